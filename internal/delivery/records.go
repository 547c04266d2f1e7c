package delivery

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/harbinger-mq/harbinger/internal/fair"
	"github.com/harbinger-mq/harbinger/internal/sched"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// StateRecords calls emit with a record of every job the Line holds, as a
// checkpoint writes them (a job in flight as ready, as recovery brings it
// back), one at a time so that a checkpoint of a million jobs need not
// hold a million records at once, and says how many.
func (l *Line) StateRecords(emit func(*store.Record)) int {
	n := 0
	rec := func(j *Job, state store.State, reason string, at time.Time) {
		emit(l.record(j, state, reason, at))
		n++
	}
	l.Each(
		func(j *Job) { rec(j, store.Ready, "", time.Time{}) },
		func(j *Job) {
			if !j.is(flagCancelled) { // gone for good once it settles (see StateRecordTo)
				rec(j, store.Ready, "", time.Time{})
			}
		},
		func(j *Job) { rec(j, store.Delayed, "", time.Time{}) },
		func(d DeadLetterEntry) { rec(d.Job, store.Dead, d.Reason, d.At) },
	)
	return n
}

// Snapshot lists every job the Line holds now (waiting, running, delayed
// and dead), for a checkpoint that writes their state a batch at a time
// with StateRecordTo and lets go of the caller's lock between batches.
// A checkpoint takes it under the lock, so it copies one pointer per job
// and reads none of the jobs: a waiting job is listed by its scheduler
// item, whose pointer the scheduler's heaps already hold, so listing a
// million jobs touches eight megabytes in order instead of a million
// scattered jobs.
func (l *Line) Snapshot() *Snapshot {
	s := &Snapshot{items: make([]*sched.Item, 0, l.Len()+len(l.leases)+len(l.delayed)+len(l.dead))}
	l.waiting().Each(func(it *sched.Item) { s.items = append(s.items, it) })
	for _, j := range l.leases {
		s.items = append(s.items, &j.item)
	}
	for _, j := range l.delayed {
		s.items = append(s.items, &j.item)
	}
	if len(l.dead) > 0 {
		s.dead = make(map[*Job]deadAt, len(l.dead))
	}
	for _, d := range l.dead {
		s.items = append(s.items, &d.Job.item)
		s.dead[d.Job] = deadAt{d.Reason, d.Job.deaths}
	}
	return s
}

// Snapshot is the jobs a Line held at one moment.
type Snapshot struct {
	items []*sched.Item   // each job's item (see jobOf)
	dead  map[*Job]deadAt // the dead letters' reasons then
}

// Len is the number of jobs listed.
func (s *Snapshot) Len() int { return len(s.items) }

type deadAt struct {
	reason string
	deaths uint16 // the job's deaths then (modulo 65,536)
}

// StateRecord is the full state now of s's i-th job, as StateRecords
// writes it, or nil once the Line no longer holds it; since s was taken
// the job may have moved anywhere. Each job is read once: s lets go of it.
func (l *Line) StateRecord(s *Snapshot, i int) *store.Record {
	r := &store.Record{}
	if !l.StateRecordTo(s, i, r) {
		return nil
	}
	return r
}

// StateRecordTo is StateRecord written into r (and r.Job, allocated if
// nil) instead of new ones, for a checkpoint that reuses one batch of
// records: a store encodes a record when it is appended. It reports
// false, leaving r alone, once the Line no longer holds the job.
func (l *Line) StateRecordTo(s *Snapshot, i int, r *store.Record) bool {
	j := jobOf(s.items[i])
	s.items[i] = nil // a job that ends during the checkpoint is not kept for it
	switch {
	case j.is(flagGone), j.is(flagCancelled):
		// A cancelled job still running is gone for good: its remove
		// record is written, and a state record after it would bring it
		// back at the next restart.
		return false
	case j.is(flagDead):
		d, ok := s.dead[j]
		reason := d.reason
		if !ok || d.deaths != j.deaths {
			// Dead-lettered since the snapshot: its entry is among the
			// newest.
			for i := len(l.dead) - 1; i >= 0; i-- {
				if l.dead[i].Job == j {
					reason = l.dead[i].Reason
					break
				}
			}
		}
		l.fill(r, j, store.Dead, reason, fromNanos(j.deadline()))
	case j.heapIdx() >= 0 && !l.inFlight(j):
		l.fill(r, j, store.Delayed, "", time.Time{})
	default: // waiting, or running and written as ready
		l.fill(r, j, store.Ready, "", time.Time{})
	}
	return true
}

// record is j's full state.
func (l *Line) record(j *Job, state store.State, reason string, deadAt time.Time) *store.Record {
	r := &store.Record{}
	l.fill(r, j, state, reason, deadAt)
	return r
}

// fill writes j's full state into r, reusing r.Job if it has one.
func (l *Line) fill(r *store.Record, j *Job, state store.State, reason string, deadAt time.Time) {
	sj := r.Job
	if sj == nil {
		sj = l.Fx.job()
	}
	*sj = store.Job{
		ID: j.ID(), Producer: j.Producer(), JobType: j.JobType(), SizeHint: j.SizeHint(),
		Payload: j.Payload(), Headers: j.Headers(), TTL: j.TTL(), MaxAttempts: int(j.MaxAttempts),
		PublishedAt: j.PublishedAt(), RetryBase: j.RetryBase(), RetryMax: j.RetryMax(), Seq: j.item.ID, Tier: int(j.item.Tier), Cost: j.item.Cost,
		Long: j.item.Long, Cold: j.is(flagPredCold), Reset: j.is(flagStale), Enqueued: j.Enqueued(), Expires: j.Expires(),
		Attempts: int(j.attempt), State: state, Reason: reason, DeadAt: deadAt, Scheduled: j.is(flagScheduled),
	}
	if state == store.Delayed {
		sj.Until = fromNanos(j.deadline())
	}
	*r = store.Record{Kind: store.KindJob, Queue: l.name, ID: j.ID(), Job: sj}
}

// log appends to Effects.Records the record fill writes into a zero
// record, unless the Line is not durable or quiet (fill is a func so that
// a memory broker builds none).
func (l *Line) log(fill func(r *store.Record)) {
	if l.cfg.Durable && !l.Quiet {
		r := l.Fx.record()
		fill(r)
		l.Fx.Records = append(l.Fx.Records, r)
	}
}

func (l *Line) logID(kind store.Kind, j *Job) {
	l.log(func(r *store.Record) { r.Kind, r.Queue, r.ID = kind, l.name, j.ID() })
}

// record is a zero record for Records: a spare one if Clear left any.
func (e *Effects) record() *store.Record { return takeSpare(&e.spare) }

// job is a zero job state for a record: a spare one if Clear left any.
func (e *Effects) job() *store.Job { return takeSpare(&e.spareJobs) }

// takeSpare takes the last of spare, or a new zero T when there is none.
func takeSpare[T any](spare *[]*T) *T {
	n := len(*spare)
	if n == 0 {
		return new(T)
	}
	v := (*spare)[n-1]
	(*spare)[n-1] = nil
	*spare = (*spare)[:n-1]
	return v
}

// Restore puts a job the log recovered back where the log left it: in
// line (ready, or delayed and due by now), delayed until its due time, or
// dead. reset marks a job to classify afresh at its next push (a requeued
// dead letter, or one out of line when its queue was redeclared). Restore
// writes no records but one: the dead record of a job it dead-letters
// because it was in flight on its last attempt. Jobs must come in the
// line's order (by Seq).
func (l *Line) Restore(sj *store.Job, reset bool, now time.Time) *Job {
	j := &Job{
		m:         l.intern(Names{sj.Producer, sj.JobType}),
		published: nanos(sj.PublishedAt),
		attempt:   uint16(min(max(sj.Attempts, 0), math.MaxUint16)),
	}
	j.SetMaxAttempts(sj.MaxAttempts)
	j.set(flagScheduled, sj.Scheduled)
	j.SetID(sj.ID)
	j.SetPayload(sj.Payload)
	j.SetOptions(sj.Headers, sj.TTL, sj.RetryBase, sj.RetryMax)
	j.SetSizeHint(sj.SizeHint)
	j.item = sched.Item{ID: sj.Seq, Cost: sj.Cost, Long: sj.Long}
	j.setHeapIdx(-1)
	j.item.SetTier(min(sj.Tier, l.sq.Config().Levels-1))
	j.item.SetExpires(sj.Expires)
	j.setEnqueued(nanos(sj.Enqueued))
	j.predTier = int8(min(max(sj.Tier, math.MinInt8), math.MaxInt8))
	j.set(flagPredCold, sj.Cold)
	j.set(flagStale, reset) // classified afresh at its push
	l.nextSeq = max(l.nextSeq, sj.Seq)
	quiet := l.Quiet
	l.Quiet = true
	defer func() { l.Quiet = quiet }()
	switch {
	case sj.State == store.Ready && !j.is(flagScheduled) && j.MaxAttempts > 0 && int(j.attempt) >= int(j.MaxAttempts):
		// In flight on its last attempt when the broker stopped (a ready
		// job has attempts left otherwise): no ack can come for that
		// delivery, and a lease that ends on the last attempt dead-letters
		// its job, so this one is too rather than run past its attempts.
		// The one record Restore writes: a later restart finds the job
		// dead, with this reason and time, rather than concluding it again.
		l.Stats.DeadLettered++
		reason := fmt.Sprintf("lease lost when the broker stopped (attempt %d of %d)", j.attempt, j.MaxAttempts)
		l.markDead(j, now, reason)
		l.Quiet = quiet
		l.log(func(r *store.Record) {
			*r = store.Record{Kind: store.KindDead, Queue: l.name, ID: j.ID(), Reason: reason, At: now}
		})
		l.Quiet = true
	case sj.State == store.Ready && l.fq != nil && j.attempt > 0 && !j.is(flagScheduled):
		// Delivered before and not settled since (or requeued by a nack,
		// which the log does not tell apart): its worker may have outlived
		// the broker and still run it. Under limits, counted by the
		// workers, it runs against its keys' limits, held back like a
		// delayed job, until a lease from now has passed.
		if j.is(flagStale) {
			l.reset(j)
		}
		l.holdLost(j, now)
	case sj.State == store.Ready, sj.State == store.Delayed && !sj.Until.After(now):
		// Jobs come in the line's order (by Seq), so each keeps its place.
		if j.is(flagScheduled) {
			l.enter(j, sj.Until) // it came due while the broker was down
		} else if j.is(flagStale) {
			l.reset(j)
		}
		l.push(j, now)
	case sj.State == store.Delayed:
		j.setDeadline(nanos(sj.Until))
		l.delayed.push(j)
	case sj.State == store.Dead:
		j.set(flagDead, true)
		j.setDeadline(nanos(sj.DeadAt))
		l.dead = append(l.dead, DeadLetterEntry{Job: j, Reason: sj.Reason, At: sj.DeadAt})
	}
	if l.byID != nil {
		l.byID[j.ID()] = j
	}
	return j
}

// RatesRecord is the state of the queue's rate buckets at now, for a
// checkpoint to write after its jobs' records (and under the same hold of
// the caller's lock as its last batch), or nil when the queue has no rate
// limits. Recovery restores the buckets from the last one and takes a
// token again for each delivery after it, which carries its start time:
// so a restart gives no key more starts than its rate allows.
func (l *Line) RatesRecord(now time.Time) *store.Record {
	if l.fq == nil || len(l.cfg.Fair.Rates) == 0 {
		return nil
	}
	data, err := json.Marshal(l.fq.Buckets(now, []fair.Bucket{}))
	if err != nil {
		panic("delivery: encoding rate buckets: " + err.Error()) // plain numbers and strings
	}
	return &store.Record{Kind: store.KindRates, Queue: l.name, Data: data}
}

// RestoreRates puts the rate buckets back as p, the replay of the log,
// leaves them: the last checkpoint's buckets, less a token for each start
// recorded after it, in order. A queue whose declaration changed after
// them starts its buckets full, as a live redeclare does. Call it before
// any job is delivered.
func (l *Line) RestoreRates(p *Replay) {
	if l.fq == nil || len(l.cfg.Fair.Rates) == 0 {
		return
	}
	for _, b := range p.buckets {
		l.fq.RestoreBucket(b)
	}
	for _, s := range p.starts {
		l.fq.Started(s.k, s.at)
	}
}
