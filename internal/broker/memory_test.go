package broker

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/delivery"
)

// TestHeapPerWaitingJob reports the heap a waiting 64-byte job costs in
// memory mode (an in-process figure: RSS out of process is bench cost's).
// It fails only if the cost grows past a generous bound.
func TestHeapPerWaitingJob(t *testing.T) {
	const jobs = 100_000
	b, _ := New(Config{})
	batch := make([]*Message, 0, 1000)
	per := heapPerJob(t, "", jobs, func(i int) {
		batch = append(batch, &Message{Queue: "q", Producer: fmt.Sprint("web-", i%4), JobType: fmt.Sprint("type-", i%8), Payload: make([]byte, 64)})
		if len(batch) == cap(batch) {
			if _, err := b.Publish(batch...); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	})
	// The memory budget (Config.MaxBytes) charges each job an estimate;
	// it must follow what a job really costs, or the budget bounds
	// nothing.
	j := &delivery.Job{}
	j.SetPayload(make([]byte, 64))
	est := float64(jobSize(j, delivery.Names{Producer: "web-0", JobType: "type-0"}, "q"))
	if est < 0.8*per || est > 1.25*per {
		t.Errorf("the budget charges a waiting job %.0f bytes, its heap is %.0f: update msgOverhead", est, per)
	}
	t.Logf("budget charge per job: %.0f bytes", est)
	runtime.KeepAlive(b)
}

// heapPerJob runs publish(i) for i below jobs and returns the heap it kept
// per job, logged with how (what) and checked against a generous bound.
func heapPerJob(t *testing.T, what string, jobs int, publish func(i int)) float64 {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range jobs {
		publish(i)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / float64(jobs)
	t.Logf("heap per waiting 64-byte job%s: %.0f bytes", what, per)
	if per > 1024 {
		t.Fatalf("a waiting job costs %.0f bytes of heap", per)
	}
	return per
}

// TestHeapPerSparseWaitingJob is TestHeapPerWaitingJob with one job per
// millisecond of a fake clock instead of thousands: each waiting job then
// has a millisecond of its own in the queue's count of waits by entry
// time (OldestWaiting), which costs about 30 bytes more per job.
func TestHeapPerSparseWaitingJob(t *testing.T) {
	const jobs = 100_000
	clk := clock.NewFake(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))
	b, _ := New(Config{Clock: clk})
	heapPerJob(t, ", one per millisecond", jobs, func(i int) {
		if _, err := b.Publish(&Message{Queue: "q", Producer: "web", JobType: fmt.Sprint("type-", i%8), Payload: make([]byte, 64)}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Millisecond)
	})
	if w, err := b.Waits("q"); err != nil || w.Oldest != jobs*time.Millisecond {
		t.Errorf("oldest wait %v, %v; want %v", w.Oldest, err, jobs*time.Millisecond)
	}
	runtime.KeepAlive(b)
}

// TestHeapPerScheduledJob reports the heap a 64-byte job published to run
// later costs once it is due and waits in line (an in-process figure): it
// takes its place when due, not when published, which the job keeps in
// itself, to the millisecond after its publish, rather than in a meta of
// its own. It fails only if the cost grows past a generous bound.
func TestHeapPerScheduledJob(t *testing.T) {
	const jobs = 100_000
	clk := clock.NewFake(time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC))
	b, _ := New(Config{Clock: clk})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	batch := make([]*Message, 0, 1000)
	for i := range jobs {
		batch = append(batch, &Message{Queue: "q", Producer: fmt.Sprint("web-", i%4), JobType: fmt.Sprint("type-", i%8),
			Payload: make([]byte, 64), Delay: time.Minute})
		if len(batch) == cap(batch) {
			if _, err := b.Publish(batch...); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	clk.Advance(2 * time.Minute)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if q, err := b.Queue("q"); err != nil || q.Ready != jobs || q.Delayed != 0 {
		t.Fatalf("queue %+v, %v: want %d ready, none delayed", q, err, jobs)
	}
	per := float64(after.HeapAlloc-before.HeapAlloc) / float64(jobs)
	t.Logf("heap per 64-byte job published to run later, once due and waiting: %.0f bytes", per)
	if per > 1024 {
		t.Fatalf("a due scheduled job costs %.0f bytes of heap", per)
	}
	runtime.KeepAlive(b)
}
