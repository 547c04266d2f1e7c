package text

import (
	"strings"
	"testing"
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
