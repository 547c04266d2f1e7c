package cli

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// bench flow finds its default workload from any directory (the binary
// carries it): from a directory outside the repository it gets as far as
// the arms.
func TestBenchFlowFromAnyDirectory(t *testing.T) {
	t.Chdir(t.TempDir())
	var errOut bytes.Buffer
	if code := Main(context.Background(), []string{"bench", "flow", "-arms", "no-such-arm"}, io.Discard, &errOut); code == 0 ||
		!strings.Contains(errOut.String(), "no-such-arm") {
		t.Fatalf("harbinger-lab bench flow outside the repository exited %d: %s", code, errOut.String())
	}
}
