package cli

import (
	"encoding/json"
	"fmt"
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

// goal-draw runs every arm on every set of seeds and writes the draw; it
// reads the same runs back with --from, and refuses --from beside flags
// that would start new runs.
func TestGoalDraw(t *testing.T) {
	out := t.TempDir()
	var stdout strings.Builder
	err := runGoalDraw(t.Context(), []string{"--arm", "predictive", "--arm", "predictive:guard=0.1,guardmin=0.05", "--seed-sets", "1;2",
		"--scenarios", "bursts", "--loads", "0.5", "--out", out, "--trace-dir", testTraceDir}, &stdout, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "of 1 cells; wrote") || strings.Count(stdout.String(), "met on every set in") != 2 {
		t.Fatalf("goal-draw on two arms, one cell: %q", stdout.String())
	}
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| arm | seeds 1 | seeds 2 |", "| `predictive:guard=0.1,guardmin=0.05` |", "--seed-sets '1;2'"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}

	// Two goal runs read back.
	dirs := []string{filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")}
	for i, seed := range []string{"1", "2"} {
		if err := runGoal(t.Context(), []string{"--scenarios", "bursts", "--loads", "0.5", "--seeds", seed, "--out", dirs[i], "--trace-dir", testTraceDir}, io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	again := t.TempDir()
	stdout.Reset()
	if err := runGoalDraw(t.Context(), []string{"--from", strings.Join(dirs, ","), "--out", again}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(filepath.Join(out, "draw.json"))
	second, _ := os.ReadFile(filepath.Join(again, "draw.json"))
	var d1, d2 struct {
		Cells []struct {
			Pass [][]bool  `json:"pass"`
			R    []float64 `json:"r"`
		} `json:"cells"`
	}
	if err := json.Unmarshal(first, &d1); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(second, &d2); err != nil {
		t.Fatal(err)
	}
	if len(d2.Cells) != 1 || len(d2.Cells[0].Pass) != 1 || fmt.Sprint(d2.Cells[0].Pass[0]) != fmt.Sprint(d1.Cells[0].Pass[0]) ||
		fmt.Sprint(d2.Cells[0].R) != fmt.Sprint(d1.Cells[0].R) {
		t.Errorf("the runs read back (%s) differ from the same runs made by goal-draw (%s)", second, first)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", dirs[0], "--arm", "fifo"}, "--from compares finished runs; --arm would start new ones"},
		{[]string{"--from", dirs[0] + "," + t.TempDir()}, "summary.json"},
		{[]string{"--from", dirs[0]}, ""}, // one run, one set: allowed, if not much of a draw
		{[]string{"--seed-sets", "1-5"}, "at least two sets"},
		{[]string{"--seed-sets", "1-5;9-7"}, `"9-7" is not a seed or a range`},
		{[]string{"--seed-sets", "1-5;x"}, `"x" is not a seed`},
		{[]string{"--seed-sets", "1-5;0-18446744073709551615"}, "a range of at most 1000 seeds"},
		{[]string{"--seed-sets", "1;2", "--arm", "nosuch", "--scenarios", "bursts", "--trace-dir", testTraceDir}, "--arm nosuch"},
	} {
		err := runGoalDraw(t.Context(), append(tc.args, "--out", t.TempDir()), io.Discard, io.Discard)
		if tc.want == "" {
			if err != nil {
				t.Errorf("goal-draw %v: %v", tc.args, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("goal-draw %v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}
