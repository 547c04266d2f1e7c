package auth_test

import (
	"crypto/tls"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/harbinger-mq/harbinger/internal/auth"
	"github.com/harbinger-mq/harbinger/internal/auth/authtest"
)

func TestScopes(t *testing.T) {
	t.Parallel()
	parse := func(ss ...string) *auth.Grant {
		g := &auth.Grant{Name: "t"}
		for _, s := range ss {
			sc, err := auth.ParseScope(s)
			if err != nil {
				t.Fatal(err)
			}
			g.Scopes = append(g.Scopes, sc)
		}
		return g
	}
	tests := []struct {
		scopes []string
		perm   auth.Permission
		queue  string
		want   bool
	}{
		{[]string{"publish:orders."}, auth.Publish, "orders.eu", true},
		{[]string{"publish:orders.*"}, auth.Publish, "orders.eu", true},
		{[]string{"publish:orders."}, auth.Publish, "ordersx", false},
		{[]string{"publish:orders."}, auth.Consume, "orders.eu", false},
		{[]string{"publish:orders."}, auth.Read, "orders.eu", false},
		{[]string{"consume"}, auth.Consume, "anything", true},
		{[]string{"admin:a"}, auth.Publish, "ab", true},
		{[]string{"admin:a"}, auth.Read, "ab", true},
		{[]string{"admin:a"}, auth.Read, "b", false},
		{[]string{"read", "publish:x"}, auth.Publish, "y", false},
		{[]string{"read", "publish:x"}, auth.Read, "y", true},
	}
	for _, tt := range tests {
		if got := parse(tt.scopes...).Allows(tt.perm, tt.queue); got != tt.want {
			t.Errorf("%v allows %s on %q = %v, want %v", tt.scopes, tt.perm, tt.queue, got, tt.want)
		}
	}
	if parse("admin:a").AllowsAll(auth.Read) || !parse("read").AllowsAll(auth.Read) {
		t.Error("AllowsAll: a scoped grant sees every queue, or an unscoped one does not")
	}
	var de *auth.DeniedError
	if err := parse("read").Check(auth.Admin, "q"); !errors.As(err, &de) || de.Queue != "q" || !strings.Contains(err.Error(), `"t"`) {
		t.Errorf("Check = %v", err)
	}
	for _, bad := range []string{"", "write", "root:x", "Admin", "read:a b", "publish:é\xfe", "consume:a\tb", "admin:\x7f", "publish:", " consume: "} {
		if _, err := auth.ParseScope(bad); err == nil {
			t.Errorf("ParseScope(%q) = nil error", bad)
		}
	}
	// "publish:*" is every queue, as "publish" is; "publish:" (a prefix
	// left out) is refused above rather than taken for either.
	if sc, err := auth.ParseScope("publish:*"); err != nil || sc != (auth.Scope{Perm: auth.Publish}) {
		t.Errorf(`ParseScope("publish:*") = %+v, %v; want every queue`, sc, err)
	}
	// A prefix that ends in "*" (a queue name may hold one) must not
	// widen to every queue when written out and read again.
	sc, err := auth.ParseScope("publish:**")
	if err != nil || sc.Prefix != "*" {
		t.Fatalf(`ParseScope("publish:**") = %+v, %v; want the prefix "*"`, sc, err)
	}
	if again, err := auth.ParseScope(sc.String()); err != nil || again != sc {
		t.Errorf("%+v written as %q reads back as %+v, %v", sc, sc.String(), again, err)
	}
	for _, name := range []string{"ops", "dépôt ci", "数据 \u2028"} {
		if err := auth.CheckName(name); err != nil {
			t.Errorf("CheckName(%q) = %v", name, err)
		}
	}
	for _, name := range []string{"", " ", "a\xffb", "tab\there", "nul\x00"} {
		if err := auth.CheckName(name); err == nil {
			t.Errorf("CheckName(%q) = nil error", name)
		}
	}
}

func TestTokenFileAndReload(t *testing.T) {
	t.Parallel()
	path, toks := authtest.TokenFile(t, map[string][]string{"ops": {"admin"}, "orders": {"publish:orders.", "read:orders."}})
	ts, err := auth.LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	if ts.Len() != 2 {
		t.Fatalf("Len = %d", ts.Len())
	}
	g, err := ts.Lookup(toks["orders"])
	if err != nil || g.Name != "orders" || !g.Allows(auth.Publish, "orders.a") || g.Allows(auth.Admin, "orders.a") {
		t.Fatalf("Lookup(orders) = %+v, %v", g, err)
	}
	if _, err := ts.Lookup(""); !errors.Is(err, auth.ErrNoToken) {
		t.Errorf("Lookup(\"\") = %v", err)
	}
	if _, err := ts.Lookup(toks["orders"] + "x"); !errors.Is(err, auth.ErrBadToken) {
		t.Errorf("Lookup(wrong) = %v", err)
	}
	if strings.Contains(mustRead(t, path), toks["ops"]) {
		t.Fatal("the token file holds a token in the clear")
	}

	// A broken file leaves the tokens in force; a fixed one replaces them.
	if err := os.WriteFile(path, []byte("tokens:\n  - name: x\n    sha256: nothex\n    scopes: [read]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ts.Reload(); err == nil {
		t.Error("Reload of a broken file: no error")
	}
	if _, err := ts.Lookup(toks["ops"]); err != nil {
		t.Errorf("after a failed reload the old token is refused: %v", err)
	}
	tok, _ := auth.NewToken()
	if err := os.WriteFile(path, []byte("tokens:\n"+auth.FileEntry("new", tok, []auth.Scope{{Perm: auth.Read}})), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ts.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Lookup(toks["ops"]); !errors.Is(err, auth.ErrBadToken) {
		t.Errorf("a token removed from the file still works after Reload: %v", err)
	}
	if g, err := ts.Lookup(tok); err != nil || g.Name != "new" {
		t.Errorf("the new token: %+v, %v", g, err)
	}
}

// Streams hold a grant for as long as they last, so they must hear of
// each reload that takes: OnReload runs once per reload that took (not
// for one refused), Generation tells a stale grant from a current one, and
// a stopped OnReload runs nothing.
func TestReloadNotifies(t *testing.T) {
	t.Parallel()
	path, toks := authtest.TokenFile(t, map[string][]string{"ops": {"admin"}})
	ts, err := auth.LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	gen := ts.Generation()
	fired := make(chan struct{}, 1)
	notify := func() { fired <- struct{}{} }
	ts.OnReload(notify)
	stopped := ts.OnReload(func() { t.Error("a stopped OnReload ran") })
	if !stopped() {
		t.Fatal("stop of a waiting OnReload reported it had run")
	}

	good := mustRead(t, path)
	if err := os.WriteFile(path, []byte("tokens: [oops"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ts.Reload(); err == nil {
		t.Fatal("a broken file reloaded")
	}
	select {
	case <-fired:
		t.Fatal("a refused reload notified")
	default:
	}
	if ts.Generation() != gen {
		t.Fatal("a refused reload changed the generation")
	}

	if err := os.WriteFile(path, []byte("tokens:\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ts.Reload(); err != nil {
		t.Fatal(err)
	}
	<-fired // the test times out if it never comes
	if ts.Generation() == gen {
		t.Fatal("a reload left the generation as it was")
	}
	if _, err := ts.Lookup(toks["ops"]); !errors.Is(err, auth.ErrBadToken) {
		t.Fatalf("after the notice the removed token is still known: %v", err)
	}
	// One notice per call: the next reload tells only who asked again.
	ts.OnReload(notify)
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ts.Reload(); err != nil {
		t.Fatal(err)
	}
	<-fired
	if _, err := ts.Lookup(toks["ops"]); err != nil {
		t.Fatal(err)
	}
}

func TestTokenFileErrors(t *testing.T) {
	t.Parallel()
	h := auth.Hash("x")
	bad := map[string]string{
		"unknown key":                 "tokenz: []\n",
		"no name":                     "tokens:\n  - sha256: " + h + "\n    scopes: [read]\n",
		"no scopes":                   "tokens:\n  - name: a\n    sha256: " + h + "\n",
		"bad scope":                   "tokens:\n  - name: a\n    sha256: " + h + "\n    scopes: [write]\n",
		"short hash":                  "tokens:\n  - name: a\n    sha256: abcd\n    scopes: [read]\n",
		"same name":                   "tokens:\n  - name: a\n    sha256: " + h + "\n    scopes: [read]\n  - name: a\n    sha256: " + auth.Hash("y") + "\n    scopes: [read]\n",
		"same hash":                   "tokens:\n  - name: a\n    sha256: " + h + "\n    scopes: [read]\n  - name: b\n    sha256: " + h + "\n    scopes: [read]\n",
		"missing file":                "",
		"not even yaml":               "tokens: [\n",
		"control character in a name": "tokens:\n  - name: \"a\\tb\"\n    sha256: " + h + "\n    scopes: [read]\n",
		"a space in a prefix":         "tokens:\n  - name: a\n    sha256: " + h + "\n    scopes: [\"read:a b\"]\n",
	}
	for name, body := range bad {
		path := t.TempDir() + "/tokens.yaml"
		if body != "" {
			if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := auth.LoadTokens(path); err == nil {
			t.Errorf("%s: LoadTokens = nil error", name)
		}
	}
}

func TestLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:7070": true, "127.9.9.9:1": true, "[::1]:7070": true, "localhost:7070": true,
		"0.0.0.0:7070": false, ":7070": false, "[::]:7070": false, "10.0.0.5:7070": false,
		"example.com:7070": false, "nonsense": false,
	} {
		if got := auth.Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// A server with a client CA takes clients with a certificate it signed and
// turns away those without one.
func TestServerAndClientTLS(t *testing.T) {
	t.Parallel()
	c := authtest.NewCerts(t)
	if _, err := auth.LoadServerTLS(c.ServerCert, "", ""); err == nil {
		t.Error("LoadServerTLS without a key: no error")
	}
	if _, err := auth.LoadServerTLS(c.ServerCert, c.ServerKey, c.ServerKey); err == nil {
		t.Error("LoadServerTLS with a client CA that is no certificate: no error")
	}
	st, err := auth.LoadServerTLS(c.ServerCert, c.ServerKey, c.CA)
	if err != nil {
		t.Fatal(err)
	}
	scfg, err := st.Config()
	if err != nil {
		t.Fatal(err)
	}
	lis, err := tls.Listen("tcp", "127.0.0.1:0", scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_, _ = io.WriteString(conn, "hi")
			}()
		}
	}()
	dial := func(ct auth.ClientTLS) error {
		cfg, err := ct.Config()
		if err != nil {
			return err
		}
		conn, err := tls.Dial("tcp", lis.Addr().String(), cfg)
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = io.ReadAll(conn)
		return err
	}
	if err := dial(auth.ClientTLS{CAFile: c.CA, CertFile: c.ClientCert, KeyFile: c.ClientKey}); err != nil {
		t.Errorf("client with a certificate: %v", err)
	}
	if err := dial(auth.ClientTLS{CAFile: c.CA}); err == nil {
		t.Error("client without a certificate was let in")
	}
	if err := dial(auth.ClientTLS{CAFile: c.OtherCA, CertFile: c.ClientCert, KeyFile: c.ClientKey}); err == nil {
		t.Error("client that trusts another CA accepted the server")
	}
	if _, err := (auth.ClientTLS{CertFile: c.ClientCert}).Config(); err == nil {
		t.Error("client certificate without its key: no error")
	}
	if err := st.Reload(); err != nil {
		t.Errorf("Reload: %v", err)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
