package broker

import (
	"strconv"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/predict"
)

// Keys lists busiest first, then by producer, job type and size bucket, the
// same way on every call, including keys that differ only by size bucket.
func TestKeysOrderDeterministic(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	type want struct {
		producer, jobType string
		bucket            int8
		count             int
	}
	// Size hints 1, 2 and 4 fall in buckets 1, 2 and 3; a message with no
	// payload and no hint has no bucket (-1).
	wants := []want{
		{"p", "a", -1, 3},
		{"p", "a", 1, 3},
		{"p", "a", 2, 3},
		{"p", "a", 3, 3},
		{"p", "b", 1, 3},
		{"q", "a", 1, 3},
		{"a", "z", 2, 1},
		{"a", "z", 3, 1},
		{"p", "", -1, 1},
	}
	hint := map[int8]uint64{-1: 0, 1: 1, 2: 2, 3: 4}
	c := tb.sub(t, "q", 1)
	// Publish in an order unrelated to the listing's.
	for _, i := range []int{8, 3, 0, 7, 5, 2, 6, 1, 4} {
		w := wants[i]
		for range w.count {
			tb.publish(t, &Message{Queue: "q", Producer: w.producer, JobType: w.jobType, SizeHint: hint[w.bucket]})
			d := next(t, c)
			if err := c.Ack(d.ID, time.Millisecond); err != nil {
				t.Fatal(err)
			}
			c.AddCredit(1)
		}
	}
	for _, limit := range []int{0, 1, 4, 6, 7, len(wants), 100} {
		n := len(wants)
		if limit > 0 {
			n = min(n, limit)
		}
		for round := range 20 {
			keys, err := tb.b.Keys("q", limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) != n {
				t.Fatalf("Keys(%d) listed %d keys, want %d", limit, len(keys), n)
			}
			for i, ks := range keys {
				w := wants[i]
				k := predict.Key{Queue: "q", Producer: w.producer, JobType: w.jobType, SizeBucket: w.bucket}
				if ks.Key != k || ks.Count != uint64(w.count) {
					t.Fatalf("Keys(%d), round %d, [%d] = %+v (count %d), want %+v (count %d)",
						limit, round, i, ks.Key, ks.Count, k, w.count)
				}
			}
		}
	}
}

// BenchmarkKeys lists a queue whose predictor tracks 100k keys. "held" is
// the part of Broker.Keys that holds the queue's lock, which every publish
// and ack on the queue waits for; "call" is Broker.Keys as a whole. limit 0
// lists every key; 100 and 10,000 are the admin API's default and maximum
// page sizes.
func BenchmarkKeys(b *testing.B) {
	const nKeys = 100_000
	br := benchBroker(b)
	if _, err := br.Declare("q", QueueConfig{}); err != nil {
		b.Fatal(err)
	}
	q, err := br.lookup("q", false)
	if err != nil {
		b.Fatal(err)
	}
	q.mu.Lock()
	p := q.sq().Predictor
	for i := range nKeys {
		// Counts of 1 to 20, so most keys tie with many others.
		k := p.KeyFor("q", "producer-"+strconv.Itoa(i%1000), "job-"+strconv.Itoa(i/1000), uint64(1+i%3))
		for range 1 + (i*7919)%20 {
			if err := p.Observe(k, predict.Prediction{}, time.Millisecond); err != nil {
				b.Fatal(err)
			}
		}
	}
	n := p.Summary().Keys
	q.mu.Unlock()
	if n != nKeys {
		b.Fatalf("predictor tracks %d keys, want %d", n, nKeys)
	}
	for _, limit := range []int{100, 10_000, 0} {
		b.Run("held/limit="+strconv.Itoa(limit), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = q.keys(limit)
			}
		})
		b.Run("call/limit="+strconv.Itoa(limit), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := br.Keys("q", limit); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
