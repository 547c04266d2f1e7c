package broker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// TestMaxInFlightAgainstModel drives a queue with a limit on its jobs in
// flight through random publishes, deliveries, acks, nacks, returns,
// lease expiries, consumers that go away and redeclared limits. After every
// step: no delivery was made at or over the limit, and a consumer that got
// nothing had a reason to (no credit, nothing ready, or the limit reached).
func TestMaxInFlightAgainstModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(30) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(seed, 31))
			tb := setup(t, Config{})
			limit := 1 + r.IntN(3)
			declare := func() {
				if _, err := tb.b.Declare("q", QueueConfig{MaxInFlight: limit, Lease: 10 * time.Second, MaxAttempts: 100}); err != nil {
					t.Fatal(err)
				}
			}
			declare()
			q, _ := tb.b.lookup("q", false)
			type worker struct {
				c    *Consumer
				held []string
			}
			open := func() *worker {
				c, err := tb.b.Subscribe("q", "w", 1+r.IntN(3))
				if err != nil {
					t.Fatal(err)
				}
				return &worker{c: c}
			}
			ws := []*worker{open(), open(), open(), open()}
			t.Cleanup(func() { // before the broker's shutdown, which waits for what they hold
				for _, w := range ws {
					w.c.Close()
				}
			})
			cancelled, cancel := context.WithCancel(context.Background())
			cancel() // Next then takes what is ready and does not wait
			state := func() (inFlight, ready int) {
				q.mu.Lock()
				defer q.mu.Unlock()
				return q.line.InFlight(), q.line.Len()
			}
			for step := range 400 {
				w := ws[r.IntN(len(ws))]
				switch k := r.IntN(20); {
				case k < 6:
					if _, err := tb.b.Publish(&Message{Queue: "q", Producer: "p", JobType: "t"}); err != nil {
						t.Fatal(err)
					}
				case k < 11:
					before, ready := state()
					q.mu.Lock()
					credit := w.c.credit
					q.mu.Unlock()
					d, err := w.c.Next(cancelled)
					switch {
					case err == nil && before >= limit:
						t.Fatalf("step %d: a delivery with %d in flight, limit %d", step, before, limit)
					case err == nil:
						w.held = append(w.held, d.ID)
					case credit > 0 && ready > 0 && before < limit:
						t.Fatalf("step %d: nothing delivered with credit %d, %d ready and %d in flight (limit %d): %v", step, credit, ready, before, limit, err)
					}
				case k < 16 && len(w.held) > 0:
					id := w.held[0]
					w.held = w.held[1:]
					switch r.IntN(3) {
					case 0:
						_ = w.c.Ack(id, time.Millisecond)
					case 1:
						_ = w.c.Nack(id, NackRequeue, 0, "again")
					default:
						w.c.Return(id)
					}
					w.c.AddCredit(1)
				case k == 16:
					tb.clk.Advance(11 * time.Second)
					for _, w := range ws {
						w.held = nil // their leases ended: the jobs are back in line
					}
				case k == 17:
					i := r.IntN(len(ws))
					ws[i].c.Close()
					ws[i] = open()
				case k == 18:
					limit = 1 + r.IntN(3)
					declare()
				}
			}
		})
	}
}

// TestMaxInFlightWakesAWaitingConsumer: a consumer blocked because the
// queue is at its limit gets the next job as soon as one in flight is
// settled, with nothing new published.
func TestMaxInFlightWakesAWaitingConsumer(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	if _, err := tb.b.Declare("q", QueueConfig{MaxInFlight: 1}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := tb.b.Publish(&Message{Queue: "q", Payload: []byte("job")}); err != nil {
			t.Fatal(err)
		}
	}
	c1, _ := tb.b.Subscribe("q", "one", 1)
	c2, _ := tb.b.Subscribe("q", "two", 1)
	defer c1.Close()
	defer c2.Close()
	first, err := c1.Next(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Delivery, 1)
	go func() {
		if d, err := c2.Next(t.Context()); err == nil {
			got <- d
		}
	}()
	// Wait until c2 waits: in the queue's list of waiters, with nothing.
	q, _ := tb.b.lookup("q", false)
	for deadline := time.Now().Add(10 * time.Second); ; runtime.Gosched() {
		q.mu.Lock()
		waiting := c2.waiting && c2.inWaiters
		q.mu.Unlock()
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second consumer never waited")
		}
	}
	select {
	case d := <-got:
		t.Fatalf("%s delivered with one in flight and a limit of one", d.ID)
	default:
	}
	if err := c1.Ack(first.ID, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		if d.ID == first.ID {
			t.Fatalf("the acked job came again")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting consumer was not woken when the job in flight was acked")
	}
}

// The limit is part of the queue's declaration, so it survives a restart.
func TestMaxInFlightRecovers(t *testing.T) {
	t.Parallel()
	st := store.NewMemory()
	clk := clock.NewFake(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))
	b := durable(t, st, clk, Config{})
	if _, err := b.Declare("q", QueueConfig{MaxInFlight: 2}); err != nil {
		t.Fatal(err)
	}
	crash(b)
	again := durable(t, st, clk, Config{})
	defer crash(again)
	info, err := again.Queue("q")
	if err != nil || info.Config.MaxInFlight != 2 {
		t.Fatalf("recovered queue %+v, %v; want max in flight 2", info.Config, err)
	}
}
