package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/harbinger-mq/harbinger/internal/fair"
	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/internal/sched"
	"github.com/harbinger-mq/harbinger/internal/sim"
	"github.com/harbinger-mq/harbinger/internal/trace"
	"github.com/harbinger-mq/harbinger/internal/workload"
	"github.com/harbinger-mq/harbinger/workloads"
)

func init() {
	register("sim", "simulate the scheduling policies on a workload in virtual time", runSim)
}

// DefaultWorkload is the pre-registered workload shipped with the repository.
// The binary carries a copy (package workloads), used when the file is not
// found from the working directory, so demo and sim work from anywhere.
const DefaultWorkload = "workloads/production-flow.yaml"

// loadWorkload reads the workload file at path; the default one falls back
// to the binary's embedded copy.
func loadWorkload(path string) (*workload.Workload, error) {
	w, err := workload.Load(path)
	if err == nil || path != DefaultWorkload || !errors.Is(err, fs.ErrNotExist) {
		return w, err
	}
	data, rerr := workloads.FS.ReadFile(filepath.Base(DefaultWorkload))
	if rerr != nil {
		return nil, err
	}
	return workload.Parse(data)
}

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("sim", "sim [--workload FILE | --trace azure-functions-2019:DIR | --history FILE] [--seeds 1,2,3] [--arms fifo,...] [--workers N] [--json]", stderr)
	historySpec := fs.String("history", "", "replay a queue's own history instead of a workload: a file from harbinger admin history, or "+HistoryBrokerPrefix+"ADDR/QUEUE to export it from a running broker; reports per key what FIFO, the default and the other policies do (docs/history.md)")
	historyWindow := fs.Duration("history-window", 0, "--history "+HistoryBrokerPrefix+"ADDR/QUEUE: only the deliveries settled in this last window, e.g. 1h (default: all the broker keeps)")
	wl := fs.String("workload", DefaultWorkload, "workload file (YAML); the default is built into the binary")
	var tf traceFlags
	tf.register(fs)
	seedsFlag := fs.String("seeds", "", "comma-separated seeds (default: the workload's)")
	armsFlag := fs.String("arms", strings.Join(sim.StandardArms, ","), "comma-separated arms: "+strings.Join(sim.StandardArms, ", ")+", strict-aging, no-aging, sjf, previous, virtual-fifo, virtual-fifo-dispatch, no-long-keys, oracle-sept, oracle-keys, shadow, or any policy name (serve -policy); predictive is the default policy (bounded), strict-aging the policy named predictive")
	workers := fs.Int("workers", 0, "worker count (default: the workload's)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of tables")
	goal := fs.Bool("goal", false, "measure the arms against the policy's goal, job by job against the FIFO run of the same jobs (T1 long jobs, T2 P99, M the mean against the key oracle family); arms may carry settings: predictive:guard=0.25,overtake=0.1,stretch=-0.2, or key-oracle:guard=0.5")
	atLoadSpec := fs.String("at-load", "", "scale the arrivals so the offered load (busy workers / workers) is this, durations unchanged (default: as the workload or trace has it); with --history, a comma-separated list of loads replayed besides the recorded one")
	overhead := fs.Duration("overhead", 0, "per-message cost outside the handler, in workload time: a worker starts each handler this much after taking the message (a live broker's delivery and ack round trip; 0 is an ideal broker)")
	var tune policyFlags
	tune.register(fs)
	var ff fairFlags
	ff.register(fs)
	tenants := fs.Bool("tenants", false, "report latency per producer (the simulator's tenants) and each arm's throughput, for the noisy-neighbour workloads; an arm named NAME+fair runs with the --group-by, --limit and --rate declaration (without such an arm every arm does)")
	window := fs.String("window", "", "with --tenants: FROM,TO (durations) over which to report each producer's share of the worker time, e.g. 60s,120s")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *overhead < 0 {
		return fmt.Errorf("--overhead cannot be negative, got %v", *overhead)
	}
	loads, err := parseLoads(*atLoadSpec)
	if err != nil {
		return err
	}
	if *historySpec != "" {
		if tf.spec != "" || flagSet(fs, "workload") || flagSet(fs, "seeds") || *goal {
			return fmt.Errorf("--history replays one history: --workload, --trace, --seeds and --goal do not apply (its report is the goal's figures, per key)")
		}
		if *workers < 0 {
			return fmt.Errorf("--workers must be positive, got %d", *workers)
		}
		if err := tune.any(fs); err != nil {
			return err
		}
		if err := ff.any(fs); err != nil {
			return err
		}
		for _, name := range []string{"tenants", "window"} {
			if flagSet(fs, name) {
				return fmt.Errorf("--%s does not apply to --history: its report is per key", name)
			}
		}
		return runSimHistory(ctx, *historySpec, *historyWindow, *armsFlag, flagSet(fs, "arms"), *workers, loads, *overhead, flagSet(fs, "overhead"), *asJSON, stdout)
	}
	if *historyWindow != 0 {
		return fmt.Errorf("--history-window needs --history")
	}
	src, err := loadSource(*wl, tf)
	if err != nil {
		return err
	}
	if len(loads) > 1 {
		return fmt.Errorf("--at-load: one load, got %d (a list is for --history)", len(loads))
	}
	if len(loads) == 1 {
		if src, err = sim.AtLoad(src, loads[0]); err != nil {
			return fmt.Errorf("--at-load: %w", err)
		}
	}
	seeds, err := parseSeeds(*seedsFlag)
	if err != nil {
		return err
	}
	if *goal && !flagSet(fs, "arms") {
		*armsFlag = "predictive"
	}
	arms, err := parseArms(*armsFlag, src)
	if err != nil {
		return err
	}
	if err := tune.apply(arms); err != nil {
		return err
	}
	fcfg, err := ff.config()
	if err != nil {
		return err
	}
	if err := applyFair(arms, fcfg); err != nil {
		return err
	}
	if *workers < 0 {
		return fmt.Errorf("--workers must be positive, got %d", *workers)
	}
	if d, ok := src.(interface{ Describe() string }); ok && !*asJSON {
		fmt.Fprintf(stdout, "%s\n\n", d.Describe())
	}
	begin := time.Now()
	if *tenants {
		win, err := parseWindow(*window)
		if err != nil {
			return err
		}
		rep, err := sim.Tenants(src, arms, sim.Options{Seeds: seeds, Workers: *workers, Overhead: *overhead}, win)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(stdout).Encode(rep)
		}
		rep.Write(stdout)
		fmt.Fprintf(stdout, "\n(simulated in %v)\n", time.Since(begin).Round(time.Millisecond))
		return nil
	}
	if *goal {
		g, err := sim.Goal(src, arms, sim.Options{Seeds: seeds, Workers: *workers, Overhead: *overhead})
		if err != nil {
			return err
		}
		return writeGoal(stdout, g, *asJSON, time.Since(begin))
	}
	rep, err := sim.Run(src, arms, sim.Options{Seeds: seeds, Workers: *workers, Overhead: *overhead})
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

// writeGoal prints the goal's figures: a table per arm, or JSON.
func writeGoal(w io.Writer, g *sim.GoalResult, asJSON bool, took time.Duration) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(g)
	}
	fmt.Fprintf(w, "goal on %s, %d workers, seeds %v; long jobs: %s\n", g.Workload, g.Workers, g.Seeds, strings.Join(g.LongTypes, ", "))
	fmt.Fprintf(w, "R = %s (%s)\n\n", pct(float64(g.R)), g.RArm)
	fmt.Fprintf(w, "%-48s %9s %9s %7s %7s %13s %8s %8s  %s\n", "arm", "long>1.1x", "long>1.5x", "worst", "P99", "P99 by seed", "mean cut", "capture", "T1 T2 M")
	row := func(p sim.Paired) {
		yes := func(b bool) string {
			if b {
				return "ok"
			}
			return "--"
		}
		fmt.Fprintf(w, "%-48s %9s %9s %7s %7s %13s %8s %8s  %s %s %s\n", p.Arm, pct(float64(p.LongOverRatio)), pct(float64(p.LongOverCap)),
			ratio(float64(p.LongWorst)), ratio(float64(p.P99Ratio)), p.P99Spread(), pct(float64(p.MeanCut)), pct(float64(p.Capture)), yes(p.T1), yes(p.T2), yes(p.M))
	}
	for _, p := range g.Arms {
		row(p)
	}
	fmt.Fprintln(w, "key oracle family (the reference for R):")
	for _, p := range g.Family {
		row(p)
	}
	fmt.Fprintf(w, "\nP99 by seed: the lowest and highest of the seeds' own P99 against FIFO's; where they straddle %.2fx, T2's verdict is the draw's and other seeds may give the other one.\n",
		sim.GoalP99Ratio)
	fmt.Fprintf(w, "method: %s\n(ran in %.1f s)\n", g.Method, took.Seconds())
	return nil
}

func pct(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", v*100)
}

func ratio(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.2fx", v)
}

// flagSet reports whether the named flag was given.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
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

// splitArms splits a comma-separated list of arms whose settings are
// comma-separated too: a KEY=VALUE item belongs to the arm before it when
// that arm has settings ("predictive,predictive:guard=0.25,overtake=0.1"
// is two arms).
func splitArms(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if n := len(out); n > 0 && strings.Contains(f, "=") && !strings.Contains(f, ":") && strings.Contains(out[n-1], ":") {
			out[n-1] += "," + f
			continue
		}
		out = append(out, f)
	}
	return out
}

func parseArms(s string, src sim.Source) ([]sim.Arm, error) {
	var arms []sim.Arm
	seen := map[string]bool{}
	for _, name := range splitArms(s) {
		name = strings.TrimSpace(name)
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		base, withFair := strings.CutSuffix(name, "+fair")
		a, err := sim.ParseArm(base, src.Types())
		if err != nil {
			return nil, err
		}
		if withFair {
			a.Name = name
		}
		arms = append(arms, a)
	}
	if len(arms) == 0 {
		return nil, fmt.Errorf("--arms: name at least one arm")
	}
	return arms, nil
}

// policyFlags override the learning policies' settings for experiments; they
// apply to every arm whose tiers come from the predictor.
type policyFlags struct {
	tiers         int
	stretch       string
	othersStretch string
	minSlack      time.Duration
	ageAfter      time.Duration
	shortestFirst bool
	agingOff      bool
	longShare     float64
}

func (p *policyFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&p.tiers, "tiers", 0, "tier count of the learning arms (default 3; sjf and oracle-sjf keep their one)")
	fs.StringVar(&p.stretch, "stretch", "", fmt.Sprintf("bounded policy: a long message's slack as a fraction of the wait FIFO would give it (default %g)", sched.DefaultStretch))
	fs.StringVar(&p.othersStretch, "others-stretch", "", "bounded policy: bound the other (not long) messages too, with this slack as a fraction of the wait FIFO would give them (default: unbounded)")
	fs.DurationVar(&p.minSlack, "min-slack", 0, fmt.Sprintf("bounded policy: slack every long message gets, as predicted work (default %v)", sched.DefaultMinSlack))
	fs.DurationVar(&p.ageAfter, "age-after", 0, fmt.Sprintf("the arms that age (strict-aging, weighted): wait at a tier before aging lifts a message (default %v)", sched.DefaultAgeAfter))
	fs.BoolVar(&p.shortestFirst, "shortest-first", false, "order each tier by predicted cost instead of arrival")
	fs.BoolVar(&p.agingOff, "aging-off", false, "turn aging (and the bounded policy's bound) off")
	fs.Float64Var(&p.longShare, "long-share", 0, fmt.Sprintf("bounded policy: the most expensive messages making up this share of recent predicted work are long and bounded (default %g; negative: none)", sched.DefaultLongShare))
}

// any refuses the policy flags where they do not apply.
func (p *policyFlags) any(fs *flag.FlagSet) error {
	for _, name := range []string{"tiers", "stretch", "others-stretch", "min-slack", "age-after", "shortest-first", "aging-off", "long-share"} {
		if flagSet(fs, name) {
			return fmt.Errorf("--%s does not apply to --history: it replays the policies as they ship", name)
		}
	}
	return nil
}

func (p *policyFlags) apply(arms []sim.Arm) error {
	stretch, err := optionalFloat("--stretch", p.stretch)
	if err != nil {
		return err
	}
	others, err := optionalFloat("--others-stretch", p.othersStretch)
	if err != nil {
		return err
	}
	if p.tiers < 0 || p.minSlack < 0 || p.ageAfter < 0 {
		return fmt.Errorf("--tiers, --min-slack and --age-after must not be negative")
	}
	for i := range arms {
		a := &arms[i]
		if a.Options.StaticTiers != nil && a.Policy == "static" || a.Policy == "fifo" {
			continue
		}
		if p.tiers > 0 && a.Options.Tiers != 1 { // sjf and oracle-sjf are one level by definition
			a.Options.Tiers = p.tiers
		}
		if stretch != nil {
			a.Options.Stretch = stretch
		}
		if others != nil {
			a.Options.OthersStretch = others
		}
		if p.minSlack > 0 {
			a.Options.MinSlack = p.minSlack
		}
		if p.ageAfter > 0 {
			n := a.Options.Tiers
			if n == 0 {
				n = 3
			}
			a.Options.AgeAfter = make([]time.Duration, n)
			for j := 1; j < n; j++ {
				a.Options.AgeAfter[j] = p.ageAfter
			}
		}
		a.Options.ShortestFirst = a.Options.ShortestFirst || p.shortestFirst
		if p.longShare != 0 {
			a.Predictor.LongShare = p.longShare
		}
		a.Options.AgingOff = a.Options.AgingOff || p.agingOff
	}
	return nil
}

// traceFlags select a real trace instead of a workload file.
type traceFlags struct {
	spec        string
	start       int
	minutes     int
	compression float64
	load        float64
}

// TracePrefix names the only trace format Harbinger replays so far.
const TracePrefix = "azure-functions-2019:"

func (t *traceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.spec, "trace", "", "replay a trace instead of a workload: "+TracePrefix+"DIR (DIR holds one *_inv.csv and one *_run.csv)")
	fs.IntVar(&t.start, "trace-start", 0, fmt.Sprintf("trace: first minute of the window, 1-1440 (default %d)", trace.DefaultStartMinute))
	fs.IntVar(&t.minutes, "trace-minutes", 0, fmt.Sprintf("trace: window length in minutes (default %d)", trace.DefaultMinutes))
	fs.Float64Var(&t.compression, "trace-compression", 0, fmt.Sprintf("trace: replay seconds per trace second, durations and arrivals alike (default %.4g)", trace.DefaultCompression))
	fs.Float64Var(&t.load, "load", 0, fmt.Sprintf("trace: target offered load, busy workers / workers (default %g)", trace.DefaultLoad))
}

func loadSource(workloadPath string, t traceFlags) (sim.Source, error) {
	if t.spec == "" {
		if t.start != 0 || t.minutes != 0 || t.compression != 0 || t.load != 0 {
			return nil, fmt.Errorf("--trace-* and --load need --trace")
		}
		w, err := loadWorkload(workloadPath)
		if err != nil {
			return nil, err
		}
		return sim.FromWorkload(w), nil
	}
	dir, ok := strings.CutPrefix(t.spec, TracePrefix)
	if !ok || dir == "" {
		return nil, fmt.Errorf("--trace: want %sDIR, got %q", TracePrefix, t.spec)
	}
	return trace.Load(dir, trace.Options{StartMinute: t.start, Minutes: t.minutes, Compression: t.compression, Load: t.load})
}

// parseLoads reads --at-load: positive numbers separated by commas; ""
// is none.
func parseLoads(s string) ([]float64, error) {
	if s == "" {
		return nil, nil
	}
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
			return nil, fmt.Errorf("--at-load: %q is not a positive number", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// optionalFloat parses a flag that may be left unset ("").
func optionalFloat(flag, s string) (*float64, error) {
	if s == "" {
		return nil, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) {
		return nil, fmt.Errorf("%s: %q is not a number", flag, s)
	}
	return &v, nil
}

// applyFair gives the declaration to the arms named NAME+fair, or to every
// arm when none is.
func applyFair(arms []sim.Arm, cfg *fair.Config) error {
	marked := false
	for _, a := range arms {
		marked = marked || strings.HasSuffix(a.Name, "+fair")
	}
	if marked && cfg == nil {
		return fmt.Errorf("an arm named +fair needs a declaration: --group-by, --limit or --rate")
	}
	for i := range arms {
		if cfg != nil && (!marked || strings.HasSuffix(arms[i].Name, "+fair")) {
			arms[i].Fair = cfg
		}
	}
	return nil
}

// parseWindow reads FROM,TO.
func parseWindow(s string) ([2]time.Duration, error) {
	if s == "" {
		return [2]time.Duration{}, nil
	}
	a, b, ok := strings.Cut(s, ",")
	from, err1 := time.ParseDuration(strings.TrimSpace(a))
	to, err2 := time.ParseDuration(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || from < 0 || to <= from {
		return [2]time.Duration{}, fmt.Errorf("--window: want FROM,TO durations with FROM < TO, got %q", s)
	}
	return [2]time.Duration{from, to}, nil
}
