import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "./broker.js";
import { clean, MAX_REASON } from "../src/text.js";

/** Bytes as JS sees text that was not UTF-8: each byte that is not part of a character as a lone surrogate. */
function surrogateEscape(b: Buffer): string {
  let out = "";
  let i = 0;
  while (i < b.length) {
    const n = b[i] < 0x80 ? 1 : b[i] >= 0xf0 ? 4 : b[i] >= 0xe0 ? 3 : b[i] >= 0xc2 ? 2 : 0;
    const chunk = n > 0 ? b.subarray(i, i + n) : undefined;
    const s = chunk && chunk.length === n ? new TextDecoder("utf-8", { fatal: false }).decode(chunk) : "";
    if (n > 0 && chunk!.length === n && !s.includes("\uFFFD")) {
      out += s;
      i += n;
    } else {
      out += String.fromCharCode(0xdc00 + b[i]);
      i++;
    }
  }
  return out;
}

test("the nack reason follows the broker's rule (client/testdata/rules.json)", () => {
  const rules = JSON.parse(readFileSync(join(ROOT, "client/testdata/rules.json"), "utf8"));
  assert.equal(rules.MaxReason, MAX_REASON);
  assert.ok(rules.Reasons.length > 0);
  for (const c of rules.Reasons) {
    const got = clean(surrogateEscape(Buffer.from(c.In, "base64")));
    const want = Buffer.from(c.Out, "base64").toString("utf8");
    assert.equal(got, want);
    assert.ok(Buffer.byteLength(got) <= MAX_REASON);
  }
});
