package server

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// A worker renews the lease of a job that runs longer than the lease it
// was delivered with: on the broker's clock the job outlives that lease
// twice over, yet it is delivered once, stays with the worker and is
// acked once. Then the next job, on the same worker, is renewed too (the
// worker's renewal does not stop at its first job).
func TestWorkerRenewsLongJobsLease(t *testing.T) {
	clk := fakeClock()
	const lease = 10 * time.Second
	tb := setup(t, broker.Config{Clock: clk, Queue: broker.QueueConfig{Lease: lease}})
	if _, err := tb.b.Declare("long", broker.QueueConfig{Lease: lease}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan string)
	release := make(chan struct{})
	var mu sync.Mutex
	runs := map[string]int{}
	done := make(chan error, 1)
	go func() {
		done <- tb.cl.RunWorker(ctx, client.WorkerConfig{Queue: "long", Name: "w", LeaseExtend: 2 * time.Millisecond},
			func(_ context.Context, d *client.Delivery) error {
				mu.Lock()
				runs[d.ID]++
				mu.Unlock()
				started <- d.ID
				<-release
				return nil
			})
	}()
	for round := range 2 {
		ids, err := tb.cl.Publish(ctx, &client.Message{Queue: "long", Producer: "p", JobType: "report", Payload: make([]byte, 2048)})
		if err != nil {
			t.Fatal(err)
		}
		id := ids[0]
		if got := <-started; got != id {
			t.Fatalf("round %d: started %s, want %s", round, got, id)
		}
		first := tb.deadline(t, "long", id)
		// Three times most of a lease on the broker's clock, each time
		// waiting for the worker to renew past the lease it had.
		for step := range 3 {
			clk.Advance(lease * 8 / 10)
			want := clk.Now().Add(lease)
			tb.waitFor(t, "a renewed lease", func() bool { return !tb.deadline(t, "long", id).Before(want) })
			if step == 0 && !tb.deadline(t, "long", id).After(first) {
				t.Fatalf("round %d: the lease did not move", round)
			}
		}
		// Past the first lease by far, and still the worker's.
		if in := tb.info(t, "long"); in.InFlight != 1 || in.Ready != 0 {
			t.Fatalf("round %d: %d in flight, %d ready, want the one job in flight", round, in.InFlight, in.Ready)
		}
		release <- struct{}{}
		tb.waitFor(t, "the ack", func() bool { in := tb.info(t, "long"); return in.InFlight == 0 && in.Ready == 0 })
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		if n != 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}
	if len(runs) != 2 {
		t.Errorf("%d jobs ran, want 2", len(runs))
	}
}

// deadline is when the lease of the in-flight job id ends.
func (tb *testBundle) deadline(t testing.TB, queue, id string) time.Time {
	t.Helper()
	js, err := tb.b.InFlightJobs(queue, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range js {
		if j.ID == id {
			return j.Deadline
		}
	}
	t.Fatalf("%s is not in flight", id)
	return time.Time{}
}
