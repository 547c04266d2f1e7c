// Package trace replays a real invocation trace, the Azure Functions 2019
// sample, as a Harbinger job stream. It owns reading and validating the two
// CSV files of a trace directory, choosing a window of the day, deriving a
// worker count for a target load, and generating jobs deterministically: the
// same (seed, function) always yields the same arrivals and durations, so
// every arm of one seed sees identical jobs.
package trace

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/harbinger-mq/harbinger/internal/workload"
)

// Defaults for Options. The window is the hour from noon, minutes 721-780 of
// the trace day: its first ten minutes are busy but ordinary in the shipped
// sample (invocations at the day's median for such a window, 48 active
// functions, the widest mix of job lengths), and an hour is long enough that
// the sample's slowest functions (minutes per call) finish well inside it.
// Compressing time 12x, durations and arrivals alike, replays the hour in
// 300 s of virtual time at the trace's own offered load.
const (
	DefaultStartMinute = 721
	DefaultMinutes     = 60
	DefaultCompression = 1.0 / 12
	DefaultLoad        = 0.95
)

// Bounds on Compression, so a minute always spans at least 60 ms of virtual
// time and a whole day fits in a time.Duration with room to spare.
const (
	minCompression = 0.001
	maxCompression = 1000
)

// DistEmpirical is the Duration.Dist of every trace job type: durations come
// from the function's percentile curve, which DurationSpec cannot express;
// Duration.MeanMS still carries the function's mean.
const DistEmpirical = "empirical"

// Job classes, for reports.
const (
	ClassShort  = "short"
	ClassExport = "export"
	ClassMid    = "mid"
)

// exportFraction is the share of functions, by mean duration, classed export.
const exportFraction = 0.05

// Options selects the part of the trace to replay and how hard to drive it.
// A zero field takes its default.
type Options struct {
	StartMinute int      // first minute of the window, 1-based; default DefaultStartMinute
	Minutes     int      // window length in minutes; default DefaultMinutes
	Compression float64  // replay (virtual) seconds per trace second; default DefaultCompression. Arrivals and durations are compressed alike, as a live run's time scale does, so the load does not depend on it.
	Load        float64  // target offered load (busy workers / workers) that sets Workers; default DefaultLoad
	Seeds       []uint64 // default 1..5
}

// WithDefaults returns o with every zero field set to its default.
func (o Options) WithDefaults() Options {
	if o.StartMinute == 0 {
		o.StartMinute = DefaultStartMinute
	}
	if o.Minutes == 0 {
		o.Minutes = DefaultMinutes
	}
	if o.Compression == 0 {
		o.Compression = DefaultCompression
	}
	if o.Load == 0 {
		o.Load = DefaultLoad
	}
	if len(o.Seeds) == 0 {
		o.Seeds = []uint64{1, 2, 3, 4, 5}
	} else {
		o.Seeds = slices.Clone(o.Seeds)
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.StartMinute < 1 || o.StartMinute > dayMinutes:
		return fmt.Errorf("trace: start minute %d is outside the day (1..%d)", o.StartMinute, dayMinutes)
	case o.Minutes < 1:
		return fmt.Errorf("trace: window of %d minutes; it must be at least 1", o.Minutes)
	case o.StartMinute+o.Minutes-1 > dayMinutes:
		return fmt.Errorf("trace: window minutes %d-%d run past the end of the day (minute %d)", o.StartMinute, o.StartMinute+o.Minutes-1, dayMinutes)
	case math.IsNaN(o.Compression) || o.Compression < minCompression || o.Compression > maxCompression:
		return fmt.Errorf("trace: compression %g must be between %g and %g virtual seconds per trace second", o.Compression, float64(minCompression), float64(maxCompression))
	case math.IsNaN(o.Load) || o.Load <= 0 || math.IsInf(o.Load, 0):
		return fmt.Errorf("trace: target load %g must be a positive number", o.Load)
	}
	return nil
}

// Trace is a window of a trace, ready to generate jobs from.
type Trace struct {
	dir     string // where it was loaded from, for Window
	source  string // dataset name, from the directory
	opts    Options
	types   []workload.JobType
	fns     []function // parallel to types
	workers int
	workS   float64 // expected seconds of work offered in the window
	jobs    int64   // invocations in the window

	functions int // rows of the inv file
	idle      int // in both files but not invoked in the window
	invOnly   int // skipped: only in the inv file
	runOnly   int // skipped: only in the run file
}

// function is what Generate needs to replay one job type.
type function struct {
	seed   uint64  // stream key, from the function's identity
	window []int32 // invocations per minute of the window
	curve  curve
}

// curve is a duration quantile function in ms, piecewise linear between the
// trace's percentile points.
type curve [len(percentilePoints)]float64

// at is the duration in ms at quantile u in [0, 1].
func (c *curve) at(u float64) float64 {
	for i := 1; i < len(percentilePoints); i++ {
		if u <= percentilePoints[i] || i == len(percentilePoints)-1 {
			lo, hi := percentilePoints[i-1], percentilePoints[i]
			f := min(max((u-lo)/(hi-lo), 0), 1)
			return c[i-1] + f*(c[i]-c[i-1])
		}
	}
	panic("unreachable")
}

// mean is the mean of the durations the curve generates, in ms.
func (c *curve) mean() float64 {
	m := 0.0
	for i := 1; i < len(percentilePoints); i++ {
		m += (percentilePoints[i] - percentilePoints[i-1]) * (c[i-1] + c[i]) / 2
	}
	return m
}

// Load reads the single *_inv.csv and *_run.csv in dir, joins them on
// (HashFunction, HashApp, HashOwner), and prepares the window opts selects.
func Load(dir string, opts Options) (*Trace, error) {
	opts = opts.WithDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	invPath, runPath, err := findFiles(dir)
	if err != nil {
		return nil, err
	}
	runs, err := readRun(runPath)
	if err != nil {
		return nil, err
	}
	invs, err := readInv(invPath, opts.StartMinute, opts.Minutes)
	if err != nil {
		return nil, err
	}

	t := &Trace{dir: dir, source: sourceName(dir, invPath), opts: opts, functions: len(invs)}
	type used struct {
		inv invRow
		run runRow
	}
	var fns []used
	matched := 0
	for _, inv := range invs {
		run, ok := runs[inv.key]
		if !ok {
			t.invOnly++
			continue
		}
		matched++
		if run.count == 0 && inv.day > 0 {
			return nil, &Error{File: runPath, Row: run.row, Column: colCount,
				Msg: fmt.Sprintf("0, but %s row %d has %d invocations", filepath.Base(invPath), inv.row, inv.day)}
		}
		if inv.total == 0 {
			t.idle++
			continue
		}
		fns = append(fns, used{inv, run})
	}
	t.runOnly = len(runs) - matched
	if len(fns) == 0 {
		return nil, fmt.Errorf("%w: minutes %d-%d", ErrNoArrivals, opts.StartMinute, opts.StartMinute+opts.Minutes-1)
	}

	// A stable order that does not depend on the row order of either file.
	slices.SortFunc(fns, func(a, b used) int { return compareKeys(a.inv.key, b.inv.key) })
	windowS := t.windowSeconds()
	for _, f := range fns {
		c := curve(f.run.curve)
		t.fns = append(t.fns, function{seed: streamKey(f.inv.key), window: f.inv.window, curve: c})
		t.types = append(t.types, workload.JobType{
			Name:     short(f.inv.key.function),
			Producer: short(f.inv.key.app),
			RatePerS: float64(f.inv.total) / windowS,
			Duration: workload.DurationSpec{Dist: DistEmpirical, MeanMS: f.run.average},
		})
		t.jobs += f.inv.total
		t.workS += float64(f.inv.total) * c.mean() / 1000 * opts.Compression
	}
	uniqueNames(t.types, func(i int) key { return fns[i].inv.key })
	t.classify()

	w := math.Ceil(t.workS / windowS / opts.Load)
	if !(w <= maxWorkers) {
		return nil, fmt.Errorf("trace: minutes %d-%d at compression %g and load %g need more than %d workers",
			opts.StartMinute, opts.StartMinute+opts.Minutes-1, opts.Compression, opts.Load, maxWorkers)
	}
	t.workers = max(1, int(w))
	return t, nil
}

// classify sets StaticTier from each function's median-duration tercile and
// Class from the tiers and mean durations: the longest exportFraction by
// mean are "export", the remaining tier-0 functions "short", the rest "mid".
func (t *Trace) classify() {
	n := len(t.types)
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	median := func(i int) float64 { return t.fns[i].curve[medianIndex] }
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(median(a), median(b)),
			cmp.Compare(t.types[a].Duration.MeanMS, t.types[b].Duration.MeanMS))
	})
	for rank, i := range order {
		t.types[i].StaticTier = rank * 3 / n
		t.types[i].Class = ClassMid
		if t.types[i].StaticTier == 0 {
			t.types[i].Class = ClassShort
		}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(t.types[b].Duration.MeanMS, t.types[a].Duration.MeanMS),
			cmp.Compare(median(b), median(a)))
	})
	for _, i := range order[:exportCount(n)] {
		t.types[i].Class = ClassExport
	}
}

// exportCount is how many of n functions are classed export: 5%, rounded
// up, so there is always at least one.
func exportCount(n int) int { return int(math.Ceil(float64(n) * exportFraction)) }

// Window loads another window of the same trace with the same options
// otherwise: minutes start to start+minutes-1 (0 keeps the current length).
func (t *Trace) Window(start, minutes int) (*Trace, error) {
	o := t.opts
	o.StartMinute = start
	if minutes > 0 {
		o.Minutes = minutes
	}
	return Load(t.dir, o)
}

// Options returns the options in force, defaults filled in.
func (t *Trace) Options() Options {
	o := t.opts
	o.Seeds = slices.Clone(o.Seeds)
	return o
}

// Name identifies the replay in reports, e.g.
// "azure-functions-2019 minutes 721-780 x0.0833 load 0.95".
func (t *Trace) Name() string {
	return fmt.Sprintf("%s minutes %d-%d x%s load %s", t.source, t.opts.StartMinute, t.lastMinute(),
		strconv.FormatFloat(t.opts.Compression, 'g', 3, 64), strconv.FormatFloat(t.opts.Load, 'g', -1, 64))
}

// Workers is the worker count that puts the expected offered load at the
// target: ceil(offered work per second / Load), at least 1.
func (t *Trace) Workers() int { return t.workers }

// Seeds are the seeds a comparison should run.
func (t *Trace) Seeds() []uint64 { return slices.Clone(t.opts.Seeds) }

// Types returns one job type per function invoked in the window; Job.Type
// indexes it.
func (t *Trace) Types() []workload.JobType { return slices.Clone(t.types) }

// OfferedLoad is the expected offered work divided by the capacity of
// Workers over the window: the mean number of busy workers it asks for, as a
// share of Workers. It counts each invocation at the mean of its function's
// duration curve, the durations Generate actually draws.
func (t *Trace) OfferedLoad() float64 {
	return t.workS / (float64(t.workers) * t.windowSeconds())
}

// Generate returns the jobs of one seed in arrival order. Each function draws
// from its own stream seeded by (seed, function identity), so a function's
// jobs never depend on the other functions or on the row order of the files.
func (t *Trace) Generate(seed uint64) []workload.Job {
	jobs := make([]workload.Job, 0, t.jobs)
	minute := time.Duration(60 * t.opts.Compression * float64(time.Second))
	for ti := range t.fns {
		f := &t.fns[ti]
		rng := rand.New(rand.NewPCG(seed, f.seed))
		for m, n := range f.window {
			start := time.Duration(m) * minute
			for range n {
				// Uniform arrivals given the minute's count are a Poisson
				// process conditioned on that count.
				off := min(time.Duration(rng.Float64()*float64(minute)), minute-1)
				ms := f.curve.at(rng.Float64()) * t.opts.Compression
				jobs = append(jobs, workload.Job{
					Type:     ti,
					Arrival:  start + off,
					Duration: max(time.Microsecond, time.Duration(ms*float64(time.Millisecond))),
				})
			}
		}
	}
	slices.SortStableFunc(jobs, func(a, b workload.Job) int {
		return cmp.Or(cmp.Compare(a.Arrival, b.Arrival), cmp.Compare(a.Type, b.Type))
	})
	for i := range jobs {
		jobs[i].Seq = i
	}
	return jobs
}

// Describe states, in one paragraph, what the replay is and how it was built.
func (t *Trace) Describe() string {
	counts := map[string]int{}
	for _, jt := range t.types {
		counts[jt.Class]++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Replays minutes %d-%d (%d min) of the %s trace with time compressed x%s, so the window's %d invocations arrive over %s s of virtual time; ",
		t.opts.StartMinute, t.lastMinute(), t.opts.Minutes, t.source,
		strconv.FormatFloat(t.opts.Compression, 'g', 3, 64), t.jobs,
		strconv.FormatFloat(t.windowSeconds(), 'g', -1, 64))
	b.WriteString("within each minute arrivals are uniform at random, and each job's duration is drawn from its function's percentile curve (linear between percentiles 0, 1, 25, 50, 75, 99, 100) and compressed by the same factor. ")
	fmt.Fprintf(&b, "%d workers for a target load of %s give an offered load of %.3f (%.0f s of expected work). ",
		t.workers, strconv.FormatFloat(t.opts.Load, 'g', -1, 64), t.OfferedLoad(), t.workS)
	fmt.Fprintf(&b, "Of the %d functions in the inv file, %d are used and %d idle in the window; skipped: %d without a run row, and %d run rows without an inv row. ",
		t.functions, len(t.types), t.idle, t.invOnly, t.runOnly)
	fmt.Fprintf(&b, "Classes among the used functions: export (%d) = the longest 5%% by mean duration, at least one; short (%d) = the rest of the shortest third by median duration; mid (%d) = everything else. Static tiers 0/1/2 are the median-duration terciles.",
		counts[ClassExport], counts[ClassShort], counts[ClassMid])
	return b.String()
}

func (t *Trace) lastMinute() int { return t.opts.StartMinute + t.opts.Minutes - 1 }

// windowSeconds is the length of the window in virtual time.
func (t *Trace) windowSeconds() float64 {
	return float64(t.opts.Minutes) * 60 * t.opts.Compression
}

// sourceName names the dataset after its directory, or after the files'
// prefix when the directory has no useful name.
func sourceName(dir, invPath string) string {
	base := filepath.Base(filepath.Clean(dir))
	if base == "." || base == ".." || base == string(filepath.Separator) {
		return strings.TrimSuffix(filepath.Base(invPath), invSuffix)
	}
	return base
}

// short is the first 12 characters of a hash, enough to tell functions apart.
func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}

// uniqueNames keeps (Producer, Name) unique when short hashes collide: the
// colliding types get their full hashes, then the owner's too if needed.
func uniqueNames(types []workload.JobType, keyOf func(int) key) {
	collisions := func() map[[2]string][]int {
		seen := map[[2]string][]int{}
		for i, jt := range types {
			k := [2]string{jt.Producer, jt.Name}
			seen[k] = append(seen[k], i)
		}
		return seen
	}
	for _, idx := range collisions() {
		if len(idx) > 1 {
			for _, i := range idx {
				types[i].Name, types[i].Producer = keyOf(i).function, keyOf(i).app
			}
		}
	}
	for _, idx := range collisions() {
		if len(idx) > 1 {
			for _, i := range idx {
				types[i].Name += "/" + keyOf(i).owner
			}
		}
	}
}

// streamKey seeds a function's random stream from its identity.
func streamKey(k key) uint64 {
	h := fnv.New64a()
	h.Write([]byte(k.function))
	h.Write([]byte{0})
	h.Write([]byte(k.app))
	h.Write([]byte{0})
	h.Write([]byte(k.owner))
	return h.Sum64()
}

func compareKeys(a, b key) int {
	return cmp.Or(strings.Compare(a.function, b.function), strings.Compare(a.app, b.app), strings.Compare(a.owner, b.owner))
}
