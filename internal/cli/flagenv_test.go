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
	if err := applyEnvAndFile(fs, func(k string) string { return env[k] }, path); err != nil {
		t.Fatal(err)
	}
	// flag > environment > file > default
	if *tiers != 3 || *httpAddr != "127.0.0.1:9999" || *grpcAddr != "127.0.0.1:9000" || !*hold || *level != "info" {
		t.Fatalf("tiers %d, http %s, grpc %s, hold %v, level %s", *tiers, *httpAddr, *grpcAddr, *hold, *level)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	_ = os.WriteFile(bad, []byte("grpc_adr: x\n"), 0o600)
	if err := applyEnvAndFile(fs, func(string) string { return "" }, bad); err == nil {
		t.Fatal("a misspelt key was accepted")
	}
	fs2 := flag.NewFlagSet("t", flag.ContinueOnError)
	fs2.Int("tiers", 5, "")
	_ = fs2.Parse(nil)
	if err := applyEnvAndFile(fs2, func(k string) string { return map[string]string{"HARBINGER_TIERS": "many"}[k] }, ""); err == nil {
		t.Fatal("a bad environment value was accepted")
	}
}
