package predict

import (
	"fmt"
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
		a, b := p.Predict(k), r.Predict(k)
		if a != b {
			t.Fatalf("key %v: restored predicts %+v, original %+v", k, b, a)
		}
	}
	if err := r.Restore("q", []byte("not a snapshot")); err == nil {
		t.Fatal("garbage restored")
	}
}
