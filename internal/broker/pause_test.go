package broker

import (
	"context"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/store"
)

func TestPauseHoldsDeliveriesNotPublishes(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	tb.publish(t, msg("q", "a"))
	c := tb.sub(t, "q", 2)
	d := next(t, c)
	if err := tb.b.Pause("q", true); err != nil {
		t.Fatal(err)
	}
	tb.publish(t, msg("q", "b")) // still taken
	noneReady(t, c)
	if err := c.Ack(d.ID, time.Millisecond); err != nil { // in flight finishes
		t.Fatal(err)
	}
	if in, _ := tb.b.Queue("q"); !in.Paused || in.Ready != 1 {
		t.Fatalf("paused queue: %+v", in)
	}
	// A consumer blocked in Next is woken by the resume.
	got := make(chan Delivery, 1)
	go func() {
		d, err := c.Next(context.Background())
		if err == nil {
			got <- d
		}
	}()
	if err := tb.b.Pause("q", false); err != nil {
		t.Fatal(err)
	}
	if d := <-got; d.JobType != "b" {
		t.Fatalf("after resume: %+v", d)
	}
	if err := tb.b.Pause("nope", false); err == nil {
		t.Fatal("resumed a queue that does not exist")
	}
	// Pausing one that does not exist yet makes it, paused: its first
	// jobs wait.
	if err := tb.b.Pause("later", true); err != nil {
		t.Fatalf("pausing a queue before its first job: %v", err)
	}
	if in, err := tb.b.Queue("later"); err != nil || !in.Paused {
		t.Fatalf("Queue(later) = %+v, %v; want it paused", in, err)
	}
}

func TestPauseSurvivesRestart(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store, clk *clock.Fake) {
		b := durable(t, st, clk, Config{})
		if _, err := b.Publish(msg("q", "a")); err != nil {
			t.Fatal(err)
		}
		if err := b.Pause("q", true); err != nil {
			t.Fatal(err)
		}
		r := durable(t, st, clk, Config{})
		if in, _ := r.Queue("q"); !in.Paused || in.Ready != 1 {
			t.Fatalf("after restart: %+v", in)
		}
		// A checkpoint keeps it too.
		if err := r.Checkpoint(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := r.Pause("q", false); err != nil {
			t.Fatal(err)
		}
		if in, _ := durable(t, st, clk, Config{}).Queue("q"); in.Paused {
			t.Fatalf("resumed queue came back paused: %+v", in)
		}
	})
}
