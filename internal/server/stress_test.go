package server

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// TestManyProducersWorkersWithKills publishes stressMessages jobs from 4
// producers to 8 workers, kills a random worker abruptly (its connection
// dropped mid-job) every few thousand completions and starts a replacement,
// and proves every job completed at least once and nothing is left behind.
func TestManyProducersWorkersWithKills(t *testing.T) {
	t.Parallel()
	const (
		producers = 4
		workers   = 8
		kills     = 12
	)
	n := stressMessages
	tb := setup(t, broker.Config{})
	if _, err := tb.ac.DeclareQueue(tb.ctx, &pb.DeclareQueueRequest{Name: "stress", Config: &pb.QueueConfig{MaxAttempts: 1000}}); err != nil {
		t.Fatal(err)
	}

	completed := make([]atomic.Uint32, n)
	var distinct atomic.Int64
	allDone := make(chan struct{})
	killNow := make(chan struct{}, kills)
	handler := func(_ context.Context, d *client.Delivery) error {
		i := binary.BigEndian.Uint64(d.Payload)
		if completed[i].Add(1) == 1 {
			c := distinct.Add(1)
			if c%int64(n/(kills+1)) == 0 {
				select {
				case killNow <- struct{}{}:
				default:
				}
			}
			if c == int64(n) {
				close(allDone)
			}
		}
		return nil
	}

	type worker struct {
		cl     *client.Client
		cancel context.CancelFunc
		done   chan struct{}
	}
	start := func(id int) *worker {
		cl, err := client.Dial(context.Background(), tb.addr, client.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		w := &worker{cl: cl, cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(w.done)
			_ = cl.RunWorker(ctx, client.WorkerConfig{Queue: "stress", Concurrency: 2, Prefetch: 4, Name: "w"}, handler)
		}()
		return w
	}
	kill := func(w *worker) {
		_ = w.cl.Close() // abrupt: the stream dies with jobs in flight
		w.cancel()
		<-w.done
	}
	ws := make([]*worker, workers)
	for i := range ws {
		ws[i] = start(i)
	}

	var pubWG sync.WaitGroup
	var pubErrs atomic.Int64
	for p := range producers {
		pubWG.Go(func() {
			cl, err := client.Dial(context.Background(), tb.addr)
			if err != nil {
				pubErrs.Add(1)
				return
			}
			defer cl.Close()
			pr := cl.NewProducer(client.ProducerConfig{})
			var acked sync.WaitGroup
			for i := p; i < n; i += producers {
				payload := binary.BigEndian.AppendUint64(nil, uint64(i))
				acked.Add(1)
				err := pr.PublishAsync(&client.Message{Queue: "stress", Producer: "p", JobType: "j", Payload: payload}, func(_ string, err error) {
					if err != nil {
						pubErrs.Add(1)
					}
					acked.Done()
				})
				if err != nil {
					pubErrs.Add(1)
					acked.Done()
				}
			}
			acked.Wait()
			_ = pr.Close()
		})
	}

	rng := rand.New(rand.NewPCG(1, 2))
	killed := 0
loop:
	for {
		select {
		case <-killNow:
			i := rng.IntN(workers)
			kill(ws[i])
			ws[i] = start(i)
			killed++
		case <-allDone:
			break loop
		}
	}
	pubWG.Wait()
	if e := pubErrs.Load(); e != 0 {
		t.Fatalf("%d publishes failed", e)
	}
	// Duplicates of jobs whose ack died with a killed worker may still be
	// running; wait for the queue to settle.
	tb.waitFor(t, "the queue to drain", func() bool {
		in := tb.info(t, "stress")
		return in.Ready == 0 && in.InFlight == 0 && in.Delayed == 0 && in.Acked == uint64(n)
	})
	for _, w := range ws {
		w.cancel()
		<-w.done
		_ = w.cl.Close()
	}
	in := tb.info(t, "stress")
	dups := 0
	for i := range completed {
		switch c := completed[i].Load(); {
		case c == 0:
			t.Fatalf("job %d never completed", i)
		case c > 1:
			dups++
		}
	}
	if in.Published != uint64(n) || in.DeadLetters != 0 {
		t.Fatalf("published %d dead letters %d", in.Published, in.DeadLetters)
	}
	t.Logf("%d jobs, %d workers killed, %d redeliveries, %d jobs ran twice or more", n, killed, in.Redelivered, dups)
}
