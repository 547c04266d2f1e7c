package server

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// A worker that holds more deliveries than it runs (Prefetch above
// Concurrency) still hears the broker's cancel notices while a delivery
// waits for a handler: the running job's handler is cancelled, the
// waiting job that was cancelled never reaches a handler, and the worker
// carries on with the next job. Before, the goroutine that reads the
// stream sat handing the waiting delivery over, so no notice was read
// until the running job ended by itself.
func TestWorkerCancelWhileDeliveryWaits(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	payload := bytes.Repeat([]byte("größe-"), 1<<10) // 7 KiB of non-ASCII text
	ids, err := tb.cl.Publish(tb.ctx,
		&client.Message{Queue: "videos", Producer: "web", JobType: "transcode", Payload: payload},
		&client.Message{Queue: "videos", Producer: "web", JobType: "thumbnail", Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	running, waiting := ids[0], ids[1]
	cl, rec := dialRecorded(t, tb.addr)
	started := make(chan string, 4)
	causes := make(chan error, 4)
	var mu sync.Mutex
	ran := map[string]int{}
	stop := runWorker(t, cl, client.WorkerConfig{Queue: "videos", Concurrency: 1, Prefetch: 3}, func(ctx context.Context, d *client.Delivery) error {
		mu.Lock()
		ran[d.ID]++
		mu.Unlock()
		if !bytes.Equal(d.Payload, payload) && d.JobType != "next" {
			t.Errorf("%s: payload of %d bytes changed", d.ID, len(d.Payload))
		}
		started <- d.ID
		if d.JobType == "next" {
			return nil
		}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	})
	if got := within(t, started, "the first job"); got != running {
		t.Fatalf("started %s, want %s", got, running)
	}
	tb.waitFor(t, "the second job delivered to the busy worker", func() bool { return tb.info(t, "videos").InFlight == 2 })
	for _, id := range []string{waiting, running} {
		if st, err := tb.cl.CancelJob(tb.ctx, "videos", id); err != nil || st != "running" {
			t.Fatalf("cancel %s: %q, %v", id, st, err)
		}
	}
	if cause := within(t, causes, "the running handler's cancellation"); !errors.Is(cause, client.ErrCancelled) {
		t.Fatalf("cause = %v, want ErrCancelled", cause)
	}
	tb.waitFor(t, "both cancelled jobs settled", func() bool { return tb.info(t, "videos").InFlight == 0 })

	next, err := tb.cl.Publish(tb.ctx, &client.Message{Queue: "videos", Producer: "web", JobType: "next"})
	if err != nil {
		t.Fatal(err)
	}
	if got := within(t, started, "the next job"); got != next[0] {
		t.Fatalf("started %s, want %s (the cancelled waiting job ran)", got, next[0])
	}
	tb.waitFor(t, "the next job's ack", func() bool { return tb.info(t, "videos").Acked == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rec.noReconnects(t)
	if in := tb.info(t, "videos"); in.Cancelled != 2 || in.Ready != 0 || in.DeadLetters != 0 || in.Redelivered != 0 {
		t.Fatalf("queue: %s; cancelled %d", counts(in), in.Cancelled)
	}
	mu.Lock()
	defer mu.Unlock()
	if ran[running] != 1 || ran[waiting] != 0 || ran[next[0]] != 1 {
		t.Fatalf("handler runs = %v; want the waiting job never run", ran)
	}
}

// A delivery that waits for a free handler (Prefetch above Concurrency)
// keeps its lease: while the one handler runs a job for three times most
// of a lease on the broker's clock, the worker renews the lease of the job
// waiting behind it, which then runs once, is acked once and is never
// redelivered. Before, only running jobs were renewed, so a job waiting
// longer than its lease went back to the queue while the worker still
// meant to run it: it ran twice and its first ack was refused.
func TestWorkerRenewsWaitingDeliveries(t *testing.T) {
	t.Parallel()
	clk := fakeClock()
	const lease = 10 * time.Second
	tb := setup(t, broker.Config{Clock: clk, Queue: broker.QueueConfig{Lease: lease}})
	payload := bytes.Repeat([]byte{0xff, 0x00, 'x'}, 2<<10) // binary, 6 KiB
	ids, err := tb.cl.Publish(tb.ctx,
		&client.Message{Queue: "reports", Producer: "büro", JobType: "long", Payload: payload},
		&client.Message{Queue: "reports", Producer: "büro", JobType: "behind", Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	first, behind := ids[0], ids[1]
	cl, rec := dialRecorded(t, tb.addr)
	reqErrs := make(chan *client.RequestError, 8)
	started := make(chan string, 4)
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseFirst := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseFirst() // a failing test lets the handler, and so RunWorker, return
	var mu sync.Mutex
	ran := map[string]int{}
	stop := runWorker(t, cl, client.WorkerConfig{
		Queue: "reports", Concurrency: 1, Prefetch: 2, LeaseExtend: 2 * time.Millisecond,
		OnRequestError: func(err *client.RequestError) { reqErrs <- err },
	}, func(_ context.Context, d *client.Delivery) error {
		mu.Lock()
		ran[d.ID]++
		mu.Unlock()
		started <- d.ID
		if d.ID == first {
			<-release
		}
		return nil
	})
	if got := within(t, started, "the first job"); got != first {
		t.Fatalf("started %s, want %s", got, first)
	}
	tb.waitFor(t, "the second job delivered to the busy worker", func() bool { return tb.info(t, "reports").InFlight == 2 })
	for range 3 {
		clk.Advance(lease * 8 / 10)
		want := clk.Now().Add(lease)
		for _, id := range ids {
			tb.waitFor(t, "the leases of both jobs renewed", func() bool { return !tb.deadline(t, "reports", id).Before(want) })
		}
	}
	if in := tb.info(t, "reports"); in.InFlight != 2 || in.Ready != 0 || in.Redelivered != 0 {
		t.Fatalf("after three leases' worth of waiting: %s", counts(in))
	}
	releaseFirst()
	if got := within(t, started, "the waiting job"); got != behind {
		t.Fatalf("started %s, want %s", got, behind)
	}
	tb.waitFor(t, "both acks", func() bool { return tb.info(t, "reports").Acked == 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rec.noReconnects(t)
	close(reqErrs)
	for re := range reqErrs {
		t.Errorf("the broker refused a request: %v", re)
	}
	if in := tb.info(t, "reports"); in.Delivered != 2 || in.Redelivered != 0 || in.Ready != 0 || in.InFlight != 0 {
		t.Fatalf("queue: %s", counts(in))
	}
	mu.Lock()
	defer mu.Unlock()
	if ran[first] != 1 || ran[behind] != 1 {
		t.Fatalf("handler runs = %v, want each job once", ran)
	}
}

// Closing the Client stops its workers, as Client.Close says: RunWorker
// returns ErrClientClosed instead of reconnecting forever on a
// connection that can never work again.
func TestWorkerStopsWhenClientCloses(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	cl, err := client.Dial(context.Background(), tb.addr, client.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	handled := make(chan string, 1)
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		done <- cl.RunWorker(ctx, client.WorkerConfig{Queue: "e-mails", Concurrency: 2}, func(_ context.Context, d *client.Delivery) error {
			handled <- string(d.Payload)
			return nil
		})
	}()
	if _, err := tb.cl.Publish(tb.ctx, &client.Message{Queue: "e-mails", JobType: "willkommen", Payload: []byte("Grüße")}); err != nil {
		t.Fatal(err)
	}
	if got := within(t, handled, "the job"); got != "Grüße" {
		t.Fatalf("handled %q", got)
	}
	tb.waitFor(t, "the ack", func() bool { return tb.info(t, "e-mails").Acked == 1 })
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	if err := within(t, done, "RunWorker to return after Close"); !errors.Is(err, client.ErrClientClosed) {
		t.Fatalf("RunWorker = %v, want ErrClientClosed", err)
	}
	tb.waitFor(t, "the consumer gone", func() bool { return tb.info(t, "e-mails").Consumers == 0 })
}

// A handler that calls runtime.Goexit (t.FailNow in a handler under test,
// say) ends its goroutine past any recover. The worker still settles the
// job as a failure, so the broker retries it at once rather than when its
// lease runs out, and the slot goes on taking jobs: with one slot, the
// next job runs too. Before, the job sat in flight for its whole lease
// and the worker never ran another.
func TestWorkerHandlerGoexit(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	payload := bytes.Repeat([]byte("\xffnot utf-8 ✗"), 400) // 5 KiB, invalid UTF-8 included
	ids, err := tb.cl.Publish(tb.ctx,
		&client.Message{Queue: "mail", Producer: "web", JobType: "exits", Payload: payload},
		&client.Message{Queue: "mail", Producer: "web", JobType: "send", Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	cl, rec := dialRecorded(t, tb.addr)
	acked := make(chan string, 4)
	stop := runWorker(t, cl, client.WorkerConfig{Queue: "mail", Concurrency: 1}, func(ctx context.Context, d *client.Delivery) error {
		if !bytes.Equal(d.Payload, payload) {
			t.Errorf("%s: payload of %d bytes changed", d.ID, len(d.Payload))
		}
		if d.JobType == "exits" && d.Attempt == 1 {
			runtime.Goexit()
		}
		acked <- d.ID
		return nil
	})
	got := map[string]bool{within(t, acked, "a job after the Goexit"): true, within(t, acked, "the second job"): true}
	if !got[ids[0]] || !got[ids[1]] {
		t.Fatalf("ran %v, want both %v", got, ids)
	}
	tb.waitFor(t, "both acks", func() bool { return tb.info(t, "mail").Acked == 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rec.noReconnects(t)
	if in := tb.info(t, "mail"); in.Nacked != 1 || in.Redelivered != 1 || in.InFlight != 0 || in.Ready != 0 || in.DeadLetters != 0 {
		t.Fatalf("queue: %s; nacked %d", counts(in), in.Nacked)
	}
}
