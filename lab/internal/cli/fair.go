package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/harbinger-mq/harbinger/internal/sim"
	"github.com/harbinger-mq/harbinger/lab/internal/bench"
)

// fairCase is one of bench fair's cases: its workload files, named from
// the workloads directory, and its goal.
type fairCase struct {
	name, calm, flood string
	meanGoal, p99Goal float64
}

// fairCases are the noisy-neighbour cases of issue #45's goal, in report
// order.
var fairCases = []fairCase{
	{"equal", "noisy-equal-calm.yaml", "noisy-equal.yaml", 1.2, 1.2},
	{"sizes", "noisy-sizes-calm.yaml", "noisy-sizes.yaml", 1.5, 2},
}

// floodProducer is the flooding tenant of the noisy-neighbour workloads.
const floodProducer = "flood"

// benchFair is what bench fair's command line asks for.
type benchFair struct {
	cfg    bench.FairConfig
	merge  string // summary files to merge instead of running
	out    string
	asJSON bool
	start  time.Time
}

func runBenchFair(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	bf, err := parseBenchFair(args, stderr)
	if err != nil {
		return err
	}
	if bf.merge != "" {
		res, err := mergeFair(strings.Split(bf.merge, ","))
		if err != nil {
			return err
		}
		return writeFair(stdout, stderr, res, bf.out, bf.asJSON, time.Since(bf.start))
	}
	cfg := bf.cfg
	arms := []bench.Arm{bench.FairArm}
	brokers, err := bench.ConnectFlow(ctx, arms, bench.FlowConnect{ConnectOptions: bench.ConnectOptions{Progress: stderr,
		Harbinger: bench.HarbingerOptions{Mode: cfg.HarbingerMode}}})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := brokers.Close(); cerr != nil {
			fmt.Fprintf(stderr, "bench: %v\n", cerr)
		}
	}()
	env := bench.Describe(ctx, brokers.Drivers)
	res, err := bench.RunFair(ctx, cfg, brokers.Drivers)
	if err != nil {
		return err
	}
	res.Method = bench.FairMethod(cfg, env)
	return writeFair(stdout, stderr, res, bf.out, bf.asJSON, time.Since(bf.start))
}

// parseBenchFair reads bench fair's flags and loads its cases' workloads,
// refusing what it cannot run before any broker is started.
func parseBenchFair(args []string, stderr io.Writer) (*benchFair, error) {
	fs := newFlags("bench fair", "bench fair [--cases equal,sizes] [--seeds 1] [--time-scale 1] [--workloads DIR] [--out DIR] [--skip-off] [--reserve N] [--reserve-above X] [--json] [--merge FILES] [flags]", stderr)
	var names []string
	for _, c := range fairCases {
		names = append(names, c.name)
	}
	casesFlag := fs.String("cases", strings.Join(names, ","), "comma-separated cases: equal (noisy-equal*.yaml, goal 1.2x at the mean and P99), sizes (noisy-sizes*.yaml, goal 1.5x and 2x)")
	dir := fs.String("workloads", filepath.Dir(DefaultWorkload), "directory of the noisy-neighbour workload files")
	seedsFlag := fs.String("seeds", "", "comma-separated seeds (default: the workloads')")
	scale := fs.Float64("time-scale", 1, "wall seconds per workload second (1, the registered form, keeps the 2 ms jobs 2 ms long)")
	drain := fs.Duration("drain-timeout", bench.DefaultDrainTimeout, "wall time after the last send to wait for the backlog before counting the rest as lost")
	window := fs.Duration("arrival-window", 0, "replay only the arrivals of this much workload time (0: all; for quick checks, not registered runs)")
	win := fs.String("window", "60s,120s", "FROM,TO (workload time): the flood's stretch, over which each tenant's share of the worker time and the latency of the jobs sent in it are reported")
	skipOff := fs.Bool("skip-off", false, "run the flood only with fair shares on, not also with them off (the contrast); a third less time")
	reserve := fs.Int("reserve", 0, "the fair arm's queue declares this reserve: how many of the last free workers a group past its share may not take with a long job (0: the broker's default)")
	reserveAbove := fs.Float64("reserve-above", 0, "the fair arm's queue declares this reserve_above: the reservation holds back only jobs predicted at least this many times the other groups' mean (0: the broker's default)")
	inProcess := fs.Bool("harbinger-in-process", false, "serve the arms from a broker inside the harness process instead of a harbinger serve --memory process per run (a shortcut)")
	asJSON := fs.Bool("json", false, "print the result as one JSON object")
	start := time.Now()
	out := fs.String("out", defaultOut(start), "directory for report.md and summary.json; \"\" writes none")
	merge := fs.String("merge", "", "comma-separated summary.json files of earlier bench fair runs over different seeds: merge them into one report (medians over every seed) and run nothing")
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	bf := &benchFair{merge: *merge, out: *out, asJSON: *asJSON, start: start}
	if *merge != "" {
		return bf, nil
	}
	seeds, err := parseSeeds(*seedsFlag)
	if err != nil {
		return nil, err
	}
	if !(*scale > 0) || math.IsInf(*scale, 1) {
		return nil, fmt.Errorf("--time-scale must be a positive number, got %g", *scale)
	}
	if *drain <= 0 || *window < 0 {
		return nil, fmt.Errorf("--drain-timeout must be positive and --arrival-window not negative")
	}
	if *reserve < 0 || !(*reserveAbove >= 0) {
		return nil, fmt.Errorf("--reserve and --reserve-above take 0 (the broker's default) or more, got %d and %g", *reserve, *reserveAbove)
	}
	var w [2]time.Duration
	from, to, ok := strings.Cut(*win, ",")
	if ok {
		w[0], err = time.ParseDuration(strings.TrimSpace(from))
		if err == nil {
			w[1], err = time.ParseDuration(strings.TrimSpace(to))
		}
	}
	if !ok || err != nil || w[1] <= w[0] || w[0] < 0 {
		return nil, fmt.Errorf("--window takes FROM,TO with TO after FROM, such as 60s,120s; got %q", *win)
	}
	cfg := bench.FairConfig{Seeds: seeds, TimeScale: *scale, DrainTimeout: *drain, Window: w, ArrivalWindow: *window,
		Progress: stderr, HarbingerMode: bench.ServeMemory, SkipOff: *skipOff,
		Fair: bench.FairSettings{Reserve: *reserve, ReserveAbove: *reserveAbove}}
	if *inProcess {
		cfg.HarbingerMode = bench.InProcess
	}
	for _, name := range strings.Split(*casesFlag, ",") {
		name = strings.TrimSpace(name)
		i := -1
		for k, c := range fairCases {
			if c.name == name {
				i = k
			}
		}
		if i < 0 {
			return nil, fmt.Errorf("--cases: unknown case %q (want %s)", name, strings.Join(names, ", "))
		}
		c := fairCases[i]
		calm, err := loadWorkload(filepath.Join(*dir, c.calm))
		if err != nil {
			return nil, err
		}
		flood, err := loadWorkload(filepath.Join(*dir, c.flood))
		if err != nil {
			return nil, err
		}
		cfg.Cases = append(cfg.Cases, bench.FairCase{Name: c.name + " (" + flood.Name + ")", Calm: sim.FromWorkload(calm), Flood: sim.FromWorkload(flood),
			MeanGoal: c.meanGoal, P99Goal: c.p99Goal, FloodProducer: floodProducer})
	}
	bf.cfg = cfg
	return bf, nil
}

// writeFair prints a fair result, then writes its files into out unless
// out is empty.
func writeFair(stdout, stderr io.Writer, res *bench.FairResult, out string, asJSON bool, took time.Duration) error {
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		if err := bench.FairMarkdown(stdout, res); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\n(ran in %.1f s)\n", took.Seconds())
	}
	if out == "" {
		return nil
	}
	if err := bench.WriteFairFiles(out, res); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "bench: wrote %s\n", out)
	return nil
}

// mergeFair merges the summary.json files of bench fair runs over
// different seeds.
func mergeFair(paths []string) (*bench.FairResult, error) {
	var parts []*bench.FairResult
	for _, p := range paths {
		data, err := os.ReadFile(strings.TrimSpace(p))
		if err != nil {
			return nil, err
		}
		var r bench.FairResult
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		parts = append(parts, &r)
	}
	return bench.MergeFair(parts)
}
