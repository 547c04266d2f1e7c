package delivery

import (
	"cmp"
	"slices"
	"time"

	"github.com/harbinger-mq/harbinger/internal/sched"
)

// Find returns the job with id and where it stands (Waiting, Delayed,
// Running or Dead), or nil and "" when the line holds no such job. The
// first Find or Cancel indexes every job held, O(jobs); from then on a
// lookup is O(1) and the index follows every job in and out.
func (l *Line) Find(id string) (*Job, State) {
	if l.byID == nil {
		l.byID = make(map[string]*Job, l.Len())
		add := func(j *Job) { l.byID[j.ID()] = j }
		l.Each(add, add, add, func(d DeadLetterEntry) { add(d.Job) })
	}
	return l.stateOf(l.byID[id])
}

// Lookup is Find for a reader that may look up one job and no more: it
// uses the index if a Cancel or Find built one, and otherwise looks
// without building it (a job in flight at once, the others by a scan,
// about 12 ms for a million waiting jobs), so that an operator's lookup in
// a deep queue neither holds it for the index's build (about 150 ms for a
// million) nor leaves it paying for the index (about 55 bytes a job).
func (l *Line) Lookup(id string) (*Job, State) {
	if l.byID != nil {
		return l.Find(id)
	}
	if f, ok := l.held[id]; ok {
		return f.job, Running
	}
	var found *Job
	match := func(j *Job) {
		if found == nil && j.ID() == id {
			found = j
		}
	}
	for _, j := range l.delayed {
		match(j)
	}
	for _, d := range l.dead {
		match(d.Job)
	}
	if found == nil {
		l.waiting().Each(func(it *sched.Item) { match(jobOf(it)) })
	}
	return l.stateOf(found)
}

// stateOf is where j, a job the line holds (or nil), stands.
func (l *Line) stateOf(j *Job) (*Job, State) {
	switch {
	case j == nil:
		return nil, ""
	case j.is(flagDead):
		return j, Dead
	case l.inFlight(j):
		return j, Running
	case j.heapIdx() >= 0:
		return j, Delayed
	}
	return j, Waiting
}

// FindDone reports a job that ended (acked, or cancelled) and is still
// among the last Config.KeepDone to end. Jobs purged, dropped as dead
// letters or expired are not kept.
func (l *Line) FindDone(id string) (DoneJob, bool) { return l.done.find(id) }

// inFlight reports whether j is delivered and not settled.
func (l *Line) inFlight(j *Job) bool {
	_, _, ok := l.Flight(j)
	return ok
}

// Each calls f for every job the Line holds and where it is: waiting,
// running (held), delayed or dead (with its reason and time).
func (l *Line) Each(waiting, running, delayed func(j *Job), dead func(d DeadLetterEntry)) {
	if waiting != nil {
		l.waiting().Each(func(it *sched.Item) { waiting(jobOf(it)) })
	}
	if running != nil {
		for _, j := range l.leases {
			running(j)
		}
	}
	if delayed != nil {
		for _, j := range l.delayed {
			delayed(j)
		}
	}
	if dead != nil {
		for _, d := range l.dead {
			dead(d)
		}
	}
}

// Peek lists up to n waiting jobs in the order they would be handed out
// now (see sched.Scheduler.Peek).
func (l *Line) Peek(now time.Time, n int) []*Job {
	items := l.waiting().Peek(now, n, make([]*sched.Item, 0, min(n, l.Len())))
	out := make([]*Job, len(items))
	for i, it := range items {
		out[i] = jobOf(it)
	}
	return out
}

// Delayed lists the jobs waiting for a due time, soonest due first. The
// caller must not change them.
func (l *Line) Delayed() []*Job {
	out := slices.Clone([]*Job(l.delayed))
	slices.SortFunc(out, func(a, b *Job) int {
		return cmp.Or(cmp.Compare(a.deadline(), b.deadline()), cmp.Compare(a.ID(), b.ID()))
	})
	return out
}

// Done lists the jobs that ended and are still kept (Config.KeepDone),
// the most recent first.
func (l *Line) Done() []DoneJob { return l.done.list() }
