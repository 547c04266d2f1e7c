// Package text owns the rules for strings that cross the wire or are kept
// from input nobody checked: valid UTF-8 (a protobuf string must be, or
// the whole message fails to encode) and a bounded length; and which
// characters a name may not have.
package text

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Clean returns s with invalid UTF-8 replaced by U+FFFD and cut to at most
// n bytes on a character boundary.
func Clean(s string, n int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// BadNameRune reports whether r may not appear in a name that is shown,
// typed and compared as text, such as a queue's: a space of any kind
// (unicode.IsSpace: NBSP U+00A0, NEL U+0085, U+2028 and the like), a
// control character, a format character (unicode.Cf: the zero-width space
// U+200B, the byte-order mark U+FEFF and every bidi control, such as
// U+202E, which reorders how the rest of a line is shown), or U+FFFD, what
// invalid UTF-8 decodes to. Each would make two names that look the same
// differ, or make one look like another.
func BadNameRune(r rune) bool {
	return r == utf8.RuneError || unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
}
