package broker

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestCreditUnderConcurrency drives the consumer shell the way the server
// does, from two goroutines per consumer: one loops on Next, the other
// acks what was delivered and gives the credit back, with AddCreditTake
// (taking a ready job itself) or AddCredit at random. Publishers add jobs
// meanwhile. Against the plain accounting of a credit protocol: every job
// is delivered exactly once, no consumer ever holds more than its
// prefetch, every job is acked in the end, and every consumer ends with
// its credit back, waiting for the next publish (a final round of jobs
// reaches each).
func TestCreditUnderConcurrency(t *testing.T) {
	t.Parallel()
	for _, prefetch := range []int{1, 3} {
		t.Run(fmt.Sprint("prefetch ", prefetch), func(t *testing.T) {
			t.Parallel()
			const consumers, publishers, jobs = 4, 3, 3000
			tb := setup(t, Config{})
			var (
				cs    []*Consumer
				helds []chan Delivery
				outs  [consumers]atomic.Int64 // delivered to each, not yet acked
			)
			var (
				mu        sync.Mutex
				delivered = map[string]int{}
				acked     atomic.Int64
				wg        sync.WaitGroup // the Next loops
				ackers    sync.WaitGroup
			)
			all := make(chan struct{})
			for ci := range consumers {
				c := tb.sub(t, "q", prefetch)
				cs = append(cs, c)
				held := make(chan Delivery, prefetch+1)
				helds = append(helds, held)
				out := &outs[ci]
				got := func(d Delivery) {
					if n := out.Add(1); n > int64(prefetch) {
						t.Errorf("consumer %d holds %d jobs, prefetch %d", ci, n, prefetch)
					}
					mu.Lock()
					delivered[d.ID]++
					mu.Unlock()
					held <- d
				}
				wg.Go(func() {
					for {
						d, err := c.Next(tb.ctx)
						if err != nil {
							return
						}
						got(d)
					}
				})
				ackers.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(ci), uint64(prefetch)))
					for {
						var d Delivery
						select {
						case d = <-held:
						case <-all:
							return
						}
						out.Add(-1)
						if err := c.Ack(d.ID, time.Millisecond); err != nil {
							t.Error(err)
						}
						if acked.Add(1) == jobs {
							close(all)
						}
						if rng.IntN(2) == 0 {
							c.AddCredit(1)
						} else if d, ok := c.AddCreditTake(1); ok {
							got(d)
						}
					}
				})
			}
			var pwg sync.WaitGroup
			for p := range publishers {
				pwg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(p), 99))
					for sent := 0; sent < jobs/publishers; {
						n := min(1+rng.IntN(8), jobs/publishers-sent)
						ms := make([]*Message, n)
						for i := range ms {
							ms[i] = msg("q", fmt.Sprintf("p%d", p))
						}
						tb.publish(t, ms...)
						sent += n
					}
				})
			}
			pwg.Wait()
			<-all
			ackers.Wait()
			// Every consumer has its credit back and waits for a publish:
			// as many new jobs as the consumers' credit all go out, each
			// consumer taking its prefetch (one left out of the queue's
			// waiters would leave jobs ready and itself short).
			tb.publish(t, func() []*Message {
				ms := make([]*Message, consumers*prefetch)
				for i := range ms {
					ms[i] = msg("q", "last")
				}
				return ms
			}()...)
			deadline := time.Now().Add(10 * time.Second) // a bound for failing, not a wait
			for i := range cs {
				for outs[i].Load() < int64(prefetch) {
					if time.Now().After(deadline) {
						t.Fatalf("consumer %d got %d of its %d last jobs", i, outs[i].Load(), prefetch)
					}
					runtime.Gosched()
				}
			}
			for i, c := range cs {
				for range prefetch {
					if err := c.Ack((<-helds[i]).ID, time.Millisecond); err != nil {
						t.Fatal(err)
					}
				}
			}
			tb.b.Shutdown(t.Context()) // ends the Next loops
			wg.Wait()
			if len(delivered) != jobs+consumers*prefetch {
				t.Fatalf("%d distinct jobs delivered, want %d", len(delivered), jobs+consumers*prefetch)
			}
			for id, n := range delivered {
				if n != 1 {
					t.Fatalf("job %s delivered %d times", id, n)
				}
			}
		})
	}
}
