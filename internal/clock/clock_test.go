package clock

import (
	"testing"
	"time"
)

func TestFakeFiresInOrderAtDueTime(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewFake(start)
	var got []time.Duration
	record := func() { got = append(got, c.Now().Sub(start)) }
	c.AfterFunc(3*time.Second, record)
	c.AfterFunc(time.Second, record)
	stopped := c.AfterFunc(2*time.Second, func() { t.Error("stopped timer fired") })
	// A timer armed by a firing timer fires in the same Advance if due.
	c.AfterFunc(1500*time.Millisecond, func() { c.AfterFunc(time.Second, record) })
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop must report true once, then false")
	}
	if c.Pending() != 3 {
		t.Fatalf("pending = %d, want 3", c.Pending())
	}
	c.Advance(10 * time.Second)
	want := []time.Duration{time.Second, 2500 * time.Millisecond, 3 * time.Second}
	if len(got) != len(want) {
		t.Fatalf("fired at %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("fired at %v, want %v", got, want)
		}
	}
	if c.Now().Sub(start) != 10*time.Second || c.Pending() != 0 {
		t.Fatalf("now %v pending %d", c.Now().Sub(start), c.Pending())
	}
}

func TestRealAfterFunc(t *testing.T) {
	t.Parallel()
	done := make(chan struct{})
	Real{}.AfterFunc(time.Millisecond, func() { close(done) })
	<-done
	if tm := (Real{}).AfterFunc(time.Hour, func() {}); !tm.Stop() {
		t.Fatal("Stop of a pending real timer returned false")
	}
}

func TestFakeNext(t *testing.T) {
	t.Parallel()
	start := time.Unix(1000, 0)
	c := NewFake(start)
	if _, ok := c.Next(); ok {
		t.Fatal("Next reports a timer on a clock with none")
	}
	c.AfterFunc(3*time.Second, func() {})
	early := c.AfterFunc(time.Second, func() {})
	if at, ok := c.Next(); !ok || !at.Equal(start.Add(time.Second)) {
		t.Fatalf("Next = %v, %v; want the earliest, 1s on", at, ok)
	}
	early.Stop()
	if at, ok := c.Next(); !ok || !at.Equal(start.Add(3*time.Second)) {
		t.Fatalf("Next = %v, %v after a stop; want 3s on", at, ok)
	}
}
