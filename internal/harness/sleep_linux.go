package harness

import (
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// preciseSleep sleeps d on a timerfd that the runtime's network poller
// waits on: the goroutine parks, its P runs other goroutines meanwhile, and
// it wakes when the timer fires, within tens of microseconds, where the
// runtime's own timers round up to a millisecond.
//
// nanosleep is as precise but blocks in a system call that keeps its P.
// With a handler per worker and a goroutine per producer asleep at once on
// two Ps, the harness's network goroutines (the acks, the next deliveries)
// waited until the runtime took a P back, up to milliseconds, and that wait
// was counted as the brokers' turnaround (until 2026-12-06).
func preciseSleep(d time.Duration) {
	if d <= 0 {
		return
	}
	t, ok := timerFDs.Get().(*timerFD)
	if !ok || t == nil {
		var err error
		if t, err = newTimerFD(); err != nil {
			nanosleep(d)
			return
		}
	}
	if err := t.sleep(d); err != nil {
		_ = t.f.Close()
		nanosleep(d)
		return
	}
	timerFDs.Put(t)
}

// PreciseSleepMethod says how preciseSleep sleeps, for the method line.
const PreciseSleepMethod = "on a timerfd the Go runtime's poller waits on"

// timerFDs keeps idle timers for reuse: a sleep costs two system calls, not
// six. A timer the pool drops is closed by its os.File's finalizer.
var timerFDs sync.Pool

type timerFD struct {
	f  *os.File // non-blocking, so its reads go through the poller
	fd int
}

func newTimerFD() (*timerFD, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return &timerFD{f: os.NewFile(uintptr(fd), "timerfd"), fd: fd}, nil
}

// sleep arms the timer for d (which must be positive: zero disarms it) and
// reads its expiry count, parking until the timer fires.
func (t *timerFD) sleep(d time.Duration) error {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(t.fd, 0, &spec, nil); err != nil {
		return err
	}
	var buf [8]byte
	_, err := t.f.Read(buf[:])
	return err
}

// nanosleep is the fallback when no timerfd can be had.
func nanosleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}
