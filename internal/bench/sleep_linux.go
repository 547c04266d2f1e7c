package bench

import (
	"syscall"
	"time"
)

// preciseSleep sleeps d with nanosleep, which keeps its promise to within
// tens of microseconds where the runtime's timers round up to a millisecond.
func preciseSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}
