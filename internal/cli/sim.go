package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/internal/sim"
	"github.com/harbinger-mq/harbinger/internal/workload"
)

func init() {
	register("sim", "simulate the scheduling policies on a workload in virtual time", runSim)
}

// DefaultWorkload is the pre-registered workload shipped with the repository.
const DefaultWorkload = "workloads/production-flow.yaml"

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("sim", "sim [--workload FILE] [--seeds 1,2,3] [--arms fifo,...] [--workers N] [--json]", stderr)
	wl := fs.String("workload", DefaultWorkload, "workload file (YAML)")
	seedsFlag := fs.String("seeds", "", "comma-separated seeds (default: the workload's)")
	armsFlag := fs.String("arms", strings.Join(sim.StandardArms, ","), "comma-separated arms: "+strings.Join(sim.StandardArms, ", ")+", strict-aging, no-aging, sjf, shadow")
	workers := fs.Int("workers", 0, "worker count (default: the workload's)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of tables")
	if err := parse(fs, args); err != nil {
		return err
	}
	w, err := workload.Load(*wl)
	if err != nil {
		return err
	}
	src := sim.FromWorkload(w)
	seeds, err := parseSeeds(*seedsFlag)
	if err != nil {
		return err
	}
	arms, err := parseArms(*armsFlag, src)
	if err != nil {
		return err
	}
	if *workers < 0 {
		return fmt.Errorf("--workers must be positive, got %d", *workers)
	}
	begin := time.Now()
	rep, err := sim.Run(src, arms, sim.Options{Seeds: seeds, Workers: *workers})
	if err != nil {
		return err
	}
	return writeReport(stdout, rep, *asJSON, time.Since(begin))
}

func writeReport(w io.Writer, rep *report.Report, asJSON bool, took time.Duration) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if err := report.WriteText(w, rep); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n(ran in %.1f s)\n", took.Seconds())
	return nil
}

func parseSeeds(s string) ([]uint64, error) {
	if s == "" {
		return nil, nil
	}
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--seeds: %q is not a non-negative whole number", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func parseArms(s string, src sim.Source) ([]sim.Arm, error) {
	var arms []sim.Arm
	seen := map[string]bool{}
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		a, err := sim.ArmByName(name, src.Types())
		if err != nil {
			return nil, err
		}
		arms = append(arms, a)
	}
	if len(arms) == 0 {
		return nil, fmt.Errorf("--arms: name at least one arm")
	}
	return arms, nil
}
