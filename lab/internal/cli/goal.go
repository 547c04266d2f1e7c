package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/harbinger-mq/harbinger/internal/sim"
	"github.com/harbinger-mq/harbinger/internal/trace"
	"github.com/harbinger-mq/harbinger/internal/workload"
	"github.com/harbinger-mq/harbinger/lab/internal/experiment"
)

func init() {
	register("goal", "measure an arm against the policy goal (T1, T2, M) on every scenario and load; writes results/goal/", runGoal)
}

func runGoal(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("goal", "goal [--arm predictive] [--out results/goal] [--seeds 1,2,3,4,5] [--loads 0.5,0.8,0.95,1.1,1.3] [--scenarios trace,bimodal]", stderr)
	armFlag := fs.String("arm", "predictive", "the arm to judge, with settings if any (sim's --arms syntax: predictive:guard=0.25)")
	out := fs.String("out", "results/goal", "directory to write report.md, heatmap.svg and summary.json into")
	seedsFlag := fs.String("seeds", "1,2,3,4,5", "comma-separated seeds (6,7,8,9,10 are the held-out ones)")
	mf := addMatrixFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	seeds, err := parseSeeds(*seedsFlag)
	if err != nil {
		return err
	}
	loads, scenarios, w, err := mf.cells()
	if err != nil {
		return err
	}
	arm, err := sim.ParseArm(*armFlag, w.JobTypes)
	if err != nil {
		return err
	}
	m, err := experiment.RunGoalMatrix(scenarios, loads, seeds, arm, stderr)
	if err != nil {
		return err
	}
	m.Command = fmt.Sprintf("go run ./cmd/harbinger-lab goal --arm %s --seeds %s --loads %s", *armFlag, *seedsFlag, *mf.loads)
	var md strings.Builder
	m.Markdown(&md)
	js, err := m.JSON()
	if err != nil {
		return err
	}
	if err := writeFiles(*out, map[string][]byte{"report.md": []byte(md.String()), "heatmap.svg": m.GoalHeatMap(), "summary.json": js}); err != nil {
		return err
	}
	t1, t2, mm, all, n := m.Passes()
	fmt.Fprintf(stdout, "%s meets the goal in %d of %d cells (T1 %d, T2 %d, M %d); wrote %s\n", m.Arm, all, n, t1, t2, mm, *out)
	return nil
}

// matrixFlags are the flags of goal and goal-draw that choose the cells.
type matrixFlags struct{ loads, workload, traceDir, only *string }

func addMatrixFlags(fs *flag.FlagSet) matrixFlags {
	return matrixFlags{
		loads:    fs.String("loads", "0.5,0.8,0.95,1.1,1.3", "comma-separated offered loads"),
		workload: fs.String("workload", DefaultWorkload, "workload file (YAML); the default is built into the binary"),
		traceDir: fs.String("trace-dir", DefaultTraceDir, "Azure Functions 2019 trace directory"),
		only:     fs.String("scenarios", "", "comma-separated scenario labels (or their prefixes) to measure; empty: all"),
	}
}

// cells reads the flags: the loads, and the goal's matrix of scenarios
// (the workload, the trace's windows and the stress workloads, or those
// whose labels start with one of --scenarios' prefixes), with the workload
// whose job types the arms name.
func (f matrixFlags) cells() ([]float64, []experiment.Scenario, *workload.Workload, error) {
	loads, err := parseLoads(*f.loads)
	if err != nil {
		return nil, nil, nil, err
	}
	w, err := loadWorkload(*f.workload)
	if err != nil {
		return nil, nil, nil, err
	}
	tr, err := trace.Load(*f.traceDir, trace.Options{})
	if err != nil {
		return nil, nil, nil, err
	}
	scenarios, err := experiment.DefaultMatrix([]experiment.Scenario{{Label: w.Name, Src: sim.FromWorkload(w)}, {Label: "trace", Src: tr}})
	if err != nil {
		return nil, nil, nil, err
	}
	if *f.only == "" {
		return loads, scenarios, w, nil
	}
	var keep []experiment.Scenario
	for _, sc := range scenarios {
		for _, p := range strings.Split(*f.only, ",") {
			if strings.HasPrefix(sc.Label, strings.TrimSpace(p)) {
				keep = append(keep, sc)
				break
			}
		}
	}
	if len(keep) == 0 {
		return nil, nil, nil, fmt.Errorf("goal: no scenario matches --scenarios %q", *f.only)
	}
	return loads, keep, w, nil
}

// writeFiles creates dir and writes each named file into it.
func writeFiles(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
