package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// frameCounts counts, on the broker's side of Consume streams, the
// requests and responses that carry several items.
type frameCounts struct {
	settleBatches, settled  atomic.Int64 // ConsumeBatch requests, and their items
	singleSettles           atomic.Int64 // acks and nacks sent alone
	deliveryBatches, inThem atomic.Int64 // DeliveryBatch responses, and their deliveries
	singleDeliveries        atomic.Int64
}

// option is a server option that counts frames into f.
func (f *frameCounts) option() grpc.ServerOption {
	return grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, countingStream{ServerStream: ss, f: f})
	})
}

type countingStream struct {
	grpc.ServerStream
	f *frameCounts
}

func (s countingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if r, ok := m.(*pb.ConsumeRequest); ok && err == nil {
		switch {
		case r.GetBatch() != nil:
			s.f.settleBatches.Add(1)
			s.f.settled.Add(int64(len(r.GetBatch().Acks) + len(r.GetBatch().Nacks)))
		case r.GetAck() != nil || r.GetNack() != nil:
			s.f.singleSettles.Add(1)
		}
	}
	return err
}

func (s countingStream) SendMsg(m any) error {
	if r, ok := m.(*pb.ConsumeResponse); ok {
		switch {
		case r.GetDeliveries() != nil:
			s.f.deliveryBatches.Add(1)
			s.f.inThem.Add(int64(len(r.GetDeliveries().Deliveries)))
		case r.GetDelivery() != nil:
			s.f.singleDeliveries.Add(1)
		}
	}
	return s.ServerStream.SendMsg(m)
}

// A worker with 16 handlers takes the jobs waiting for it in one frame,
// and the acks of handlers that finish together go back in one request;
// every job runs once and is acked.
func TestWorkerBatchesDeliveriesAndAcks(t *testing.T) {
	t.Parallel()
	var f frameCounts
	tb := setupWith(t, broker.Config{}, false, f.option())
	tb.fifo(t, "q")
	const slots, rounds = 16, 4
	var mu sync.Mutex
	ran := map[string]int{}
	started := make(chan struct{}, slots)
	var gate atomic.Pointer[chan struct{}]
	newGate := func() chan struct{} {
		g := make(chan struct{})
		gate.Store(&g)
		return g
	}
	g := newGate()
	runWorker(t, tb.cl, client.WorkerConfig{Queue: "q", Concurrency: slots}, func(_ context.Context, d *client.Delivery) error {
		mu.Lock()
		ran[d.ID]++
		mu.Unlock()
		wait := *gate.Load()
		started <- struct{}{}
		<-wait // the round's handlers finish together
		return nil
	})
	tb.waitFor(t, "the worker", func() bool { return tb.info(t, "q").Consumers == 1 })
	for r := range rounds {
		tb.publish(t, numbered("q", slots)...)
		for range slots {
			within(t, started, "a handler to start")
		}
		next := g
		if r < rounds-1 {
			g = newGate()
		}
		close(next)
		tb.waitFor(t, "the round's acks", func() bool { return tb.info(t, "q").Acked == uint64((r+1)*slots) })
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != slots*rounds {
		t.Fatalf("ran %d jobs, want %d", len(ran), slots*rounds)
	}
	for id, n := range ran {
		if n != 1 {
			t.Fatalf("job %s ran %d times", id, n)
		}
	}
	if f.deliveryBatches.Load() == 0 || f.settleBatches.Load() == 0 {
		t.Fatalf("delivery batches %d, settle batches %d: want both used", f.deliveryBatches.Load(), f.settleBatches.Load())
	}
	if got := f.inThem.Load() + f.singleDeliveries.Load(); got != slots*rounds {
		t.Fatalf("%d deliveries sent, want %d", got, slots*rounds)
	}
	if got := f.settled.Load() + f.singleSettles.Load(); got != slots*rounds {
		t.Fatalf("%d acks received, want %d", got, slots*rounds)
	}
	t.Logf("%d deliveries in %d batches and %d alone; %d acks in %d batches and %d alone",
		f.inThem.Load(), f.deliveryBatches.Load(), f.singleDeliveries.Load(), f.settled.Load(), f.settleBatches.Load(), f.singleSettles.Load())
}

// Against a broker that reports no batches, as one from before them, the
// same worker sends and asks for single items only, and works as ever.
func TestWorkerOnABrokerWithoutBatches(t *testing.T) {
	t.Parallel()
	var f frameCounts
	tb := setupWith(t, broker.Config{}, true, f.option())
	const jobs = 200
	var handled atomic.Int64
	runWorker(t, tb.cl, client.WorkerConfig{Queue: "q", Concurrency: 16}, func(context.Context, *client.Delivery) error {
		handled.Add(1)
		return nil
	})
	tb.publish(t, numbered("q", jobs)...)
	tb.waitFor(t, "every ack", func() bool { return tb.info(t, "q").Acked == jobs })
	if f.deliveryBatches.Load() != 0 || f.settleBatches.Load() != 0 {
		t.Fatalf("delivery batches %d, settle batches %d: want none", f.deliveryBatches.Load(), f.settleBatches.Load())
	}
	if handled.Load() != jobs {
		t.Fatalf("handled %d, want %d", handled.Load(), jobs)
	}
}

// A worker process that dies holding a batch of 16 gets all 16 redelivered
// to the next worker, each once, its attempt counted.
func TestSDKWorkerDyingWithABatch(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	tb.fifo(t, "q")
	ids := tb.publish(t, numbered("q", 16)...)
	dying, _ := dialRecorded(t, tb.addr)
	held := make(chan struct{}, 16)
	runWorker(t, dying, client.WorkerConfig{Queue: "q", Concurrency: 16}, func(ctx context.Context, _ *client.Delivery) error {
		held <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	for range 16 {
		within(t, held, "the dying worker's handlers")
	}
	_ = dying.Close() // the process dies: its connection goes, no nack is sent
	tb.waitFor(t, "the jobs back in line", func() bool { return tb.info(t, "q").Ready == 16 })

	var mu sync.Mutex
	got := map[string][]int{}
	all := make(chan struct{})
	runWorker(t, tb.cl, client.WorkerConfig{Queue: "q", Concurrency: 16}, func(_ context.Context, d *client.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		got[d.ID] = append(got[d.ID], d.Attempt)
		if len(got) == 16 {
			close(all)
		}
		return nil
	})
	within(t, all, "the redeliveries")
	tb.waitFor(t, "16 acks", func() bool { return tb.info(t, "q").Acked == 16 })
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if a := got[id]; len(a) != 1 || a[0] != 2 {
			t.Fatalf("job %s delivered with attempts %v, want once, attempt 2", id, a)
		}
	}
}

// durableBundle is setup on a write-ahead log whose fsyncs the test can
// hold.
func durableBundle(t *testing.T) (*testBundle, *store.FaultFS) {
	t.Helper()
	ffs := &store.FaultFS{}
	st, err := store.OpenFile(t.TempDir(), store.FileOptions{FS: ffs, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return setup(t, broker.Config{Store: st}), ffs
}

// A Producer's window of unanswered publishes: full, a publish blocks
// until an answer frees a place (or its context ends, and the message is
// not sent), or with FailFast is refused at once with ErrFull. Nothing is
// dropped: every message queued is answered with its id once the fsync
// that covers it is done, and none is answered before.
func TestProducerWindowFullBlocksOrFailsFast(t *testing.T) {
	t.Parallel()
	for _, failFast := range []bool{false, true} {
		t.Run(fmt.Sprint("FailFast ", failFast), func(t *testing.T) {
			t.Parallel()
			tb, ffs := durableBundle(t)
			const window = 8
			p := tb.cl.NewProducer(client.ProducerConfig{MaxPending: window, FailFast: failFast})
			defer p.Close()
			held, release := ffs.HoldSyncs()
			defer release()
			var released atomic.Bool
			answered := make(chan client.Result, window)
			for i := range window {
				m := &client.Message{Queue: "q", JobType: fmt.Sprint("job-", i), Payload: []byte("x")}
				if err := p.PublishAsyncResult(m, func(r client.Result) {
					if !released.Load() {
						t.Errorf("answered %+v before its fsync", r)
					}
					answered <- r
				}); err != nil {
					t.Fatalf("publish %d of a window of %d: %v", i, window, err)
				}
			}
			within(t, held, "the fsync")
			extra := &client.Message{Queue: "q", JobType: "extra"}
			if failFast {
				if err := p.PublishAsync(extra, func(string, error) { t.Error("a refused message was answered") }); !errors.Is(err, client.ErrFull) {
					t.Fatalf("publish into a full window: %v, want ErrFull", err)
				}
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				_, err := p.Publish(ctx, extra)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("publish into a full window: %v, want it to wait until its context ends", err)
				}
			}
			// Round trips on the same connection: an answer sent before the
			// fsync would have arrived by now.
			for range 3 {
				if _, err := tb.cl.ListQueues(tb.ctx); err != nil {
					t.Fatal(err)
				}
			}
			released.Store(true)
			release()
			for range window {
				if r := within(t, answered, "an answer"); r.Err != nil || r.ID == "" {
					t.Fatalf("answer %+v, want an id", r)
				}
			}
			// The window has room again.
			if _, err := p.Publish(tb.ctx, extra); err != nil {
				t.Fatal(err)
			}
			if in := tb.info(t, "q"); in.Published != window+1 {
				t.Fatalf("broker stored %d messages, want %d: the window's and the one after", in.Published, window+1)
			}
		})
	}
}

// On a durable broker a publish stream's requests are admitted while an
// earlier one's fsync runs, so the requests a Producer keeps in flight
// share fsyncs instead of taking one each; each is still answered only
// after the fsync that covers it, in order.
func TestDurablePublishStreamSharesFsyncs(t *testing.T) {
	t.Parallel()
	tb, ffs := durableBundle(t)
	// One message to a request, as many requests as the broker admits
	// ahead of their answers.
	const n = maxPipelined
	p := tb.cl.NewProducer(client.ProducerConfig{MaxBatch: 1, Window: n})
	defer p.Close()
	held, release := ffs.HoldSyncs()
	defer release()
	var released atomic.Bool
	answers := make(chan client.Result, n)
	for i := range n {
		m := &client.Message{Queue: "q", JobType: fmt.Sprint("job-", i), Payload: []byte("x")}
		if err := p.PublishAsyncResult(m, func(r client.Result) {
			if !released.Load() {
				t.Errorf("answered %+v before its fsync", r)
			}
			answers <- r
		}); err != nil {
			t.Fatal(err)
		}
	}
	within(t, held, "the first fsync")
	// Every request reaches the broker while that fsync is held: before,
	// the stream waited for its first request's fsync before reading the
	// next.
	tb.waitFor(t, "every publish admitted", func() bool { return tb.info(t, "q").Published == n })
	before := ffs.Syncs()
	released.Store(true)
	release()
	for range n {
		if r := within(t, answers, "an answer"); r.Err != nil || r.ID == "" {
			t.Fatalf("answer %+v, want an id", r)
		}
	}
	if syncs := ffs.Syncs() - before; syncs > 4 {
		t.Errorf("%d fsyncs for %d requests admitted together, want a few", syncs, n)
	}
}
