package experiment

import (
	"fmt"
	"math"
	"strings"

	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/internal/sched"
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

// level says how a lower-is-better ratio compares with 1 at the precision
// the document prints it: -1 below, 0 level (or unknown), +1 above.
func level(v float64) int {
	switch s := fmtNum(v); {
	case math.IsNaN(v), s == "1.00", s == "1.000":
		return 0
	case v < 1:
		return -1
	default:
		return 1
	}
}

// pick chooses a word by level(v).
func pick(v float64, below, same, above string) string {
	switch level(v) {
	case -1:
		return below
	case 1:
		return above
	}
	return same
}

// side words where a set of ratios lies against their base ("below FIFO's").
func side(vs ...float64) string {
	var below, same, above int
	for _, v := range vs {
		switch level(v) {
		case -1:
			below++
		case 1:
			above++
		default:
			same++
		}
	}
	switch {
	case below > 0 && above > 0:
		return "on both sides of"
	case below > 0 && same == 0:
		return "below"
	case below > 0:
		return "at or below"
	case above > 0 && same == 0:
		return "above"
	case above > 0:
		return "at or above"
	}
	return "level with"
}

// slightly words a ratio's side, "slightly above" when it is within a tenth of 1.
func slightly(v float64) string {
	if level(v) != 0 && math.Abs(v-1) < 0.1 {
		return "slightly " + side(v)
	}
	return side(v)
}

// near words where ratios lie against their base, "close to" when all are
// within a tenth of 1.
func near(vs ...float64) string {
	for _, v := range vs {
		if math.IsNaN(v) || math.Abs(v-1) >= 0.1 {
			return side(vs...)
		}
	}
	return "close to"
}

// lessGain words how much of the default's gain over FIFO an arm keeps, from
// the arm's mean over the default's.
func lessGain(v float64) string {
	switch {
	case v > 2:
		return "keep far less of the gain in mean latency"
	case level(v) > 0:
		return "keep less of the gain in mean latency"
	case level(v) < 0:
		return "beat the default's mean"
	}
	return "match the default's mean"
}

// both words two lower-is-better ratios of one arm against another on the
// two sources: "lower than X on both sources".
func both(a, b float64, what string) string {
	switch la, lb := level(a), level(b); {
	case la < 0 && lb < 0:
		return "lower than " + what + " on both sources"
	case la > 0 && lb > 0:
		return "higher than " + what + " on both sources"
	case la == 0 && lb == 0:
		return "level with " + what + " on both sources"
	}
	return "lower than " + what + " on one source and not on the other"
}

// pct is |v-1| as a whole percentage, rounded up so "within" and "more
// than" stay true: 1.19 gives "19%", 0.991 gives "1%".
func pct(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", math.Ceil(math.Abs(v-1)*100-1e-9))
}

// pctRound is |v-1| as a whole percentage, rounded: 1.047 gives "5%".
func pctRound(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", math.Abs(v-1)*100)
}

// barely words how much a set of means moves: "barely" within a tenth.
func barely(hiOverLo float64) string {
	if hiOverLo < 1.1 {
		return "barely"
	}
	return "visibly"
}

// sharePct words a long share as a percentage of the work, e.g. "20%".
func sharePct(share float64) string { return fmt.Sprintf("%.0f%%", share*100) }

// spread is the largest |ratio-1| of arms against base, as a ratio 1+d.
func (r *Results) spread(si int, load float64, arms []string, base string, m metric) float64 {
	d := math.NaN()
	for _, a := range arms {
		if v := r.ratio(si, load, a, base, m); !math.IsNaN(v) && (math.IsNaN(d) || math.Abs(v-1) > d) {
			d = math.Abs(v - 1)
		}
	}
	return 1 + d
}

// extremes are the smallest and largest figure of arms; NaN when none.
func (r *Results) extremes(si int, load float64, arms []string, m metric) (lo, hi float64) {
	lo, hi = math.NaN(), math.NaN()
	for _, a := range arms {
		v := r.value(si, load, a, m)
		if math.IsNaN(v) {
			continue
		}
		if math.IsNaN(lo) || v < lo {
			lo = v
		}
		if math.IsNaN(hi) || v > hi {
			hi = v
		}
	}
	return lo, hi
}

// best is the arm with the smallest figure, "" when none has one.
func (r *Results) best(si int, load float64, arms []string, m metric) string {
	b, bv := "", math.NaN()
	for _, a := range arms {
		if v := r.value(si, load, a, m); !math.IsNaN(v) && (math.IsNaN(bv) || v < bv) {
			b, bv = a, v
		}
	}
	return b
}

// holdsBoth lists the arms whose longest export wait and P99 are both at or
// below FIFO's.
func (r *Results) holdsBoth(si int, load float64, arms []string) []string {
	var out []string
	for _, a := range arms {
		e, p := r.ratio(si, load, a, ArmFIFO, mExport), r.ratio(si, load, a, ArmFIFO, mP99)
		if !math.IsNaN(e) && !math.IsNaN(p) && level(e) <= 0 && level(p) <= 0 {
			out = append(out, a)
		}
	}
	return out
}

// longRule describes the default policy's bound on long messages in words.
func longRule() string {
	return fmt.Sprintf("a message is long when it is among the most expensive recent messages that together make up %s of the recent predicted work (the cut moved to the widest relative gap between neighbouring costs nearby), or when its key is among the costliest %s of the queue's warm keys (at least one), or when its key is cold or spread-gated; a long message gets a deadline at about %.2g of the wait FIFO would give it, counted in predicted work, and overdue messages go first",
		sharePct(sched.DefaultLongShare), sharePct(sched.DefaultLongKeys), 1+sched.DefaultStretch)
}

// guardRule describes the default policy's guard on every message in words.
func guardRule() string {
	return fmt.Sprintf("every message, long or not, is guarded against FIFO: once the predicted work dispatched reaches its FIFO position (FIFO would start it next), only messages predicted at most %s of its cost may still go ahead of it, and only until its deadline, %s times the latency FIFO would have given it after that moment, when it goes next (docs/policy.md)",
		fracWord(sched.DefaultOvertake), fmtLoad(sched.DefaultGuard))
}

// fracWord names a fraction such as 0.25 ("a quarter").
func fracWord(f float64) string {
	switch f {
	case 0.25:
		return "a quarter"
	case 0.5:
		return "half"
	}
	return fmtNum(f) + " times"
}

func studies() []study {
	return []study{
		{
			slug:  "aging",
			title: "1. What aging costs and what it protects",
			question: "The default policy is shortest predicted first with a FIFO-position bound on long messages: " + longRule() + "; and " + guardRule() + ". " +
				"It runs here with its bounds on and off (bound-off: neither), against the policy as it was before the guard (previous: the most expensive fifth of the recent work and unpredictable messages long, bounded at 0.75 of their FIFO wait plus a second of predicted work, nothing else bounded) and the older alternatives: strict priority with step aging, and level weights with pausing aging. " +
				fmt.Sprintf("Three wider bounds, which mark the most expensive %s (the default before this share), %s or %s of the recent predicted work long instead of %s, show what bounding more of the queue would cost.",
					sharePct(shareFifth), sharePct(shareWide), sharePct(shareWider), sharePct(sched.DefaultLongShare)),
			arms: []string{ArmFIFO, ArmDefault, ArmPrevious, ArmAgingOff, ArmStrictAging, ArmWeighted, ArmShare20, ArmShare40, ArmShare60, ArmOthers1, ArmOthers3},
			columns: []column{{mMean, ""}, {mMean, ArmFIFO}, {mP99, ""}, {mP99, ArmFIFO},
				{mExport, ""}, {mExport, ArmFIFO}},
			panels:   []panelSpec{{column{mMean, ArmFIFO}, true}, {column{mExport, ArmFIFO}, true}},
			chartArm: []string{ArmDefault, ArmPrevious, ArmAgingOff, ArmStrictAging, ArmWeighted, ArmShare20, ArmShare40, ArmShare60, ArmOthers1, ArmOthers3},
			findings: findingsAging,
		},
		{
			slug:     "predictor",
			title:    "2. What the predictor buys over the oracle and over static maps",
			question: "The default arm learns each key's duration online. The oracle arm runs the same policy, long-job cut and guard included, with every message's true duration known in advance (so it moves whenever the default does); oracle-sjf also knows every true duration but runs shortest first on one level with no bound and no aging, a fixed reference for the mean; the static arm uses the hand-written job type -> tier map with strict priority and no aging.",
			arms:     []string{ArmFIFO, ArmStatic, ArmDefault, ArmOracle, ArmOracleSJF},
			columns: []column{{mMAE, ""}, {mTier, ""}, {mMean, ""}, {mMean, ArmOracle}, {mMean, ArmStatic},
				{mExport, ""}},
			panels:   []panelSpec{{column{mMean, ArmOracle}, true}, {column{mMean, ArmStatic}, true}},
			chartArm: []string{ArmFIFO, ArmStatic, ArmDefault, ArmOracle, ArmOracleSJF},
			findings: findingsPredictor,
		},
		{
			slug:  "ablation",
			title: "3. Which parts of the predictor matter",
			question: "Each arm changes one part of the default predictor: the histogram median instead of the EWMA, the spread gate off (for either estimator), the size bucket left out of keys, and a cold-start threshold of 1 or 10 observations instead of 3. " +
				"The tree arm replaces the EWMA with a heavier model: a CART regression tree over (producer, job type, log2 size), fitted to the log durations of the last 4,096 completed jobs and refitted every 512 completions; a leaf predicts the mean duration of its jobs. " +
				"It is a real model plugged into the simulator through sim.Arm.NewModel (the same sched.Queue, fed the tree's cost through ClassifyKnown), not the oracle with noise. Cold and spread-gated keys are handled exactly as the default predictor handles them, so the arm differs only in the estimate.",
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
	vf := func(si int, l float64, arm string, m metric) float64 { return r.ratio(si, l, arm, ArmFIFO, m) }
	var b strings.Builder

	// Production-flow at 0.95: what the bound buys.
	fmt.Fprintf(&b, "On production-flow %s: at load 0.95 the default arm's mean is %s of FIFO's (%s s), its P99 %s and its longest export wait %s FIFO's, while with the bound off the mean is %s (%s s) but an export job waits up to %s s (%s FIFO's). ",
		pick(r.ratio(w, 0.95, ArmAgingOff, ArmDefault, mExport), "the bound does not protect the export jobs", "the bound changes little for the export jobs", "the bound is what keeps the export jobs from starving"),
		r.x(w, 0.95, ArmDefault, ArmFIFO, mMean), r.at(w, 0.95, ArmFIFO, mMean), r.x(w, 0.95, ArmDefault, ArmFIFO, mP99), r.x(w, 0.95, ArmDefault, ArmFIFO, mExport),
		r.x(w, 0.95, ArmAgingOff, ArmFIFO, mMean), r.at(w, 0.95, ArmAgingOff, mMean), r.at(w, 0.95, ArmAgingOff, mExport), r.x(w, 0.95, ArmAgingOff, ArmFIFO, mExport))
	fmt.Fprintf(&b, "The default's mean is %s the bound-off arm's at 0.95 and %s at 1.1, %s. ",
		r.x(w, 0.95, ArmDefault, ArmAgingOff, mMean), r.x(w, 1.1, ArmDefault, ArmAgingOff, mMean),
		pick(r.ratio(w, 0.95, ArmDefault, ArmAgingOff, mMean), "so the bound does not cost mean latency", "so the bound costs no mean latency", "the bound's price in mean latency"))
	// Production-flow at the edges: the tail under overload, the export wait at light load.
	p99, offP99 := vf(w, 1.1, ArmDefault, mP99), vf(w, 1.1, ArmAgingOff, mP99)
	fmt.Fprintf(&b, "At 1.1 the default's P99 is %s FIFO's (%s) and the bound-off arm's %s FIFO's (%s)",
		side(p99), r.x(w, 1.1, ArmDefault, ArmFIFO, mP99), side(offP99), r.x(w, 1.1, ArmAgingOff, ArmFIFO, mP99))
	if level(p99) > 0 && level(offP99) < 0 {
		b.WriteString(": under overload the bound's cost lands on the tail, presumably on messages that are neither short enough to go first nor long enough to be bounded and so wait behind both")
	}
	fmt.Fprintf(&b, ". The default's longest export wait is %s FIFO's at 0.8 (%s) and %s FIFO's at 1.1 (%s). ",
		slightly(vf(w, 0.8, ArmDefault, mExport)), r.x(w, 0.8, ArmDefault, ArmFIFO, mExport),
		side(vf(w, 1.1, ArmDefault, mExport)), r.x(w, 1.1, ArmDefault, ArmFIFO, mExport))
	// The older alternatives.
	fmt.Fprintf(&b, "Strict priority with step aging and weighted levels with pausing aging keep the longest export wait %s FIFO's at 0.95 (%s, %s) but %s: their means are %s and %s of FIFO's at 0.95 and %s and %s at 1.1. ",
		near(vf(w, 0.95, ArmStrictAging, mExport), vf(w, 0.95, ArmWeighted, mExport)),
		r.x(w, 0.95, ArmStrictAging, ArmFIFO, mExport), r.x(w, 0.95, ArmWeighted, ArmFIFO, mExport),
		lessGain(min(r.ratio(w, 0.95, ArmStrictAging, ArmDefault, mMean), r.ratio(w, 0.95, ArmWeighted, ArmDefault, mMean))),
		r.x(w, 0.95, ArmStrictAging, ArmFIFO, mMean), r.x(w, 0.95, ArmWeighted, ArmFIFO, mMean),
		r.x(w, 1.1, ArmStrictAging, ArmFIFO, mMean), r.x(w, 1.1, ArmWeighted, ArmFIFO, mMean))

	// The trace.
	e8, e95 := vf(t, 0.8, ArmDefault, mExport), vf(t, 0.95, ArmDefault, mExport)
	fmt.Fprintf(&b, "On the trace at 0.8 and 0.95 the default's longest export wait is %s FIFO's (%s, %s) and its mean %s FIFO's (%s, %s); with the bound off the longest export wait is %s and %s FIFO's. ",
		side(e8, e95), r.x(t, 0.8, ArmDefault, ArmFIFO, mExport), r.x(t, 0.95, ArmDefault, ArmFIFO, mExport),
		side(vf(t, 0.8, ArmDefault, mMean), vf(t, 0.95, ArmDefault, mMean)), r.x(t, 0.8, ArmDefault, ArmFIFO, mMean), r.x(t, 0.95, ArmDefault, ArmFIFO, mMean),
		r.x(t, 0.8, ArmAgingOff, ArmFIFO, mExport), r.x(t, 0.95, ArmAgingOff, ArmFIFO, mExport))
	te, tp := vf(t, 1.1, ArmDefault, mExport), vf(t, 1.1, ArmDefault, mP99)
	verdict := "it holds"
	if level(te) > 0 || level(tp) > 0 {
		verdict = "it fails"
	}
	fmt.Fprintf(&b, "At 1.1 %s: the longest export wait is %s FIFO's (%s; %s s against %s s) and P99 %s FIFO's (%s), while the mean is %s FIFO's (%s). ",
		verdict, side(te), r.x(t, 1.1, ArmDefault, ArmFIFO, mExport), r.at(t, 1.1, ArmDefault, mExport), r.at(t, 1.1, ArmFIFO, mExport),
		side(tp), r.x(t, 1.1, ArmDefault, ArmFIFO, mP99), side(vf(t, 1.1, ArmDefault, mMean)), r.x(t, 1.1, ArmDefault, ArmFIFO, mMean))

	// Wider bounds.
	if level(vf(t, 1.1, ArmShare40, mExport)) <= 0 && level(vf(t, 1.1, ArmShare40, mP99)) > 0 {
		b.WriteString("Bounding more of the work changes which of the two suffers. ")
	}
	fmt.Fprintf(&b, "With %s of the work bounded, the trace's longest export wait at 1.1 is %s FIFO's (%s) and its P99 %s FIFO's (%s); with %s, %s and %s. ",
		sharePct(shareWide), side(vf(t, 1.1, ArmShare40, mExport)), r.x(t, 1.1, ArmShare40, ArmFIFO, mExport), side(vf(t, 1.1, ArmShare40, mP99)), r.x(t, 1.1, ArmShare40, ArmFIFO, mP99),
		sharePct(shareWider), r.x(t, 1.1, ArmShare60, ArmFIFO, mExport), r.x(t, 1.1, ArmShare60, ArmFIFO, mP99))
	if hold := r.holdsBoth(t, 1.1, []string{ArmDefault, ArmShare40, ArmShare60}); len(hold) == 0 {
		b.WriteString("None of the three shares keeps both at or below FIFO's there. ")
	} else {
		fmt.Fprintf(&b, "Of the three shares, %s keeps both at or below FIFO's there. ", strings.Join(hold, " and "))
	}
	fmt.Fprintf(&b, "On production-flow the wider bounds' means at 0.95 are %s the default's (%s, %s) and their P99s at 1.1 %s FIFO's against the default's %s.",
		side(r.ratio(w, 0.95, ArmShare40, ArmDefault, mMean), r.ratio(w, 0.95, ArmShare60, ArmDefault, mMean)),
		r.x(w, 0.95, ArmShare40, ArmDefault, mMean), r.x(w, 0.95, ArmShare60, ArmDefault, mMean),
		r.x(w, 1.1, ArmShare40, ArmFIFO, mP99)+" and "+r.x(w, 1.1, ArmShare60, ArmFIFO, mP99), r.x(w, 1.1, ArmDefault, ArmFIFO, mP99))

	// Bounding every message (docs/overload.md).
	fmt.Fprintf(&b, " Bounding every message instead, not only the long ones, at twice the wait FIFO would give it: on the trace at 1.1 the longest export wait is %s FIFO's and P99 %s (at four times: %s and %s); on production-flow at 1.1 P99 is %s FIFO's (%s). The price is paid at normal load: at 0.95 the mean is %s the default's on production-flow (%s at four times) and %s on the trace.",
		r.x(t, 1.1, ArmOthers1, ArmFIFO, mExport), r.x(t, 1.1, ArmOthers1, ArmFIFO, mP99),
		r.x(t, 1.1, ArmOthers3, ArmFIFO, mExport), r.x(t, 1.1, ArmOthers3, ArmFIFO, mP99),
		r.x(w, 1.1, ArmOthers1, ArmFIFO, mP99), r.x(w, 1.1, ArmOthers3, ArmFIFO, mP99),
		r.x(w, 0.95, ArmOthers1, ArmDefault, mMean), r.x(w, 0.95, ArmOthers3, ArmDefault, mMean),
		r.x(t, 0.95, ArmOthers1, ArmDefault, mMean))
	return b.String()
}

func findingsPredictor(r *Results) string {
	w, t := scWorkload, scTrace
	var b strings.Builder
	fmt.Fprintf(&b, "On production-flow the learned predictor is off by %s ms on average and puts %s of messages in the tier their true duration earns; its mean is %s the oracle's at 0.95 (%s at 1.1) and %s the static map's (%s at 1.1). The static map has no shortest-first ordering within a tier, no aging, and cannot see the flash sale or the partner slowdown. ",
		r.at(w, 0.95, ArmDefault, mMAE), r.at(w, 0.95, ArmDefault, mTier), r.x(w, 0.95, ArmDefault, ArmOracle, mMean), r.x(w, 1.1, ArmDefault, ArmOracle, mMean),
		r.x(w, 0.95, ArmDefault, ArmStatic, mMean), r.x(w, 1.1, ArmDefault, ArmStatic, mMean))
	fmt.Fprintf(&b, "On the trace durations vary far more within a function: the MAE is %s ms and tier accuracy %s, yet the mean is %s the oracle's at 0.95. Ordering buys %s there: at 0.95 the learned arm's mean is %s FIFO's and %s the static map's, and the oracle's %s FIFO's, because most of the mean comes from a few functions whose jobs last tens of seconds and cannot be shortened by ordering. ",
		r.at(t, 0.95, ArmDefault, mMAE), r.at(t, 0.95, ArmDefault, mTier), r.x(t, 0.95, ArmDefault, ArmOracle, mMean),
		map[bool]string{true: "little", false: "less than on production-flow"}[r.ratio(t, 0.95, ArmOracle, ArmFIFO, mMean) > 0.75],
		r.x(t, 0.95, ArmDefault, ArmFIFO, mMean), r.x(t, 0.95, ArmDefault, ArmStatic, mMean), r.x(t, 0.95, ArmOracle, ArmFIFO, mMean))
	ow, ot := r.ratio(w, 0.95, ArmOracle, ArmDefault, mExport), r.ratio(t, 1.1, ArmOracle, ArmDefault, mExport)
	protect := "protects the long jobs no more reliably"
	switch {
	case level(ow) > 0 && level(ot) > 0:
		protect = "does not protect the long jobs"
	case level(ow) < 0 && level(ot) < 0:
		protect = "also protects the long jobs better"
	}
	fmt.Fprintf(&b, "Knowing every duration %s: the oracle's longest export wait is %s s on production-flow at 0.95 (%s FIFO's; the default's %s s) and %s s on the trace at 1.1 (the default's %s s, FIFO's %s s).",
		protect,
		r.at(w, 0.95, ArmOracle, mExport), r.x(w, 0.95, ArmOracle, ArmFIFO, mExport), r.at(w, 0.95, ArmDefault, mExport),
		r.at(t, 1.1, ArmOracle, mExport), r.at(t, 1.1, ArmDefault, mExport), r.at(t, 1.1, ArmFIFO, mExport))
	if level(ow) > 0 && level(ot) > 0 {
		b.WriteString(" With per-message true costs the work-share cut falls inside the export jobs' own spread of durations, so their shorter ones are not marked long and, as the largest unbounded messages, wait behind everything shorter; the learned predictor gives every message of a key the same estimate, so a key's jobs fall on one side of the cut together.")
	}
	return b.String()
}

func findingsAblation(r *Results) string {
	w, t := scWorkload, scTrace
	var b strings.Builder
	parts := []string{ArmMedian, ArmNoGate, ArmMedianNoGate, ArmNoSize, ArmCold1, ArmCold10}
	fmt.Fprintf(&b, "No single part of the predictor moves the mean by more than %s on production-flow at 0.95 (median %s the default's, no gate %s, no size bucket %s, cold start 1 %s, cold start 10 %s), or by more than %s on the trace. ",
		pct(r.spread(w, 0.95, parts, ArmDefault, mMean)),
		r.x(w, 0.95, ArmMedian, ArmDefault, mMean), r.x(w, 0.95, ArmNoGate, ArmDefault, mMean), r.x(w, 0.95, ArmNoSize, ArmDefault, mMean),
		r.x(w, 0.95, ArmCold1, ArmDefault, mMean), r.x(w, 0.95, ArmCold10, ArmDefault, mMean),
		pct(r.spread(t, 0.95, parts, ArmDefault, mMean)))
	mw, mt := r.ratio(w, 0.95, ArmMedian, ArmDefault, mMAE), r.ratio(t, 0.95, ArmMedian, ArmDefault, mMAE)
	fmt.Fprintf(&b, "The median estimator's MAE is %s (%s vs %s ms on production-flow, %s vs %s ms on the trace), but shortest-first wants the mean duration, which the EWMA tracks; the median's mean latency is %s the default's on production-flow at 0.95 and %s on the trace. ",
		both(mw, mt, "the EWMA's"), r.at(w, 0.95, ArmMedian, mMAE), r.at(w, 0.95, ArmDefault, mMAE), r.at(t, 0.95, ArmMedian, mMAE), r.at(t, 0.95, ArmDefault, mMAE),
		r.x(w, 0.95, ArmMedian, ArmDefault, mMean), r.x(t, 0.95, ArmMedian, ArmDefault, mMean))
	fmt.Fprintf(&b, "Turning the spread gate off %s the trace's MAE (%s to %s ms; the gate keeps the noisiest keys out of the MAE and out of shortest-first) and puts its mean at %s the default's at 0.95; the trace's longest export wait at 1.1 goes from %s s to %s s. On production-flow the gate-off arm's mean and P99 at 0.8 are %s and %s the default's. ",
		pick(r.ratio(t, 0.95, ArmNoGate, ArmDefault, mMAE), "lowers", "leaves unchanged", "raises"),
		r.at(t, 0.95, ArmDefault, mMAE), r.at(t, 0.95, ArmNoGate, mMAE), r.x(t, 0.95, ArmNoGate, ArmDefault, mMean),
		r.at(t, 1.1, ArmDefault, mExport), r.at(t, 1.1, ArmNoGate, mExport),
		r.x(w, 0.8, ArmNoGate, ArmDefault, mMean), r.x(w, 0.8, ArmNoGate, ArmDefault, mP99))
	fmt.Fprintf(&b, "The size bucket matters only for the one sized job type of production-flow (image.resize): without it the mean is %s the default's at 0.95 (%s at 1.1); the trace carries no sizes. A cold-start threshold of 10 puts the mean at %s the default's at 0.95 (%s at 1.1), a threshold of 1 at %s. ",
		r.x(w, 0.95, ArmNoSize, ArmDefault, mMean), r.x(w, 1.1, ArmNoSize, ArmDefault, mMean),
		r.x(w, 0.95, ArmCold10, ArmDefault, mMean), r.x(w, 1.1, ArmCold10, ArmDefault, mMean), r.x(w, 0.95, ArmCold1, ArmDefault, mMean))
	tm := r.ratio(w, 0.95, ArmTree, ArmDefault, mMean)
	fmt.Fprintf(&b, "The regression tree's mean on production-flow is %s the default's at 0.95 (%s at 1.1) and its P99 %s, with an MAE of %s ms against the EWMA's %s: a leaf pools keys, so its estimates are coarser than a per-key EWMA's. Its longest export wait is %s s against the default's %s s at 0.95 and %s s against %s s at 1.1. ",
		r.x(w, 0.95, ArmTree, ArmDefault, mMean), r.x(w, 1.1, ArmTree, ArmDefault, mMean), r.x(w, 0.95, ArmTree, ArmDefault, mP99),
		r.at(w, 0.95, ArmTree, mMAE), r.at(w, 0.95, ArmDefault, mMAE),
		r.at(w, 0.95, ArmTree, mExport), r.at(w, 0.95, ArmDefault, mExport), r.at(w, 1.1, ArmTree, mExport), r.at(w, 1.1, ArmDefault, mExport))
	fmt.Fprintf(&b, "%s. ", pick(tm, "A heavier model buys mean latency here", "A heavier model buys no mean latency here", "A heavier model costs mean latency here"))
	// How fragile the trace's overload result is.
	alt := []string{ArmMedian, ArmMedianNoGate, ArmCold1, ArmCold10, ArmTree}
	lo, hi := r.extremes(t, 1.1, alt, mExport)
	if def := r.value(t, 1.1, ArmDefault, mExport); hi < 0.75*def {
		fmt.Fprintf(&b, "The trace's longest export wait at 1.1 is fragile: the median estimator (with or without the gate), a cold-start threshold of 1 or 10 and the tree all bring it from the default's %s s to between %s s and %s s (FIFO's %s s).",
			r.at(t, 1.1, ArmDefault, mExport), fmtNum(lo), fmtNum(hi), r.at(t, 1.1, ArmFIFO, mExport))
	}
	return strings.TrimSpace(b.String())
}

func findingsTiers(r *Results) string {
	w, t := scWorkload, scTrace
	var b strings.Builder
	tiers := []string{ArmTiers2, ArmDefault, ArmTiers4, ArmTiers6}
	lo, hi := r.extremes(w, 0.95, tiers, mMean)
	fmt.Fprintf(&b, "Under the default policy the tier count %s moves production-flow's mean: the policy already orders by predicted cost across and within tiers, so tiers only decide where cold and gated messages sit (the middle tier). "+
		"Means at 0.95 on production-flow are %s, %s, %s and %s s for 2, 3, 4 and 6 tiers (the largest %s above the smallest); tier accuracy falls from %s to %s as boundaries multiply, which is a statement about the metric, not about latency. ",
		barely(hi/lo), r.at(w, 0.95, ArmTiers2, mMean), r.at(w, 0.95, ArmDefault, mMean), r.at(w, 0.95, ArmTiers4, mMean), r.at(w, 0.95, ArmTiers6, mMean),
		pctRound(hi/lo), r.at(w, 0.95, ArmTiers2, mTier), r.at(w, 0.95, ArmTiers6, mTier))
	others := []string{ArmTiers2, ArmTiers4, ArmTiers6}
	olo, ohi := r.extremes(t, 1.1, others, mExport)
	def := r.value(t, 1.1, ArmDefault, mExport)
	where := "between theirs"
	switch {
	case def > ohi:
		where = "the longest of the four"
	case def < olo:
		where = "the shortest of the four"
	}
	though := ""
	if where != "between theirs" {
		though = ", though,"
	}
	fmt.Fprintf(&b, "On the trace at 1.1%s the three-tier default's longest export wait is %s: %s s against %s s to %s s for 2, 4 and 6 tiers (FIFO's %s s). ",
		though, where, fmtNum(def), fmtNum(olo), fmtNum(ohi), r.at(t, 1.1, ArmFIFO, mExport))
	study := []string{ArmTiers2, ArmDefault, ArmTiers4, ArmTiers6, ArmSJF}
	lead := "Shortest-first without tiers and without the bound (sjf)"
	if r.best(w, 0.95, study, mMean) == ArmSJF && r.best(w, 0.95, study, mP99) == ArmSJF {
		fmt.Fprintf(&b, "%s has the best mean and P99 on production-flow (%s s and %s s at 0.95)", lead, r.at(w, 0.95, ArmSJF, mMean), r.at(w, 0.95, ArmSJF, mP99))
	} else {
		fmt.Fprintf(&b, "%s has a mean of %s s and a P99 of %s s on production-flow at 0.95", lead, r.at(w, 0.95, ArmSJF, mMean), r.at(w, 0.95, ArmSJF, mP99))
	}
	starve := "does not delay"
	switch v := r.ratio(w, 0.95, ArmSJF, ArmFIFO, mExport); {
	case v > 2:
		starve = "starves"
	case level(v) > 0:
		starve = "delays"
	}
	fmt.Fprintf(&b, " and %s the export jobs (longest wait %s s, %s FIFO's). ",
		starve,
		r.at(w, 0.95, ArmSJF, mExport), r.x(w, 0.95, ArmSJF, ArmFIFO, mExport))
	fmt.Fprintf(&b, "On the trace at 0.95 its mean is %s the default's (%s vs %s s), but its longest export wait is %s FIFO's against the default's %s: there the bound %s.",
		r.x(t, 0.95, ArmSJF, ArmDefault, mMean), r.at(t, 0.95, ArmSJF, mMean), r.at(t, 0.95, ArmDefault, mMean),
		r.x(t, 0.95, ArmSJF, ArmFIFO, mExport), r.x(t, 0.95, ArmDefault, ArmFIFO, mExport),
		pick(r.ratio(t, 0.95, ArmSJF, ArmDefault, mExport), "does not help the longest functions", "changes little for the longest functions", "is what keeps the longest functions' jobs from waiting far longer than under FIFO"))
	return b.String()
}
