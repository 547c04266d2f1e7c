package text

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestClean(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		n    int
		want string
	}{
		{"plain", 10, "plain"},
		{"ééé", 5, "éé"},           // 6 bytes; the cut falls inside the third é
		{"日本語", 4, "日"},            // 3-byte runes
		{"a\xffb", 10, "a\uFFFDb"}, // invalid byte replaced
		{"\xff\xfe", 2, ""},        // the replacement itself does not fit
		{strings.Repeat("€", 400), 1024, strings.Repeat("€", 341)},
	}
	for _, c := range cases {
		if got := Clean(c.in, c.n); got != c.want {
			t.Errorf("Clean(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

func FuzzClean(f *testing.F) {
	f.Add("ééé\xff", 5)
	f.Add(strings.Repeat("😀", 300), 1024)
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = min(max(n, 0), 4096)
		got := Clean(s, n)
		if !utf8.ValidString(got) || len(got) > n {
			t.Fatalf("Clean(%q, %d) = %q: invalid or too long", s, n, got)
		}
		if full := Clean(s, 1<<30); !strings.HasPrefix(full, got) {
			t.Fatalf("%q is not a prefix of %q", got, full)
		}
	})
}

func TestBadNameRune(t *testing.T) {
	t.Parallel()
	// Every bidi control (Unicode's Bidi_Control property) is refused, as
	// is every space, control and format character.
	for _, tab := range []*unicode.RangeTable{unicode.Bidi_Control, unicode.White_Space, unicode.Cc, unicode.Cf} {
		for _, r16 := range tab.R16 {
			for r := rune(r16.Lo); r <= rune(r16.Hi); r += rune(r16.Stride) {
				if !BadNameRune(r) {
					t.Errorf("%U is allowed in a name", r)
				}
			}
		}
		for _, r32 := range tab.R32 {
			for r := rune(r32.Lo); r <= rune(r32.Hi); r += rune(r32.Stride) {
				if !BadNameRune(r) {
					t.Errorf("%U is allowed in a name", r)
				}
			}
		}
	}
	for _, r := range "\uFFFD" {
		if !BadNameRune(r) {
			t.Errorf("%U is allowed in a name", r)
		}
	}
	for _, r := range "az09.-_:/*?#%é注文✓😀" {
		if BadNameRune(r) {
			t.Errorf("%U is refused in a name", r)
		}
	}
}
