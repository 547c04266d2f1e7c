package broker

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/store"
)

func uniq(key string, window time.Duration) *Message {
	return &Message{Queue: "q", Producer: "p", JobType: "charge", UniqueKey: key, UniqueFor: window}
}

func TestUniqueJobs(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{MaxUniqueKeys: 3})
	first := tb.b.PublishEach([]*Message{uniq("order-1 ✓", time.Hour), uniq("order-1 ✓", time.Hour)}, nil)
	if first[0].Err != nil || first[0].Duplicate || !first[1].Duplicate || first[1].ID != first[0].ID {
		t.Fatalf("same batch: %+v", first)
	}
	id := first[0].ID
	check := func(when string) {
		t.Helper()
		r := tb.b.PublishEach([]*Message{uniq("order-1 ✓", time.Hour)}, nil)[0]
		if !r.Duplicate || r.ID != id {
			t.Fatalf("%s: %+v, want a duplicate of %s", when, r, id)
		}
	}
	check("waiting")
	c := tb.sub(t, "q", 1)
	d := next(t, c)
	check("running")
	_ = c.Ack(d.ID, time.Millisecond)
	check("finished")
	if in, _ := tb.b.Queue("q"); in.Published != 1 {
		t.Fatalf("published %d, want 1", in.Published)
	}
	// Past the window the key is free again.
	tb.clk.Advance(time.Hour)
	if r := tb.b.PublishEach([]*Message{uniq("order-1 ✓", time.Hour)}, nil)[0]; r.Duplicate || r.Err != nil || r.ID == id {
		t.Fatalf("after the window: %+v", r)
	}
	// The index is bounded.
	tb.b.PublishEach([]*Message{uniq("a", time.Hour), uniq("b", time.Hour)}, nil)
	if r := tb.b.PublishEach([]*Message{uniq("c", time.Hour)}, nil)[0]; !errors.Is(r.Err, ErrTooManyUniqueKeys) {
		t.Fatalf("past the limit: %+v", r)
	}
	for _, m := range []*Message{uniq("x", 0), uniq("x", 31*24*time.Hour), uniq("\xff", time.Hour)} {
		if r := tb.b.PublishEach([]*Message{m}, nil)[0]; !errors.Is(r.Err, ErrInvalid) {
			t.Fatalf("%q for %v: %+v", m.UniqueKey, m.UniqueFor, r)
		}
	}
}

func TestUniqueKeysSurviveRestart(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store, clk *clock.Fake) {
		b := durable(t, st, clk, Config{})
		id := b.PublishEach([]*Message{uniq("k", time.Hour)}, nil)[0].ID
		short := b.PublishEach([]*Message{uniq("short", time.Minute)}, nil)[0].ID
		crash(b)
		clk.Advance(2 * time.Minute)
		r := durable(t, st, clk, Config{})
		if got := r.PublishEach([]*Message{uniq("k", time.Hour)}, nil)[0]; !got.Duplicate || got.ID != id {
			t.Fatalf("after restart: %+v, want a duplicate of %s", got, id)
		}
		if got := r.PublishEach([]*Message{uniq("short", time.Minute)}, nil)[0]; got.Duplicate || got.ID == short {
			t.Fatalf("a closed window came back: %+v", got)
		}
		if err := r.Checkpoint(context.Background()); err != nil {
			t.Fatal(err)
		}
		crash(r)
		r2 := durable(t, st, clk, Config{})
		if got := r2.PublishEach([]*Message{uniq("k", time.Hour)}, nil)[0]; !got.Duplicate || got.ID != id {
			t.Fatalf("after a checkpoint: %+v", got)
		}
	})
}

// syncedOnly is a memory store that a machine crash cuts back to what
// the broker waited for: Replay replays the records up to the last
// position a Wait covered, as a log replays what was fsynced.
type syncedOnly struct {
	*store.Memory
	mu     sync.Mutex
	synced store.Pos
}

func (s *syncedOnly) Wait(pos store.Pos) error {
	s.mu.Lock()
	s.synced = max(s.synced, pos)
	s.mu.Unlock()
	return s.Memory.Wait(pos)
}

func (s *syncedOnly) Replay(fn func(*store.Record) error) error {
	s.mu.Lock()
	n := s.synced
	s.mu.Unlock()
	var seen store.Pos
	return s.Memory.Replay(func(r *store.Record) error {
		if seen++; seen > n {
			return nil
		}
		return fn(r)
	})
}

// A publish is answered once its unique key is on disk, not only its job:
// the same publish repeated after a crash of the machine is a duplicate.
// The key's record was appended after the job's, and the answer waited
// for the job's alone.
func TestUniqueKeyDurableWhenAnswered(t *testing.T) {
	t.Parallel()
	st := &syncedOnly{Memory: store.NewMemory()}
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := durable(t, st, clk, Config{})
	payload := []byte(strings.Repeat("Zahlung für Bestellung ✓ \xff ", 64)) // over a kilobyte, not all UTF-8
	var batch []*Message
	for i := range 50 {
		m := uniq(fmt.Sprintf("bestellung-%d-überweisung-%s", i, strings.Repeat("ключ", i)), time.Hour)
		m.Payload = payload
		batch = append(batch, m)
	}
	ids := map[string]string{}
	for i, r := range b.PublishEach(batch, nil) {
		if r.Err != nil || r.Duplicate {
			t.Fatalf("publish %d: %+v", i, r)
		}
		ids[batch[i].UniqueKey] = r.ID
	}
	// One more, alone: its key is the last record of all.
	last := uniq("letzte-überweisung", time.Hour)
	r := b.PublishEach([]*Message{last}, nil)[0]
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	ids[last.UniqueKey] = r.ID
	crash(b)
	b = durable(t, st, clk, Config{})
	for key, id := range ids {
		if got := b.PublishEach([]*Message{uniq(key, time.Hour)}, nil)[0]; !got.Duplicate || got.ID != id {
			t.Errorf("key %q after a crash: %+v, want a duplicate of %s", key, got, id)
		}
	}
}

// BenchmarkMillionDelayedAndUnique publishes 1,000,000 jobs delayed by an
// hour, each with its own unique key, in batches of 1,000, and reports the
// publish cost and the heap they take. Run it with
//
//	go test -run '^$' -bench BenchmarkMillionDelayedAndUnique -benchtime 1x ./internal/broker/
func BenchmarkMillionDelayedAndUnique(b *testing.B) {
	const jobs = 1_000_000
	for b.Loop() {
		b.StopTimer()
		br := benchBroker(b)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		payload := make([]byte, 64)
		batch := make([]*Message, 0, 1000)
		b.StartTimer()
		start := time.Now()
		for i := range jobs {
			batch = append(batch, &Message{Queue: "q", Producer: "web", JobType: "reminder", Payload: payload,
				Delay: time.Hour, UniqueKey: fmt.Sprint("user-", i), UniqueFor: 2 * time.Hour})
			if len(batch) == cap(batch) {
				for _, r := range br.PublishEach(batch, nil) {
					if r.Err != nil || r.Duplicate {
						b.Fatal(r)
					}
				}
				batch = batch[:0]
			}
		}
		took := time.Since(start)
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(took.Nanoseconds())/jobs, "ns/publish")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/jobs, "heap-bytes/job")
		if in, _ := br.Queue("q"); in.Delayed != jobs {
			b.Fatalf("%d delayed", in.Delayed)
		}
		runtime.KeepAlive(br)
		b.StartTimer()
	}
}
