package sched

import (
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/predict"
)

// tailKeysBound adds to b, a bound with a long guard, what the defaults
// of the tail keys give it.
func tailKeysBound(b *Bound) *Bound {
	if DefaultTailKeys > 0 || DefaultNearLongKeys > 0 {
		b.TailLong = true
		if g := DefaultTailLongGuard; g >= 0 {
			b.TailLongGuard = &g
		}
	}
	return b
}

func TestNewPolicy(t *testing.T) {
	t.Parallel()
	age3 := []time.Duration{0, DefaultAgeAfter, DefaultAgeAfter}
	guard := DefaultGuard
	longGuard := DefaultLongGuard
	bound := tailKeysBound(&Bound{Stretch: DefaultStretch, MinSlack: DefaultMinSlack, Guard: &guard, Overtake: DefaultOvertake,
		Tail: DefaultTail, GuardMin: DefaultGuardMin, LongGuard: &longGuard})
	stretch, tight, anyone := 0.5, 0.1, 0.0
	tail, gmin, sameGuard := 0.9, 0.2, -1.0
	tests := []struct {
		name      string
		policy    string
		opts      PolicyOptions
		want      Config
		predictor bool
		shadow    bool
	}{
		{"default is bounded", "", PolicyOptions{},
			Config{Levels: 3, Discipline: Strict, ShortestFirst: true, Bound: bound}, true, false},
		{"fifo", FIFO, PolicyOptions{}, Config{Levels: 1, Discipline: Strict}, false, false},
		{"fifo shortest first", FIFO, PolicyOptions{ShortestFirst: true}, Config{Levels: 1, Discipline: Strict, ShortestFirst: true}, false, false},
		{"shadow", Shadow, PolicyOptions{}, Config{Levels: 1, Discipline: Strict}, true, true},
		{"static", Static, PolicyOptions{StaticTiers: map[string]int{"a": 0, "b": 2}}, Config{Levels: 3, Discipline: Strict}, false, false},
		{"static widens to its map", Static, PolicyOptions{StaticTiers: map[string]int{"a": 5}}, Config{Levels: 6, Discipline: Strict}, false, false},
		{"predictive", Predictive, PolicyOptions{},
			Config{Levels: 3, Discipline: Strict, Aging: AgingStep, AgeAfter: age3}, true, false},
		{"predictive aging off", Predictive, PolicyOptions{AgingOff: true},
			Config{Levels: 3, Discipline: Strict, Aging: AgingOff, AgeAfter: age3}, true, false},
		{"predictive 5 tiers", Predictive, PolicyOptions{Tiers: 5},
			Config{Levels: 5, Discipline: Strict, Aging: AgingStep, AgeAfter: []time.Duration{0, DefaultAgeAfter, DefaultAgeAfter, DefaultAgeAfter, DefaultAgeAfter}}, true, false},
		{"weighted", WeightedP, PolicyOptions{},
			Config{Levels: 3, Discipline: Weighted, Weights: []int{8, 3, 1}, Aging: AgingPausing, AgeAfter: age3}, true, false},
		{"weighted, empty lists", WeightedP, PolicyOptions{Weights: []int{}, AgeAfter: []time.Duration{}},
			Config{Levels: 3, Discipline: Weighted, Weights: []int{8, 3, 1}, Aging: AgingPausing, AgeAfter: age3}, true, false},
		{"weighted 5 tiers", WeightedP, PolicyOptions{Tiers: 5, AgeAfter: []time.Duration{0, 1, 2, 3, 4}},
			Config{Levels: 5, Discipline: Weighted, Weights: []int{8, 5, 3, 2, 1}, Aging: AgingPausing, AgeAfter: []time.Duration{0, 1, 2, 3, 4}}, true, false},
		{"weighted 1 tier", WeightedP, PolicyOptions{Tiers: 1},
			Config{Levels: 1, Discipline: Weighted, Weights: []int{8}, Aging: AgingPausing, AgeAfter: []time.Duration{0}}, true, false},
		{"weighted own weights", WeightedP, PolicyOptions{Weights: []int{4, 2, 1}},
			Config{Levels: 3, Discipline: Weighted, Weights: []int{4, 2, 1}, Aging: AgingPausing, AgeAfter: age3}, true, false},
		{"bounded options", Bounded, PolicyOptions{Tiers: 2, Stretch: &stretch, MinSlack: time.Minute, OthersStretch: &stretch, Guard: &tight, Overtake: &anyone,
			Tail: &tail, GuardMin: &gmin, LongGuard: &sameGuard},
			Config{Levels: 2, Discipline: Strict, ShortestFirst: true, Bound: &Bound{Stretch: 0.5, MinSlack: time.Minute, Others: &stretch, Guard: &tight,
				Tail: 0.9, GuardMin: 0.2}}, true, false},
		{"bounded measured, tail risk, unsure minimum", Bounded, PolicyOptions{Measured: new(true), TailRisk: new(1.0), UnsureGuardMin: new(0.1)},
			Config{Levels: 3, Discipline: Strict, ShortestFirst: true, Bound: tailKeysBound(&Bound{Stretch: DefaultStretch, Guard: &guard, Overtake: DefaultOvertake,
				Tail: DefaultTail, GuardMin: DefaultGuardMin, LongGuard: &longGuard, Measured: true, TailRisk: 1, UnsureGuardMin: new(0.1)})}, true, false},
		{"bounded tail keys, long guard", Bounded, PolicyOptions{TailKeys: new(0.99), TailLongGuard: new(-1.0)},
			Config{Levels: 3, Discipline: Strict, ShortestFirst: true, Bound: &Bound{Stretch: DefaultStretch, Guard: &guard, Overtake: DefaultOvertake,
				Tail: DefaultTail, GuardMin: DefaultGuardMin, LongGuard: &longGuard, TailLong: true}}, true, false},
		{"bounded tail keys off", Bounded, PolicyOptions{TailKeys: new(0.0), NearLongKeys: new(0.0)},
			Config{Levels: 3, Discipline: Strict, ShortestFirst: true, Bound: &Bound{Stretch: DefaultStretch, Guard: &guard, Overtake: DefaultOvertake,
				Tail: DefaultTail, GuardMin: DefaultGuardMin, LongGuard: &longGuard}}, true, false},
		{"bounded tail keys, own guard", Bounded, PolicyOptions{TailKeys: new(0.9), TailLongGuard: new(0.1)},
			Config{Levels: 3, Discipline: Strict, ShortestFirst: true, Bound: &Bound{Stretch: DefaultStretch, Guard: &guard, Overtake: DefaultOvertake,
				Tail: DefaultTail, GuardMin: DefaultGuardMin, LongGuard: &longGuard, TailLong: true, TailLongGuard: new(0.1)}}, true, false},
		{"bounded guard off", Bounded, PolicyOptions{GuardOff: true},
			Config{Levels: 3, Discipline: Strict, ShortestFirst: true, Bound: &Bound{Stretch: DefaultStretch}}, true, false},
		{"bounded aging off drops the bound", Bounded, PolicyOptions{AgingOff: true},
			Config{Levels: 3, Discipline: Strict, ShortestFirst: true}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := NewPolicy(tt.policy, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			name := tt.policy
			if name == "" {
				name = DefaultPolicy
			}
			if p.Name != name || p.UsePredictor != tt.predictor || p.Shadow != tt.shadow {
				t.Errorf("name %q predictor %v shadow %v, want %q %v %v", p.Name, p.UsePredictor, p.Shadow, name, tt.predictor, tt.shadow)
			}
			if !reflect.DeepEqual(p.Sched, tt.want) {
				t.Errorf("config\n got %+v (bound %+v)\nwant %+v (bound %+v)", p.Sched, p.Sched.Bound, tt.want, tt.want.Bound)
			}
			if tt.policy == Static && !reflect.DeepEqual(p.StaticTiers, tt.opts.StaticTiers) {
				t.Errorf("static tiers %v", p.StaticTiers)
			}
			if _, err := New(p.Sched); err != nil {
				t.Errorf("New: %v", err)
			}
		})
	}
	// Every listed policy resolves.
	for _, name := range Policies {
		if _, err := NewPolicy(name, PolicyOptions{}); err != nil {
			t.Errorf("NewPolicy(%q): %v", name, err)
		}
	}
}

func TestNewPolicyErrors(t *testing.T) {
	t.Parallel()
	nan, low := math.NaN(), -2.0
	tests := []struct {
		name   string
		policy string
		opts   PolicyOptions
		want   string
	}{
		{"unknown", "lifo", PolicyOptions{}, `unknown policy "lifo" (want one of fifo, static, predictive, weighted, bounded, shadow)`},
		{"case matters", "FIFO", PolicyOptions{}, `unknown policy "FIFO"`},
		{"too many tiers", Predictive, PolicyOptions{Tiers: predict.MaxTiers + 1}, "tiers must be 1 to 16, got 17"},
		{"negative tiers", Bounded, PolicyOptions{Tiers: -1}, "tiers must be 1 to 16, got -1"},
		{"static tier too high", Static, PolicyOptions{StaticTiers: map[string]int{"report": 16}}, `static tier of "report" must be 0 to 15, got 16`},
		{"static tier negative", Static, PolicyOptions{StaticTiers: map[string]int{"x": -1}}, "must be 0 to 15, got -1"},
		{"weights count", WeightedP, PolicyOptions{Weights: []int{8, 1}}, "one weight per level (3), got 2"},
		{"zero weight", WeightedP, PolicyOptions{Weights: []int{8, 0, 1}}, "weights must be 1 to 1000000, got 0"},
		{"age thresholds count", Predictive, PolicyOptions{AgeAfter: []time.Duration{0, time.Second}}, "one threshold per level (3), got 2"},
		{"zero age threshold", WeightedP, PolicyOptions{AgeAfter: []time.Duration{0, time.Second, 0}}, "threshold of level 2 must be positive, got 0s"},
		{"NaN stretch", Bounded, PolicyOptions{Stretch: &nan}, "bound stretch must be -1 to 1000, got NaN"},
		{"stretch below -1", Bounded, PolicyOptions{Stretch: &low}, "bound stretch must be -1 to 1000, got -2"},
		{"negative min slack", Bounded, PolicyOptions{MinSlack: -time.Second}, "min slack must not be negative, got -1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := NewPolicy(tt.policy, tt.opts)
			if err == nil || !strings.HasPrefix(err.Error(), "sched: ") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewPolicy error = %v, want %q", err, tt.want)
			}
			if !reflect.DeepEqual(p, Policy{}) {
				t.Errorf("NewPolicy returned %+v with its error", p)
			}
		})
	}
}

func TestQueueClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		policy  string
		opts    PolicyOptions
		jobType string
		want    int
	}{
		{FIFO, PolicyOptions{}, "a", 0},
		{Shadow, PolicyOptions{}, "a", 0},
		{Static, PolicyOptions{StaticTiers: map[string]int{"a": 2, "b": 0}}, "a", 2},
		{Static, PolicyOptions{StaticTiers: map[string]int{"a": 2, "b": 0}}, "unknown", 1}, // the middle tier
		{Bounded, PolicyOptions{}, "a", 1},                                                 // cold: the middle tier
	}
	for _, tt := range tests {
		t.Run(tt.policy+"/"+tt.jobType, func(t *testing.T) {
			t.Parallel()
			pol, err := NewPolicy(tt.policy, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			q, err := NewQueue(pol, predict.Config{})
			if err != nil {
				t.Fatal(err)
			}
			it := &Item{}
			pr := q.Classify(it, q.Predictor.KeyFor("q", "p", tt.jobType, 0))
			if int(it.Tier) != tt.want || !pr.Made || it.Cost != pr.Cost || it.Long != pr.Long {
				t.Errorf("tier %d, prediction %+v; want tier %d", it.Tier, pr, tt.want)
			}
			if err := q.Push(it, t0); err != nil {
				t.Fatal(err)
			}
			if got := q.Pop(t0); got != it {
				t.Errorf("Pop = %v", got)
			}
		})
	}
}

// The predictor learns and routes: after a few observations a short key
// goes to a lower tier than a long one.
func TestQueueLearns(t *testing.T) {
	t.Parallel()
	pol, err := NewPolicy(Bounded, PolicyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := NewQueue(pol, predict.Config{RecomputeEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	if q.Predictor.Config().Tiers != pol.Sched.Levels {
		t.Fatalf("predictor tiers %d, levels %d", q.Predictor.Config().Tiers, pol.Sched.Levels)
	}
	short, long := q.Predictor.KeyFor("q", "p", "short", 0), q.Predictor.KeyFor("q", "p", "long", 0)
	for range 50 {
		for _, k := range []predict.Key{short, long} {
			it := &Item{}
			pr := q.Classify(it, k)
			d := time.Millisecond
			if k == long {
				d = time.Second
			}
			if err := q.Learn(k, pr, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	a, b := &Item{}, &Item{}
	q.Classify(a, short)
	q.Classify(b, long)
	if a.Tier >= b.Tier || a.Cost >= b.Cost {
		t.Errorf("short key tier %d cost %v, long key tier %d cost %v", a.Tier, a.Cost, b.Tier, b.Cost)
	}
	o := &Item{}
	if pr := q.ClassifyKnown(o, 2*time.Second); o.Cost != 2*time.Second || int(o.Tier) != pr.Tier || int(o.Tier) != pol.Sched.Levels-1 {
		t.Errorf("ClassifyKnown: %+v, prediction %+v", o, pr)
	}
}

// benchSched runs Pop then Push of a fresh message per iteration, with
// resident messages waiting throughout. The clock moves a microsecond per
// iteration, or with workers > 0 by the popped message's cost shared among
// that many workers, so that a virtual FIFO run on them keeps pace.
func benchSched(b *testing.B, cfg Config, resident int, longEvery int, workers int) {
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	s.SetWorkers(workers, t0)
	rng := rand.New(rand.NewPCG(1, 2))
	item := func(id uint64, it *Item) {
		*it = Item{ID: id, Tier: int8(rng.IntN(cfg.Levels)), Cost: time.Duration(1+rng.IntN(1000)) * time.Millisecond,
			Long: longEvery > 0 && rng.IntN(longEvery) == 0}
	}
	pool := make([]Item, resident)
	now := t0
	for i := range pool {
		item(uint64(i), &pool[i])
		if err := s.Push(&pool[i], now); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		it := s.Pop(now)
		if workers > 0 {
			now = now.Add(it.Cost / time.Duration(workers))
		} else {
			now = now.Add(time.Microsecond)
		}
		item(uint64(resident+i), it)
		if err := s.Push(it, now); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPushPop(b *testing.B) {
	cfg := Config{Levels: 3, Discipline: Strict}
	for _, n := range []int{1_000, 100_000} {
		b.Run("resident="+strconv.Itoa(n), func(b *testing.B) { benchSched(b, cfg, n, 0, 0) })
	}
}

func BenchmarkPushPopBounded(b *testing.B) {
	pol, err := NewPolicy(Bounded, PolicyOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1_000, 100_000} {
		b.Run("resident="+strconv.Itoa(n), func(b *testing.B) { benchSched(b, pol.Sched, n, 100, 0) })
	}
}

// BenchmarkPushPopVirtual is the bounded policy with its FIFO moments from a
// virtual FIFO run on 16 workers, on the wall clock and the dispatch clock.
func BenchmarkPushPopVirtual(b *testing.B) {
	for _, clock := range []string{"wall", "dispatch"} {
		pol, err := NewPolicy(Bounded, PolicyOptions{VirtualFIFO: true, DispatchClock: clock == "dispatch"})
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{1_000, 100_000} {
			b.Run("clock="+clock+"/resident="+strconv.Itoa(n), func(b *testing.B) { benchSched(b, pol.Sched, n, 100, 16) })
		}
	}
}
