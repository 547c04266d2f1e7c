package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/harbinger-mq/harbinger/internal/auth"
)

// demo and sim find their default workload from any directory: the binary
// carries it.
func TestDefaultWorkloadFromAnyDirectory(t *testing.T) {
	t.Chdir(t.TempDir())
	w, err := loadWorkload(DefaultWorkload)
	if err != nil {
		t.Fatalf("the default workload outside the repository: %v", err)
	}
	if w.Name == "" || len(w.JobTypes) == 0 {
		t.Errorf("embedded workload %+v", w)
	}
	if _, err := loadWorkload("missing.yaml"); err == nil {
		t.Error("a missing workload other than the default loaded")
	}
	var out bytes.Buffer
	if code := Main(context.Background(), []string{"sim", "-seeds", "1", "-arms", "fifo,predictive", "-json"}, &out, io.Discard); code != 0 {
		t.Fatalf("harbinger sim outside the repository exited %d", code)
	}
	// A file of that name in the working directory wins over the copy.
	if err := os.MkdirAll(filepath.Dir(DefaultWorkload), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(DefaultWorkload, []byte("not: a workload\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadWorkload(DefaultWorkload); err == nil {
		t.Error("a local default workload file was ignored")
	}
}

func TestVersionAndToken(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if code := Main(context.Background(), []string{"version"}, &out, io.Discard); code != 0 || !strings.HasPrefix(out.String(), "harbinger ") || !strings.Contains(out.String(), "go1.") {
		t.Errorf("version: %d %q", code, out.String())
	}
	out.Reset()
	if code := Main(context.Background(), []string{"token", "-name", "ci", "-scope", "publish:orders.", "-scope", "read"}, &out, io.Discard); code != 0 {
		t.Fatalf("token exited %d", code)
	}
	tok := regexp.MustCompile(`hbr_[a-z2-7]+`).FindString(out.String())
	entry := out.String()[strings.Index(out.String(), "  - name"):]
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(path, []byte("tokens:\n"+entry), 0o600); err != nil {
		t.Fatal(err)
	}
	ts, err := auth.LoadTokens(path)
	if err != nil {
		t.Fatalf("the printed entry does not load: %v\n%s", err, out.String())
	}
	g, err := ts.Lookup(tok)
	if err != nil || !g.Allows(auth.Publish, "orders.eu") || g.Allows(auth.Admin, "orders.eu") {
		t.Errorf("the printed token: %+v, %v", g, err)
	}
	for _, args := range [][]string{{"token"}, {"token", "-name", "x"}, {"token", "-name", "x", "-scope", "root"},
		{"token", "-name", "a\xffb", "-scope", "read"}, {"token", "-name", "a\nb", "-scope", "read"}, {"token", "-name", "x", "-scope", "read:a b"}} {
		if code := Main(context.Background(), args, io.Discard, io.Discard); code == 0 {
			t.Errorf("%v exited 0", args)
		}
	}
}
