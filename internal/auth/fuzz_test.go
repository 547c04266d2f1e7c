package auth

import (
	"encoding/hex"
	"maps"
	"slices"
	"strings"
	"testing"
)

// FuzzTokenFile feeds arbitrary bytes to the token file's parser: it must
// not panic, and what it accepts must write back (fileEntry) to a file
// that reads as the same grants.
func FuzzTokenFile(f *testing.F) {
	h := Hash("x")
	for _, s := range []string{
		"tokens:\n  - name: ops\n    sha256: " + h + "\n    scopes: [admin]\n",
		"tokens:\n  - name: \"dépôt \\u2028 ci\"\n    sha256: sha256:" + strings.ToUpper(h) + "\n    scopes: [\"publish:orders.*\", read]\n",
		"tokens:\n  - name: \"a\\xffb\"\n    sha256: " + h + "\n    scopes: [\"consume:é\\xfe\"]\n",
		"tokens: []\n",
		"",
		"tokens:\n  - {name: a, sha256: " + h + ", scopes: [read:x, \"admin:\"]}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := parseTokens(data)
		if err != nil {
			if m != nil {
				t.Fatalf("an error (%v) came with grants", err)
			}
			return
		}
		var b strings.Builder
		b.WriteString("tokens:\n")
		for k, g := range m {
			b.WriteString(fileEntry(g.Name, hex.EncodeToString(k[:]), g.Scopes))
		}
		again, err := parseTokens([]byte(b.String()))
		if err != nil {
			t.Fatalf("the grants written back do not parse: %v\n%s", err, b.String())
		}
		if !maps.EqualFunc(m, again, func(a, b *Grant) bool {
			return a.Name == b.Name && slices.Equal(a.Scopes, b.Scopes)
		}) {
			t.Fatalf("the grants written back read differently:\n%s", b.String())
		}
	})
}

// FuzzFileEntry checks what `harbinger token` prints: for any name that
// CheckName accepts and any scope ParseScope accepts, the entry reads
// back as exactly that name and scope.
func FuzzFileEntry(f *testing.F) {
	for _, s := range [][2]string{
		{"orders-service", "publish:orders."},
		{"dépôt ci", "consume:é"},
		{"a\xffb", "read"},
		{"tab\there", "admin"},
		{"\u2028\ufeff\"\\", "read:a\"b\\"},
		{"ok: yes # not a comment", "publish:é\xfe"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, name, scope string) {
		sc, err := ParseScope(scope)
		if err != nil {
			return
		}
		if CheckName(name) != nil {
			return
		}
		m, err := parseTokens([]byte("tokens:\n" + FileEntry(name, "tok", []Scope{sc})))
		if err != nil {
			t.Fatalf("name %q scope %q: the entry does not parse: %v", name, scope, err)
		}
		g := m[hashOf(t, Hash("tok"))]
		if g == nil || g.Name != name || len(g.Scopes) != 1 || g.Scopes[0] != sc {
			t.Fatalf("name %q scope %+v read back as %+v", name, sc, g)
		}
	})
}

func hashOf(t *testing.T, h string) (k [32]byte) {
	t.Helper()
	raw, err := hex.DecodeString(h)
	if err != nil || len(raw) != len(k) {
		t.Fatalf("hash %q: %v", h, err)
	}
	copy(k[:], raw)
	return k
}
