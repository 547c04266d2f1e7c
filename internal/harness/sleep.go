package harness

import "time"

// coarseSlack is how far short of a deadline the harness stops trusting the
// runtime's timers, whose resolution is about a millisecond: a scaled
// workload asks handlers to sleep a few hundred microseconds.
const coarseSlack = 1500 * time.Microsecond

// SleepUntil blocks until deadline or ctx-like cancellation through done.
// It sleeps on the runtime timer while the deadline is far and finishes with
// a precise OS sleep, so a 400 µs handler takes about 400 µs, not 1 ms.
func SleepUntil(deadline time.Time, done <-chan struct{}) bool {
	for {
		r := time.Until(deadline)
		if r <= 0 {
			return true
		}
		if r > coarseSlack+500*time.Microsecond {
			t := time.NewTimer(r - coarseSlack)
			select {
			case <-done:
				t.Stop()
				return false
			case <-t.C:
			}
			continue
		}
		select {
		case <-done:
			return false
		default:
		}
		preciseSleep(r)
	}
}
