package delivery

import (
	"slices"
	"time"

	"github.com/harbinger-mq/harbinger/internal/store"
)

// DeadLetterEntry is a job on the dead-letter list.
type DeadLetterEntry struct {
	Job    *Job
	Reason string
	At     time.Time
}

func (l *Line) deadLetter(j *Job, now time.Time, reason string) {
	l.Stats.DeadLettered++
	l.log(func(r *store.Record) {
		*r = store.Record{Kind: store.KindDead, Queue: l.name, ID: j.ID(), Reason: reason, At: now}
	})
	if len(l.dead) >= l.cfg.MaxDead {
		l.drop(l.dead[0].Job)
		l.dead[0] = DeadLetterEntry{}
		l.dead = l.dead[1:]
		l.Stats.DeadDropped++
	}
	l.markDead(j, now, reason)
}

// markDead makes j the newest dead letter, without deadLetter's record
// and bound (Restore's, for a job whose death it finds).
func (l *Line) markDead(j *Job, now time.Time, reason string) {
	j.set(flagDead, true)
	j.setDeadline(nanos(now))
	j.deaths++
	l.dead = append(l.dead, DeadLetterEntry{Job: j, Reason: reason, At: now})
}

// DeadEntry is j's dead-letter entry, if j is a dead letter: O(dead
// letters).
func (l *Line) DeadEntry(j *Job) (DeadLetterEntry, bool) {
	for _, d := range l.dead {
		if d.Job == j {
			return d, true
		}
	}
	return DeadLetterEntry{}, false
}

// TakeDead removes the dead letters named in ids (all of them when ids is
// empty): requeued with fresh attempts and no TTL, joining the line as new
// jobs would, or dropped for good. It says how many.
func (l *Line) TakeDead(ids []string, requeue bool, now time.Time) int {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	kept := l.dead[:0]
	n := 0
	for _, d := range l.dead {
		if len(want) > 0 && !want[d.Job.ID()] {
			kept = append(kept, d)
			continue
		}
		n++
		j := d.Job
		if !requeue {
			l.drop(j)
			continue
		}
		l.log(func(r *store.Record) { *r = store.Record{Kind: store.KindRequeue, Queue: l.name, ID: j.ID(), At: now} })
		j.set(flagDead, false)
		j.setDeadline(0)
		j.attempt = 0
		j.item.SetExpires(time.Time{})
		j.setEnqueued(nanos(now))
		j.set(flagStale, true) // classified against what the queue knows now
		l.push(j, now)
	}
	clear(l.dead[len(kept):])
	l.dead = kept
	return n
}

// SortDead orders the dead letters by when they died, after Restore.
func (l *Line) SortDead() {
	slices.SortStableFunc(l.dead, func(a, b DeadLetterEntry) int { return a.At.Compare(b.At) })
}
