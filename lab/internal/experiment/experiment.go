// Package experiment owns Harbinger's ablation studies: it replays the
// pre-registered workload and the shipped trace at several offered loads
// through many variants of the scheduler and predictor, and renders the
// findings as Markdown tables and hand-written SVG charts
// (lab/results/experiments.md). It only composes the simulator; the one model it
// adds, a regression tree standing in for a heavier predictor, lives here
// too, so the scheduling core stays as it ships.
package experiment

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/harbinger-mq/harbinger/internal/predict"
	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/internal/sched"
	"github.com/harbinger-mq/harbinger/internal/sim"
	"github.com/harbinger-mq/harbinger/internal/stats"
	"github.com/harbinger-mq/harbinger/internal/workload"
)

// Defaults for Config.
var (
	DefaultLoads = []float64{0.8, 0.95, 1.1}
	DefaultSeeds = []uint64{1, 2, 3, 4, 5}
)

// Scenario is one job stream the studies run on, before load scaling.
type Scenario struct {
	Label string     // short name for tables, e.g. "production-flow"
	Src   sim.Source // workers and durations are kept; arrivals are rescaled per load
}

// Config says what to run.
type Config struct {
	Scenarios []Scenario
	Loads     []float64 // offered loads; default DefaultLoads
	Seeds     []uint64  // default DefaultSeeds
	Parallel  int       // concurrent runs; default GOMAXPROCS
	Progress  io.Writer // one line per finished scenario and load; nil for none
	Command   string    // the command line that reproduces the run, quoted in the document
	// Matrix lists the evaluation matrix's scenarios; nil builds the
	// default one from Scenarios (DefaultMatrix).
	Matrix []Scenario
	// MatrixLoads are the matrix's offered loads; default DefaultMatrixLoads.
	MatrixLoads []float64
	// NoMatrix leaves the matrix out.
	NoMatrix bool
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if len(c.Loads) == 0 {
		c.Loads = slices.Clone(DefaultLoads)
	}
	if len(c.Seeds) == 0 {
		c.Seeds = slices.Clone(DefaultSeeds)
	}
	if c.Parallel <= 0 {
		c.Parallel = runtime.GOMAXPROCS(0)
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.Command == "" {
		c.Command = "go run ./cmd/harbinger-lab experiments"
	}
	if len(c.MatrixLoads) == 0 {
		c.MatrixLoads = slices.Clone(DefaultMatrixLoads)
	}
	return c
}

func (c Config) validate() error {
	if len(c.Scenarios) == 0 {
		return fmt.Errorf("experiment: no scenarios to run")
	}
	for _, l := range append(slices.Clone(c.Loads), c.MatrixLoads...) {
		if !(l > 0) || math.IsInf(l, 0) {
			return fmt.Errorf("experiment: offered load %v must be a positive number", l)
		}
	}
	return nil
}

// Arm names. The default arm is the shipped configuration: the bounded
// policy with its long share (sched.DefaultLongShare: in practice the
// costliest cluster of recent messages is bounded), three tiers, the EWMA
// estimator, the spread gate, size buckets and a cold-start threshold of
// three observations. ArmShare20 is the default before this share, which
// bounded the most expensive fifth of the recent work. ArmShare40 and ArmShare60
// bound the most expensive 40% and 60% of the recent work instead; their
// names must match shareWide and shareWider. ArmOthers1 and ArmOthers3 also
// bound every message that is not long, at twice and four times the wait
// FIFO would give it (sched.Bound.Others); their names must match
// othersTight and othersLoose.
const (
	ArmFIFO         = "fifo"
	ArmDefault      = "default"
	ArmAgingOff     = "bound-off"
	ArmStrictAging  = "strict+step"
	ArmWeighted     = "weighted+pausing"
	ArmShare20      = "bound 20% of work"
	ArmShare40      = "bound 40% of work"
	ArmShare60      = "bound 60% of work"
	ArmOthers1      = "bound all, 2x FIFO"
	ArmOthers3      = "bound all, 4x FIFO"
	ArmOracle       = "oracle"
	ArmStatic       = "static"
	ArmMedian       = "median"
	ArmNoGate       = "ewma-no-gate"
	ArmMedianNoGate = "median-no-gate"
	ArmNoSize       = "no-size-bucket"
	ArmCold1        = "cold-start-1"
	ArmCold10       = "cold-start-10"
	ArmTree         = "tree"
	ArmTiers2       = "tiers-2"
	ArmTiers4       = "tiers-4"
	ArmTiers6       = "tiers-6"
	ArmSJF          = "sjf"
	// ArmVirtual is the default with FIFO's progress taken from a virtual
	// FIFO run on the scenario's workers (sched.Bound.VirtualFIFO), and
	// ArmOracleVirtual the same on true durations: there the virtual run is
	// exactly FIFO's.
	// ArmVirtualDispatch runs that virtual run on the dispatch clock
	// (sched.Bound.DispatchClock).
	ArmVirtual         = "virtual FIFO"
	ArmVirtualDispatch = "virtual FIFO, dispatch clock"
	ArmOracleVirtual   = "oracle, virtual FIFO"
)

// The stretches of ArmOthers1 and ArmOthers3 for the messages that are not
// long: a message may start up to 1 + stretch times its FIFO wait.
const (
	othersTight = 1.0
	othersLoose = 3.0
)

// The long shares of ArmShare20, ArmShare40 and ArmShare60.
const (
	shareFifth = 0.2
	shareWide  = 0.4
	shareWider = 0.6
)

// armSpec is an arm and how to run it.
type armSpec struct {
	sim.Arm
}

// buildArms resolves every arm the studies need for one scenario's types.
func buildArms(types []workload.JobType) ([]armSpec, error) {
	by := func(name, base string, tweak func(*sim.Arm)) (armSpec, error) {
		a, err := sim.ArmByName(base, types)
		if err != nil {
			return armSpec{}, err
		}
		a.Name = name
		if tweak != nil {
			tweak(&a)
		}
		return armSpec{Arm: a}, nil
	}
	def := func(name string, tweak func(*sim.Arm)) (armSpec, error) { return by(name, "bounded", tweak) }
	var out []armSpec
	add := func(a armSpec, err error) error {
		if err == nil {
			out = append(out, a)
		}
		return err
	}
	tree, err := def(ArmTree, nil)
	tree.NewModel = func() sim.Model { return newTreeModel() }
	for _, e := range []error{
		add(by(ArmFIFO, "fifo", nil)),
		add(def(ArmDefault, nil)),
		add(def(ArmAgingOff, func(a *sim.Arm) { a.Options.AgingOff = true })),
		add(by(ArmStrictAging, "strict-aging", nil)),
		add(by(ArmWeighted, "weighted", nil)),
		add(def(ArmShare20, func(a *sim.Arm) { a.Predictor.LongShare = shareFifth })),
		add(def(ArmShare40, func(a *sim.Arm) { a.Predictor.LongShare = shareWide })),
		add(def(ArmShare60, func(a *sim.Arm) { a.Predictor.LongShare = shareWider })),
		add(def(ArmOthers1, func(a *sim.Arm) { a.Options.OthersStretch = new(othersTight) })),
		add(def(ArmOthers3, func(a *sim.Arm) { a.Options.OthersStretch = new(othersLoose) })),
		add(by(ArmOracle, "oracle", nil)),
		add(by(ArmStatic, "static", nil)),
		add(def(ArmMedian, func(a *sim.Arm) { a.Predictor.Estimator = predict.EstimateMedian })),
		add(def(ArmNoGate, func(a *sim.Arm) { a.Predictor.SpreadGate = -1 })),
		add(def(ArmMedianNoGate, func(a *sim.Arm) {
			a.Predictor.Estimator, a.Predictor.SpreadGate = predict.EstimateMedian, -1
		})),
		add(def(ArmNoSize, func(a *sim.Arm) { a.Predictor.NoSizeBucket = true })),
		add(def(ArmCold1, func(a *sim.Arm) { a.Predictor.MinObservations = 1 })),
		add(def(ArmCold10, func(a *sim.Arm) { a.Predictor.MinObservations = 10 })),
		add(tree, err),
		add(def(ArmTiers2, func(a *sim.Arm) { a.Options.Tiers = 2 })),
		add(def(ArmTiers4, func(a *sim.Arm) { a.Options.Tiers = 4 })),
		add(def(ArmTiers6, func(a *sim.Arm) { a.Options.Tiers = 6 })),
		add(by(ArmSJF, "sjf", nil)),
		add(by(ArmOracleSJF, "oracle-sjf", nil)),
		add(by(ArmOracleSEPT, "oracle-sept", nil)),
		add(by(ArmOracleKeys, "oracle-keys", nil)),
		add(by(ArmPrevious, "previous", nil)),
		add(by(ArmNoLongKeys, "no-long-keys", nil)),
		add(def(ArmGuardTight, func(a *sim.Arm) { a.Options.Guard = new(guardTight) })),
		add(def(ArmGuardMid, func(a *sim.Arm) { a.Options.Guard = new(guardMid) })),
		add(def(ArmGuardLoose, func(a *sim.Arm) { a.Options.Guard = new(guardLoose) })),
		add(def(ArmOvertakeAny, func(a *sim.Arm) { a.Options.Overtake = new(0.0) })),
		add(def(ArmVirtual, func(a *sim.Arm) { a.Options.VirtualFIFO = true })),
		add(def(ArmVirtualDispatch, func(a *sim.Arm) { a.Options.VirtualFIFO, a.Options.DispatchClock = true, true })),
		add(by(ArmOracleVirtual, "oracle", func(a *sim.Arm) { a.Options.VirtualFIFO = true })),
	} {
		if e != nil {
			return nil, e
		}
	}
	return out, nil
}

// Cell is one arm on one scenario at one load, across seeds.
type Cell struct {
	*report.ArmResult
	ExportP99WaitS []float64 // per seed: 99th percentile wait of the export class
	ExportMeanWait []float64 // per seed: mean wait of the export class
	// Per seed, each message's latency against the latency FIFO gave the
	// same message: the share above 1 + sched.DefaultGuard times it (the
	// default's guarantee), and the largest ratio.
	OverGuard  []float64
	WorstRatio []float64
}

// Results holds every cell: Cells[scenario][load][arm].
type Results struct {
	Config    Config
	Scenarios []ScenarioInfo
	Cells     []map[float64]map[string]*Cell
	Matrix    *MatrixResults // nil when the matrix was left out
	Took      time.Duration
}

// ScenarioInfo describes a scenario as run.
type ScenarioInfo struct {
	Label   string
	Name    string // the source's own name
	Workers int
	Jobs    int     // jobs of the first seed
	Load    float64 // offered load of the first seed before rescaling
}

// Cell returns one cell, or nil.
func (r *Results) Cell(scenario int, load float64, arm string) *Cell {
	if scenario < 0 || scenario >= len(r.Cells) {
		return nil
	}
	return r.Cells[scenario][load][arm]
}

// Run runs every arm on every scenario, load and seed.
func Run(c Config) (*Results, error) {
	c = c.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	begin := time.Now()
	res := &Results{Config: c}
	for si, sc := range c.Scenarios {
		arms, err := buildArms(sc.Src.Types())
		if err != nil {
			return nil, err
		}
		first := sc.Src.Generate(c.Seeds[0])
		base, err := sim.OfferedLoad(first, sc.Src.Workers())
		if err != nil {
			return nil, fmt.Errorf("experiment: %s: %w", sc.Label, err)
		}
		res.Scenarios = append(res.Scenarios, ScenarioInfo{Label: sc.Label, Name: sc.Src.Name(),
			Workers: sc.Src.Workers(), Jobs: len(first), Load: base})
		res.Cells = append(res.Cells, map[float64]map[string]*Cell{})
		for _, load := range c.Loads {
			cells, err := runLoad(sc.Src, load, arms, c)
			if err != nil {
				return nil, fmt.Errorf("experiment: %s at load %v: %w", sc.Label, load, err)
			}
			res.Cells[si][load] = cells
			fmt.Fprintf(c.Progress, "experiments: %s at load %v: %d arms x %d seeds done (%.1f s)\n",
				sc.Label, load, len(arms), len(c.Seeds), time.Since(begin).Seconds())
		}
	}
	if !c.NoMatrix {
		scs := c.Matrix
		if scs == nil {
			var err error
			if scs, err = DefaultMatrix(c.Scenarios); err != nil {
				return nil, err
			}
		}
		m, err := runMatrix(scs, c.MatrixLoads, c)
		if err != nil {
			return nil, err
		}
		res.Matrix = m
	}
	res.Took = time.Since(begin)
	return res, nil
}

// seedSource pins the seeds AtLoad measures on to the study's seeds.
type seedSource struct {
	sim.Source
	seeds []uint64
}

func (s seedSource) Seeds() []uint64 { return slices.Clone(s.seeds) }

func runLoad(src sim.Source, load float64, arms []armSpec, c Config) (map[string]*Cell, error) {
	scaled, err := sim.AtLoad(seedSource{src, c.Seeds}, load)
	if err != nil {
		return nil, err
	}
	types := scaled.Types()
	jobs := make([][]workload.Job, len(c.Seeds))
	for i, s := range c.Seeds {
		jobs[i] = scaled.Generate(s)
	}
	type out struct {
		res               report.SeedResult
		p99, meanW        float64
		overGuard, ratioX float64
	}
	outs := make([][]out, len(arms))
	for i := range outs {
		outs[i] = make([]out, len(c.Seeds))
	}
	// FIFO runs first, so that every other arm can be compared with it
	// message by message as it finishes, without keeping its records.
	fifo := slices.IndexFunc(arms, func(a armSpec) bool { return a.Name == ArmFIFO })
	fifoRecs := make([][]report.Record, len(c.Seeds))
	type task struct{ arm, seed int }
	var mu sync.Mutex
	var firstErr error
	phase := func(list []task) {
		tasks := make(chan task)
		var wg sync.WaitGroup
		for range c.Parallel {
			wg.Go(func() {
				for t := range tasks {
					a := arms[t.arm]
					r, recs, err := sim.RunSeed(types, jobs[t.seed], scaled.Workers(), a.Arm, c.Seeds[t.seed])
					o := out{res: r, overGuard: math.NaN(), ratioX: math.NaN()}
					o.p99, o.meanW = exportWaits(recs)
					if t.arm == fifo {
						fifoRecs[t.seed] = recs
					} else if fifo >= 0 {
						o.overGuard, o.ratioX = againstFIFO(recs, fifoRecs[t.seed], 1+sched.DefaultGuard)
					}
					mu.Lock()
					if err != nil && firstErr == nil {
						firstErr = fmt.Errorf("arm %s seed %d: %w", a.Name, c.Seeds[t.seed], err)
					}
					outs[t.arm][t.seed] = o
					mu.Unlock()
				}
			})
		}
		for _, t := range list {
			tasks <- t
		}
		close(tasks)
		wg.Wait()
	}
	var first, rest []task
	for a := range arms {
		for s := range c.Seeds {
			if a == fifo {
				first = append(first, task{a, s})
			} else {
				rest = append(rest, task{a, s})
			}
		}
	}
	phase(first)
	phase(rest)
	if firstErr != nil {
		return nil, firstErr
	}
	cells := make(map[string]*Cell, len(arms))
	for i, a := range arms {
		per := make([]report.SeedResult, len(c.Seeds))
		cell := &Cell{}
		for s, o := range outs[i] {
			per[s] = o.res
			cell.ExportP99WaitS = append(cell.ExportP99WaitS, o.p99)
			cell.ExportMeanWait = append(cell.ExportMeanWait, o.meanW)
			cell.OverGuard = append(cell.OverGuard, o.overGuard)
			cell.WorstRatio = append(cell.WorstRatio, o.ratioX)
		}
		cell.ArmResult = report.Combine(per)
		cells[a.Name] = cell
	}
	return cells, nil
}

// againstFIFO pairs each message of recs with the same message under FIFO
// and returns the share whose latency is above bound times FIFO's, and the
// largest ratio. Records carry no message id; a message is its send time and
// type, which the generators never repeat in practice (arrivals are drawn
// in nanoseconds); a pair that cannot be made is left out.
func againstFIFO(recs, fifo []report.Record, bound float64) (over, worst float64) {
	type key struct {
		sent time.Duration
		typ  int
	}
	lat := make(map[key]time.Duration, len(fifo))
	for _, r := range fifo {
		lat[key{r.Sent, r.Type}] = r.Done - r.Sent
	}
	n, above := 0, 0
	worst = math.NaN()
	for _, r := range recs {
		f, ok := lat[key{r.Sent, r.Type}]
		if !ok || f <= 0 {
			continue
		}
		x := float64(r.Done-r.Sent) / float64(f)
		n++
		if x > bound {
			above++
		}
		if !(x <= worst) {
			worst = x
		}
	}
	if n == 0 {
		return math.NaN(), math.NaN()
	}
	return float64(above) / float64(n), worst
}

// exportWaits returns the 99th percentile and the mean wait (send to start)
// of the export class, in seconds; NaN when there is none.
func exportWaits(recs []report.Record) (p99, mean float64) {
	var w []float64
	for _, r := range recs {
		if r.Class == report.ClassExport {
			w = append(w, (r.Started - r.Sent).Seconds())
		}
	}
	if len(w) == 0 {
		return math.NaN(), math.NaN()
	}
	return stats.Quantile(w, 0.99), stats.Mean(w)
}
