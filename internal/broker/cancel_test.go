package broker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/store"
)

func TestCancel(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{Queue: QueueConfig{Policy: "fifo"}})
	ids := tb.publish(t, msg("q", "run"), msg("q", "wait"))
	later := tb.publish(t, &Message{Queue: "q", JobType: "later", Delay: time.Hour})[0]
	c := tb.sub(t, "q", 1)
	running := next(t, c)
	for id, want := range map[string]JobState{ids[1]: JobWaiting, later: JobDelayed, running.ID: JobRunning} {
		if got, err := tb.b.Cancel("q", id); err != nil || got != want {
			t.Fatalf("cancel %s: %v, %v; want %v", id, got, err, want)
		}
	}
	// The worker hears of the running one, and its nack drops it.
	if d := next(t, c); !d.Cancel || d.ID != running.ID {
		t.Fatalf("notice = %+v", d)
	}
	if err := c.Nack(running.ID, NackRequeue, 0, "cancelled"); err != nil {
		t.Fatal(err)
	}
	tb.clk.Advance(2 * time.Hour)
	noneReady(t, c)
	in, _ := tb.b.Queue("q")
	if in.Ready+in.Delayed+in.InFlight+in.DeadLetters != 0 || in.Cancelled != 3 {
		t.Fatalf("after cancelling everything: %+v", in)
	}
	if _, err := tb.b.Cancel("q", ids[1]); !errors.Is(err, ErrUnknownMessage) {
		t.Fatalf("second cancel: %v", err)
	}
	if held := tb.b.bytes.Load(); held != 0 {
		t.Fatalf("cancelled jobs still hold %d bytes", held)
	}
}

// A property test of delays and cancellation against a reference model:
// nothing is delivered before it is due, nothing after it was cancelled,
// and nothing is lost, across restarts of a durable broker.
func TestDelaysAndCancelAgainstModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(30) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 11))
			clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			st := store.NewMemory()
			cfg := Config{Queue: QueueConfig{Lease: time.Hour, MaxAttempts: 100}}
			b := durable(t, st, clk, cfg)
			type job struct {
				due       time.Time
				cancelled bool
				done      bool
			}
			model := map[string]*job{}
			var order []string
			c, _ := b.Subscribe("q", "w", 1000)
			drain := func() {
				for {
					ctx, cancel := context.WithCancel(context.Background())
					cancel()
					d, err := c.Next(ctx)
					if err != nil {
						return
					}
					if d.Cancel {
						continue
					}
					j := model[d.ID]
					switch {
					case j == nil:
						t.Fatalf("delivered %s, never published", d.ID)
					case j.cancelled:
						t.Fatalf("delivered %s after it was cancelled", d.ID)
					case clk.Now().Before(j.due):
						t.Fatalf("delivered %s at %v, due %v", d.ID, clk.Now(), j.due)
					case j.done:
						t.Fatalf("delivered %s twice", d.ID)
					}
					j.done = true
					_ = c.Ack(d.ID, time.Millisecond)
					c.AddCredit(1)
				}
			}
			for range 300 {
				switch op := rng.IntN(10); {
				case op < 5:
					delay := time.Duration(rng.IntN(4)) * 10 * time.Second
					ids, err := b.Publish(&Message{Queue: "q", Producer: "p", JobType: "j", Delay: delay})
					if err != nil {
						t.Fatal(err)
					}
					model[ids[0]] = &job{due: clk.Now().Add(delay)}
					order = append(order, ids[0])
				case op < 7 && len(order) > 0:
					id := order[rng.IntN(len(order))]
					if j := model[id]; !j.done && !j.cancelled {
						if _, err := b.Cancel("q", id); err != nil {
							t.Fatalf("cancel %s: %v", id, err)
						}
						j.cancelled = true
					}
				case op < 9:
					clk.Advance(time.Duration(rng.IntN(15)) * time.Second)
					drain()
				default: // crash and restart
					crash(b)
					b = durable(t, st, clk, cfg)
					c, _ = b.Subscribe("q", "w", 1000)
					drain()
				}
			}
			clk.Advance(time.Minute)
			drain()
			for id, j := range model {
				if !j.cancelled && !j.done {
					t.Fatalf("job %s lost (due %v)", id, j.due)
				}
			}
		})
	}
}

func TestRetryPolicy(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{Queue: QueueConfig{RetryBase: 10 * time.Second, RetryMax: 40 * time.Second, RetryJitter: 0.2}})
	tb.publish(t, msg("q", "a"))
	// The curve itself is delivery's TestBackoff.
	// Through a nack: held back, then delivered again.
	c := tb.sub(t, "q", 1)
	d := next(t, c)
	if err := c.Nack(d.ID, NackRetry, 0, "boom"); err != nil {
		t.Fatal(err)
	}
	c.AddCredit(1)
	tb.clk.Advance(8*time.Second - time.Millisecond)
	noneReady(t, c)
	tb.clk.Advance(4 * time.Second)
	if d2 := next(t, c); d2.ID != d.ID || d2.Attempt != 2 {
		t.Fatalf("retry: %+v", d2)
	}
}
