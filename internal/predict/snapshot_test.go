package predict

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

func TestSnapshotRestoresWhatWasLearned(t *testing.T) {
	t.Parallel()
	p, _ := New(Config{MaxKeys: 500})
	keys := make([]Key, 0, 600)
	for i := range 600 { // more than MaxKeys: the oldest are evicted
		keys = append(keys, p.KeyFor("q", "wéb", fmt.Sprintf("type-%d", i%600), uint64(1)<<(i%20)))
	}
	for round := range 20 {
		for i, k := range keys {
			d := time.Duration(1+i%37) * time.Millisecond * time.Duration(1+round%3)
			pr := p.Predict(k)
			if err := p.Observe(k, pr, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	snap := p.Snapshot()
	r, _ := New(Config{MaxKeys: 500})
	if err := r.Restore("q", snap); err != nil {
		t.Fatal(err)
	}
	if a, b := p.Summary(), r.Summary(); a.Keys != b.Keys || a.Observations != b.Observations {
		t.Fatalf("summary after restore: %+v, want %+v", b, a)
	}
	for _, k := range keys {
		if e := p.keys[k]; e != nil && r.keys[k].meanMS != e.meanMS {
			t.Fatalf("key %v: restored slow mean %v, original %v", k, r.keys[k].meanMS, e.meanMS)
		}
		a, b := p.Predict(k), r.Predict(k)
		if a != b {
			t.Fatalf("key %v: restored predicts %+v, original %+v", k, b, a)
		}
	}
	// A snapshot written before keys had a slow mean restores it as the EWMA.
	var old snapshot
	if err := gob.NewDecoder(bytes.NewReader(snap)).Decode(&old); err != nil {
		t.Fatal(err)
	}
	for i := range old.Keys {
		old.Keys[i].MeanMS = 0
	}
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(&old); err != nil {
		t.Fatal(err)
	}
	if err := r.Restore("q", b.Bytes()); err != nil {
		t.Fatal(err)
	}
	for k, e := range r.keys {
		if e.meanMS != e.ewmaMS || e.meanMS <= 0 {
			t.Fatalf("key %v from an old snapshot: slow mean %v, EWMA %v", k, e.meanMS, e.ewmaMS)
		}
	}
	if err := r.Restore("q", []byte("not a snapshot")); err == nil {
		t.Fatal("garbage restored")
	}
}

// FuzzRestore: a snapshot read back from a damaged log, raw bytes or a
// well-formed snapshot with any figures in it, is either refused with an
// error that leaves the predictor as it was, or restored into a predictor
// whose predictions are sane and whose own snapshot restores to the same
// predictions.
func FuzzRestore(f *testing.F) {
	src := mustNew(f, Config{LongShare: 0.01, LongKeys: 0.05})
	for i := range 50 {
		k := src.KeyFor("q", "wéb", fmt.Sprintf("type-%d", i%7), uint64(i))
		observe(f, src, k, src.Predict(k), time.Duration(1+i%5)*time.Millisecond)
	}
	f.Add(src.Snapshot(), uint64(5), 12.5, 11.0, 3.0, 1.0, float32(2), float32(1), 1, 4.0, 9.0)
	f.Add([]byte("not a snapshot"), uint64(0), math.NaN(), math.Inf(1), -1.0, 0.0, float32(-1), float32(math.NaN()), -7, math.NaN(), -3.0)
	f.Fuzz(func(t *testing.T, data []byte, count uint64, ewma, mean, histTotal, histWeight float64, w0, w1 float32, tier int, recent, typical float64) {
		var b bytes.Buffer
		ks := keySnapshot{Producer: "wéb", JobType: "report", SizeBucket: 3, Count: count, EWMAMS: ewma, MeanMS: mean,
			HistTotal: histTotal, HistWeight: histWeight, Tier: tier}
		ks.Hist[10], ks.Hist[20] = w0, w1
		s := snapshot{Keys: []keySnapshot{ks}, Recent: []float64{recent, 1, 2, recent}, TypicalMS: typical}
		if err := gob.NewEncoder(&b).Encode(&s); err != nil {
			t.Fatal(err)
		}
		for _, snap := range [][]byte{data, b.Bytes()} {
			p := mustNew(t, Config{LongShare: 0.01, LongKeys: 0.05})
			k := p.KeyFor("q", "wéb", "report", 4)
			observe(t, p, k, Prediction{}, 3*time.Millisecond)
			before := p.Snapshot()
			if err := p.Restore("q", snap); err != nil {
				if !bytes.Equal(p.Snapshot(), before) {
					t.Fatalf("a refused snapshot (%v) changed the predictor", err)
				}
				continue
			}
			check := func(p *Predictor) []Prediction {
				var out []Prediction
				for _, k := range []Key{k, p.KeyFor("q", "wéb", "other", 0)} {
					pr := p.Predict(k)
					if pr.Cost < 0 || pr.Tier < 0 || pr.Tier >= DefaultTiers {
						t.Fatalf("after a restore %v predicts %+v", k, pr)
					}
					out = append(out, pr)
				}
				return out
			}
			// Restore recomputes the tiers from the window, so compare a
			// restore with a restore of its own snapshot, before either
			// predicts.
			again := mustNew(t, Config{LongShare: 0.01, LongKeys: 0.05})
			if err := again.Restore("q", p.Snapshot()); err != nil {
				t.Fatalf("a restored predictor's own snapshot is refused: %v", err)
			}
			if a, b := check(p), check(again); !slices.Equal(a, b) {
				t.Fatalf("restored twice predicts %+v, once %+v", b, a)
			}
			if err := p.Observe(k, Prediction{}, 5*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			check(p)
		}
	})
}
