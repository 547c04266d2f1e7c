package predict

import (
	"bytes"
	"encoding/gob"
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
