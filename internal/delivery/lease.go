package delivery

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/harbinger-mq/harbinger/internal/store"
)

// Attach makes a new Holder, for a consumer that will take deliveries.
func (l *Line) Attach() Holder {
	l.holders++
	return l.holders
}

// Held is how many jobs h holds: O(jobs in flight).
func (l *Line) Held(h Holder) int {
	n := 0
	for _, f := range l.held {
		if f.holder == h {
			n++
		}
	}
	return n
}

// flight is a job in flight: who holds it, and since when.
type flight struct {
	job    *Job
	holder Holder
	leased int64 // Unix nanoseconds
}

// Flight reports who holds j and since when its current delivery started,
// or false if j is not in flight.
func (l *Line) Flight(j *Job) (Holder, time.Time, bool) {
	f, ok := l.held[j.ID()]
	if !ok || f.job != j {
		return 0, time.Time{}, false
	}
	return f.holder, time.Unix(0, f.leased), true
}

// Deliver pops the next job for h, if one is ready, and leases it.
func (l *Line) Deliver(h Holder, now time.Time) *Job {
	w := l.waiting()
	if w.Len() == 0 {
		return nil
	}
	if at, ok := w.NextExpiry(); ok && !at.After(now) {
		l.expire(now)
	}
	it := w.Pop(now)
	if it == nil {
		return nil
	}
	j := jobOf(it)
	l.unwait(j)
	if l.fq != nil && len(l.cfg.Fair.Rates) > 0 {
		// The start time, for recovery to take it from the rate buckets
		// again (see RatesRecord).
		l.log(func(r *store.Record) { r.Kind, r.Queue, r.ID, r.At = store.KindDeliver, l.name, j.ID(), now })
	} else {
		l.logID(store.KindDeliver, j)
	}
	if j.attempt < math.MaxUint16 {
		j.attempt++
	}
	j.setDeadline(nanos(now.Add(l.cfg.Lease)))
	l.leases.push(j)
	l.held[j.ID()] = flight{job: j, holder: h, leased: now.UnixNano()}
	l.Stats.Delivered++
	if j.attempt > 1 {
		l.Stats.Redelivered++
	}
	return j
}

// heldBy is the job id that h holds, or nil.
func (l *Line) heldBy(h Holder, id string) *Job {
	if f, ok := l.held[id]; ok && f.holder == h {
		return f.job
	}
	return nil
}

// settle takes an in-flight job away from its holder at now. Under
// limits its keys may start another job: as many consumers may be woken.
func (l *Line) settle(j *Job, now time.Time) {
	l.leases.remove(j)
	delete(l.held, j.ID())
	l.Fx.Settled++
	if l.fq != nil {
		l.Fx.Ready += l.fq.Done(&j.item, now)
	}
}

// Ack settles a delivery as done and teaches the predictor that it took
// d. It returns the job. A duration of zero, negative or over
// Config.MaxDuration acks the job all the same and returns
// ErrBadDuration: a job is never lost or redelivered for a clock glitch.
func (l *Line) Ack(h Holder, id string, d time.Duration, now time.Time) (*Job, error) {
	j := l.heldBy(h, id)
	if j == nil {
		return nil, ErrNotHeld
	}
	l.settle(j, now)
	l.release(j)
	l.Stats.Acked++
	if j.is(flagCancelled) {
		l.logID(store.KindRemove, j) // it ran anyway; nothing to learn from a cut-short run
		l.done.add(l.cfg.KeepDone, j, l.namesOf(j), Cancelled, 0, now)
		return j, nil
	}
	l.done.add(l.cfg.KeepDone, j, l.namesOf(j), Done, d, now)
	if d <= 0 || d > l.cfg.MaxDuration {
		l.logID(store.KindAck, j)
		l.Stats.BadDurations++
		return j, ErrBadDuration
	}
	l.log(func(r *store.Record) { *r = store.Record{Kind: store.KindAck, Queue: l.name, ID: j.ID(), Duration: d} })
	if err := l.sq.Finished(&j.item, l.keyOf(j), j.Prediction(), d, now); err != nil {
		l.Stats.BadDurations++
		return j, ErrBadDuration
	}
	return j, nil
}

// Nack settles a delivery as failed. reason is kept on a dead letter;
// delay is used with RequeueAfter. When draining, a delayed requeue is
// requeued at once instead.
func (l *Line) Nack(h Holder, id string, action NackAction, delay time.Duration, reason string, draining bool, now time.Time) error {
	j := l.heldBy(h, id)
	if j == nil {
		return ErrNotHeld
	}
	l.settle(j, now)
	l.Stats.Nacked++
	if j.is(flagCancelled) {
		l.dropCancelled(j, now)
		return nil
	}
	if reason == "" {
		reason = "nacked"
	} else {
		reason = "nacked: " + reason
	}
	if action == Retry {
		action, delay = RequeueAfter, l.backoff(j)
	}
	switch {
	case action == DeadLetter:
		l.deadLetter(j, now, reason)
	case action == RequeueAfter && delay > 0 && int(j.attempt) < int(j.MaxAttempts) && !draining:
		j.setDeadline(nanos(now.Add(delay)))
		l.log(func(r *store.Record) {
			*r = store.Record{Kind: store.KindDelay, Queue: l.name, ID: j.ID(), At: fromNanos(j.deadline())}
		})
		l.delayed.push(j)
	default:
		l.retry(j, now, reason)
	}
	return nil
}

// backoff is the delay before j's next try under its retry policy.
func (l *Line) backoff(j *Job) time.Duration {
	base, most := l.cfg.RetryBase, l.cfg.RetryMax
	if b := j.RetryBase(); b > 0 {
		base = b
	}
	if m := j.RetryMax(); m > 0 {
		most = m
	}
	shift := min(max(int(j.attempt)-1, 0), 30)
	d := base << shift
	if d <= 0 || d > most || d>>shift != base { // d>>shift: the doubling overflowed
		d = most
	}
	if jit := l.cfg.RetryJitter; jit > 0 {
		r := rand.Float64
		if l.cfg.Rand != nil {
			r = l.cfg.Rand
		}
		d = time.Duration(float64(d) * (1 - jit + 2*jit*r()))
	}
	return min(d, l.cfg.MaxDelay)
}

// Extend renews the lease of a job h holds to lease from now (0 is the
// queue's lease).
func (l *Line) Extend(h Holder, id string, lease time.Duration, now time.Time) error {
	j := l.heldBy(h, id)
	if j == nil {
		return ErrNotHeld
	}
	if lease <= 0 {
		lease = l.cfg.Lease
	}
	j.setDeadline(nanos(now.Add(lease)))
	l.leases.fix(j.heapIdx())
	return nil
}

// Return gives back a delivery that never reached its holder: the job goes
// back in line at its place, its attempt not counted.
func (l *Line) Return(h Holder, id string, now time.Time) {
	j := l.heldBy(h, id)
	if j == nil {
		return
	}
	l.settle(j, now)
	if j.is(flagCancelled) {
		l.dropCancelled(j, now) // cancelled while on its way: it must not run again
		return
	}
	l.logID(store.KindReturn, j)
	j.attempt = max(j.attempt, 1) - 1
	l.Stats.Delivered--
	if j.attempt > 0 {
		l.Stats.Redelivered--
	}
	l.push(j, now)
}

// Detach ends h: the jobs it holds go back in line with their attempt
// counted (or to the dead letters once they have had their attempts), as
// a crashed consumer's would.
func (l *Line) Detach(h Holder, now time.Time) {
	for _, j := range l.heldSorted(h) {
		l.settle(j, now)
		l.retry(j, now, "consumer disconnected")
	}
}

// heldSorted is the jobs h holds in the line's order, so that what a Detach
// does does not depend on map order.
func (l *Line) heldSorted(h Holder) []*Job {
	var js []*Job
	for _, f := range l.held {
		if f.holder == h {
			js = append(js, f.job)
		}
	}
	slices.SortFunc(js, func(a, b *Job) int { return cmp.Compare(a.item.ID, b.item.ID) })
	return js
}

// retry requeues a settled job whose delivery failed, or dead-letters it
// once it has had its attempts. A cancelled job is dropped.
func (l *Line) retry(j *Job, now time.Time, reason string) {
	if j.is(flagCancelled) {
		l.dropCancelled(j, now)
		return
	}
	if int(j.attempt) >= int(j.MaxAttempts) {
		l.deadLetter(j, now, fmt.Sprintf("%s (attempt %d of %d)", reason, j.attempt, j.MaxAttempts))
		return
	}
	l.push(j, now)
}
