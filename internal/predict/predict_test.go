package predict

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func mustNew(t testing.TB, cfg Config) *Predictor {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func ms(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }

func observe(t testing.TB, p *Predictor, k Key, pr Prediction, d time.Duration) {
	t.Helper()
	if err := p.Observe(k, pr, d); err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"alpha", Config{Alpha: 1.5}, "alpha must be in (0, 1], got 1.5"},
		{"NaN alpha", Config{Alpha: math.NaN()}, "alpha must be in (0, 1], got NaN"},
		{"decay", Config{Decay: -0.1}, "decay must be in (0, 1]"},
		{"min observations", Config{MinObservations: -1}, "min observations must be at least 1"},
		{"spread gate", Config{SpreadGate: 0.5}, "spread gate must be at least 1"},
		{"tiers", Config{Tiers: MaxTiers + 1}, "tiers must be 1 to 16, got 17"},
		{"window", Config{Window: 1<<20 + 1}, "window must be 1 to 1048576"},
		{"recompute", Config{RecomputeEvery: -1}, "recompute interval must be at least 1"},
		{"max keys", Config{MaxKeys: -1}, "max keys must be at least 1"},
		{"max duration", Config{MaxDuration: -1}, "max duration must be positive"},
		{"long share", Config{LongShare: 1.5}, "long share must be at most 1"},
		{"long keys", Config{LongKeys: 1.5}, "long keys must be at most 1"},
		{"long keys NaN", Config{LongKeys: math.NaN()}, "long keys must be at most 1"},
		{"estimator", Config{Estimator: "mode"}, `unknown estimator "mode"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tt.cfg)
			if err == nil || !strings.HasPrefix(err.Error(), "predict: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New error = %v, want %q", err, tt.want)
			}
		})
	}
	if _, err := New(Config{SpreadGate: -1, LongShare: -1}); err != nil {
		t.Errorf("negative spread gate and long share disable them, got %v", err)
	}
}

func TestKeyFor(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{})
	for size, want := range map[uint64]int8{0: -1, 1: 1, 1023: 10, 1024: 11, math.MaxUint64: 64} {
		if k := p.KeyFor("q", "p", "j", size); k.SizeBucket != want || k.Queue != "q" || k.Producer != "p" || k.JobType != "j" {
			t.Errorf("KeyFor size %d = %+v, want bucket %d", size, k, want)
		}
	}
	if k := mustNew(t, Config{NoSizeBucket: true}).KeyFor("q", "p", "j", 4096); k.SizeBucket != -1 {
		t.Errorf("NoSizeBucket: bucket %d", k.SizeBucket)
	}
}

func TestEWMA(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{Alpha: 0.5, MinObservations: 1, SpreadGate: -1})
	k := p.KeyFor("q", "p", "j", 0)
	want := []float64{10, 15, 22.5, 16.25} // first observation seeds it, then halfway each time
	for i, d := range []float64{10, 20, 30, 10} {
		observe(t, p, k, Prediction{}, ms(d))
		ks, ok := p.Lookup(k)
		if !ok || ks.Count != uint64(i+1) || ks.EWMA != ms(want[i]) {
			t.Errorf("after %d observations: %+v, want EWMA %v ms", i+1, ks, want[i])
		}
	}
	if pr := p.Predict(k); pr.Cost != ms(16.25) || pr.Cold || pr.SpreadGated || !pr.Routed() {
		t.Errorf("Predict = %+v, want the EWMA, routed", pr)
	}

	// The median estimator predicts the histogram's median instead.
	m := mustNew(t, Config{Estimator: EstimateMedian, MinObservations: 1, SpreadGate: -1})
	for _, d := range []float64{1.5, 1.5, 5} {
		observe(t, m, k, Prediction{}, ms(d))
	}
	ks, _ := m.Lookup(k)
	if pr := m.Predict(k); pr.Cost != ks.P50 || ks.P50 < ms(1) || ks.P50 >= ms(2) {
		t.Errorf("median estimator: Predict %v, P50 %v, want P50 in [1, 2) ms", pr.Cost, ks.P50)
	}
}

func TestColdStart(t *testing.T) {
	t.Parallel()
	for _, tiers := range []int{1, 2, 3, 5} {
		p := mustNew(t, Config{Tiers: tiers, MinObservations: 3, RecomputeEvery: 1})
		warm, cold := p.KeyFor("q", "p", "warm", 0), p.KeyFor("q", "p", "cold", 0)
		for range 3 {
			observe(t, p, warm, Prediction{}, ms(1))
		}
		p.Predict(warm) // boundaries now exist
		for i := range 3 {
			pr := p.Predict(cold)
			if !pr.Cold || pr.Tier != tiers/2 || !pr.Long || pr.Routed() || !pr.Made || pr.Cost != p.typical() {
				t.Errorf("tiers %d, after %d observations: %+v, want cold in tier %d", tiers, i, pr, tiers/2)
			}
			observe(t, p, cold, pr, ms(1000))
		}
		if pr := p.Predict(cold); pr.Cold || !pr.Routed() {
			t.Errorf("tiers %d, after 3 observations: %+v, want warm", tiers, pr)
		}
	}
	// With LongShare disabled a cold message is not held as long.
	p := mustNew(t, Config{LongShare: -1})
	if pr := p.Predict(p.KeyFor("q", "p", "j", 0)); !pr.Cold || pr.Long {
		t.Errorf("LongShare -1: %+v", pr)
	}
}

func TestSpreadGate(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{RecomputeEvery: 1})
	bimodal, steady := p.KeyFor("q", "p", "bimodal", 0), p.KeyFor("q", "p", "steady", 0)
	// Two thirds at 1 ms, a third at 1000 ms: the median is 1 ms and the
	// p99 1000 ms. (The gate is p99/p50, so a key whose long mode holds
	// half or more of the weight has a long median and is routed instead.)
	for i := range 300 {
		d := ms(1)
		if i%3 == 2 {
			d = ms(1000)
		}
		observe(t, p, bimodal, Prediction{}, d)
		observe(t, p, steady, Prediction{}, ms(3))
	}
	for range 10 {
		p.Predict(steady)
	}
	pr := p.Predict(bimodal)
	if !pr.SpreadGated || pr.Cold || pr.Tier != 1 || !pr.Long || pr.Routed() {
		t.Errorf("bimodal 1 ms / 1000 ms key: %+v, want spread-gated in the middle tier", pr)
	}
	if ks, _ := p.Lookup(bimodal); !ks.SpreadGated || ks.P99 < 16*ks.P50 || ks.Tier != 1 {
		t.Errorf("Lookup: %+v", ks)
	}
	if pr := p.Predict(steady); pr.SpreadGated || !pr.Routed() {
		t.Errorf("steady key: %+v", pr)
	}
	// A negative gate disables it.
	q := mustNew(t, Config{SpreadGate: -1})
	for i := range 30 {
		observe(t, q, bimodal, Prediction{}, ms(float64(1+999*(i%2))))
	}
	if pr := q.Predict(bimodal); pr.SpreadGated || !pr.Routed() {
		t.Errorf("gate off: %+v", pr)
	}
}

// With GateLongOnly the spread gate takes only keys whose slowest runs
// are long: a short key whose measured times are noisy (a push measured
// anywhere from 0.1 ms to a few ms, as on a loaded machine) is predicted
// by its own estimate, short; a key whose p99 is long is still gated.
// Without it both are gated. Before any long cut is known, a spread key
// is gated either way.
func TestGateLongOnly(t *testing.T) {
	t.Parallel()
	fresh := mustNew(t, Config{LongShare: 0.2, GateLongOnly: true})
	lone := fresh.KeyFor("jobs", "wéb", "bimodal", 0)
	for i := range 40 {
		d := ms(1)
		if i%4 == 0 {
			d = ms(1000)
		}
		observe(t, fresh, lone, Prediction{}, d)
	}
	if pr := fresh.Predict(lone); !pr.SpreadGated || !pr.Long {
		t.Errorf("GateLongOnly with no long cut yet: %+v, want gated and long", pr)
	}
	for _, longOnly := range []bool{false, true} {
		p := mustNew(t, Config{RecomputeEvery: 1, LongShare: 0.2, GateLongOnly: longOnly})
		noisy := p.KeyFor("jobs", "wéb", "push", 0)
		spread := p.KeyFor("jobs", "wéb", "report", 0)
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range 400 {
			d := ms(0.1 + 0.2*rng.Float64()) // mostly 0.1-0.3 ms
			if i%10 == 9 {
				d = ms(3 + 2*rng.Float64()) // a tenth waited for a core
			}
			observe(t, p, noisy, Prediction{}, d)
			d = ms(20)
			if i%3 == 2 {
				d = ms(5000)
			}
			observe(t, p, spread, Prediction{}, d)
			for k := range 8 { // a steady mix, so that the long cut has recent work to sit in
				observe(t, p, p.KeyFor("jobs", "wéb", fmt.Sprint("mid-", k), 0), Prediction{}, ms(float64(50+10*k)))
			}
		}
		for range 200 {
			for k := range 8 {
				p.Predict(p.KeyFor("jobs", "wéb", fmt.Sprint("mid-", k), 0))
			}
			p.Predict(noisy)
			p.Predict(spread)
		}
		if ks, _ := p.Lookup(noisy); ks.P99 < 16*ks.P50 {
			t.Fatalf("the noisy key's p99 %v is not past the gate (median %v): the test does not test the gate", ks.P99, ks.P50)
		}
		pr := p.Predict(noisy)
		if pr.SpreadGated == longOnly || pr.Long == longOnly {
			t.Errorf("GateLongOnly %v: the noisy short key predicted %+v, want gated and long only without it", longOnly, pr)
		}
		if longOnly && (pr.Cost > ms(3) || pr.Tier != 0) {
			t.Errorf("GateLongOnly: the noisy short key predicted %+v, want its own short estimate in the first tier", pr)
		}
		if ks, _ := p.Lookup(noisy); ks.SpreadGated != pr.SpreadGated {
			t.Errorf("Lookup says spread-gated %v, Predict %v", ks.SpreadGated, pr.SpreadGated)
		}
		if pr := p.Predict(spread); !pr.SpreadGated || !pr.Long {
			t.Errorf("GateLongOnly %v: the key whose p99 is 5 s predicted %+v, want gated and long", longOnly, pr)
		}
	}
}

func TestBoundariesInGaps(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	cluster := func(n int, center float64) []float64 {
		var out []float64
		for range n {
			out = append(out, center*(0.9+0.2*rng.Float64()))
		}
		return out
	}
	// Unequal clusters, so the plain tercile cuts fall inside clusters.
	a, b, c := cluster(400, 1), cluster(250, 10), cluster(350, 100)
	costs := slices.Concat(c, a, b)
	rng.Shuffle(len(costs), func(i, j int) { costs[i], costs[j] = costs[j], costs[i] })
	orig := slices.Clone(costs)
	got := Boundaries(costs, 3)
	if !slices.Equal(costs, orig) {
		t.Error("Boundaries modified its input")
	}
	if len(got) != 2 {
		t.Fatalf("Boundaries = %v, want 2", got)
	}
	if got[0] <= slices.Max(a) || got[0] >= slices.Min(b) || got[1] <= slices.Max(b) || got[1] >= slices.Min(c) {
		t.Errorf("boundaries %v, want one in (%.3f, %.3f) and one in (%.3f, %.3f)",
			got, slices.Max(a), slices.Min(b), slices.Max(b), slices.Min(c))
	}
	// Each boundary is the geometric midpoint of its gap.
	if want := math.Sqrt(slices.Max(a) * slices.Min(b)); math.Abs(got[0]-want) > 1e-9 {
		t.Errorf("first boundary %v, want the gap's geometric midpoint %v", got[0], want)
	}

	tests := []struct {
		name  string
		costs []float64
		tiers int
		want  []float64
	}{
		{"one tier", []float64{1, 2, 3}, 1, nil},
		{"no costs", nil, 3, nil},
		{"one cost", []float64{5}, 3, []float64{5, 5}},
		{"all equal", []float64{4, 4, 4, 4, 4, 4}, 3, []float64{4, 4}},
		{"zeros skipped", []float64{0, 0, 0, 8, 8, 8}, 2, []float64{8}},
		{"two clusters", []float64{1, 1, 1, 1, 100, 100}, 2, []float64{10}},
	}
	for _, tt := range tests {
		got := Boundaries(tt.costs, tt.tiers)
		if len(got) != len(tt.want) {
			t.Errorf("%s: Boundaries = %v, want %v", tt.name, got, tt.want)
			continue
		}
		for i := range got {
			if math.Abs(got[i]-tt.want[i]) > 1e-9 {
				t.Errorf("%s: Boundaries = %v, want %v", tt.name, got, tt.want)
			}
		}
	}
}

// MAE and tier accuracy on a sequence worked out by hand.
func TestSummaryAccuracy(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{Tiers: 2, MinObservations: 1, SpreadGate: -1, RecomputeEvery: 1})
	if s := p.Summary(); !math.IsNaN(s.TierAccuracy) || s.MAE != 0 || s.MAESamples != 0 {
		t.Errorf("empty summary %+v", s)
	}
	a, b, c := p.KeyFor("q", "p", "a", 0), p.KeyFor("q", "p", "b", 0), p.KeyFor("q", "p", "c", 0)
	observe(t, p, a, Prediction{}, ms(10)) // no prediction: counts for neither figure
	observe(t, p, b, Prediction{}, ms(100))

	prA := p.Predict(a) // 10 ms; boundaries [10]
	prB := p.Predict(b) // 100 ms; boundaries [sqrt(10*100)]
	prC := p.Predict(c) // cold, middle tier 1
	if prA.Tier != 0 || prB.Tier != 1 || !prC.Cold || prC.Tier != 1 {
		t.Fatalf("predictions %+v %+v %+v", prA, prB, prC)
	}
	if s := p.Summary(); len(s.Boundaries) != 1 || s.Boundaries[0] != ms(math.Sqrt(1000)) {
		t.Fatalf("boundaries %v, want [%v]", s.Boundaries, ms(math.Sqrt(1000)))
	}
	observe(t, p, a, prA, ms(12))  // |10-12| = 2; tier 0, right
	observe(t, p, b, prB, ms(20))  // |100-20| = 80; 20 ms earns tier 0, wrong
	observe(t, p, c, prC, ms(500)) // cold: the default tier, scored for neither figure
	s := p.Summary()
	if s.MAE != ms(41) || s.MAESamples != 2 || s.TierSamples != 2 || s.TierAccuracy != 0.5 {
		t.Errorf("MAE %v over %d, accuracy %v over %d; want 41ms over 2, 1/2 over 2", s.MAE, s.MAESamples, s.TierAccuracy, s.TierSamples)
	}
	if s.Observations != 5 || s.Keys != 3 || s.Rejected != 0 || s.Evicted != 0 {
		t.Errorf("summary %+v", s)
	}
	// Each unscored one is counted by why: two without a prediction, one
	// cold; a gated one below.
	if s.UnscoredUnpredicted != 2 || s.UnscoredCold != 1 || s.UnscoredGated != 0 {
		t.Errorf("unscored: %d unpredicted, %d cold, %d gated; want 2, 1, 0", s.UnscoredUnpredicted, s.UnscoredCold, s.UnscoredGated)
	}
	observe(t, p, c, Prediction{Made: true, SpreadGated: true, Tier: 1}, ms(5))
	if s := p.Summary(); s.UnscoredGated != 1 || s.MAESamples != 2 {
		t.Errorf("after a gated one: %+v", s)
	}
}

func TestBadDurations(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{MaxDuration: time.Hour, MinObservations: 1})
	good, bad := p.KeyFor("q", "p", "good", 0), p.KeyFor("q", "p", "bad", 0)
	observe(t, p, good, Prediction{}, ms(5))
	before := p.Summary()
	typical := p.typical()
	for i, d := range []time.Duration{0, -1, -time.Hour, math.MinInt64, math.MaxInt64, time.Hour + 1, 1 << 62} {
		for _, k := range []Key{good, bad} {
			err := p.Observe(k, Prediction{Made: true, Tier: 2}, d)
			if !errors.Is(err, ErrBadDuration) || !strings.Contains(err.Error(), d.String()) {
				t.Errorf("Observe(%v) = %v, want ErrBadDuration naming it", d, err)
			}
		}
		if s := p.Summary(); s.Rejected != uint64(2*(i+1)) || s.Observations != before.Observations || s.TierSamples != 0 {
			t.Errorf("after rejecting %v: %+v", d, s)
		}
	}
	if _, ok := p.Lookup(bad); ok {
		t.Error("a key with only rejected durations is tracked")
	}
	if ks, _ := p.Lookup(good); ks.Count != 1 || ks.EWMA != ms(5) || p.typical() != typical {
		t.Errorf("rejected durations folded in: %+v, typical %v", ks, p.typical())
	}
	// The limits themselves: 1 ns and exactly MaxDuration are accepted.
	observe(t, p, good, Prediction{}, 1)
	observe(t, p, good, Prediction{}, time.Hour)
}

func TestLRU(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{MaxKeys: 3, MinObservations: 1})
	k := func(s string) Key { return p.KeyFor("q", "p", s, 0) }
	for _, s := range []string{"a", "b", "c"} {
		observe(t, p, k(s), Prediction{}, ms(1))
	}
	p.Predict(k("a"))                          // touches a: b is now the least recent
	p.Lookup(k("b"))                           // Lookup does not touch
	observe(t, p, k("d"), Prediction{}, ms(1)) // evicts b
	observe(t, p, k("c"), Prediction{}, ms(1)) // touches c: a is least recent
	observe(t, p, k("e"), Prediction{}, ms(1)) // evicts a
	var got []string
	for _, ks := range p.Keys(0) {
		got = append(got, ks.Key.JobType)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"c", "d", "e"}) || p.Summary().Evicted != 2 {
		t.Errorf("keys %v, evicted %d; want [c d e], 2", got, p.Summary().Evicted)
	}
	if top := p.Keys(1); len(top) != 1 || top[0].Key.JobType != "c" || top[0].Count != 2 {
		t.Errorf("Keys(1) = %+v, want c, the busiest", top)
	}
}

// A million distinct keys never hold more than MaxKeys in memory.
func TestMaxKeysBound(t *testing.T) {
	t.Parallel()
	const maxKeys, n = 1000, 1_000_000
	p := mustNew(t, Config{MaxKeys: maxKeys})
	hot := p.KeyFor("q", "p", "hot", 0)
	names := make([]string, 0, 1000)
	for i := range 1000 {
		names = append(names, strconv.Itoa(i))
	}
	for i := range n {
		k := Key{Queue: "q", Producer: names[i%1000], JobType: names[(i/1000)%1000], SizeBucket: -1}
		observe(t, p, k, Prediction{}, ms(1))
		if i%100 == 0 {
			observe(t, p, hot, Prediction{}, ms(1)) // kept warm, never evicted
		}
		if len(p.keys) > maxKeys {
			t.Fatalf("after %d keys %d are tracked", i+1, len(p.keys))
		}
	}
	s := p.Summary()
	if s.Keys != maxKeys || len(p.keys) != maxKeys || s.Evicted != n+1-maxKeys {
		t.Errorf("keys %d, evicted %d; want %d and %d", s.Keys, s.Evicted, maxKeys, n+1-maxKeys)
	}
	if _, ok := p.Lookup(hot); !ok {
		t.Error("the recently used key was evicted")
	}
	// The LRU list and the map agree.
	count := 0
	for e := p.head; e != nil; e = e.next {
		if p.keys[e.key] != e {
			t.Fatalf("list entry %+v not in the map", e.key)
		}
		count++
	}
	if count != maxKeys {
		t.Errorf("LRU list holds %d entries, map %d", count, maxKeys)
	}
}

// TestBytesPerKey measures the heap one tracked key costs, excluding its
// strings, and holds the BytesPerKey constant to within a factor of two.
func TestBytesPerKey(t *testing.T) {
	if testing.Short() {
		t.Skip("measures 100k keys")
	}
	// Not parallel: other tests' allocations would count.
	const n = 100_000
	names := make([]string, n)
	for i := range names {
		names[i] = strconv.Itoa(i)
	}
	p := mustNew(t, Config{MaxKeys: n})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		observe(t, p, Key{Queue: "q", Producer: "p", JobType: names[i], SizeBucket: -1}, Prediction{}, ms(1))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if len(p.keys) != n {
		t.Fatalf("%d keys tracked", len(p.keys))
	}
	per := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
	runtime.KeepAlive(p)
	t.Logf("%.0f bytes per key (BytesPerKey = %d)", per, BytesPerKey)
	if per < BytesPerKey/2 || per > 2*BytesPerKey {
		t.Errorf("%.0f bytes per key, BytesPerKey says %d", per, BytesPerKey)
	}
}

// Random sequences of Predict and Observe under random configurations never
// panic, keep every tier in range and keep the figures consistent.
func TestPredictObserveProperty(t *testing.T) {
	t.Parallel()
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 99))
		cfg := Config{
			Alpha:           []float64{0.01, 0.2, 1}[rng.IntN(3)],
			Decay:           []float64{0.5, 0.98, 1}[rng.IntN(3)],
			MinObservations: 1 + rng.IntN(4),
			SpreadGate:      []float64{-1, 1, 16}[rng.IntN(3)],
			Tiers:           1 + rng.IntN(MaxTiers),
			Window:          1 + rng.IntN(64),
			RecomputeEvery:  1 + rng.IntN(16),
			MaxKeys:         1 + rng.IntN(20),
			Estimator:       []string{EstimateEWMA, EstimateMedian}[rng.IntN(2)],
			LongShare:       []float64{-1, 0.2, 1}[rng.IntN(3)],
		}
		p := mustNew(t, cfg)
		var accepted, rejected uint64
		for range 500 {
			k := p.KeyFor("q", "p", strconv.Itoa(rng.IntN(30)), rng.Uint64N(1<<20))
			pr := p.Predict(k)
			if pr.Tier < 0 || pr.Tier >= cfg.Tiers || pr.Cost < 0 || !pr.Made {
				t.Fatalf("seed %d %+v: prediction %+v", seed, cfg, pr)
			}
			var d time.Duration
			switch rng.IntN(10) {
			case 0:
				d = -time.Duration(rng.Int64())
			case 1:
				d = DefaultMaxDuration + time.Duration(rng.Int64N(1<<40))
			default:
				d = time.Duration(rng.Int64N(int64(10 * time.Second)))
			}
			if err := p.Observe(k, pr, d); err != nil {
				rejected++
				if !errors.Is(err, ErrBadDuration) || d > 0 && d <= DefaultMaxDuration {
					t.Fatalf("seed %d: Observe(%v) = %v", seed, d, err)
				}
			} else {
				accepted++
			}
		}
		s := p.Summary()
		if s.Observations != accepted || s.Rejected != rejected || s.Keys > cfg.MaxKeys || len(s.Boundaries) > cfg.Tiers-1 ||
			!slices.IsSorted(s.Boundaries) || (s.TierSamples > 0 && !(s.TierAccuracy >= 0 && s.TierAccuracy <= 1)) {
			t.Fatalf("seed %d %+v: summary %+v", seed, cfg, s)
		}
		for _, ks := range p.Keys(0) {
			if ks.Tier < 0 || ks.Tier >= cfg.Tiers {
				t.Fatalf("seed %d: key %+v", seed, ks)
			}
		}
	}
}

func FuzzObserve(f *testing.F) {
	f.Add("q", "job", uint64(0), int64(time.Millisecond), int64(0))
	f.Add("", "", uint64(1<<63), int64(0), int64(-1))
	f.Add("q", "x", uint64(7), int64(math.MinInt64), int64(math.MaxInt64))
	f.Add("q", "y", uint64(7), int64(DefaultMaxDuration), int64(DefaultMaxDuration+1))
	f.Fuzz(func(t *testing.T, queue, jobType string, size uint64, d1, d2 int64) {
		p := mustNew(t, Config{MinObservations: 1, RecomputeEvery: 1, MaxKeys: 2})
		k := p.KeyFor(queue, "p", jobType, size)
		for _, d := range []time.Duration{time.Duration(d1), time.Duration(d2), time.Duration(d1)} {
			pr := p.Predict(k)
			if pr.Tier < 0 || pr.Tier >= DefaultTiers {
				t.Fatalf("tier %d", pr.Tier)
			}
			before, _ := p.Lookup(k)
			err := p.Observe(k, pr, d)
			after, _ := p.Lookup(k)
			if d <= 0 || d > DefaultMaxDuration {
				if !errors.Is(err, ErrBadDuration) || after.Count != before.Count || after.EWMA != before.EWMA {
					t.Fatalf("Observe(%v) = %v; count %d -> %d", d, err, before.Count, after.Count)
				}
			} else if err != nil || after.Count != before.Count+1 || after.EWMA <= 0 || after.EWMA > DefaultMaxDuration {
				t.Fatalf("Observe(%v) = %v; %+v -> %+v", d, err, before, after)
			}
		}
	})
}

func BenchmarkPredictObserve(b *testing.B) {
	p := mustNew(b, Config{})
	keys := make([]Key, 1000)
	for i := range keys {
		keys[i] = p.KeyFor("queue", "producer", "job-"+strconv.Itoa(i), uint64(i*100))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	durs := make([]time.Duration, 4096)
	for i := range durs {
		durs[i] = time.Duration(1+rng.IntN(1000)) * time.Millisecond
	}
	for i, k := range keys { // warm every key
		for range DefaultMinObservations {
			if err := p.Observe(k, Prediction{}, durs[i%len(durs)]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		k := keys[i%len(keys)]
		pr := p.Predict(k)
		if err := p.Observe(k, pr, durs[i%len(durs)]); err != nil {
			b.Fatal(err)
		}
	}
}

// The long cut lands in the gap between clusters of costs, so a key whose
// estimate wobbles is not long one moment and short the next, and it holds
// the most expensive messages that make up the share of the work.
func TestLongCut(t *testing.T) {
	t.Parallel()
	var costs []float64
	for i := range 1000 {
		switch {
		case i%100 == 0: // 1% of messages, 5000 ms each: 5 x 10 = 50 s, 38% of the work
			costs = append(costs, 5000+float64(i%7))
		case i%10 == 0: // 9%, 350 ms: 31.5 s, 24%
			costs = append(costs, 350+float64(i%5))
		default: // 90%, 5 to 100 ms
			costs = append(costs, 5+float64(i%96))
		}
	}
	slices.Sort(costs)
	cut := longCut(costs, 0.2)
	if !(cut > 400 && cut < 5000) {
		t.Fatalf("cut at 20%% of work = %v ms, want it in the gap between 355 and 5000", cut)
	}
	// At half the work the cut is within reach of the 355 -> 5000 gap and
	// snaps to it; at 90% it must reach down into the short cluster.
	if cut := longCut(costs, 0.5); !(cut > 400 && cut < 5000) {
		t.Fatalf("cut at 50%% of work = %v ms, want the 355-5000 gap", cut)
	}
	if cut := longCut(costs, 0.9); !(cut < 100) {
		t.Fatalf("cut at 90%% of work = %v ms, want it among the short costs", cut)
	}
	if cut := longCut(nil, 0.2); !math.IsInf(cut, 1) {
		t.Fatalf("empty sample: %v", cut)
	}
	// Through the predictor: after learning, the 5 s key is long, the 350 ms one is not.
	p := mustNew(t, Config{RecomputeEvery: 1})
	long, mid, short := p.KeyFor("q", "p", "export", 0), p.KeyFor("q", "p", "pdf", 0), p.KeyFor("q", "p", "email", 0)
	for range 5 {
		observe(t, p, long, Prediction{}, ms(5000))
		observe(t, p, mid, Prediction{}, ms(350))
		observe(t, p, short, Prediction{}, ms(8))
	}
	for i := range 1000 {
		switch {
		case i%100 == 0:
			p.Predict(long)
		case i%10 == 0:
			p.Predict(mid)
		default:
			p.Predict(short)
		}
	}
	if !p.Predict(long).Long || p.Predict(mid).Long || p.Predict(short).Long {
		t.Fatalf("long %+v mid %+v short %+v", p.Predict(long), p.Predict(mid), p.Predict(short))
	}
}

// Record puts a cost in the window as a warm prediction of that cost
// would: a predictor that predicts half the messages and records the
// other half's costs, as a fleet member records its peers' predictions,
// draws the same boundaries and long cut as one that predicts them all.
func TestRecordFeedsTheWindow(t *testing.T) {
	t.Parallel()
	cfg := Config{Tiers: 3, Window: 64, RecomputeEvery: 8, MinObservations: 1, SpreadGate: -1}
	all, half := mustNew(t, cfg), mustNew(t, cfg)
	costs := map[string]time.Duration{"email": ms(5), "thumb": ms(40), "pdf": ms(300), "export": ms(4000)}
	names := []string{"email", "email", "thumb", "email", "pdf", "thumb", "email", "export"}
	for _, p := range []*Predictor{all, half} {
		for _, n := range names {
			observe(t, p, p.KeyFor("q", "p", n, 0), Prediction{}, costs[n])
		}
	}
	for i := range 200 {
		n := names[i%len(names)]
		want := all.Predict(all.KeyFor("q", "p", n, 0))
		if i%2 == 0 {
			got := half.Predict(half.KeyFor("q", "p", n, 0))
			if got.Tier != want.Tier || got.Long != want.Long {
				t.Fatalf("message %d (%s): tier %d long %v, want tier %d long %v", i, n, got.Tier, got.Long, want.Tier, want.Long)
			}
		} else {
			half.Record(costs[n])
		}
	}
	a, h := all.Summary(), half.Summary()
	if !slices.Equal(a.Boundaries, h.Boundaries) {
		t.Fatalf("boundaries %v with recorded costs, want %v", h.Boundaries, a.Boundaries)
	}
	if len(h.Boundaries) != 2 || h.Boundaries[1] <= h.Boundaries[0] {
		t.Fatalf("boundaries %v, want two distinct ones", h.Boundaries)
	}
	// Nothing but the window: no key, observation or score changes.
	before := half.Summary()
	half.Record(ms(10))
	half.Record(0)
	half.Record(-ms(1))
	after := half.Summary()
	if after.Keys != before.Keys || after.Observations != before.Observations || after.TierSamples != before.TierSamples {
		t.Fatalf("Record changed the keys or scores: before %+v after %+v", before, after)
	}
	if half.Predict(half.KeyFor("q", "p", "export", 0)).Long != all.Predict(all.KeyFor("q", "p", "export", 0)).Long {
		t.Fatal("the long cut differs")
	}
}

// A cost that is not positive never enters the window.
func TestRecordIgnoresNonPositive(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{Tiers: 2, RecomputeEvery: 1})
	p.Record(0)
	p.Record(-ms(5))
	if b := p.Summary().Boundaries; len(b) != 0 {
		t.Fatalf("boundaries %v from non-positive costs, want none", b)
	}
	p.Record(ms(7))
	if b := p.Summary().Boundaries; len(b) != 1 || b[0] != ms(7) {
		t.Fatalf("boundaries %v, want [7ms]", b)
	}
}

// With LongKeys, the messages of the costliest twentieth of the warm keys
// are long even when the work-share cut leaves them out: here a frequent
// 1 s kind makes up the top of the recent work, and two rare kinds of 300
// and 400 ms, costlier than all the others, are left out by the cut. With
// LongKeys 0.05 (3 of 41 kinds) they are long too, and nothing else is
// added. The cut follows the keys' costs as they change, within a key's
// worth of predictions, and survives a snapshot.
func TestLongKeys(t *testing.T) {
	t.Parallel()
	keyOf := func(i int) Key {
		return Key{Queue: "q", Producer: "wéb", JobType: "kind-" + strconv.Itoa(i), SizeBucket: -1}
	}
	const big, rare1, rare2 = 38, 39, 40
	cost := func(i int) time.Duration {
		switch i {
		case big:
			return time.Second
		case rare1:
			return 300 * time.Millisecond
		case rare2:
			return 400 * time.Millisecond
		}
		return ms(float64(i + 1))
	}
	run := func(cfg Config) (*Predictor, map[int]bool) {
		p := mustNew(t, cfg)
		for i := range 41 {
			for range 3 {
				observe(t, p, keyOf(i), Prediction{}, cost(i))
			}
		}
		long := map[int]bool{}
		for n := range 6000 {
			i := n % 38
			switch {
			case n%200 == 0:
				i = rare1 + (n/200)%2
			case n%3 == 0:
				i = big
			}
			if p.Predict(keyOf(i)).Long {
				long[i] = true
			}
		}
		return p, long
	}
	_, off := run(Config{LongShare: 0.01})
	if !off[big] || off[rare1] || off[rare2] {
		t.Fatalf("without LongKeys: long kinds %v; the test needs the cut to take the 1 s kind and leave the rare ones out", off)
	}
	p, on := run(Config{LongShare: 0.01, LongKeys: 0.05})
	if !on[rare1] || !on[rare2] || !on[big] {
		t.Errorf("with LongKeys 0.05 the three costliest of 41 kinds are not all long: %v", on)
	}
	for i := range 38 {
		if on[i] {
			t.Errorf("kind %d (%v) is long with LongKeys: only the top twentieth should be added", i, cost(i))
		}
	}
	// The keys' stats say the same, without predicting.
	for i := range 41 {
		ks, ok := p.Lookup(keyOf(i))
		if !ok || ks.Long != on[i] {
			t.Errorf("kind %d: stats say long %v, predictions %v", i, ks.Long, on[i])
		}
	}
	// Kind 0 becomes the costliest of all: long within a key's worth of
	// predictions.
	for range 20 {
		observe(t, p, keyOf(0), Prediction{}, 5*time.Second)
	}
	longNow := false
	for range DefaultRecomputeEvery + 1 {
		longNow = p.Predict(keyOf(0)).Long
	}
	if !longNow {
		t.Error("a kind that became the costliest is not long after a recompute")
	}
	// A snapshot restored keeps the cut.
	q := mustNew(t, Config{LongShare: 0.01, LongKeys: 0.05})
	if err := q.Restore("q", p.Snapshot()); err != nil {
		t.Fatal(err)
	}
	if !q.Predict(keyOf(rare2)).Long {
		t.Error("after a restore the costliest rare kind is not long")
	}
}

// BenchmarkKeyCut is the pause a queue with 100,000 warm keys takes once
// per key's worth of predictions, when the costliest keys' cut
// (Config.LongKeys) is recomputed.
func BenchmarkKeyCut(b *testing.B) {
	p := mustNew(b, Config{MaxKeys: 200_000})
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 100_000 {
		k := p.KeyFor("queue", "producer", "job-"+strconv.Itoa(i), 0)
		for range DefaultMinObservations {
			if err := p.Observe(k, Prediction{}, time.Duration(1+rng.IntN(10_000))*time.Millisecond); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		p.keyCutMS = p.keyCut(p.cfg.LongKeys)
	}
}

// TestKeyCutMatchesSort checks the costliest keys' cut, kept from a dense
// array of the warm keys' slow means, against the reference: every warm
// key's slow mean, from the map, sorted. Keys come, warm up and are evicted (MaxKeys
// below the keys in use), costs tie often, and a snapshot is restored
// midway; both estimators.
func TestKeyCutMatchesSort(t *testing.T) {
	for _, est := range []string{EstimateEWMA, EstimateMedian} {
		t.Run(est, func(t *testing.T) {
			p := mustNew(t, Config{MaxKeys: 100, LongKeys: 0.05, Estimator: est})
			rng := rand.New(rand.NewPCG(5, 6))
			reference := func() float64 {
				var costs []float64
				for _, e := range p.keys {
					if e.count >= uint64(p.cfg.MinObservations) {
						costs = append(costs, e.meanMS)
					}
				}
				if len(costs) == 0 {
					return math.Inf(1)
				}
				slices.Sort(costs)
				return costs[len(costs)-max(int(math.Ceil(float64(len(costs))*p.cfg.LongKeys)), 1)]
			}
			for i := range 20_000 {
				k := p.KeyFor("q", "producer-ü", "job-"+strconv.Itoa(rng.IntN(300)), 0)
				d := time.Duration(1+rng.IntN(20)) * time.Millisecond // many ties
				if err := p.Observe(k, p.Predict(k), d); err != nil {
					t.Fatal(err)
				}
				if i == 10_000 {
					snap := p.Snapshot()
					p = mustNew(t, p.cfg)
					if err := p.Restore("q", snap); err != nil {
						t.Fatal(err)
					}
				}
				if i%97 == 0 {
					if got, want := p.keyCut(p.cfg.LongKeys), reference(); got != want {
						t.Fatalf("after %d observations the key cut is %v, want %v", i+1, got, want)
					}
					if len(p.warm) != len(p.warmMeans) || len(p.warm) > len(p.keys) {
						t.Fatalf("%d warm keys with %d means, of %d keys", len(p.warm), len(p.warmMeans), len(p.keys))
					}
					for j, e := range p.warm {
						if int(e.warmIdx) != j || p.keys[e.key] != e {
							t.Fatalf("warm key %d (%v) says index %d, in the map %v", j, e.key, e.warmIdx, p.keys[e.key] == e)
						}
					}
				}
			}
		})
	}
}

func TestNthSmallest(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 2000 {
		n := 1 + rng.IntN(60)
		xs := make([]float64, n)
		for i := range xs {
			switch rng.IntN(3) {
			case 0:
				xs[i] = float64(rng.IntN(4)) // ties
			case 1:
				xs[i] = float64(i) // runs already in order
			default:
				xs[i] = rng.Float64() * 1e6
			}
		}
		sorted := slices.Sorted(slices.Values(xs))
		k := rng.IntN(n)
		if got := nthSmallest(slices.Clone(xs), k); got != sorted[k] {
			t.Fatalf("nthSmallest(%v, %d) = %v, want %v", xs, k, got, sorted[k])
		}
	}
}

// TestKeyMean checks the slow mean the costliest keys' cut ranks keys by
// against its definition: a plain running mean over a key's first twenty
// observations, then an EWMA of weight 0.05.
func TestKeyMean(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{})
	k := p.KeyFor("q", "producer-ß", "report", 4<<10)
	rng := rand.New(rand.NewPCG(9, 10))
	var sum, want float64
	for n := 1; n <= 200; n++ {
		d := float64(1 + rng.IntN(5000))
		observe(t, p, k, Prediction{}, ms(d))
		if n <= 20 {
			sum += d
			want = sum / float64(n)
		} else {
			want = 0.95*want + 0.05*d
		}
		if got := p.keys[k].meanMS; math.Abs(got-want) > 1e-6*want {
			t.Fatalf("after %d observations the slow mean is %v ms, want %v", n, got, want)
		}
	}
}

// TestLongKeyStaysLongThroughShortRuns: a costly kind of job that runs
// short a few times in a row stays among the long keys (its slow mean
// still ranks it there) while its EWMA, which orders its messages, follows
// the short runs; a kind that stays short long enough leaves them. The
// spread gate is off: it would mark this very mix long by itself, and the
// test is of the cut.
func TestLongKeyStaysLongThroughShortRuns(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{LongShare: 0.01, LongKeys: 0.05, SpreadGate: -1})
	keyOf := func(i int) Key {
		return Key{Queue: "q", Producer: "billing", JobType: "kind-" + strconv.Itoa(i), SizeBucket: -1}
	}
	const report = 40
	for i := range report {
		for range 3 {
			observe(t, p, keyOf(i), Prediction{}, ms(float64(i+1))) // 1 to 40 ms
		}
	}
	for range 30 {
		observe(t, p, keyOf(report), Prediction{}, time.Second)
	}
	// predict spreads a recompute's worth of predictions over the short
	// kinds, then predicts report once.
	predict := func() Prediction {
		for n := range DefaultRecomputeEvery + 1 {
			p.Predict(keyOf(n % report))
		}
		return p.Predict(keyOf(report))
	}
	if pr := predict(); !pr.Long {
		t.Fatalf("the 1 s kind among 1-40 ms kinds is not long: %+v", pr)
	}
	for range 20 {
		observe(t, p, keyOf(report), Prediction{}, 20*time.Millisecond)
	}
	pr := predict()
	if pr.Cost > 40*time.Millisecond {
		t.Fatalf("after 20 runs of 20 ms the EWMA still predicts %v; the test needs it among the short kinds", pr.Cost)
	}
	if !pr.Long {
		t.Errorf("after 20 short runs the 1 s kind is no longer long (predicted %v, slow mean %.0f ms, cut %.0f ms)", pr.Cost, p.keys[keyOf(report)].meanMS, p.keyCutMS)
	}
	if ks, _ := p.Lookup(keyOf(report)); !ks.Long {
		t.Error("its stats do not say long")
	}
	for range 200 {
		observe(t, p, keyOf(report), Prediction{}, 20*time.Millisecond)
	}
	if pr := predict(); pr.Long {
		t.Errorf("after 220 runs of 20 ms the kind is still long (slow mean %.0f ms, cut %.0f ms)", p.keys[keyOf(report)].meanMS, p.keyCutMS)
	}
}

// With GatedMean a spread-gated key keeps the middle tier but is priced at
// its slow mean, and is Long only by the cuts: a spread key that is quick
// on average sorts ahead of a steady key that costs more, and is not held
// to its FIFO start.
func TestGatedMean(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{false, true} {
		p := mustNew(t, Config{RecomputeEvery: 1, LongShare: 0.01, LongKeys: 0.05, GatedMean: on})
		spread := p.KeyFor("jobs", "wéb", "render", 0)
		steady := p.KeyFor("jobs", "wéb", "sync", 0)
		export := p.KeyFor("jobs", "wéb", "export", 0)
		for i := range 400 {
			d := ms(20)
			if i%20 == 19 {
				d = ms(3000) // a twentieth take 150 times as long: mean about 170 ms
			}
			observe(t, p, spread, Prediction{}, d)
			observe(t, p, steady, Prediction{}, ms(400))
			if i%10 == 0 {
				observe(t, p, export, Prediction{}, ms(60_000))
			}
			for k := range 20 {
				observe(t, p, p.KeyFor("jobs", "wéb", fmt.Sprint("ping-", k), 0), Prediction{}, ms(float64(2+k)))
			}
		}
		for range 100 {
			p.Predict(steady)
			p.Predict(export)
			for k := range 20 {
				p.Predict(p.KeyFor("jobs", "wéb", fmt.Sprint("ping-", k), 0))
			}
		}
		pr := p.Predict(spread)
		if !pr.SpreadGated || pr.Tier != 1 {
			t.Fatalf("GatedMean %v: %+v, want spread-gated in the middle tier", on, pr)
		}
		ks, _ := p.Lookup(spread)
		if !on {
			if !pr.Long || pr.Cost != p.typical() {
				t.Errorf("gate as before: %+v, want long at the typical cost %v", pr, p.typical())
			}
			continue
		}
		if pr.Cost < ms(100) || pr.Cost > ms(300) || pr.Long {
			t.Errorf("GatedMean: %+v, want about 170 ms and not long", pr)
		}
		if st := p.Predict(steady); st.Cost <= pr.Cost {
			t.Errorf("GatedMean: the steady 400 ms key at %v is not past the spread key at %v", st.Cost, pr.Cost)
		}
		if ks.Long != pr.Long {
			t.Errorf("Lookup says long %v, Predict %v", ks.Long, pr.Long)
		}
		if ex := p.Predict(export); !ex.Long {
			t.Errorf("GatedMean: the export key %+v should stay long", ex)
		}
	}
}

// A key whose runs are mostly quick and now and then minutes long has a
// small slow mean while its long runs are still running; LongKeysByTail
// ranks it by its tail and so marks it long.
func TestLongKeysByTail(t *testing.T) {
	t.Parallel()
	for _, byTail := range []bool{false, true} {
		p := mustNew(t, Config{RecomputeEvery: 1, LongShare: 0.01, LongKeys: 0.05, GatedMean: true, LongKeysByTail: byTail})
		rare := p.KeyFor("jobs", "fn", "käse-tail", 0)
		for i := range 200 {
			d := ms(700)
			if i%50 == 10 {
				d = ms(120_000) // two minutes, four times in 200 runs
			}
			observe(t, p, rare, Prediction{}, d)
			for k := range 30 {
				observe(t, p, p.KeyFor("jobs", "fn", fmt.Sprint("f-", k), 0), Prediction{}, ms(float64(100+700*k)))
			}
		}
		for k := range 30 {
			p.Predict(p.KeyFor("jobs", "fn", fmt.Sprint("f-", k), 0))
		}
		pr := p.Predict(rare)
		if pr.Long != byTail {
			ks, _ := p.Lookup(rare)
			t.Errorf("LongKeysByTail %v: %+v (mean and p99 %v, %v), want long %v", byTail, pr, ks.EWMA, ks.P99, byTail)
		}
	}
}

// A spread key priced at its mean is not long, but a twentieth of its runs
// are: TailKeys marks its messages TailLong, without moving its cost, tier
// or Long, and marks no key whose tail is short or that is long already.
func TestTailKeys(t *testing.T) {
	t.Parallel()
	for _, q := range []float64{0, 0.99, 0.9} {
		p := mustNew(t, Config{RecomputeEvery: 1, LongShare: 0.01, LongKeys: 0.05, GatedMean: true, TailKeys: q})
		spread := p.KeyFor("jobs", "wéb", "render", 0)
		export := p.KeyFor("jobs", "wéb", "export", 0)
		ping := p.KeyFor("jobs", "wéb", "ping-0", 0)
		for i := range 400 {
			d := ms(20)
			if i%20 == 19 {
				d = ms(3000) // p99 3 s, p90 20 ms, mean about 170 ms
			}
			observe(t, p, spread, Prediction{}, d)
			observe(t, p, p.KeyFor("jobs", "wéb", "sync", 0), Prediction{}, ms(400))
			if i%10 == 0 {
				observe(t, p, export, Prediction{}, ms(60_000))
			}
			for k := range 20 {
				observe(t, p, p.KeyFor("jobs", "wéb", fmt.Sprint("ping-", k), 0), Prediction{}, ms(float64(2+k)))
			}
		}
		for range 100 {
			p.Predict(export)
			p.Predict(p.KeyFor("jobs", "wéb", "sync", 0))
			for k := range 20 {
				p.Predict(p.KeyFor("jobs", "wéb", fmt.Sprint("ping-", k), 0))
			}
		}
		pr := p.Predict(spread)
		if !pr.SpreadGated || pr.Long || pr.Tier != 1 || pr.Cost < ms(100) || pr.Cost > ms(300) {
			t.Fatalf("TailKeys %v: %+v, want gated, about 170 ms in the middle tier, not long", q, pr)
		}
		// The p99 (3 s) reaches the long-keys cut; the p90 (20 ms) does not.
		if want := q == 0.99; pr.TailLong != want {
			t.Errorf("TailKeys %v: tail-long %v, want %v", q, pr.TailLong, want)
		}
		if ex := p.Predict(export); !ex.Long || ex.TailLong {
			t.Errorf("TailKeys %v: export %+v, want long and not tail-long", q, ex)
		}
		if pg := p.Predict(ping); pg.Long || pg.TailLong {
			t.Errorf("TailKeys %v: ping %+v, want neither", q, pg)
		}
	}
	if _, err := New(Config{TailKeys: 1}); err == nil {
		t.Error("TailKeys 1 accepted")
	}
	if _, err := New(Config{NearLongKeys: -0.1}); err == nil {
		t.Error("NearLongKeys -0.1 accepted")
	}
}

// NearLongKeys marks TailLong the keys ranked just under the long-keys cut:
// of 23 keys, the top two by mean are long (LongKeys 0.05) and the next
// three are marked (NearLongKeys 0.2); the rest are not.
func TestNearLongKeys(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{RecomputeEvery: 1, LongShare: 0.01, LongKeys: 0.05, NearLongKeys: 0.2})
	key := func(name string) Key { return p.KeyFor("jobs", "wéb", name, 0) }
	for i := range 100 {
		observe(t, p, key("sync"), Prediction{}, ms(400))
		observe(t, p, key("render"), Prediction{}, ms(170))
		if i%10 == 0 {
			observe(t, p, key("export"), Prediction{}, ms(60_000))
		}
		for k := range 20 {
			observe(t, p, key(fmt.Sprint("ping-", k)), Prediction{}, ms(float64(2+k)))
		}
	}
	for range 10 {
		for _, n := range []string{"sync", "render", "export"} {
			p.Predict(key(n))
		}
		for k := range 20 {
			p.Predict(key(fmt.Sprint("ping-", k)))
		}
	}
	for _, c := range []struct {
		name           string
		long, tailLong bool
	}{
		{"export", true, false}, {"sync", true, false},
		{"render", false, true}, {"ping-19", false, true}, {"ping-18", false, true},
		{"ping-17", false, false}, {"ping-0", false, false},
	} {
		if pr := p.Predict(key(c.name)); pr.Long != c.long || pr.TailLong != c.tailLong {
			t.Errorf("%s: long %v tail-long %v, want %v and %v", c.name, pr.Long, pr.TailLong, c.long, c.tailLong)
		}
	}
}
