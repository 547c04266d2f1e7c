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
