package sched

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/harbinger-mq/harbinger/internal/predict"
)

// Policy names.
const (
	FIFO       = "fifo"       // one level, arrival order
	Static     = "static"     // a job type -> tier map, strict priority, no aging
	Predictive = "predictive" // predicted tiers, strict priority, step aging
	WeightedP  = "weighted"   // predicted tiers, level weights, pausing aging
	Bounded    = "bounded"    // shortest predicted first, every message's latency bounded relative to FIFO
	Shadow     = "shadow"     // predicts and records, routes as FIFO

	// DefaultPolicy is what a queue gets when none is named.
	DefaultPolicy = Bounded
)

// Policies lists the policy names a queue accepts.
var Policies = []string{FIFO, Static, Predictive, WeightedP, Bounded, Shadow}

// Policy defaults.
var (
	// DefaultWeights are the level weights of the weighted policy, top level first.
	DefaultWeights = []int{8, 3, 1}
	// DefaultAgeAfter is how long a message waits at a level before aging
	// lifts it one level (predictive and weighted policies).
	DefaultAgeAfter = 10 * time.Second
	// DefaultStretch is the bounded policy's slack for long messages as a
	// fraction of the wait FIFO would give them: negative, so a long message
	// starts a little before FIFO would have started it even when
	// predictions err (docs/policy.md; -0.25 before the guard, which pushed
	// everyone else back by more than the tail allows, and -0.05 with the
	// fixed guard, which let long jobs start late under overload).
	DefaultStretch = -0.1
	// DefaultMinSlack is the predicted work a long message may be overtaken
	// by beyond its stretch: none, so that it starts no later than FIFO
	// would start it however short the queue.
	DefaultMinSlack time.Duration = 0
	// DefaultGuard is the bounded policy's guard on every message (see
	// Bound.Guard): no message finishes much later than 1.5 times the
	// latency FIFO would have given it. docs/policy.md gives the reasons
	// and the figures at 0.1 and 0.25, which hold the tail closer to FIFO
	// and give up most of the gain in mean latency.
	DefaultGuard = 0.5
	// DefaultLongShare is the share of the recent predicted work whose
	// messages the bounded policy's predictor marks long (predict.Config's
	// LongShare): a hundredth, so that in practice only the costliest
	// cluster of recent messages (the predictor moves the cut to the widest
	// gap between neighbouring costs among the costliest sixteenth) and the
	// messages it cannot predict are long. The guard covers every other
	// message. It was a fifth before the guard existed, which put so much
	// work on the long bound's near-FIFO order that it cost the mean and
	// the longest class's wait (docs/policy.md).
	DefaultLongShare = 0.01
	// DefaultLongKeys is the share of a queue's warm keys whose messages
	// the bounded policy's predictor marks long besides the work-share cut
	// (predict.Config's LongKeys): the costliest twentieth by a slow mean
	// of each key's durations, at least one key. A rare, costly kind of
	// job carries too little of the recent work to reach the 1% cut, and
	// is then left to the guard, which lets it start up to half its FIFO
	// latency late; this keeps the costliest kinds of job to their FIFO
	// start (docs/policy.md).
	DefaultLongKeys = 0.05
	// DefaultOvertake is the guard's overtaking ratio (Bound.Overtake):
	// once FIFO would have started a message, only messages predicted at
	// most a quarter of its cost may still go ahead of it.
	DefaultOvertake = 0.25
	// DefaultTail, DefaultGuardMin and DefaultLongGuard adapt the guard to
	// the queue (Bound.Tail): a message may be held up to DefaultGuard
	// times its FIFO latency while it stays below the P99 of the recent
	// FIFO latencies, and 0.35 times it past that; a long message not at
	// all past its FIFO moment. docs/policy.md has the matrix they were
	// measured on, and what each part does there.
	DefaultTail      = 0.99
	DefaultGuardMin  = 0.35
	DefaultLongGuard = 0.0
	// DefaultMeasured is whether the guard counts FIFO's progress in the
	// measured durations of the messages that jumped the line
	// (Bound.Measured).
	DefaultMeasured = false
	// DefaultTailRisk applies the tail cap only while the latencies the
	// queue's dispatches realize reach past this times the FIFO tail
	// (Bound.TailRisk); 0 applies it always.
	DefaultTailRisk = 0.0
	// DefaultTailKeys is the quantile of a key's durations that, at a long
	// cut, gives the key's messages the guard of DefaultTailLongGuard
	// (PolicyOptions.TailKeys); 0 is off. A spread-gated key is priced at
	// its mean and ordered in the middle tier, but its slow runs are among
	// the longest jobs of the queue: its messages keep their place in the
	// order and are held past their FIFO moment by 0.2 of their FIFO
	// latency at most, not the 0.5 (0.35 past the tail) of the others.
	DefaultTailKeys = 0.99
	// DefaultTailKeysGated limits DefaultTailKeys to spread-gated keys: on
	// every key it cost the mean where a warm key's p99 reached the cut.
	DefaultTailKeysGated = true
	// DefaultNearLongKeys is the share of the keys whose messages take the
	// long guard (PolicyOptions.NearLongKeys); 0 is off.
	DefaultNearLongKeys = 0.0
	// DefaultTailLongGuard is the guard of the messages those mark
	// (PolicyOptions.TailLongGuard); negative takes the long guard (0,
	// which cost bimodal's and heavy-tail's mean cut).
	DefaultTailLongGuard = 0.2
	// DefaultTune is whether the bounded policy chooses its guard's
	// settings by replaying the queue's recent messages (Policy.Tune).
	DefaultTune = false
)

// Policy is a named policy resolved to a scheduler configuration and a way of
// choosing tiers.
type Policy struct {
	Name  string
	Sched Config
	// Tiers is the number of tiers the queue's predictor predicts: the
	// configured count, whatever the policy routes by. A shadow or FIFO
	// queue schedules on one level but still predicts the tiers a
	// predictive policy would use, so that its tier accuracy means
	// something. Zero leaves the predictor's own configuration in force.
	Tiers        int
	StaticTiers  map[string]int // Static: job type -> tier; unknown types take the middle tier
	UsePredictor bool           // tiers come from the predictor
	// LongShare is the predictor's long share for this policy (see
	// DefaultLongShare); zero leaves the predictor's own default. A share
	// set in the predictor's configuration wins.
	LongShare float64
	// LongKeys is the predictor's long-keys share for this policy (see
	// DefaultLongKeys); zero leaves the predictor's own (off). A share set
	// in the predictor's configuration wins; negative there turns it off.
	LongKeys float64
	Shadow   bool // predict and record, but route everything to level 0
	// GatedMean and LongKeysByTail turn on the predictor's settings of
	// the same names (predict.Config): the bounded policy prices a
	// spread-gated key at its mean, and ranks keys for the long-keys cut
	// by their tail as well as their mean.
	GatedMean      bool
	LongKeysByTail bool
	// TailKeys and TailKeysGated are the predictor's settings of the same
	// names (predict.Config): the bounded policy marks the messages of keys
	// whose tail reaches the long cut, and its bound holds them to their
	// FIFO start (Bound.TailLong).
	TailKeys      float64
	TailKeysGated bool
	// NearLongKeys is the predictor's setting of the same name: keys next
	// to the long ones are marked as well.
	NearLongKeys float64
	// Tune sets the bounded policy's guard from the queue's own traffic
	// (Queue, Ladder). The simulator's arms may turn it on; the broker
	// does not (it numbers a retried message's pushes alike, which the
	// tuner's record of pushes does not handle yet).
	Tune bool
}

// PolicyOptions carries the settings a queue may override; zero fields take
// their defaults.
type PolicyOptions struct {
	Tiers       int
	Weights     []int
	AgeAfter    []time.Duration // per level; index 0 unused
	AgingOff    bool
	StaticTiers map[string]int
	Stretch     *float64
	MinSlack    time.Duration
	// OthersStretch, when set, bounds the bounded policy's other (not long)
	// messages too, with this stretch; nil leaves them unbounded (the
	// default: see lab/results/experiments.md for the trade-off).
	OthersStretch *float64
	// ShortestFirst orders each level by predicted cost, not arrival.
	ShortestFirst bool
	// Guard sets the bounded policy's guard on every message (Bound.Guard);
	// nil takes DefaultGuard.
	Guard *float64
	// Overtake sets the guard's overtaking ratio (Bound.Overtake); nil
	// takes DefaultOvertake, zero or less lets any message overtake until
	// the deadline.
	Overtake *float64
	// GuardOff turns the guard off, leaving only long messages (and, with
	// OthersStretch, the others) bounded: the bounded policy as it was
	// before the guard.
	GuardOff bool
	// VirtualFIFO makes the bounded policy track FIFO's progress in a
	// virtual FIFO run (Bound.VirtualFIFO); the caller must then tell the
	// scheduler its worker count (Scheduler.SetWorkers).
	VirtualFIFO bool
	// DispatchClock runs that virtual run on the dispatch clock
	// (Bound.DispatchClock).
	DispatchClock bool
	// Tail, GuardMin and LongGuard set the guard's adaptation (see
	// Bound); nil takes DefaultTail, DefaultGuardMin and DefaultLongGuard.
	// A Tail of 0 turns the adaptation off, leaving the fixed Guard; a
	// negative LongGuard gives long messages the Guard of the others.
	Tail      *float64
	GuardMin  *float64
	LongGuard *float64
	// GatedMean and LongKeysByTail, when set, override the bounded
	// policy's predictor settings of the same names (on by default).
	GatedMean      *bool
	LongKeysByTail *bool
	// Measured, when set, overrides DefaultMeasured (Bound.Measured).
	Measured *bool
	// TailRisk, when set, overrides DefaultTailRisk (Bound.TailRisk).
	TailRisk *float64
	// UnsureGuardMin, when set, is the guard minimum of messages whose
	// cost is a guess (Bound.UnsureGuardMin); nil or negative: GuardMin.
	UnsureGuardMin *float64
	// TailKeys, when set, overrides DefaultTailKeys: the quantile of a
	// key's durations that, at a long cut, gives its messages the long
	// guard (Bound.TailLong, predict.Config.TailKeys); 0 is off.
	TailKeys *float64
	// TailKeysGated, when set, overrides DefaultTailKeysGated: only
	// spread-gated keys are marked by their tail.
	TailKeysGated *bool
	// NearLongKeys, when set, overrides DefaultNearLongKeys: the share of
	// the keys, ranked as for the long-keys cut, whose messages take the
	// long guard (Bound.TailLong, predict.Config.NearLongKeys); 0 is off.
	NearLongKeys *float64
	// TailLongGuard, when set, overrides DefaultTailLongGuard: the guard of
	// the messages TailKeys and NearLongKeys mark (Bound.TailLongGuard);
	// negative: the long guard.
	TailLongGuard *float64
	// Tune, when set, overrides DefaultTune: the guard's settings chosen
	// by replaying the queue's recent messages (Ladder).
	Tune *bool
}

// NewPolicy resolves a policy name ("" means DefaultPolicy).
func NewPolicy(name string, o PolicyOptions) (Policy, error) {
	if name == "" {
		name = DefaultPolicy
	}
	tiers := o.Tiers
	if tiers == 0 {
		tiers = predict.DefaultTiers
	}
	if tiers < 1 || tiers > predict.MaxTiers {
		return Policy{}, fmt.Errorf("sched: tiers must be 1 to %d, got %d", predict.MaxTiers, tiers)
	}
	ageAfter := o.AgeAfter
	if len(ageAfter) == 0 { // none given, or an empty list: the defaults
		ageAfter = make([]time.Duration, tiers)
		for i := 1; i < tiers; i++ {
			ageAfter[i] = DefaultAgeAfter
		}
	}
	aging := func(mode string) string {
		if o.AgingOff {
			return AgingOff
		}
		return mode
	}
	p := Policy{Name: name, Tiers: tiers, UsePredictor: true}
	switch name {
	case FIFO:
		p.UsePredictor = false
		p.Sched = Config{Levels: 1, Discipline: Strict}
	case Shadow:
		p.Shadow = true
		p.Sched = Config{Levels: 1, Discipline: Strict}
	case Static:
		p.UsePredictor = false
		p.StaticTiers = o.StaticTiers
		levels := 1
		for jt, t := range o.StaticTiers {
			if t < 0 || t >= predict.MaxTiers {
				return Policy{}, fmt.Errorf("sched: static tier of %q must be 0 to %d, got %d", jt, predict.MaxTiers-1, t)
			}
			levels = max(levels, t+1)
		}
		p.Sched = Config{Levels: max(levels, tiers), Discipline: Strict}
	case Predictive:
		p.Sched = Config{Levels: tiers, Discipline: Strict, Aging: aging(AgingStep), AgeAfter: ageAfter}
	case WeightedP:
		w := o.Weights
		if len(w) == 0 { // none given, or an empty list: the defaults
			w = defaultWeights(tiers)
		}
		p.Sched = Config{Levels: tiers, Discipline: Weighted, Weights: w, Aging: aging(AgingPausing), AgeAfter: ageAfter}
	case Bounded:
		stretch := DefaultStretch
		if o.Stretch != nil {
			stretch = *o.Stretch
		}
		minSlack := o.MinSlack
		if minSlack == 0 {
			minSlack = DefaultMinSlack
		}
		bound := &Bound{Stretch: stretch, MinSlack: minSlack, Others: o.OthersStretch}
		if !o.GuardOff {
			g, r := DefaultGuard, DefaultOvertake
			if o.Guard != nil {
				g = *o.Guard
			}
			if o.Overtake != nil {
				r = *o.Overtake
			}
			bound.Guard, bound.Overtake = &g, r
			bound.VirtualFIFO = o.VirtualFIFO
			bound.DispatchClock = o.VirtualFIFO && o.DispatchClock
			bound.Tail, bound.GuardMin = orDefault(o.Tail, DefaultTail), orDefault(o.GuardMin, DefaultGuardMin)
			if lg := orDefault(o.LongGuard, DefaultLongGuard); lg >= 0 {
				bound.LongGuard = &lg
			}
			if bound.Tail > 0 {
				bound.TailRisk = orDefault(o.TailRisk, DefaultTailRisk)
				if g := o.UnsureGuardMin; g != nil && *g >= 0 {
					bound.UnsureGuardMin = new(*g)
				}
			}
			bound.Measured = DefaultMeasured && !o.VirtualFIFO
			if o.Measured != nil {
				bound.Measured = *o.Measured
			}
		}
		p.Sched = Config{Levels: tiers, Discipline: Strict, ShortestFirst: true, Bound: bound}
		p.LongShare, p.LongKeys = DefaultLongShare, DefaultLongKeys
		p.GatedMean, p.LongKeysByTail = true, true
		if o.GatedMean != nil {
			p.GatedMean = *o.GatedMean
		}
		if o.LongKeysByTail != nil {
			p.LongKeysByTail = *o.LongKeysByTail
		}
		p.TailKeys, p.TailKeysGated = orDefault(o.TailKeys, DefaultTailKeys), DefaultTailKeysGated
		if o.TailKeysGated != nil {
			p.TailKeysGated = *o.TailKeysGated
		}
		p.NearLongKeys = orDefault(o.NearLongKeys, DefaultNearLongKeys)
		if bound.LongGuard == nil || o.GuardOff || o.AgingOff { // no long guard to give
			p.TailKeys, p.NearLongKeys = 0, 0
		}
		if p.TailKeys > 0 || p.NearLongKeys > 0 {
			bound.TailLong = true
			if g := orDefault(o.TailLongGuard, DefaultTailLongGuard); g >= 0 {
				bound.TailLongGuard = &g
			}
		}
		p.Tune = DefaultTune && bound.Guard != nil && bound.Tail > 0 && !bound.VirtualFIFO
		if o.Tune != nil {
			p.Tune = *o.Tune && bound.Guard != nil && bound.Tail > 0 && !bound.VirtualFIFO
		}
		if o.AgingOff {
			p.Sched.Bound = nil
			p.Tune = false
		}
	default:
		return Policy{}, fmt.Errorf("sched: unknown policy %q (want one of %s)", name, strings.Join(Policies, ", "))
	}
	p.Sched.ShortestFirst = p.Sched.ShortestFirst || o.ShortestFirst
	if err := p.Sched.Validate(); err != nil {
		return Policy{}, err
	}
	return p, nil
}

func orDefault(v *float64, def float64) float64 {
	if v == nil {
		return def
	}
	return *v
}

// defaultWeights stretches 8:3:1 to any number of levels.
func defaultWeights(n int) []int {
	if n == len(DefaultWeights) {
		return slices.Clone(DefaultWeights)
	}
	w := make([]int, n)
	for i := range w {
		w[i] = max(1, int(math.Round(8*math.Pow(1.0/8, float64(i)/float64(max(n-1, 1))))))
	}
	return w
}
