package harness

import (
	"math"
	"testing"
	"time"
)

// A wait counts only when the worker had finished a message before and the
// message it then got was surely at the broker when it came free.
func TestTurnaroundsCountOnlyWaitingWork(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	at := func(us int) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }
	var ts turnarounds
	ts = ts.add(time.Time{}, at(0), at(10_000))     // first message: nothing to measure from
	ts = ts.add(at(10_000), at(9_000), at(10_300))  // sent 1 ms before: maybe still on its way
	ts = ts.add(at(10_000), at(12_000), at(12_500)) // sent after: the worker was idle
	ts = ts.add(at(20_000), at(5_000), at(20_250))  // waiting: 250 µs
	ts = ts.add(at(30_000), at(27_999), at(30_650)) // sent 2.001 ms before: 650 µs
	ts = ts.add(at(40_000), at(38_000), at(40_100)) // exactly the margin: not surely waiting
	if len(ts) != 2 || ts[0] != 250*time.Microsecond || ts[1] != 650*time.Microsecond {
		t.Fatalf("counted %v, want [250µs 650µs]", []time.Duration(ts))
	}
	mean, p99 := ts.stats()
	if mean != 450 || p99 < 250 || p99 > 650 {
		t.Errorf("mean %v µs, P99 %v µs; want 450 and a value between the two", mean, p99)
	}
	// 900 µs of waits over 2 workers x 9 ms of wall: 5%.
	if got := ts.share(2, 9*time.Millisecond); math.Abs(got-0.05) > 1e-12 {
		t.Errorf("share %v, want 0.05", got)
	}
	if got := ts.share(0, time.Second); !math.IsNaN(got) {
		t.Errorf("share with no workers %v, want NaN", got)
	}
	if m, p := turnarounds(nil).stats(); !math.IsNaN(m) || !math.IsNaN(p) {
		t.Errorf("no waits: got %v, %v; want NaN", m, p)
	}
}
