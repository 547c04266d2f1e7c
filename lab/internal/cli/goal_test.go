package cli

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// goal --scenarios measures only the scenarios named, by label or prefix,
// and refuses a list that names none.
func TestGoalScenarios(t *testing.T) {
	out := t.TempDir()
	var stdout strings.Builder
	err := runGoal(t.Context(), []string{"--scenarios", "bursts", "--loads", "0.5", "--seeds", "1", "--out", out, "--trace-dir", testTraceDir}, &stdout, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "of 1 cells") {
		t.Fatalf("goal on one scenario at one load: %q", stdout.String())
	}
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(report), "| bursts | 0.50 |") || strings.Contains(string(report), "| bimodal |") {
		t.Fatalf("report holds other scenarios than bursts:\n%s", report)
	}
	err = runGoal(t.Context(), []string{"--scenarios", "nightly", "--out", t.TempDir(), "--trace-dir", testTraceDir}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `no scenario matches --scenarios "nightly"`) {
		t.Fatalf("goal --scenarios nightly: %v", err)
	}
}

// testTraceDir is the shipped trace, named from this package's directory.
const testTraceDir = "../../../traces/azure-functions-2019"
