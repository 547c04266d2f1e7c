package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/internal/sim"
	"github.com/harbinger-mq/harbinger/internal/stats"
	"github.com/harbinger-mq/harbinger/internal/workload"
)

// FairArm is the default policy with fair shares between producers (the
// workloads' tenants): the queue declared with group_by producer and the
// broker's default fair settings, the reservation on. It is not one of
// the pre-registered FlowArms; bench flow accepts it by name and bench
// fair runs it.
var FairArm = Arm{Name: "harbinger-predictive-fair", Broker: Harbinger, Policy: PolicyFair}

// KnownFlowArms are the arms bench flow accepts: FlowArms and FairArm.
func KnownFlowArms() []Arm { return append(slices.Clone(FlowArms), FairArm) }

// DefaultFairWindow is the stretch of workload time the noisy-neighbour
// workloads flood in, over which bench fair reports each tenant's share
// of the worker time and the latency of the jobs sent in it.
var DefaultFairWindow = [2]time.Duration{60 * time.Second, 120 * time.Second}

// TenantFigures are one producer's figures in one run (or their medians
// over seeds), in workload time.
type TenantFigures struct {
	Producer string `json:"producer"`
	Jobs     int    `json:"jobs"` // completed
	// MeanS and P99S are the latency, publish to done, of every
	// completed job; WindowMeanS and WindowP99S of those published inside
	// the window (WindowJobs of them).
	MeanS       float64 `json:"mean_s"`
	P99S        float64 `json:"p99_s"`
	WindowJobs  int     `json:"window_jobs"`
	WindowMeanS float64 `json:"window_mean_s"`
	WindowP99S  float64 `json:"window_p99_s"`
	// WorkShare is the producer's share of the worker time spent on jobs,
	// WindowShare its share of the worker time spent inside the window.
	WorkShare   float64 `json:"work_share"`
	WindowShare float64 `json:"window_share"`
}

// TenantRun is one run's figures per producer and its totals.
type TenantRun struct {
	Arm     string          `json:"arm"`
	Seed    uint64          `json:"seed"`
	Sent    int             `json:"sent"`
	Tenants []TenantFigures `json:"tenants"` // by producer name
	// ThroughputPerS is completed jobs per second from the first publish
	// to the last done, MakespanS that span, BusyShare the share of the
	// workers' time inside the window spent on jobs.
	ThroughputPerS float64 `json:"throughput_per_s"`
	MakespanS      float64 `json:"makespan_s"`
	BusyShare      float64 `json:"busy_share"`
	// The harness's own figures for the run (RunResult): how long handlers
	// slept past their jobs' durations, and the broker's turnaround.
	OverrunUS       report.Num `json:"overrun_us"`
	TurnaroundUS    report.Num `json:"turnaround_us"`
	TurnaroundShare report.Num `json:"turnaround_share"`
}

// Tenant returns the figures of producer p, and false if it completed
// nothing.
func (r TenantRun) Tenant(p string) (TenantFigures, bool) {
	i := slices.IndexFunc(r.Tenants, func(f TenantFigures) bool { return f.Producer == p })
	if i < 0 {
		return TenantFigures{}, false
	}
	return r.Tenants[i], true
}

// Tenants computes a run's figures per producer, with the simulator's
// definitions (sim.Tenants): latency from publish to done, work from
// start to done, a job's work inside the window the part of it that
// overlaps the window. workers is the run's; window is in workload time.
func Tenants(res RunResult, types []workload.JobType, workers int, window [2]time.Duration) TenantRun {
	out := TenantRun{Arm: res.Arm, Seed: res.Seed, Sent: res.Sent, OverrunUS: report.Num(res.OverrunUS),
		TurnaroundUS: report.Num(res.TurnaroundUS), TurnaroundShare: report.Num(res.TurnaroundShare)}
	lat, wlat := map[string][]float64{}, map[string][]float64{}
	work, wwork := map[string]float64{}, map[string]float64{}
	var total, wtotal float64
	first, last := time.Duration(-1), time.Duration(0)
	for _, r := range res.Records {
		p := types[r.Type].Producer
		l := (r.Done - r.Sent).Seconds()
		lat[p] = append(lat[p], l)
		if r.Sent >= window[0] && r.Sent < window[1] {
			wlat[p] = append(wlat[p], l)
		}
		w := (r.Done - r.Started).Seconds()
		work[p] += w
		total += w
		if in := (min(r.Done, window[1]) - max(r.Started, window[0])).Seconds(); in > 0 {
			wwork[p] += in
			wtotal += in
		}
		if first < 0 || r.Sent < first {
			first = r.Sent
		}
		last = max(last, r.Done)
	}
	for _, p := range slices.Sorted(maps.Keys(lat)) {
		f := TenantFigures{Producer: p, Jobs: len(lat[p]), WindowJobs: len(wlat[p]),
			WorkShare: work[p] / max(total, 1e-12), WindowShare: wwork[p] / max(wtotal, 1e-12)}
		f.MeanS, f.P99S = meanP99(lat[p])
		f.WindowMeanS, f.WindowP99S = meanP99(wlat[p])
		out.Tenants = append(out.Tenants, f)
	}
	if len(res.Records) > 0 {
		out.MakespanS = (last - first).Seconds()
		out.ThroughputPerS = float64(len(res.Records)) / max(out.MakespanS, 1e-12)
	}
	if window[1] > window[0] && workers > 0 {
		out.BusyShare = wtotal / (float64(workers) * (window[1] - window[0]).Seconds())
	}
	return out
}

// meanP99 is the mean and 99th percentile of xs, zero for none.
func meanP99(xs []float64) (mean, p99 float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	s := slices.Sorted(slices.Values(xs))
	return stats.Mean(s), stats.QuantileSorted(s, 0.99)
}

// medianTenants is the median over runs of each producer's figures, and of
// the totals; the run's arm names it.
func medianTenants(runs []TenantRun) TenantRun {
	if len(runs) == 0 {
		return TenantRun{}
	}
	out := TenantRun{Arm: runs[0].Arm}
	med := func(f func(TenantRun) float64) float64 {
		xs := make([]float64, len(runs))
		for i, r := range runs {
			xs[i] = f(r)
		}
		return stats.Median(xs)
	}
	out.Sent = int(med(func(r TenantRun) float64 { return float64(r.Sent) }))
	out.ThroughputPerS = med(func(r TenantRun) float64 { return r.ThroughputPerS })
	out.MakespanS = med(func(r TenantRun) float64 { return r.MakespanS })
	out.BusyShare = med(func(r TenantRun) float64 { return r.BusyShare })
	out.OverrunUS = report.Num(med(func(r TenantRun) float64 { return float64(r.OverrunUS) }))
	out.TurnaroundUS = report.Num(med(func(r TenantRun) float64 { return float64(r.TurnaroundUS) }))
	out.TurnaroundShare = report.Num(med(func(r TenantRun) float64 { return float64(r.TurnaroundShare) }))
	producers := map[string]bool{}
	for _, r := range runs {
		for _, t := range r.Tenants {
			producers[t.Producer] = true
		}
	}
	for _, p := range slices.Sorted(maps.Keys(producers)) {
		get := func(f func(TenantFigures) float64) float64 {
			return med(func(r TenantRun) float64 { t, _ := r.Tenant(p); return f(t) })
		}
		out.Tenants = append(out.Tenants, TenantFigures{Producer: p,
			Jobs:        int(get(func(t TenantFigures) float64 { return float64(t.Jobs) })),
			MeanS:       get(func(t TenantFigures) float64 { return t.MeanS }),
			P99S:        get(func(t TenantFigures) float64 { return t.P99S }),
			WindowJobs:  int(get(func(t TenantFigures) float64 { return float64(t.WindowJobs) })),
			WindowMeanS: get(func(t TenantFigures) float64 { return t.WindowMeanS }),
			WindowP99S:  get(func(t TenantFigures) float64 { return t.WindowP99S }),
			WorkShare:   get(func(t TenantFigures) float64 { return t.WorkShare }),
			WindowShare: get(func(t TenantFigures) float64 { return t.WindowShare }),
		})
	}
	return out
}

// FairCase is one noisy-neighbour case: the workload with the flood and
// the same without it, and the goal a steady tenant's latency under the
// flood, with fair shares on, must meet against the calm run's.
type FairCase struct {
	Name        string
	Calm, Flood sim.Source
	// MeanGoal and P99Goal are the largest ratios, flood with fair shares
	// over calm, the goal allows (1.2 and 1.2 for equal sizes, 1.5 and 2
	// for sizes 1000x apart).
	MeanGoal, P99Goal float64
	// FloodProducer names the flooding tenant; the others are steady.
	FloodProducer string
}

// The three runs of a case, as the fair report names them.
const (
	FairCalm     = "calm"            // the calm workload, harbinger-predictive
	FairFloodOff = "flood, fair off" // the flood, harbinger-predictive
	FairFloodOn  = "flood, fair on"  // the flood, harbinger-predictive-fair
)

// FairConfig configures RunFair.
type FairConfig struct {
	Cases        []FairCase
	Seeds        []uint64 // default: the flood workload's
	TimeScale    float64  // default DefaultTimeScale
	DrainTimeout time.Duration
	// Window is the flood's stretch of workload time; default
	// DefaultFairWindow.
	Window [2]time.Duration
	// ArrivalWindow keeps only the arrivals before it (FlowConfig.Window);
	// tests use it for a short run.
	ArrivalWindow time.Duration
	Progress      io.Writer
	HarbingerMode HarbingerMode
	// SkipOff runs the flood only with fair shares on: no contrast run.
	SkipOff bool
	// Fair is what the fair arm's queue declares of the reservation;
	// zero is the broker's defaults.
	Fair FairSettings
}

// FairResult is a noisy-neighbour comparison: per case, each run's
// figures per tenant and their medians over seeds.
type FairResult struct {
	Method string           `json:"method"`
	Window [2]float64       `json:"window_s"`
	Cases  []FairCaseResult `json:"cases"`
}

// FairCaseResult is one case's runs and medians.
type FairCaseResult struct {
	Name          string      `json:"name"`
	Workers       int         `json:"workers"`
	Seeds         []uint64    `json:"seeds"`
	FloodProducer string      `json:"flood_producer"`
	MeanGoal      float64     `json:"mean_goal"`
	P99Goal       float64     `json:"p99_goal"`
	Runs          []TenantRun `json:"runs"`
	// Calm, Off and On are the medians over seeds of the calm run and the
	// flood's without and with fair shares.
	Calm TenantRun `json:"calm"`
	Off  TenantRun `json:"flood_fair_off"`
	On   TenantRun `json:"flood_fair_on"`
	// Steady compares each steady tenant's figures under the flood with
	// its calm ones.
	Steady []SteadyRatios `json:"steady"`
}

// SteadyRatios are one steady tenant's latency under the flood over its
// calm latency, with fair shares off and on, over every job and over the
// jobs sent in the window.
type SteadyRatios struct {
	Producer          string  `json:"producer"`
	OffMean           float64 `json:"off_mean"`
	OffP99            float64 `json:"off_p99"`
	OnMean            float64 `json:"on_mean"`
	OnP99             float64 `json:"on_p99"`
	OffWindowMean     float64 `json:"off_window_mean"`
	OffWindowP99      float64 `json:"off_window_p99"`
	OnWindowMean      float64 `json:"on_window_mean"`
	OnWindowP99       float64 `json:"on_window_p99"`
	MeetsGoal         bool    `json:"meets_goal"`
	MeetsGoalInWindow bool    `json:"meets_goal_in_window"`
}

// GoalMet reports whether every steady tenant met the case's goal over
// the whole run.
func (c FairCaseResult) GoalMet() bool {
	for _, s := range c.Steady {
		if !s.MeetsGoal {
			return false
		}
	}
	return len(c.Steady) > 0
}

// RunFair runs each case live: the calm workload with
// harbinger-predictive, then the flood with harbinger-predictive and
// harbinger-predictive-fair interleaved within each seed (RunFlow), and
// compares each steady tenant's latency with its calm one.
func RunFair(ctx context.Context, cfg FairConfig, drivers map[string]Driver) (*FairResult, error) {
	if cfg.Window == [2]time.Duration{} {
		cfg.Window = DefaultFairWindow
	}
	if !(cfg.Window[1] > cfg.Window[0]) {
		return nil, fmt.Errorf("bench: the fair window must end after it starts, got %s-%s", cfg.Window[0], cfg.Window[1])
	}
	predictive, err := ParseArms("harbinger-predictive", FlowArms)
	if err != nil {
		return nil, err
	}
	out := &FairResult{Window: [2]float64{cfg.Window[0].Seconds(), cfg.Window[1].Seconds()}}
	for _, c := range cfg.Cases {
		flow := func(src sim.Source, arms []Arm) (*FlowResult, FlowConfig, error) {
			fc := FlowConfig{Source: src, Seeds: cfg.Seeds, Arms: arms, TimeScale: cfg.TimeScale, DrainTimeout: cfg.DrainTimeout,
				Window: cfg.ArrivalWindow, Progress: cfg.Progress, HarbingerMode: cfg.HarbingerMode, Fair: cfg.Fair}.WithDefaults()
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "bench fair: %s, %s: seeds %v, time scale %g\n", c.Name, src.Name(), fc.Seeds, fc.TimeScale)
			}
			res, err := RunFlow(ctx, fc, drivers)
			return res, fc, err
		}
		calm, _, err := flow(c.Calm, predictive)
		if err != nil {
			return nil, fmt.Errorf("bench: %s calm: %w", c.Name, err)
		}
		floodArms := []Arm{predictive[0], FairArm}
		if cfg.SkipOff {
			floodArms = []Arm{FairArm}
		}
		flood, fc, err := flow(c.Flood, floodArms)
		if err != nil {
			return nil, fmt.Errorf("bench: %s flood: %w", c.Name, err)
		}
		cr := FairCaseResult{Name: c.Name, Workers: fc.Workers, Seeds: fc.Seeds, FloodProducer: c.FloodProducer,
			MeanGoal: c.MeanGoal, P99Goal: c.P99Goal}
		add := func(label string, runs []RunResult, types []workload.JobType) {
			for _, r := range runs {
				tr := Tenants(r, types, fc.Workers, cfg.Window)
				tr.Arm = label
				cr.Runs = append(cr.Runs, tr)
			}
		}
		add(FairCalm, calm.Runs, c.Calm.Types())
		var off, on []RunResult
		for _, r := range flood.Runs {
			if r.Arm == FairArm.Name {
				on = append(on, r)
			} else {
				off = append(off, r)
			}
		}
		add(FairFloodOff, off, c.Flood.Types())
		add(FairFloodOn, on, c.Flood.Types())
		cr.summarize()
		out.Cases = append(out.Cases, cr)
	}
	return out, nil
}

// summarize sets the medians over seeds and the steady tenants' ratios
// from the case's runs.
func (c *FairCaseResult) summarize() {
	by := map[string][]TenantRun{}
	for _, r := range c.Runs {
		by[r.Arm] = append(by[r.Arm], r)
	}
	c.Calm, c.Off, c.On = medianTenants(by[FairCalm]), medianTenants(by[FairFloodOff]), medianTenants(by[FairFloodOn])
	c.Steady = steadyRatios(c.Calm, c.Off, c.On, c.FloodProducer, c.MeanGoal, c.P99Goal)
}

// MergeFair combines fair results run separately over different seeds
// (each a bench fair run's summary.json) into one, the medians taken over
// every seed; the cases are matched by name.
func MergeFair(parts []*FairResult) (*FairResult, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("bench: nothing to merge")
	}
	out := &FairResult{Window: parts[0].Window}
	var seeds []string
	for _, p := range parts {
		if p.Window != out.Window {
			return nil, fmt.Errorf("bench: cannot merge windows %v and %v", out.Window, p.Window)
		}
		if len(p.Cases) > 0 {
			seeds = append(seeds, fmt.Sprint(p.Cases[0].Seeds))
		}
		for _, c := range p.Cases {
			i := slices.IndexFunc(out.Cases, func(o FairCaseResult) bool { return o.Name == c.Name })
			if i < 0 {
				c.Runs = slices.Clone(c.Runs)
				c.Seeds = slices.Clone(c.Seeds)
				out.Cases = append(out.Cases, c)
				continue
			}
			o := &out.Cases[i]
			if o.Workers != c.Workers || o.FloodProducer != c.FloodProducer || o.MeanGoal != c.MeanGoal || o.P99Goal != c.P99Goal {
				return nil, fmt.Errorf("bench: case %s differs between the results", c.Name)
			}
			o.Seeds = append(o.Seeds, c.Seeds...)
			o.Runs = append(o.Runs, c.Runs...)
		}
	}
	for i := range out.Cases {
		out.Cases[i].summarize()
	}
	out.Method = parts[0].Method
	if len(parts) > 1 {
		out.Method += fmt.Sprintf(" Merged from %d runs of bench fair, each as described, with seeds %s; medians over all of them.",
			len(parts), strings.Join(seeds, ", "))
	}
	return out, nil
}

// steadyRatios compares every tenant but the flooding one with its calm
// figures.
func steadyRatios(calm, off, on TenantRun, flood string, meanGoal, p99Goal float64) []SteadyRatios {
	var out []SteadyRatios
	for _, base := range calm.Tenants {
		if base.Producer == flood {
			continue
		}
		f, _ := off.Tenant(base.Producer)
		n, _ := on.Tenant(base.Producer)
		s := SteadyRatios{Producer: base.Producer,
			OffMean: ratio(f.MeanS, base.MeanS), OffP99: ratio(f.P99S, base.P99S),
			OnMean: ratio(n.MeanS, base.MeanS), OnP99: ratio(n.P99S, base.P99S),
			OffWindowMean: ratio(f.WindowMeanS, base.WindowMeanS), OffWindowP99: ratio(f.WindowP99S, base.WindowP99S),
			OnWindowMean: ratio(n.WindowMeanS, base.WindowMeanS), OnWindowP99: ratio(n.WindowP99S, base.WindowP99S)}
		// A ratio of zero is a figure missing on either side: no goal met.
		s.MeetsGoal = s.OnMean > 0 && s.OnP99 > 0 && s.OnMean <= meanGoal && s.OnP99 <= p99Goal
		s.MeetsGoalInWindow = s.OnWindowMean > 0 && s.OnWindowP99 > 0 && s.OnWindowMean <= meanGoal && s.OnWindowP99 <= p99Goal
		out = append(out, s)
	}
	return out
}

// ratio is a over b, zero when either is missing (zero).
func ratio(a, b float64) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return a / b
}

// FairMethod is the method paragraph of a fair report.
func FairMethod(cfg FairConfig, env Environment) string {
	fc := FlowConfig{TimeScale: cfg.TimeScale, DrainTimeout: cfg.DrainTimeout}.WithDefaults()
	var names []string
	workers := 0
	for _, c := range cfg.Cases {
		names = append(names, c.Flood.Name()+" against "+c.Calm.Name())
		workers = c.Flood.Workers()
	}
	seeds := cfg.Seeds
	if len(seeds) == 0 && len(cfg.Cases) > 0 {
		seeds = cfg.Cases[0].Flood.Seeds()
	}
	arrivals := "the whole arrival window"
	if cfg.ArrivalWindow > 0 {
		arrivals = fmt.Sprintf("only the first %s of arrivals", cfg.ArrivalWindow)
	}
	w := cfg.Window
	if w == [2]time.Duration{} {
		w = DefaultFairWindow
	}
	floodRuns, interleaved := "harbinger-predictive and "+FairArm.Name, " interleaved within each seed"
	settings := "the default fair settings, the reservation on"
	if s := cfg.Fair.String(); s != "" {
		settings = s + ", the other fair settings the broker's defaults"
	}
	if cfg.SkipOff {
		floodRuns, interleaved = "only "+FairArm.Name+" (--skip-off: no run with fair shares off)", ""
	}
	return fmt.Sprintf("Live noisy-neighbour runs of %s, seeds %v, time scale %g (latencies quoted in workload time), %s, %d workers. "+
		"Each run is bench flow's (RunFlow): Harbinger as "+fairHarbinger(cfg.HarbingerMode)+"; one producer goroutine per tenant "+
		"(the workload's producers) publishing each job at its scaled arrival time with its key; workers with prefetch 1 sleeping each job's "+
		"scaled true duration and acking with it. Per case: the calm workload with harbinger-predictive (the default policy), then the flood "+
		"with "+floodRuns+" (the same policy on a queue declared with group_by producer and "+settings+")"+interleaved+", each on a fresh broker. Latency: publish to ack. Per tenant: mean and P99 over "+
		"every completed job, and over the jobs published in %s-%s of workload time (the window); its share of the worker time spent on jobs, "+
		"overall and inside the window (a job's part that overlaps it), as the simulator's --tenants --window reports it. Ratios: a steady "+
		"tenant's figure under the flood over its calm figure; figures and totals are medians over seeds. Throughput: completed jobs over "+
		"first publish to last ack. Drain timeout %s (wall) after the last send. Environment: %s.",
		joinAnd(names), seeds, fc.TimeScale, arrivals, workers, w[0], w[1], fc.DrainTimeout, env)
}

// fairHarbinger says how a fair run's brokers ran.
func fairHarbinger(m HarbingerMode) string {
	if m == InProcess {
		return "a fresh broker per run inside the harness process (a shortcut: it shares the harness's CPU and garbage collector), " +
			"used through the public client SDK over gRPC on loopback"
	}
	return "a fresh `harbinger serve --memory` process per run, a process of its own, used through the public client SDK over gRPC on loopback"
}

func joinAnd(xs []string) string {
	switch len(xs) {
	case 0:
		return ""
	case 1:
		return xs[0]
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " and " + xs[len(xs)-1]
}

// FairMarkdown writes the fair report: the method, then per case the
// steady tenants' ratios, every tenant's figures and the runs' totals.
func FairMarkdown(w io.Writer, r *FairResult) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Fair shares, live\n\n%s\n", r.Method)
	win := fmt.Sprintf("%g-%g s", r.Window[0], r.Window[1])
	for _, c := range r.Cases {
		fmt.Fprintf(&b, "\n## %s\n\n", c.Name)
		fmt.Fprintf(&b, "Goal, fair shares on: each steady tenant within %gx of calm at the mean and %gx at P99. Met over the whole run: %s.\n\n",
			c.MeanGoal, c.P99Goal, yesNo(c.GoalMet()))
		fmt.Fprintf(&b, "Steady tenants, mean / P99 under the flood over calm:\n\n")
		rows := [][]string{}
		for _, s := range c.Steady {
			rows = append(rows, []string{s.Producer,
				pairRatio(s.OffMean, s.OffP99), pairRatio(s.OnMean, s.OnP99),
				pairRatio(s.OffWindowMean, s.OffWindowP99), pairRatio(s.OnWindowMean, s.OnWindowP99),
				yesNo(s.MeetsGoal)})
		}
		table(&b, true, "llllll", []string{"steady tenant", "fair off", "fair on", "fair off, sent in " + win, "fair on, sent in " + win, "goal met (fair on)"}, rows)
		fmt.Fprintf(&b, "\nEvery tenant (jobs completed; latency mean / P99 over all jobs and over those sent in %s; share of the worker time, overall and in %s):\n\n", win, win)
		rows = rows[:0]
		for _, run := range c.ran() {
			for _, t := range run.Tenants {
				rows = append(rows, []string{run.Arm, t.Producer, fmt.Sprint(t.Jobs),
					secs(t.MeanS) + " / " + secs(t.P99S), secs(t.WindowMeanS) + " / " + secs(t.WindowP99S),
					fmt.Sprintf("%.1f%%", 100*t.WorkShare), fmt.Sprintf("%.1f%%", 100*t.WindowShare)})
			}
		}
		table(&b, true, "llrllrr", []string{"run", "tenant", "jobs", "mean / P99", "sent in " + win, "work", "work in " + win}, rows)
		fmt.Fprintf(&b, "\nTotals (handler overrun: how long handlers slept past their jobs' durations; turnaround: the broker's time between a worker's ack and its next job while work waited):\n\n")
		rows = rows[:0]
		for _, run := range c.ran() {
			rows = append(rows, []string{run.Arm, fmt.Sprint(run.Sent), fmt.Sprintf("%.1f", run.ThroughputPerS), secs(run.MakespanS),
				fmt.Sprintf("%.1f%%", 100*run.BusyShare), fmt.Sprintf("%.0f µs", float64(run.OverrunUS)),
				fmt.Sprintf("%.0f µs, %.2f%% of worker time", float64(run.TurnaroundUS), 100*float64(run.TurnaroundShare))})
		}
		table(&b, true, "lrrrrrl", []string{"run", "sent", "throughput/s", "makespan", "busy in " + win, "handler overrun", "turnaround"}, rows)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// ran is the case's median runs that took place: the run with fair shares
// off is missing under --skip-off.
func (c FairCaseResult) ran() []TenantRun {
	var out []TenantRun
	for _, r := range []TenantRun{c.Calm, c.Off, c.On} {
		if len(r.Tenants) > 0 {
			out = append(out, r)
		}
	}
	return out
}

// pairRatio renders a mean and a P99 ratio; zeros (a run not made) as "not run".
func pairRatio(mean, p99 float64) string {
	if mean == 0 && p99 == 0 {
		return "not run"
	}
	return fmt.Sprintf("%.2fx / %.2fx", mean, p99)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// secs renders workload seconds as ms below a second.
func secs(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.1f ms", s*1000)
	}
	return fmt.Sprintf("%.2f s", s)
}

// WriteFairFiles writes report.md and summary.json into dir.
func WriteFairFiles(dir string, r *FairResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, FileReport), func(w io.Writer) error { return FairMarkdown(w, r) }); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, FileSummary), func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	})
}
