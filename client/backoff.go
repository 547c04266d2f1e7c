package client

import (
	"math/rand/v2"
	"time"
)

// backoff spaces out the tries of something the broker cannot do for now
// (it is restarting, or unreachable): the wait doubles from minBackoff up
// to its max, and each one is drawn at random between half and all of it,
// so that the many clients that lost a broker together do not all come
// back at the same instant.
type backoff struct {
	cur, max time.Duration
}

const minBackoff = 50 * time.Millisecond

func newBackoff(max time.Duration) backoff { return backoff{cur: minBackoff, max: max} }

// next is the wait before the next try.
func (b *backoff) next() time.Duration {
	d := b.cur/2 + rand.N(b.cur/2+1)
	b.cur = min(b.cur*2, b.max)
	return d
}

// reset starts again from the shortest wait, after a success.
func (b *backoff) reset() { b.cur = minBackoff }

// pause waits d, and reports false if done closed first.
func pause(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return false
	case <-t.C:
		return true
	}
}
