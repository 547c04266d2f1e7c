/**
 * The broker's rule for text it keeps from a client (internal/text), kept
 * here so that a nack's reason is what the broker would store; checked
 * against client/testdata/rules.json, which the broker's tests check too.
 */

/** Bytes of a nack's reason sent; the broker keeps 1,024. */
export const MAX_REASON = 512;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * The index of the first lone surrogate of s (a code unit UTF-8 cannot
 * encode, which protobuf would silently replace), or -1.
 */
export function badUtf16At(s: string): number {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0xd800 || c > 0xdfff) continue;
    if (c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        i++;
        continue;
      }
    }
    return i;
  }
  return -1;
}

/**
 * s with every run of lone surrogates replaced by one U+FFFD, cut to at
 * most limit bytes of UTF-8 on a character boundary.
 */
export function clean(s: string, limit = MAX_REASON): string {
  if (badUtf16At(s) >= 0) {
    // Keep well-formed pairs, replace each run of lone surrogates once.
    let out = "";
    let run = false;
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
        const d = s.charCodeAt(i + 1);
        if (d >= 0xdc00 && d <= 0xdfff) {
          out += s[i] + s[i + 1];
          i++;
          run = false;
          continue;
        }
      }
      if (c >= 0xd800 && c <= 0xdfff) {
        if (!run) out += "\uFFFD";
        run = true;
        continue;
      }
      out += s[i];
      run = false;
    }
    s = out;
  }
  const b = encoder.encode(s);
  if (b.length <= limit) return s;
  let cut = limit;
  while (cut > 0 && (b[cut] & 0xc0) === 0x80) cut--;
  return decoder.decode(b.subarray(0, cut));
}

