package delivery

import (
	"time"

	"github.com/harbinger-mq/harbinger/internal/store"
)

func (l *Line) expire(now time.Time) {
	l.expBuf = l.waiting().Expire(now, l.expBuf[:0])
	for i, it := range l.expBuf {
		l.unwait(jobOf(it))
		l.Stats.Expired++
		l.deadLetter(jobOf(it), now, "expired")
		l.expBuf[i] = nil
	}
}

// NextDeadline is the earliest moment the Line has work of its own: a lease
// ending, a TTL passing, a delayed job coming due, or under limits a rate
// limit's bucket refilling or a reservation lapsing.
func (l *Line) NextDeadline() (time.Time, bool) {
	var at time.Time
	earliest := func(t time.Time) {
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	if j := l.leases.min(); j != nil {
		earliest(fromNanos(j.deadline()))
	}
	if t, ok := l.waiting().NextExpiry(); ok {
		earliest(t)
	}
	if l.fq != nil {
		if t, ok := l.fq.NextWake(); ok {
			earliest(t) // a bucket refilled, a reservation lapsed
		}
	}
	if j := l.delayed.min(); j != nil {
		earliest(fromNanos(j.deadline()))
	}
	return at, !at.IsZero()
}

// Tick does what has come due by now: leases that ended go back in line
// (or to the dead letters), jobs whose TTL passed expire, delayed jobs
// join the line.
func (l *Line) Tick(now time.Time) {
	for j := l.leases.min(); j != nil && j.deadline() <= nanos(now); j = l.leases.min() {
		l.settle(j, now)
		l.retry(j, now, "lease expired")
	}
	if at, ok := l.waiting().NextExpiry(); ok && !at.After(now) {
		l.expire(now)
	}
	if l.fq != nil {
		l.Fx.Ready += l.fq.Wake(now)
	}
	for j := l.delayed.min(); j != nil && j.deadline() <= nanos(now); j = l.delayed.min() {
		l.delayed.remove(j)
		j.setDeadline(0)
		l.releaseLost(j, now)
		if j.is(flagScheduled) {
			// A scheduled job enters as if published now, behind every
			// job in line; its record says the place it got.
			j.item.ID = l.nextID()
			l.enter(j, now)
			l.log(func(r *store.Record) { l.fill(r, j, store.Ready, "", time.Time{}) })
		}
		l.push(j, now)
	}
}

// RunNow makes delayed jobs due at once: each named one that waits for a
// due time (published to run later, or nacked with a delay to retry) joins
// the line as if its time had come now. Ids the line holds in another
// state, or not at all, are skipped. It says how many it moved.
func (l *Line) RunNow(ids []string, now time.Time) int {
	n := 0
	for _, id := range ids {
		j, state := l.Find(id)
		if state != Delayed {
			continue
		}
		l.delayed.remove(j)
		j.setDeadline(nanos(now))
		// The delay record again, due now: a restart finds it due, as
		// Tick leaves it.
		l.log(func(r *store.Record) {
			*r = store.Record{Kind: store.KindDelay, Queue: l.name, ID: j.ID(), At: now}
		})
		l.delayed.push(j)
		n++
	}
	if n > 0 {
		l.Tick(now)
	}
	return n
}
