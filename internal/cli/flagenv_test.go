package cli

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestApplyEnvAndFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sidecar.yaml")
	if err := os.WriteFile(path, []byte("grpc_addr: 127.0.0.1:9000\nhttp-addr: off\ntiers: 7\nhold: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	grpcAddr := fs.String("grpc-addr", "127.0.0.1:7072", "")
	httpAddr := fs.String("http-addr", "127.0.0.1:7073", "")
	tiers := fs.Int("tiers", 5, "")
	hold := fs.Bool("hold", false, "")
	level := fs.String("log-level", "info", "")
	if err := fs.Parse([]string{"-tiers", "3"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"HARBINGER_HTTP_ADDR": "127.0.0.1:9999", "HARBINGER_TIERS": "9"}
	if err := applyEnvAndFile(fs, serveEnvPrefix, func(k string) string { return env[k] }, path); err != nil {
		t.Fatal(err)
	}
	// flag > environment > file > default
	if *tiers != 3 || *httpAddr != "127.0.0.1:9999" || *grpcAddr != "127.0.0.1:9000" || !*hold || *level != "info" {
		t.Fatalf("tiers %d, http %s, grpc %s, hold %v, level %s", *tiers, *httpAddr, *grpcAddr, *hold, *level)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	_ = os.WriteFile(bad, []byte("grpc_adr: x\n"), 0o600)
	if err := applyEnvAndFile(fs, serveEnvPrefix, func(string) string { return "" }, bad); err == nil {
		t.Fatal("a misspelt key was accepted")
	}
	fs2 := flag.NewFlagSet("t", flag.ContinueOnError)
	fs2.Int("tiers", 5, "")
	_ = fs2.Parse(nil)
	if err := applyEnvAndFile(fs2, serveEnvPrefix, func(k string) string { return map[string]string{"HARBINGER_TIERS": "many"}[k] }, ""); err == nil {
		t.Fatal("a bad environment value was accepted")
	}
}

// A flag kept under an old name is one setting: given on the command line
// under either name it wins over the environment and the file under
// either name; otherwise the new name's variable and key come first.
func TestApplyEnvAndFileOldNames(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sidecar.yaml")
	if err := os.WriteFile(path, []byte("grpc_addr: file-new\nlisten: file-old\nhttp: file-old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		args      []string
		env       map[string]string
		grpc, web string
	}{
		{"new flag over the old name's variable", []string{"-grpc-addr", "flag"}, map[string]string{"HARBINGER_LISTEN": "env"}, "flag", "file-old"},
		{"old flag over the new name's key", []string{"-listen", "flag", "-http", "flag"}, nil, "flag", "flag"},
		{"new variable before the old", nil, map[string]string{"HARBINGER_LISTEN": "env-old", "HARBINGER_GRPC_ADDR": "env-new"}, "env-new", "file-old"},
		{"old variable before any key", nil, map[string]string{"HARBINGER_HTTP": "env-old"}, "file-new", "env-old"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		grpcAddr := fs.String("grpc-addr", "default", "")
		fs.StringVar(grpcAddr, "listen", "default", "old name of -grpc-addr")
		httpAddr := fs.String("http-addr", "default", "")
		fs.StringVar(httpAddr, "http", "default", "old name of -http-addr")
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if err := applyEnvAndFile(fs, serveEnvPrefix, func(k string) string { return tc.env[k] }, path); err != nil {
			t.Fatal(err)
		}
		if *grpcAddr != tc.grpc || *httpAddr != tc.web {
			t.Errorf("%s: grpc %q, http %q; want %q, %q", tc.name, *grpcAddr, *httpAddr, tc.grpc, tc.web)
		}
	}
}

// Under another prefix only that prefix's variables count: the sidecar's
// HARBINGER_SIDECAR_TIERS, not serve's HARBINGER_TIERS.
func TestApplyEnvAndFilePrefix(t *testing.T) {
	t.Parallel()
	env := map[string]string{"HARBINGER_TIERS": "9", "HARBINGER_GRPC_ADDR": "0.0.0.0:7070", "HARBINGER_SIDECAR_TIERS": "4"}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	tiers := fs.Int("tiers", 5, "")
	grpcAddr := fs.String("grpc-addr", "127.0.0.1:7072", "")
	_ = fs.Parse(nil)
	if err := applyEnvAndFile(fs, sidecarEnvPrefix, func(k string) string { return env[k] }, ""); err != nil {
		t.Fatal(err)
	}
	if *tiers != 4 || *grpcAddr != "127.0.0.1:7072" {
		t.Errorf("tiers %d, grpc %s: want 4 from HARBINGER_SIDECAR_TIERS and the default address", *tiers, *grpcAddr)
	}
	if got := serveSettingsInEnv(fs, func(k string) string { return env[k] }); len(got) != 2 || got[0] != "HARBINGER_GRPC_ADDR" || got[1] != "HARBINGER_TIERS" {
		t.Errorf("serve's variables found: %q", got)
	}
}
