// Package workload owns Harbinger's workload files: parsing and validating
// them, and generating the deterministic job stream a simulator run or a live
// benchmark replays. The same (seed, job type) always yields the same
// arrivals, sizes and durations, so every arm of one seed sees identical jobs.
package workload

import (
	"cmp"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Workload is a parsed workload file.
type Workload struct {
	Name      string
	ArrivalsS float64 // arrivals are generated in [0, ArrivalsS)
	Workers   int
	Seeds     []uint64
	JobTypes  []JobType
	Events    []Event
}

// JobType is one kind of job: who produces it, how often, how long it takes.
type JobType struct {
	Name       string
	Producer   string
	Tenant     string // the group label its producer sets (the tenant header); optional
	RatePerS   float64
	Duration   DurationSpec
	Size       SizeSpec
	StaticTier int    // the hand-tuned priority of the static arms; 0 is served first
	Class      string // report group: "short" and "export" are gated on
}

// DurationSpec is the distribution of a job type's true duration.
type DurationSpec struct {
	Dist    string  // "fixed", "lognormal", "exponential", "bimodal" or "pareto"
	MeanMS  float64 // arithmetic mean in milliseconds; bimodal: the mean of the common (low) mode
	Sigma   float64 // log-sigma: lognormal, and each mode of bimodal
	PerSize bool    // mean scales linearly with size / Size.Mean
	// Bimodal: with probability HighShare a job comes from a second
	// lognormal mode of mean HighMS (a cost event scales both modes).
	HighMS    float64
	HighShare float64
	// Pareto: the shape (tail index) alpha > 1; the scale follows from
	// MeanMS. The smaller alpha, the heavier the tail.
	Alpha float64
}

// SizeSpec is the distribution of the size hint a producer reports.
type SizeSpec struct {
	Dist  string  // "fixed" or "lognormal"; empty means no size hint
	Mean  float64 // bytes
	Sigma float64
}

// Event kinds.
const (
	EventRate = "rate" // multiplies a type's arrival rate inside [StartS, EndS)
	EventCost = "cost" // sets a type's mean duration from StartS (until EndS, if set)
)

// Event changes a job type's rate or cost for a window of time.
type Event struct {
	Kind       string
	Name       string
	JobType    string
	StartS     float64
	EndS       float64 // +Inf when open-ended
	Multiplier float64 // rate events
	MeanMS     float64 // cost events
}

// Job is one generated message.
type Job struct {
	Seq      int           // position in arrival order, 0-based
	Type     int           // index into Workload.JobTypes
	Arrival  time.Duration // since the start of the run
	Size     int64         // size hint in bytes; 0 when the type has none
	Duration time.Duration // true duration the handler takes
}

// Generate returns the jobs of one seed in arrival order. Each job type draws
// from its own random stream seeded by (seed, type name), so adding a type or
// an arm never shifts another type's jobs.
func (w *Workload) Generate(seed uint64) []Job {
	var jobs []Job
	for i := range w.JobTypes {
		jobs = append(jobs, w.generateType(seed, i)...)
	}
	slices.SortStableFunc(jobs, func(a, b Job) int {
		if c := cmp.Compare(a.Arrival, b.Arrival); c != 0 {
			return c
		}
		return cmp.Compare(a.Type, b.Type)
	})
	for i := range jobs {
		jobs[i].Seq = i
	}
	return jobs
}

func (w *Workload) generateType(seed uint64, ti int) []Job {
	jt := &w.JobTypes[ti]
	h := fnv.New64a()
	h.Write([]byte(jt.Name))
	rng := rand.New(rand.NewPCG(seed, h.Sum64()))

	// Rates are piecewise constant between event edges; exponential gaps are
	// memoryless, so at each edge the draw restarts with the new rate.
	edges := []float64{w.ArrivalsS}
	for _, e := range w.Events {
		if e.JobType == jt.Name && e.Kind == EventRate {
			edges = append(edges, e.StartS, e.EndS)
		}
	}
	slices.Sort(edges)

	var jobs []Job
	t := 0.0
	for t < w.ArrivalsS {
		next := w.ArrivalsS
		for _, e := range edges {
			if e > t {
				next = math.Min(e, w.ArrivalsS)
				break
			}
		}
		rate := w.rateAt(jt, t)
		if rate <= 0 {
			t = next
			continue
		}
		gap := rng.ExpFloat64() / rate
		if t+gap >= next {
			t = next
			continue
		}
		t += gap
		size := drawSize(rng, jt.Size)
		jobs = append(jobs, Job{
			Type:     ti,
			Arrival:  time.Duration(t * float64(time.Second)),
			Size:     size,
			Duration: drawDuration(rng, jt, w.meanMSAt(jt, t), size),
		})
	}
	return jobs
}

// rateAt is the arrival rate of jt at time t (seconds).
func (w *Workload) rateAt(jt *JobType, t float64) float64 {
	r := jt.RatePerS
	for _, e := range w.Events {
		if e.JobType == jt.Name && e.Kind == EventRate && t >= e.StartS && t < e.EndS {
			r *= e.Multiplier
		}
	}
	return r
}

// meanMSAt is the mean duration of jt at time t; the last matching cost event wins.
func (w *Workload) meanMSAt(jt *JobType, t float64) float64 {
	m := jt.Duration.MeanMS
	for _, e := range w.Events {
		if e.JobType == jt.Name && e.Kind == EventCost && t >= e.StartS && t < e.EndS {
			m = e.MeanMS
		}
	}
	return m
}

func drawSize(rng *rand.Rand, s SizeSpec) int64 {
	switch s.Dist {
	case "":
		return 0
	case "lognormal":
		return max(1, int64(math.Round(lognormal(rng, s.Mean, s.Sigma))))
	default: // fixed
		return max(1, int64(math.Round(s.Mean)))
	}
}

func drawDuration(rng *rand.Rand, jt *JobType, meanMS float64, size int64) time.Duration {
	if jt.Duration.PerSize && jt.Size.Mean > 0 {
		meanMS *= float64(size) / jt.Size.Mean
	}
	var ms float64
	switch jt.Duration.Dist {
	case "lognormal":
		ms = lognormal(rng, meanMS, jt.Duration.Sigma)
	case "exponential":
		ms = rng.ExpFloat64() * meanMS
	case "bimodal":
		// Both draws are taken every time, so the stream does not depend
		// on which mode a job fell in.
		u, low := rng.Float64(), lognormal(rng, meanMS, jt.Duration.Sigma)
		// meanMS carries any cost event and size factor; the high mode
		// scales with it.
		high := lognormal(rng, jt.Duration.HighMS*meanMS/jt.Duration.MeanMS, jt.Duration.Sigma)
		ms = low
		if u < jt.Duration.HighShare {
			ms = high
		}
	case "pareto":
		a := jt.Duration.Alpha
		xm := meanMS * (a - 1) / a
		ms = xm / math.Pow(1-rng.Float64(), 1/a)
	default: // fixed
		ms = meanMS
	}
	return max(time.Microsecond, time.Duration(ms*float64(time.Millisecond)))
}

// mean is the arithmetic mean duration of a job whose MeanMS is m (after
// cost events, before any size factor): m itself, except for bimodal, whose
// second mode scales with m.
func (d DurationSpec) mean(m float64) float64 {
	if d.Dist == "bimodal" {
		return (1-d.HighShare)*m + d.HighShare*d.HighMS*m/d.MeanMS
	}
	return m
}

// lognormal draws from the lognormal distribution with arithmetic mean m and
// log-sigma s: mu = ln(m) - s²/2.
func lognormal(rng *rand.Rand, m, s float64) float64 {
	return math.Exp(math.Log(m) - s*s/2 + s*rng.NormFloat64())
}

// OfferedLoad is the mean number of busy workers the workload asks for over
// its arrival window: sum over types of rate x mean duration, with events.
// It integrates numerically at 10 ms steps; it is for reports, not scheduling.
func (w *Workload) OfferedLoad() float64 {
	const step = 0.01
	work := 0.0
	for i := range w.JobTypes {
		jt := &w.JobTypes[i]
		for t := step / 2; t < w.ArrivalsS; t += step {
			work += w.rateAt(jt, t) * jt.Duration.mean(w.meanMSAt(jt, t)) / 1000 * step
		}
	}
	return work / w.ArrivalsS
}
