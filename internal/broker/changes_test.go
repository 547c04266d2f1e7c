package broker

import (
	"testing"
	"time"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestChangedWakesWaiters checks that Changed's channel closes at each kind
// of change the inspector shows, including a timer's, and not when the
// inspector is only read.
func TestChangedWakesWaiters(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{Queue: QueueConfig{Lease: 10 * time.Second}})
	steps := []struct {
		what string
		do   func()
	}{
		{"publish", func() { tb.publish(t, msg("q", "j")) }},
		{"subscribe", func() { tb.sub(t, "q", 1) }},
	}
	for _, s := range steps {
		ch := tb.b.Changed()
		if closed(ch) {
			t.Fatalf("before %s: closed with no change", s.what)
		}
		s.do()
		if !closed(ch) {
			t.Errorf("%s did not close the channel", s.what)
		}
	}
	c := tb.sub(t, "q", 1)
	ch := tb.b.Changed()
	d := next(t, c)
	if !closed(ch) {
		t.Error("a delivery did not close the channel")
	}
	ch = tb.b.Changed()
	if _, err := tb.b.Queue("q"); err != nil {
		t.Fatal(err)
	}
	tb.b.Stats()
	if closed(ch) {
		t.Error("reading the inspector closed the channel")
	}
	tb.clk.Advance(10 * time.Second) // the lease expires: redelivery
	if !closed(ch) {
		t.Error("a lease timeout did not close the channel")
	}
	c2 := tb.sub(t, "q", 1) // c spent its credit on the expired delivery
	d2 := next(t, c2)
	ch = tb.b.Changed()
	if err := c2.Ack(d2.ID, time.Millisecond); err != nil || d2.ID != d.ID {
		t.Fatalf("ack of the redelivery %s (first %s): %v", d2.ID, d.ID, err)
	}
	if !closed(ch) {
		t.Error("an ack did not close the channel")
	}
	// Two waiters share one channel; a change after it closed needs a new one.
	a, b := tb.b.Changed(), tb.b.Changed()
	if a != b {
		t.Error("waiters between two changes got different channels")
	}
	tb.publish(t, msg("q", "j"))
	if !closed(a) || closed(tb.b.Changed()) {
		t.Error("the next change did not close the shared channel, or a fresh one came closed")
	}
}
