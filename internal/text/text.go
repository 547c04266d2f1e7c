// Package text owns one rule for strings that cross the wire or are kept
// from input nobody checked: valid UTF-8 (a protobuf string must be, or
// the whole message fails to encode) and a bounded length.
package text

import (
	"strings"
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
