package experiment

import (
	"embed"
	"fmt"
	"math"
	"path"
	"strings"
	"time"

	"github.com/harbinger-mq/harbinger/internal/sched"
	"github.com/harbinger-mq/harbinger/internal/sim"
	"github.com/harbinger-mq/harbinger/internal/stats"
	"github.com/harbinger-mq/harbinger/internal/trace"
	"github.com/harbinger-mq/harbinger/internal/workload"
)

// The evaluation matrix: every scenario the default policy must not harm,
// at every offered load, against FIFO and the oracle SJF reference.
//
// The goal per cell (medians of the per-seed ratios to FIFO, paired by
// seed): the longest class's max wait at most MatrixExportMax x FIFO's, the
// all-message P99 at most MatrixP99Max x FIFO's, and, wherever oracle SJF
// cuts the mean by at least MatrixMinGain, a mean that captures at least
// MatrixCapture of oracle SJF's cut.
const (
	MatrixExportMax = 1.0
	MatrixP99Max    = 1.10
	MatrixMinGain   = 0.05
	MatrixCapture   = 0.70
)

// DefaultMatrixLoads are the offered loads of every matrix row.
var DefaultMatrixLoads = []float64{0.5, 0.8, 0.95, 1.1, 1.3}

// DefaultTraceWindows are the first minutes of the trace windows the matrix
// replays: one hour every six hours, from midnight, chosen by the clock
// before any result was seen (721 is also the trace's default window).
var DefaultTraceWindows = []int{1, 361, 721, 1081}

// Arm names of the matrix besides ArmFIFO, ArmDefault and ArmOracle.
const (
	// ArmOracleSJF knows every true duration and runs shortest first on
	// one level with no bound and no aging: a fixed reference for the mean.
	ArmOracleSJF = "oracle-sjf"
	// ArmPrevious is the bounded policy as it shipped before its guard on
	// every message (sim arm "previous").
	ArmPrevious = "previous"
	// ArmNoLongKeys is the default without its long keys
	// (sched.DefaultLongKeys): only the work-share cut and unpredictable
	// messages long, the default before 2026-12-03.
	ArmNoLongKeys = "no long keys"
	// ArmOracleSEPT knows each key's true mean duration and runs shortest
	// expected first with no bound: the most an estimate made from the key
	// alone can cut the mean. ArmOracleKeys is the default on those means.
	ArmOracleSEPT = "oracle-sept"
	ArmOracleKeys = "oracle on key means"
)

// The guard's settings around the default's, for the matrix's sensitivity
// table: a tighter and looser guard, and no overtaking rule.
const (
	ArmGuardTight  = "guard 0.1"
	ArmGuardMid    = "guard 0.25"
	ArmGuardLoose  = "guard 1"
	ArmOvertakeAny = "any may overtake"
	guardTight     = 0.1
	guardMid       = 0.25
	guardLoose     = 1.0
)

// matrixArms are the arms of every matrix cell.
var matrixArms = []string{ArmFIFO, ArmDefault, ArmNoLongKeys, ArmShare20, ArmPrevious, ArmOracle, ArmOracleSJF,
	ArmGuardTight, ArmGuardMid, ArmGuardLoose, ArmOvertakeAny, ArmSJF,
	ArmVirtual, ArmVirtualDispatch, ArmOracleVirtual, ArmOracleSEPT, ArmOracleKeys}

// sensitivityArms are the rows of the sensitivity table, the default first.
var sensitivityArms = []string{ArmDefault, ArmNoLongKeys, ArmShare20, ArmGuardTight, ArmGuardMid, ArmGuardLoose, ArmOvertakeAny, ArmPrevious, ArmSJF, ArmOracle,
	ArmVirtual, ArmVirtualDispatch, ArmOracleVirtual, ArmOracleSEPT, ArmOracleKeys}

// keyArms are the columns of the table of what the key alone allows, the
// default first.
var keyArms = []string{ArmDefault, ArmOracleKeys, ArmOracleSEPT, ArmSJF}

// virtualArms are the columns of the virtual FIFO table, the default first.
var virtualArms = []string{ArmDefault, ArmVirtual, ArmVirtualDispatch, ArmOracle, ArmOracleVirtual}

//go:embed workloads/*.yaml
var stressFS embed.FS

// StressWorkloads are the workloads written to break the default policy
// (lab/internal/experiment/workloads): each file says what it is built to do.
func StressWorkloads() ([]*workload.Workload, error) {
	names, err := stressFS.ReadDir("workloads")
	if err != nil {
		return nil, err
	}
	var out []*workload.Workload
	for _, n := range names {
		data, err := stressFS.ReadFile(path.Join("workloads", n.Name()))
		if err != nil {
			return nil, err
		}
		w, err := workload.Parse(data)
		if err != nil {
			return nil, fmt.Errorf("experiment: %s: %w", n.Name(), err)
		}
		out = append(out, w)
	}
	return out, nil
}

// DefaultMatrix builds the matrix's scenarios from the studies' own: each
// workload scenario as it is, each trace at every DefaultTraceWindows
// window, then the stress workloads.
func DefaultMatrix(scenarios []Scenario) ([]Scenario, error) {
	var out []Scenario
	for _, sc := range scenarios {
		tr, ok := sc.Src.(*trace.Trace)
		if !ok {
			out = append(out, sc)
			continue
		}
		o := tr.Options()
		for _, start := range DefaultTraceWindows {
			w, err := tr.Window(start, o.Minutes)
			if err != nil {
				return nil, fmt.Errorf("experiment: trace window %d: %w", start, err)
			}
			out = append(out, Scenario{Label: fmt.Sprintf("trace %s-%s", clockOf(start), clockOf(start+o.Minutes)), Src: w})
		}
	}
	ws, err := StressWorkloads()
	if err != nil {
		return nil, err
	}
	for _, w := range ws {
		out = append(out, Scenario{Label: w.Name, Src: sim.FromWorkload(w)})
	}
	return out, nil
}

// clockOf names a 1-based minute of the day as a time of day.
func clockOf(minute int) string {
	m := (minute - 1) % (24 * 60)
	return fmt.Sprintf("%02d:%02d", m/60, m%60)
}

// MatrixResults are the matrix's cells: Cells[scenario][load][arm].
type MatrixResults struct {
	Loads     []float64
	Seeds     []uint64
	Scenarios []ScenarioInfo
	Cells     []map[float64]map[string]*Cell
	Took      time.Duration
}

// runMatrix runs matrixArms on every scenario and load.
func runMatrix(scenarios []Scenario, loads []float64, c Config) (*MatrixResults, error) {
	return runMatrixArms(scenarios, loads, c, matrixArms)
}

// runMatrixArms runs the named arms on every scenario and load.
func runMatrixArms(scenarios []Scenario, loads []float64, c Config, names []string) (*MatrixResults, error) {
	begin := time.Now()
	m := &MatrixResults{Loads: loads, Seeds: c.Seeds}
	for _, sc := range scenarios {
		all, err := buildArms(sc.Src.Types())
		if err != nil {
			return nil, err
		}
		var arms []armSpec
		for _, name := range names {
			found := false
			for _, a := range all {
				if a.Name == name {
					arms, found = append(arms, a), true
				}
			}
			if !found {
				known := make([]string, len(all))
				for i, a := range all {
					known[i] = a.Name
				}
				return nil, fmt.Errorf("experiment: unknown arm %q (want one of: %s)", name, strings.Join(known, ", "))
			}
		}
		first := sc.Src.Generate(c.Seeds[0])
		base, err := sim.OfferedLoad(first, sc.Src.Workers())
		if err != nil {
			return nil, fmt.Errorf("experiment: %s: %w", sc.Label, err)
		}
		m.Scenarios = append(m.Scenarios, ScenarioInfo{Label: sc.Label, Name: sc.Src.Name(),
			Workers: sc.Src.Workers(), Jobs: len(first), Load: base})
		cells := map[float64]map[string]*Cell{}
		for _, load := range loads {
			cl, err := runLoad(sc.Src, load, arms, c)
			if err != nil {
				return nil, fmt.Errorf("experiment: matrix %s at load %v: %w", sc.Label, load, err)
			}
			cells[load] = cl
		}
		m.Cells = append(m.Cells, cells)
		fmt.Fprintf(c.Progress, "experiments: matrix %s: %d loads x %d arms x %d seeds done (%.1f s)\n",
			sc.Label, len(loads), len(arms), len(c.Seeds), time.Since(begin).Seconds())
	}
	m.Took = time.Since(begin)
	return m, nil
}

// ratio is the median across seeds of arm / base for one cell.
func (m *MatrixResults) ratio(si int, load float64, arm, base string, mt metric) float64 {
	a, b := m.Cells[si][load][arm], m.Cells[si][load][base]
	if a == nil || b == nil {
		return math.NaN()
	}
	var xs []float64
	for i := range a.PerSeed {
		x, y := mt.seed(a, i), mt.seed(b, i)
		if !math.IsNaN(x) && !math.IsNaN(y) && y > 0 {
			xs = append(xs, x/y)
		}
	}
	return stats.Median(xs)
}

// value is the median across seeds of one figure of one cell.
func (m *MatrixResults) value(si int, load float64, arm string, mt metric) float64 {
	c := m.Cells[si][load][arm]
	if c == nil {
		return math.NaN()
	}
	var xs []float64
	for i := range c.PerSeed {
		if v := mt.seed(c, i); !math.IsNaN(v) {
			xs = append(xs, v)
		}
	}
	return stats.Median(xs)
}

var (
	mOverGuard = metric{"share over the guard", "", func(c *Cell, i int) float64 { return c.OverGuard[i] }}
	mWorstX    = metric{"worst latency vs FIFO's", "", func(c *Cell, i int) float64 { return c.WorstRatio[i] }}
)

// Verdict is one arm's standing in one matrix cell against the goal.
type Verdict struct {
	Export   float64 // longest class's max wait / FIFO's
	P99      float64 // all-message P99 / FIFO's
	Mean     float64 // mean / FIFO's
	Oracle   float64 // oracle SJF's mean / FIFO's
	Captured float64 // (1 - Mean) / (1 - Oracle): the share of oracle SJF's cut; NaN when the oracle gains too little to judge
	// Pass is every guard met and, where judged, the capture.
	ExportOK, P99OK, MeanOK, Pass bool
}

// Verdict judges arm in one cell.
func (m *MatrixResults) Verdict(si int, load float64, arm string) Verdict {
	v := Verdict{
		Export: m.ratio(si, load, arm, ArmFIFO, mExport),
		P99:    m.ratio(si, load, arm, ArmFIFO, mP99),
		Mean:   m.ratio(si, load, arm, ArmFIFO, mMean),
		Oracle: m.ratio(si, load, ArmOracleSJF, ArmFIFO, mMean),
	}
	v.Captured = math.NaN()
	if 1-v.Oracle >= MatrixMinGain {
		v.Captured = (1 - v.Mean) / (1 - v.Oracle)
	}
	v.ExportOK = math.IsNaN(v.Export) || v.Export <= MatrixExportMax
	v.P99OK = v.P99 <= MatrixP99Max
	v.MeanOK = math.IsNaN(v.Captured) || v.Captured >= MatrixCapture
	v.Pass = v.ExportOK && v.P99OK && v.MeanOK
	return v
}

// Passes counts the cells arm passes, and the cells there are.
func (m *MatrixResults) Passes(arm string) (pass, cells int) {
	for si := range m.Scenarios {
		for _, l := range m.Loads {
			cells++
			if m.Verdict(si, l, arm).Pass {
				pass++
			}
		}
	}
	return pass, cells
}

// matrixMarkdown writes the matrix section of the document.
func (m *MatrixResults) matrixMarkdown(b *strings.Builder, cmd string) {
	b.WriteString("## 5. The evaluation matrix: does the default do harm anywhere?\n\n")
	b.WriteString("Every scenario at every offered load, the default policy against FIFO, judged by the goal of docs/policy.md: ")
	fmt.Fprintf(b, "the longest class's max wait at most %.1fx FIFO's (the export class; on the trace, the longest 5%% of functions by mean), the all-message P99 at most %.2fx FIFO's, and, wherever oracle SJF cuts the mean by at least %.0f%%, a mean that captures at least %.0f%% of oracle SJF's cut (captured = (1 - default/FIFO) / (1 - oracle SJF/FIFO)). ",
		MatrixExportMax, MatrixP99Max, 100*MatrixMinGain, 100*MatrixCapture)
	fmt.Fprintf(b, "Ratios are medians across seeds %v of the per-seed ratio to FIFO. Oracle SJF (`%s`) knows every true duration and runs shortest first with no bound: a reference that does not move when the default does. `%s` is the default before its long keys (only the work-share cut and unpredictable messages long); `%s` is the default with the most expensive fifth of the recent work long (the share before the 1%% cut); `%s` the default before the guard (only long messages bounded). ", m.Seeds, ArmOracleSJF, ArmNoLongKeys, ArmShare20, ArmPrevious)
	fmt.Fprintf(b, "The trace windows are chosen by the clock (one hour every six hours); the stress workloads (bimodal, bursts, drift, heavy-tail, sized, tenants) are in lab/internal/experiment/workloads/, each file saying what it is built to break. Loads are set with `sim.AtLoad` as above.\n\n")
	fmt.Fprintf(b, "![5. The evaluation matrix](%s/matrix.svg)\n\n", ChartDir)
	fmt.Fprintf(b, "Reproduce: `%s` (arms: %s).\n\n", cmd, strings.Join(matrixArms, ", "))
	pass, cells := m.Passes(ArmDefault)
	kpass, _ := m.Passes(ArmNoLongKeys)
	spass, _ := m.Passes(ArmShare20)
	upass, _ := m.Passes(ArmPrevious)
	fmt.Fprintf(b, "The default passes **%d of %d cells** (the default before it, %s: %d; with a fifth of the work long, %s: %d; before the guard, %s: %d).\n\n", pass, cells, ArmNoLongKeys, kpass, ArmShare20, spass, ArmPrevious, upass)
	fmt.Fprintf(b, "| scenario | workers | load | longest class max wait vs fifo | P99 vs fifo | mean vs fifo | oracle SJF mean vs fifo | captured | result | messages over %sx their FIFO latency | worst message vs its FIFO latency | before (no long keys): wait, P99, mean vs fifo, result |\n|---|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---|\n", fmtNum(1+sched.DefaultGuard))
	for si, sc := range m.Scenarios {
		for _, l := range m.Loads {
			v := m.Verdict(si, l, ArmDefault)
			u := m.Verdict(si, l, ArmNoLongKeys)
			fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s, %s, %s, %s |\n", sc.Label, sc.Workers, fmtLoad(l),
				mark(fmtRatio(v.Export), !v.ExportOK), mark(fmtRatio(v.P99), !v.P99OK), fmtRatio(v.Mean), fmtRatio(v.Oracle),
				mark(fmtShare(v.Captured), !v.MeanOK), passWord(v),
				fmtPct(m.value(si, l, ArmDefault, mOverGuard)), short(m.value(si, l, ArmDefault, mWorstX)),
				fmtRatio(u.Export), fmtRatio(u.P99), fmtRatio(u.Mean), strings.ReplaceAll(passWord(u), "**", ""))
		}
	}
	b.WriteString("\nA figure in bold misses its part of the goal. \"-\" under captured: oracle SJF gains less than 5% there, so the mean is not judged.\n\n")
	b.WriteString("| scenario | source | workers | jobs (seed 1) | offered load as generated |\n|---|---|---|---|---|\n")
	for _, sc := range m.Scenarios {
		fmt.Fprintf(b, "| %s | %s | %d | %d | %.3f |\n", sc.Label, sc.Name, sc.Workers, sc.Jobs, sc.Load)
	}
	b.WriteString("\n")
	if f := m.misses(); f != "" {
		b.WriteString("**Where the default falls short.** " + f + "\n\n")
	}
	m.sensitivity(b)
	m.virtualMarkdown(b)
	m.keyMarkdown(b)
}

// keyMarkdown writes, cell by cell, what an estimate made from the key
// alone could do: the default's rules and unbounded shortest expected
// first, both on each key's true mean duration.
func (m *MatrixResults) keyMarkdown(b *strings.Builder) {
	b.WriteString("**What the key alone allows.** The predictor sees a message's key, not its duration. `" + ArmOracleKeys + "` runs the default's rules with every message placed at its key's true mean duration over the seed's jobs, known in advance (no cold start, no spread gate, no estimation noise; the long keys are not applied, only the work-share cut). `" + ArmOracleSEPT + "` orders by the same means, shortest expected first on one level with no bound: what ordering by the key alone buys the mean when nothing is held back. `" + ArmSJF + "` is shortest predicted first with no bound, on the predictor's estimates. Per cell, each arm's longest class max wait, P99 and mean capture against FIFO, and its result:\n\n")
	m.cellTable(b, keyArms)
}

// virtualMarkdown writes, cell by cell, what tracking FIFO in a virtual
// FIFO run does to the default, on both clocks and on true durations.
func (m *MatrixResults) virtualMarkdown(b *strings.Builder) {
	b.WriteString("**FIFO's progress from a virtual FIFO run.** The default counts a message's FIFO moment in the predicted work it has dispatched itself. `" + ArmVirtual + "` replays the same messages, in predicted costs, through FIFO on the scenario's number of workers in real time (`sched.Bound.VirtualFIFO`): a message's FIFO moment is when that run starts it. `" + ArmVirtualDispatch + "` runs it on a clock that, while messages wait, advances by the predicted work dispatched shared among the workers, and by real time only while none wait (`sched.Bound.DispatchClock`). `" + ArmOracleVirtual + "` is the oracle (the default's rules on true durations) with the real-time virtual run, which on true durations is FIFO's run exactly. Per cell, each arm's longest class max wait, P99 and mean capture against FIFO, and its result:\n\n")
	m.cellTable(b, virtualArms)
}

// cellTable writes, per cell, each arm's longest class max wait, P99 and
// mean capture against FIFO, and its result.
func (m *MatrixResults) cellTable(b *strings.Builder, arms []string) {
	b.WriteString("| scenario | load |")
	for _, a := range arms {
		fmt.Fprintf(b, " %s |", a)
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---|", len(arms)) + "\n")
	for si, sc := range m.Scenarios {
		for _, l := range m.Loads {
			fmt.Fprintf(b, "| %s | %s |", sc.Label, fmtLoad(l))
			for _, a := range arms {
				v := m.Verdict(si, l, a)
				fmt.Fprintf(b, " %s, %s, %s, %s |", fmtRatio(v.Export), fmtRatio(v.P99), fmtShare(v.Captured), strings.ReplaceAll(passWord(v), "**", ""))
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n")
}

// sensitivity writes, for the default and the guard's settings around it,
// how many cells meet each part of the goal and the worst misses.
func (m *MatrixResults) sensitivity(b *strings.Builder) {
	b.WriteString("**The guard's settings.** The same matrix for the default (guard 0.5, overtaking by a quarter of the cost, the costliest 1% of the recent work and the costliest 5% of the keys long), the default before it (no long keys: only the 1% of the work), the default with the most expensive 20% of the work long, a tighter and looser guard, the guard without the overtaking rule (any shorter message may go ahead until the deadline), the default before the guard (previous), shortest predicted first with no bound at all (sjf), the oracle (the default's rules on true durations), the default and the oracle with FIFO's progress taken from a virtual FIFO run (below), and the default's rules and unbounded shortest expected first on each key's true mean duration (below). Cells meeting each part of the goal, and the worst ratios to FIFO over all cells:\n\n")
	fmt.Fprintf(b, "| arm | cells passed | both guards held | longest class wait <= 1.0x | P99 <= 1.10x | mean captured | P99 > 1.5x | worst longest class wait | worst P99 | largest share over %sx FIFO latency |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", fmtNum(1+sched.DefaultGuard))
	for _, a := range sensitivityArms {
		var pass, guards, wait, p99, mean, p15 int
		worstE, worstP, over := math.NaN(), math.NaN(), math.NaN()
		for si := range m.Scenarios {
			for _, l := range m.Loads {
				v := m.Verdict(si, l, a)
				count := func(ok bool, n *int) {
					if ok {
						*n++
					}
				}
				count(v.Pass, &pass)
				count(v.ExportOK && v.P99OK, &guards)
				count(v.ExportOK, &wait)
				count(v.P99OK, &p99)
				count(v.MeanOK, &mean)
				count(v.P99 > 1.5, &p15)
				if !math.IsNaN(v.Export) && !(v.Export <= worstE) {
					worstE = v.Export
				}
				if !math.IsNaN(v.P99) && !(v.P99 <= worstP) {
					worstP = v.P99
				}
				if o := m.value(si, l, a, mOverGuard); !math.IsNaN(o) && !(o <= over) {
					over = o
				}
			}
		}
		fmt.Fprintf(b, "| %s | %d | %d | %d | %d | %d | %d | %s | %s | %s |\n", a, pass, guards, wait, p99, mean, p15, fmtRatio(worstE), fmtRatio(worstP), fmtPct(over))
	}
	b.WriteString("\n")
}

// misses lists the failing cells by the part of the goal they miss.
func (m *MatrixResults) misses() string {
	var exp, p99, mean []string
	for si, sc := range m.Scenarios {
		for _, l := range m.Loads {
			v := m.Verdict(si, l, ArmDefault)
			at := fmt.Sprintf("%s at %s", sc.Label, fmtLoad(l))
			if !v.ExportOK {
				exp = append(exp, fmt.Sprintf("%s (%s)", at, fmtRatio(v.Export)))
			}
			if !v.P99OK {
				p99 = append(p99, fmt.Sprintf("%s (%s)", at, fmtRatio(v.P99)))
			}
			if !v.MeanOK {
				mean = append(mean, fmt.Sprintf("%s (%s of oracle SJF's cut)", at, fmtShare(v.Captured)))
			}
		}
	}
	var parts []string
	if len(exp) > 0 {
		parts = append(parts, "Longest class's max wait above FIFO's: "+strings.Join(exp, ", ")+".")
	}
	if len(p99) > 0 {
		parts = append(parts, fmt.Sprintf("P99 above %.2fx FIFO's: ", MatrixP99Max)+strings.Join(p99, ", ")+".")
	}
	if len(mean) > 0 {
		parts = append(parts, fmt.Sprintf("Mean capturing less than %.0f%% of oracle SJF's cut: ", 100*MatrixCapture)+strings.Join(mean, ", ")+".")
	}
	return strings.Join(parts, " ")
}

func fmtRatio(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.3fx", v)
}

func fmtPct(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", 100*v)
}

func fmtShare(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*v)
}

func mark(s string, bad bool) string {
	if bad {
		return "**" + s + "**"
	}
	return s
}

func passWord(v Verdict) string {
	if v.Pass {
		return "pass"
	}
	var miss []string
	if !v.ExportOK {
		miss = append(miss, "wait")
	}
	if !v.P99OK {
		miss = append(miss, "P99")
	}
	if !v.MeanOK {
		miss = append(miss, "mean")
	}
	return "**fail** (" + strings.Join(miss, ", ") + ")"
}

// HeatMap draws the matrix as one SVG: a row per scenario, a column per
// load, in three panels (the longest class's wait, P99, the mean's capture)
// and a fourth with the verdict. Each cell's colour says how far it is
// from its threshold: green inside, red outside.
func (m *MatrixResults) HeatMap() []byte {
	const (
		cellW, cellH = 64, 26
		labelW       = 150
		gap          = 24
		top          = 64
	)
	type panel struct {
		title string
		get   func(Verdict) (text string, score float64) // score <= 0 inside the goal
	}
	panels := []panel{
		{"longest class max wait vs FIFO (goal <= 1.0x)", func(v Verdict) (string, float64) {
			return short(v.Export), math.Log(v.Export / MatrixExportMax)
		}},
		{fmt.Sprintf("P99 vs FIFO (goal <= %.2fx)", MatrixP99Max), func(v Verdict) (string, float64) {
			return short(v.P99), math.Log(v.P99 / MatrixP99Max)
		}},
		{fmt.Sprintf("share of oracle SJF's mean cut (goal >= %.0f%%)", 100*MatrixCapture), func(v Verdict) (string, float64) {
			if math.IsNaN(v.Captured) {
				return "-", math.NaN()
			}
			return fmtShare(v.Captured), (MatrixCapture - v.Captured) * 2
		}},
		{"verdict", func(v Verdict) (string, float64) {
			if v.Pass {
				return "pass", -0.5
			}
			return "fail", 0.5
		}},
	}
	cols := len(m.Loads)
	pw := cols * cellW
	width := labelW + len(panels)*(pw+gap)
	height := top + len(m.Scenarios)*cellH + 40
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	pass, cells := m.Passes(ArmDefault)
	fmt.Fprintf(&b, `<text x="%d" y="20" text-anchor="middle" font-size="15" font-weight="bold">%s</text>`+"\n", width/2,
		esc(fmt.Sprintf("5. The evaluation matrix: the default against FIFO (%d of %d cells pass)", pass, cells)))
	for pi, p := range panels {
		x0 := labelW + pi*(pw+gap)
		fmt.Fprintf(&b, `<text x="%d" y="40" text-anchor="middle" font-weight="bold">%s</text>`+"\n", x0+pw/2, esc(p.title))
		for li, l := range m.Loads {
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", x0+li*cellW+cellW/2, top-6, esc("load "+fmtLoad(l)))
		}
		for si := range m.Scenarios {
			for li, l := range m.Loads {
				text, score := p.get(m.Verdict(si, l, ArmDefault))
				x, y := x0+li*cellW, top+si*cellH
				fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s" stroke="white"><title>%s</title></rect>`+"\n",
					x, y, cellW, cellH, heat(score), esc(m.Scenarios[si].Label+" at "+fmtLoad(l)+": "+text))
				fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", x+cellW/2, y+cellH/2+4, esc(text))
			}
		}
	}
	for si, sc := range m.Scenarios {
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", labelW-8, top+si*cellH+cellH/2+4, esc(sc.Label))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", labelW, height-14,
		esc(fmt.Sprintf("medians of seeds %v; green meets the goal, red misses it, the deeper the further; grey: not judged", m.Seeds)))
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// short formats a ratio for a heat-map cell.
func short(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.2fx", v)
}

// heat maps a score (<= 0 inside the goal) to a colour.
func heat(score float64) string {
	if math.IsNaN(score) {
		return "#e0e0e0"
	}
	t := min(math.Abs(score)/0.7, 1) // saturate at about 2x off
	lerp := func(a, b int) int { return a + int(math.Round(float64(b-a)*(0.25+0.75*t))) }
	if score <= 0 {
		return fmt.Sprintf("#%02x%02x%02x", lerp(0xf0, 0x4c), lerp(0xf7, 0xaf), lerp(0xf0, 0x50))
	}
	return fmt.Sprintf("#%02x%02x%02x", lerp(0xfb, 0xd7), lerp(0xe9, 0x30), lerp(0xe9, 0x27))
}
