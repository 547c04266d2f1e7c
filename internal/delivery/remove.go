package delivery

import (
	"time"

	"github.com/harbinger-mq/harbinger/internal/sched"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// dropCancelled ends a cancelled job, which FindDone then reports.
func (l *Line) dropCancelled(j *Job, now time.Time) {
	l.drop(j)
	l.done.add(l.cfg.KeepDone, j, l.namesOf(j), Cancelled, 0, now)
}

// drop ends a job the Line no longer holds anywhere.
func (l *Line) drop(j *Job) {
	l.logID(store.KindRemove, j)
	j.set(flagDead, false)
	l.release(j)
}

// release lets go of j for good.
func (l *Line) release(j *Job) {
	j.set(flagGone, true)
	if l.byID != nil {
		delete(l.byID, j.ID())
	}
	l.Fx.Released = append(l.Fx.Released, j)
}

// Cancel ends a job by id: a waiting or delayed job is removed at once; a
// running one stays with its holder, who is told (Effects.Cancels), and is
// dropped, not retried, when it settles or its lease ends. It finds the
// job by scanning: O(jobs held).
func (l *Line) Cancel(id string, now time.Time) (State, error) {
	j, state := l.Find(id)
	switch state {
	case "", Dead:
		return "", ErrNotFound
	case Running:
		h, _, _ := l.Flight(j)
		if !j.is(flagCancelled) {
			j.set(flagCancelled, true)
			l.Stats.Cancelled++
			l.logID(store.KindRemove, j) // a restart must not bring it back
			l.Fx.Cancels = append(l.Fx.Cancels, Cancel{Holder: h, ID: id})
		}
		return Running, nil
	case Delayed:
		l.delayed.remove(j)
		l.releaseLost(j, now)
		l.dropCancelled(j, now)
		l.Stats.Cancelled++
		return Delayed, nil
	}
	l.waiting().Remove(&j.item)
	l.unwait(j)
	l.dropCancelled(j, now)
	l.Stats.Cancelled++
	return Waiting, nil
}

// Purge drops every waiting job and says how many; jobs in flight and
// delayed are kept.
func (l *Line) Purge() int {
	var all []*Job
	l.waiting().Each(func(it *sched.Item) { all = append(all, jobOf(it)) })
	for _, j := range all {
		l.waiting().Remove(&j.item)
		l.unwait(j)
		l.drop(j)
	}
	return len(all)
}
