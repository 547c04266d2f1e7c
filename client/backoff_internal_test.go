package client

import (
	"testing"
	"time"
)

// Waits double from 50 ms up to the cap, each drawn between half and all
// of its step, and spread (clients that lost the broker together come back
// apart); reset starts again from the shortest.
func TestBackoff(t *testing.T) {
	t.Parallel()
	const max = 5 * time.Second
	seen := map[time.Duration]bool{}
	for range 200 {
		b := newBackoff(max)
		step := minBackoff
		for i := range 12 {
			d := b.next()
			if d < step/2 || d > step {
				t.Fatalf("wait %d is %v, want %v to %v", i, d, step/2, step)
			}
			if i == 0 {
				seen[d] = true
			}
			step = min(step*2, max)
		}
		b.reset()
		if d := b.next(); d > minBackoff {
			t.Fatalf("after reset the wait is %v, want at most %v", d, minBackoff)
		}
	}
	if len(seen) < 50 {
		t.Errorf("200 first waits took only %d values: not spread", len(seen))
	}
	done := make(chan struct{})
	close(done)
	if pause(done, time.Hour) {
		t.Error("pause waited out its hour with done closed")
	}
}
