package predict

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"
)

// Cold and spread-gated predictions take the middle tier by default, so
// they say nothing of the predictor: with only those observed, tier
// accuracy and MAE have no samples and accuracy is NaN (the metrics then
// leave the series out) rather than a perfect 1.
func TestTierAccuracyUnrouted(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{RecomputeEvery: 1})
	// Cold: every key's first three predictions.
	for i := range 30 {
		k := p.KeyFor("q", "p", "job"+strconv.Itoa(i%10), 0)
		pr := p.Predict(k)
		if !pr.Cold || pr.Routed() {
			t.Fatalf("prediction %d: %+v, want cold", i, pr)
		}
		observe(t, p, k, pr, ms(5))
	}
	// Spread-gated: two thirds at 1 ms, a third at 1000 ms (see
	// TestSpreadGate), each observed with its own gated prediction.
	gated := p.KeyFor("q", "p", "bimodal", 0)
	for i := range 3 {
		observe(t, p, gated, Prediction{}, ms(1))
		observe(t, p, gated, Prediction{}, ms(1))
		observe(t, p, gated, Prediction{}, ms(1000))
		if i < 2 {
			continue
		}
		for range 10 {
			pr := p.Predict(gated)
			if !pr.SpreadGated || pr.Routed() {
				t.Fatalf("bimodal key: %+v, want spread-gated", pr)
			}
			observe(t, p, gated, pr, ms(1))
		}
	}
	s := p.Summary()
	if !math.IsNaN(s.TierAccuracy) || s.TierSamples != 0 || s.MAESamples != 0 || s.MAE != 0 {
		t.Errorf("accuracy %v over %d, MAE %v over %d; want NaN over 0, 0 over 0", s.TierAccuracy, s.TierSamples, s.MAE, s.MAESamples)
	}
	if s.Observations != 30+9+10 {
		t.Errorf("observations %d, want %d", s.Observations, 30+9+10)
	}
}

// Keys lists busiest first and breaks ties by queue, producer, job type and
// size bucket, the same way every time whatever the map's iteration order.
func TestKeysOrderDeterministic(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{})
	key := func(queue, producer, jobType string, bucket int8) Key {
		return Key{Queue: queue, Producer: producer, JobType: jobType, SizeBucket: bucket}
	}
	want := []struct {
		k Key
		n int
	}{
		{key("q", "p", "a", -1), 5},
		{key("q", "p", "a", 3), 5},
		{key("q", "p", "a", 7), 5}, // these three differ only by size bucket
		{key("q", "p", "b", -1), 5},
		{key("q", "r", "a", -1), 5},
		{key("r", "a", "a", -1), 5},
		{key("q", "p", "a", 1), 2},
		{key("q", "p", "a", 2), 2},
		{key("q", "p", "", -1), 1},
		{key("q", "p", "", 4), 1},
	}
	// Insert in an order unrelated to the wanted one.
	for _, i := range []int{9, 2, 6, 0, 8, 4, 1, 7, 3, 5} {
		for range want[i].n {
			observe(t, p, want[i].k, Prediction{}, ms(1))
		}
	}
	for limit := range len(want) + 2 {
		n := len(want)
		if limit > 0 {
			n = min(limit, n)
		}
		for round := range 20 {
			got := p.Keys(limit)
			if len(got) != n {
				t.Fatalf("Keys(%d) returned %d keys, want %d", limit, len(got), n)
			}
			for i, ks := range got {
				if ks.Key != want[i].k || ks.Count != uint64(want[i].n) {
					t.Fatalf("Keys(%d), round %d, [%d] = %+v (count %d), want %+v (count %d)",
						limit, round, i, ks.Key, ks.Count, want[i].k, want[i].n)
				}
			}
		}
	}
}

// SelectKeys then SortKeys agrees with sorting every key, on random keys
// with many ties, for every limit.
func TestSelectKeysMatchesFullSort(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 50 {
		p := mustNew(t, Config{})
		for range r.IntN(200) {
			k := Key{
				Queue:      "q" + strconv.Itoa(r.IntN(2)),
				Producer:   "p" + strconv.Itoa(r.IntN(3)),
				JobType:    "j" + strconv.Itoa(r.IntN(3)),
				SizeBucket: int8(r.IntN(4) - 1),
			}
			observe(t, p, k, Prediction{}, ms(1))
		}
		var all []KeyStats
		for _, e := range p.keys {
			all = append(all, p.stats(e))
		}
		slices.SortFunc(all, func(a, b KeyStats) int { return compareBusiest(a.Count, a.Key, b.Count, b.Key) })
		for _, limit := range []int{-1, 0, 1, 2, 3, 7, len(all) - 1, len(all), len(all) + 1} {
			want := all
			if limit > 0 && limit < len(all) {
				want = all[:limit]
			}
			got := p.SelectKeys([]KeyStats{{Count: 99}}, limit) // appends after what buf holds
			if len(got) == 0 || got[0].Count != 99 {
				t.Fatalf("trial %d, limit %d: SelectKeys dropped the buffer's contents", trial, limit)
			}
			got = got[1:]
			SortKeys(got)
			if !slices.Equal(got, want) {
				t.Fatalf("trial %d, limit %d:\n got %v\nwant %v", trial, limit, got, want)
			}
		}
	}
}

// Each key keeps its own predicted against actual.
func TestKeyAccuracy(t *testing.T) {
	t.Parallel()
	p, _ := New(Config{})
	fast := p.KeyFor("q", "p", "fast", 0)
	slow := p.KeyFor("q", "p", "slow", 0)
	for range 20 {
		for k, d := range map[Key]time.Duration{fast: 2 * time.Millisecond, slow: 800 * time.Millisecond} {
			pr := p.Predict(k)
			if err := p.Observe(k, pr, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	// One surprise for the fast key: predicted ~2 ms, took 1 s.
	pr := p.Predict(fast)
	if !pr.Routed() {
		t.Fatalf("the fast key is not warm: %+v", pr)
	}
	_ = p.Observe(fast, pr, time.Second)
	fs, _ := p.Lookup(fast)
	ss, _ := p.Lookup(slow)
	if fs.Scored == 0 || ss.Scored == 0 || fs.Scored != ss.Scored+1 {
		t.Fatalf("scored %d and %d", fs.Scored, ss.Scored)
	}
	if ss.MAE > time.Millisecond || ss.TierAccuracy != 1 {
		t.Fatalf("the steady key: MAE %v, tier accuracy %v", ss.MAE, ss.TierAccuracy)
	}
	if want := (time.Second - pr.Cost) / time.Duration(fs.Scored); fs.MAE < want-time.Millisecond || fs.MAE > want+time.Millisecond || fs.TierAccuracy >= 1 {
		t.Fatalf("the surprised key: MAE %v (want about %v), tier accuracy %v", fs.MAE, want, fs.TierAccuracy)
	}
	// It survives a snapshot.
	r, _ := New(Config{})
	if err := r.Restore("q", p.Snapshot()); err != nil {
		t.Fatal(err)
	}
	if rs, _ := r.Lookup(fast); rs.MAE != fs.MAE || rs.Scored != fs.Scored || rs.TierAccuracy != fs.TierAccuracy {
		t.Fatalf("after restore: %+v, want %+v", rs, fs)
	}
}
