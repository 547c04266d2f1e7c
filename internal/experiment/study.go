package experiment

import (
	"fmt"
	"math"

	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/internal/stats"
)

// metric reads one figure of one seed.
type metric struct {
	name string
	unit string
	seed func(c *Cell, i int) float64
}

func fromSeed(f func(report.SeedResult) report.Num) func(*Cell, int) float64 {
	return func(c *Cell, i int) float64 { return float64(f(c.PerSeed[i])) }
}

var (
	mMean   = metric{"mean", "s", fromSeed(func(s report.SeedResult) report.Num { return s.MeanS })}
	mP99    = metric{"P99", "s", fromSeed(func(s report.SeedResult) report.Num { return s.P99S })}
	mExport = metric{"export max wait", "s", fromSeed(func(s report.SeedResult) report.Num { return s.ExportMaxWaitS })}
	mShort  = metric{"short median", "s", fromSeed(func(s report.SeedResult) report.Num { return s.ShortMedianS })}
	mMAE    = metric{"MAE", "ms", fromSeed(func(s report.SeedResult) report.Num { return s.MAEms })}
	mTier   = metric{"tier accuracy", "", fromSeed(func(s report.SeedResult) report.Num { return s.TierAccuracy })}
)

// value is the median across seeds of m for one arm.
func (r *Results) value(si int, load float64, arm string, m metric) float64 {
	c := r.Cell(si, load, arm)
	if c == nil {
		return math.NaN()
	}
	var xs []float64
	for i := range c.PerSeed {
		if v := m.seed(c, i); !math.IsNaN(v) {
			xs = append(xs, v)
		}
	}
	return stats.Median(xs)
}

// ratio is the median across seeds of arm / base, paired by seed.
func (r *Results) ratio(si int, load float64, arm, base string, m metric) float64 {
	a, b := r.Cell(si, load, arm), r.Cell(si, load, base)
	if a == nil || b == nil {
		return math.NaN()
	}
	var xs []float64
	for i := range a.PerSeed {
		x, y := m.seed(a, i), m.seed(b, i)
		if !math.IsNaN(x) && !math.IsNaN(y) && y > 0 {
			xs = append(xs, x/y)
		}
	}
	return stats.Median(xs)
}

// column is one column of a study table: a figure or a ratio to a base arm.
type column struct {
	m    metric
	base string // "" for the figure itself
}

func (c column) head() string {
	if c.base == "" {
		if c.m.unit == "" {
			return c.m.name
		}
		return c.m.name + " " + c.m.unit
	}
	return c.m.name + " vs " + c.base
}

func (c column) get(r *Results, si int, load float64, arm string) float64 {
	if c.base == "" {
		return r.value(si, load, arm, c.m)
	}
	return r.ratio(si, load, arm, c.base, c.m)
}

// panelSpec is one chart panel per scenario.
type panelSpec struct {
	col column
	log bool
}

// study is one question, its arms, table columns, chart and findings.
type study struct {
	slug     string
	title    string
	question string
	arms     []string
	columns  []column
	panels   []panelSpec // drawn once per scenario
	chartArm []string    // arms on the chart; default arms
	findings func(r *Results) string
}

// at formats one figure for findings.
func (r *Results) at(si int, load float64, arm string, m metric) string {
	return fmtNum(r.value(si, load, arm, m))
}

// x formats one paired ratio for findings, e.g. "4.8x".
func (r *Results) x(si int, load float64, arm, base string, m metric) string {
	return fmtNum(r.ratio(si, load, arm, base, m)) + "x"
}

func fmtNum(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// The scenario indexes the findings speak of: the workload first, the trace second.
const (
	scWorkload = 0
	scTrace    = 1
)

func studies() []study {
	return []study{
		{
			slug:     "aging",
			title:    "1. What aging costs and what it protects",
			question: "The default policy (shortest predicted first with a FIFO-position bound on long messages) with its bound on and off, against the older alternatives: strict priority with step aging, and level weights with pausing aging. Two wider bounds (a message is bounded when predicted at least 16x or 4x the median cost, instead of 64x) show what bounding more of the queue would cost.",
			arms:     []string{ArmFIFO, ArmDefault, ArmAgingOff, ArmStrictAging, ArmWeighted, ArmLong16, ArmLong4},
			columns: []column{{mMean, ""}, {mMean, ArmFIFO}, {mP99, ""}, {mP99, ArmFIFO},
				{mExport, ""}, {mExport, ArmFIFO}},
			panels:   []panelSpec{{column{mMean, ArmFIFO}, true}, {column{mExport, ArmFIFO}, true}},
			chartArm: []string{ArmDefault, ArmAgingOff, ArmStrictAging, ArmWeighted, ArmLong16, ArmLong4},
			findings: findingsAging,
		},
		{
			slug:     "predictor",
			title:    "2. What the predictor buys over the oracle and over static maps",
			question: "The default arm learns each key's duration online. The oracle arm runs the same policy with every message's true duration known in advance; the static arm uses the hand-written job type -> tier map with strict priority and no aging.",
			arms:     []string{ArmFIFO, ArmStatic, ArmDefault, ArmOracle},
			columns: []column{{mMAE, ""}, {mTier, ""}, {mMean, ""}, {mMean, ArmOracle}, {mMean, ArmStatic},
				{mExport, ""}},
			panels:   []panelSpec{{column{mMean, ArmOracle}, true}, {column{mMean, ArmStatic}, true}},
			chartArm: []string{ArmFIFO, ArmStatic, ArmDefault, ArmOracle},
			findings: findingsPredictor,
		},
		{
			slug:  "ablation",
			title: "3. Which parts of the predictor matter",
			question: "Each arm changes one part of the default predictor: the histogram median instead of the EWMA, the spread gate off (for either estimator), the size bucket left out of keys, and a cold-start threshold of 1 or 10 observations instead of 3. " +
				"The tree arm replaces the EWMA with a heavier model: a CART regression tree over (producer, job type, log2 size), fitted to the log durations of the last 4,096 completed jobs and refitted every 512 completions; a leaf predicts the mean duration of its jobs. " +
				"It is a real model run in the experiment package's own copy of the simulator loop (the same sched.Queue, fed the tree's cost through ClassifyKnown), not the oracle with noise. Cold and spread-gated keys are handled exactly as the default predictor handles them, so the arm differs only in the estimate.",
			arms: []string{ArmDefault, ArmMedian, ArmNoGate, ArmMedianNoGate, ArmNoSize, ArmCold1, ArmCold10, ArmTree},
			columns: []column{{mMAE, ""}, {mTier, ""}, {mMean, ""}, {mMean, ArmDefault}, {mP99, ArmDefault},
				{mExport, ""}},
			panels:   []panelSpec{{column{mMAE, ""}, false}, {column{mMean, ArmDefault}, true}},
			findings: findingsAblation,
		},
		{
			slug:     "tiers",
			title:    "4. How many tiers",
			question: "The default policy with 2, 3 (the default), 4 and 6 tiers, and shortest predicted first with one level and no bound (sjf).",
			arms:     []string{ArmFIFO, ArmTiers2, ArmDefault, ArmTiers4, ArmTiers6, ArmSJF},
			columns: []column{{mTier, ""}, {mMean, ""}, {mMean, ArmFIFO}, {mP99, ArmFIFO},
				{mExport, ""}, {mExport, ArmFIFO}},
			panels:   []panelSpec{{column{mMean, ArmFIFO}, true}, {column{mExport, ArmFIFO}, true}},
			chartArm: []string{ArmTiers2, ArmDefault, ArmTiers4, ArmTiers6, ArmSJF},
			findings: findingsTiers,
		},
	}
}

func findingsAging(r *Results) string {
	w, t := scWorkload, scTrace
	return fmt.Sprintf("On production-flow the bound is what keeps the export jobs alive: at load 0.95 the default arm's mean is %s of FIFO's (%s s) and its longest export wait %s s (%s FIFO's), while with the bound off the mean halves again (%s s) but an export job waits up to %s s (%s FIFO's). "+
		"The bound costs about %s in mean latency at 0.95 and more at 1.1 (%s s vs %s s), and buys export waits no worse than FIFO's. "+
		"Strict priority with step aging and weighted levels with pausing aging protect the export jobs about as well as FIFO does but give back most of the gain: their means are %s and %s of FIFO's at 0.95, and at 1.1 they are barely better than FIFO (%s, %s). "+
		"Where the default loses: on the trace the bound almost never engages, because only messages predicted at least 64x the median recent cost are bounded and the trace's longest-mean functions have many mid-length invocations whose key EWMA sits below that line. Their jobs then wait behind a stream of shorter work: the longest export wait is %s s against FIFO's %s s at load 0.95 (%s) and %s s against %s s at 1.1 (%s), while the bound-off arm gives the same numbers, i.e. the bound did nothing. "+
		"Bounding at 16x fixes the trace (export wait %s s at 0.95, %s s at 1.1) but on production-flow it costs %s the default's mean at 0.95 (%s s) and raises P99 from %s s to %s s, because invoice.pdf (350 ms, about 20x the median) becomes bounded and takes workers in FIFO order; at 4x production-flow's mean (%s s) is worse than FIFO's.",
		r.x(w, 0.95, ArmDefault, ArmFIFO, mMean), r.at(w, 0.95, ArmFIFO, mMean), r.at(w, 0.95, ArmDefault, mExport), r.x(w, 0.95, ArmDefault, ArmFIFO, mExport),
		r.at(w, 0.95, ArmAgingOff, mMean), r.at(w, 0.95, ArmAgingOff, mExport), r.x(w, 0.95, ArmAgingOff, ArmFIFO, mExport),
		r.x(w, 0.95, ArmDefault, ArmAgingOff, mMean), r.at(w, 1.1, ArmDefault, mMean), r.at(w, 1.1, ArmAgingOff, mMean),
		r.x(w, 0.95, ArmStrictAging, ArmFIFO, mMean), r.x(w, 0.95, ArmWeighted, ArmFIFO, mMean), r.x(w, 1.1, ArmStrictAging, ArmFIFO, mMean), r.x(w, 1.1, ArmWeighted, ArmFIFO, mMean),
		r.at(t, 0.95, ArmDefault, mExport), r.at(t, 0.95, ArmFIFO, mExport), r.x(t, 0.95, ArmDefault, ArmFIFO, mExport),
		r.at(t, 1.1, ArmDefault, mExport), r.at(t, 1.1, ArmFIFO, mExport), r.x(t, 1.1, ArmDefault, ArmFIFO, mExport),
		r.at(t, 0.95, ArmLong16, mExport), r.at(t, 1.1, ArmLong16, mExport),
		r.x(w, 0.95, ArmLong16, ArmDefault, mMean), r.at(w, 0.95, ArmLong16, mMean), r.at(w, 0.95, ArmDefault, mP99), r.at(w, 0.95, ArmLong16, mP99),
		r.at(w, 0.95, ArmLong4, mMean))
}

func findingsPredictor(r *Results) string {
	w, t := scWorkload, scTrace
	return fmt.Sprintf("On production-flow the learned predictor is off by %s ms on average and puts %s of messages in the tier their true duration earns; that costs %s of the oracle's mean at 0.95 (%s at 1.1), and the learned arm's mean is %s of the static map's (%s at 1.1), because the static map has no shortest-first ordering within a tier, no aging, and cannot see the flash sale or the partner slowdown. "+
		"On the trace durations vary far more within a function: the MAE is %s ms and tier accuracy %s, yet the mean is still within %s of the oracle's at 0.95; there every learning arm, the oracle included, beats FIFO and the static map on the mean only modestly (%s and %s of FIFO's at 0.95), because most of the mean comes from a few functions whose jobs last tens of seconds and cannot be shortened by ordering. "+
		"The oracle is no cure for the long-job problem of study 1: with the same 64x bound it too lets export jobs on the trace wait %s s at 1.1.",
		r.at(w, 0.95, ArmDefault, mMAE), r.at(w, 0.95, ArmDefault, mTier), r.x(w, 0.95, ArmDefault, ArmOracle, mMean), r.x(w, 1.1, ArmDefault, ArmOracle, mMean),
		r.x(w, 0.95, ArmDefault, ArmStatic, mMean), r.x(w, 1.1, ArmDefault, ArmStatic, mMean),
		r.at(t, 0.95, ArmDefault, mMAE), r.at(t, 0.95, ArmDefault, mTier), r.x(t, 0.95, ArmDefault, ArmOracle, mMean),
		r.x(t, 0.95, ArmDefault, ArmFIFO, mMean), r.x(t, 0.95, ArmOracle, ArmFIFO, mMean),
		r.at(t, 1.1, ArmOracle, mExport))
}

func findingsAblation(r *Results) string {
	w, t := scWorkload, scTrace
	return fmt.Sprintf("No single part of the predictor moves mean latency much: on production-flow every variant's mean at 0.95 is within a few tens of percent of the default's (median %s, no gate %s, no size bucket %s, cold start 1 %s, cold start 10 %s), and on the trace within a few percent. "+
		"The median estimator has the lower MAE on both (%s vs %s ms on production-flow, %s vs %s ms on the trace) but SJF wants the mean, and the latency difference is within seed noise. "+
		"Turning the spread gate off raises the trace's MAE from %s to %s ms (the gate keeps the noisiest keys out of the MAE and out of shortest-first) while leaving the mean about where it was. "+
		"The size bucket matters only for the one sized job type of production-flow (image.resize) and not at all on the trace, which carries no sizes. "+
		"The regression tree is the cautionary result: it lowers production-flow's mean a little (%s of the default's at 0.95) but, fitted to a window of recent jobs with a minimum leaf size, it pools the rare export jobs with shorter ones, predicts them below the 64x line and so leaves them unbounded: their longest wait rises from %s s to %s s at 0.95 and from %s s to %s s at 1.1. Its MAE (%s ms) is also worse than the EWMA's. A heavier model buys nothing here that the per-key EWMA does not, and it breaks the long-job guarantee.",
		r.x(w, 0.95, ArmMedian, ArmDefault, mMean), r.x(w, 0.95, ArmNoGate, ArmDefault, mMean), r.x(w, 0.95, ArmNoSize, ArmDefault, mMean), r.x(w, 0.95, ArmCold1, ArmDefault, mMean), r.x(w, 0.95, ArmCold10, ArmDefault, mMean),
		r.at(w, 0.95, ArmMedian, mMAE), r.at(w, 0.95, ArmDefault, mMAE), r.at(t, 0.95, ArmMedian, mMAE), r.at(t, 0.95, ArmDefault, mMAE),
		r.at(t, 0.95, ArmDefault, mMAE), r.at(t, 0.95, ArmNoGate, mMAE),
		r.x(w, 0.95, ArmTree, ArmDefault, mMean), r.at(w, 0.95, ArmDefault, mExport), r.at(w, 0.95, ArmTree, mExport),
		r.at(w, 1.1, ArmDefault, mExport), r.at(w, 1.1, ArmTree, mExport), r.at(w, 0.95, ArmTree, mMAE))
}

func findingsTiers(r *Results) string {
	w, t := scWorkload, scTrace
	return fmt.Sprintf("Under the default policy the tier count hardly matters: the policy already orders by predicted cost across and within tiers, so tiers only decide where cold and gated messages sit (the middle tier). "+
		"Means at 0.95 on production-flow are %s, %s, %s and %s s for 2, 3, 4 and 6 tiers; tier accuracy falls from %s to %s as boundaries multiply, which is a statement about the metric, not about latency. "+
		"Shortest-first without tiers and without the bound (sjf) has the best mean and P99 on production-flow (%s s and %s s at 0.95) and starves the export jobs (longest wait %s s, %s FIFO's); on the trace it is indistinguishable from the default (mean %s vs %s s), again because the default's bound rarely engages there.",
		r.at(w, 0.95, ArmTiers2, mMean), r.at(w, 0.95, ArmDefault, mMean), r.at(w, 0.95, ArmTiers4, mMean), r.at(w, 0.95, ArmTiers6, mMean),
		r.at(w, 0.95, ArmTiers2, mTier), r.at(w, 0.95, ArmTiers6, mTier),
		r.at(w, 0.95, ArmSJF, mMean), r.at(w, 0.95, ArmSJF, mP99), r.at(w, 0.95, ArmSJF, mExport), r.x(w, 0.95, ArmSJF, ArmFIFO, mExport),
		r.at(t, 0.95, ArmSJF, mMean), r.at(t, 0.95, ArmDefault, mMean))
}
