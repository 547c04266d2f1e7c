package cli

import (
	"context"
	"errors"
	"io"
	"strings"

	"github.com/harbinger-mq/harbinger/internal/sim"
	"github.com/harbinger-mq/harbinger/internal/trace"
	"github.com/harbinger-mq/harbinger/lab/internal/experiment"
)

func init() {
	register("matrix", "run candidate arms through the experiments' scenario matrix beside FIFO, the SJF oracle and the default policy", runMatrix)
}

func runMatrix(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("matrix", "matrix --arms a,b [--seeds 1,2,3,4,5] [--workload FILE] [--trace-dir DIR]", stderr)
	armsFlag := fs.String("arms", "", "comma-separated arms to compare (any arm of the experiments)")
	seedsFlag := fs.String("seeds", "1,2,3,4,5", "comma-separated seeds (6,7,8,9,10 are the held-out ones)")
	wl := fs.String("workload", DefaultWorkload, "workload file (YAML); the default is built into the binary")
	traceDir := fs.String("trace-dir", DefaultTraceDir, "Azure Functions 2019 trace directory")
	if err := parse(fs, args); err != nil {
		return err
	}
	var arms []string
	for _, a := range strings.Split(*armsFlag, ",") {
		if a = strings.TrimSpace(a); a != "" {
			arms = append(arms, a)
		}
	}
	if len(arms) == 0 {
		return errors.New("--arms: name at least one arm")
	}
	seeds, err := parseSeeds(*seedsFlag)
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
	return experiment.CompareArms(stdout, []experiment.Scenario{{Label: w.Name, Src: sim.FromWorkload(w)}, {Label: "trace", Src: tr}}, arms, seeds, stderr)
}
