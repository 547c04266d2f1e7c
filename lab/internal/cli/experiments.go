package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/harbinger-mq/harbinger/internal/sim"
	"github.com/harbinger-mq/harbinger/internal/trace"
	"github.com/harbinger-mq/harbinger/lab/internal/experiment"
)

func init() {
	register("experiments", "run the ablation studies and write results/experiments.md with its charts", runExperiments)
}

// DefaultTraceDir is the trace shipped with the repository, named from
// lab/, where harbinger-lab runs.
const DefaultTraceDir = "../traces/azure-functions-2019"

func runExperiments(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("experiments", "experiments [--out results] [--seeds 1,2,3,4,5] [--loads 0.8,0.95,1.1] [--workload FILE] [--trace-dir DIR]", stderr)
	out := fs.String("out", "results", "directory to write experiments.md and experiments/*.svg into")
	seedsFlag := fs.String("seeds", "1,2,3,4,5", "comma-separated seeds")
	loadsFlag := fs.String("loads", "0.8,0.95,1.1", "comma-separated offered loads")
	wl := fs.String("workload", DefaultWorkload, "workload file (YAML); the default is built into the binary")
	traceDir := fs.String("trace-dir", DefaultTraceDir, "Azure Functions 2019 trace directory (replayed with the default window)")
	if err := parse(fs, args); err != nil {
		return err
	}
	seeds, err := parseSeeds(*seedsFlag)
	if err != nil {
		return err
	}
	loads, err := parseLoads(*loadsFlag)
	if err != nil {
		return err
	}
	w, err := loadWorkload(*wl)
	if err != nil {
		return err
	}
	tr, err := trace.Load(*traceDir, trace.Options{})
	if err != nil {
		return err
	}
	cmd := "go run ./cmd/harbinger-lab experiments --out " + *out + " --seeds " + *seedsFlag
	if *loadsFlag != fs.Lookup("loads").DefValue {
		cmd += " --loads " + *loadsFlag
	}
	if *wl != DefaultWorkload {
		cmd += " --workload " + *wl
	}
	if *traceDir != DefaultTraceDir {
		cmd += " --trace-dir " + *traceDir
	}
	res, err := experiment.Run(experiment.Config{
		Scenarios: []experiment.Scenario{
			{Label: w.Name, Src: sim.FromWorkload(w)},
			{Label: "azure-functions-2019 trace", Src: tr},
		},
		Loads:    loads,
		Seeds:    seeds,
		Progress: stderr,
		Command:  cmd,
	})
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := experiment.Write(res, *out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s/experiments.md and %s/%s/*.svg (%.0f s)\n", *out, *out, experiment.ChartDir, res.Took.Seconds())
	return nil
}

// parseLoads reads --loads: comma-separated positive offered loads.
func parseLoads(s string) ([]float64, error) {
	var loads []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v > 0) {
			return nil, fmt.Errorf("--loads: %q is not a positive number", f)
		}
		loads = append(loads, v)
	}
	return loads, nil
}
