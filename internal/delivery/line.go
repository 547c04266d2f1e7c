// Package delivery is one queue's job lifecycle as a pure state machine:
// publish, delivery under a lease, ack, nack, retry with backoff, lease
// expiry, TTL, delays, cancel, dead letters, requeue and redeclare.
//
// A Line takes the time as an argument, does no I/O, starts no goroutines
// and takes no locks. Each call leaves what it did for the world in
// Effects (records for the log, jobs it let go of, consumers to wake,
// holders to tell of a cancel), which the caller carries out under the
// same lock before the next call; NextDeadline says when the Line next
// has work of its own (a lease ending, a TTL passing, a job coming due),
// for the caller's one timer to call Tick then. The records are exactly
// what a durable broker writes and what its recovery replays (see
// Restore). The broker is the shell: a mutex, the timer, consumer credit
// and wake-ups, the byte budget and the store.
package delivery

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/harbinger-mq/harbinger/internal/fair"
	"github.com/harbinger-mq/harbinger/internal/predict"
	"github.com/harbinger-mq/harbinger/internal/sched"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// Errors a Line returns; the broker wraps them in its own.
var (
	ErrFull        = errors.New("delivery: queue full")
	ErrNotHeld     = errors.New("delivery: job not held by this holder")
	ErrNotFound    = errors.New("delivery: job not waiting, delayed or running")
	ErrBadDuration = errors.New("delivery: bad duration")
)

// Config is what a Line needs of its queue's settings.
type Config struct {
	MaxDepth    int           // waiting jobs at most
	MaxAttempts int           // deliveries before a job is dead-lettered, unless the job sets its own
	Lease       time.Duration // a delivery's lease
	DefaultTTL  time.Duration // 0 is none
	RetryBase   time.Duration // NackRetry: the first retry's delay
	RetryMax    time.Duration // NackRetry: the longest delay
	RetryJitter float64       // NackRetry: +- this share of the delay, at random
	MaxDelay    time.Duration // bounds a retry's delay
	MaxDuration time.Duration // the longest duration an ack may teach the predictor
	MaxDead     int           // dead letters kept; the oldest is dropped past it
	MaxNames    int           // distinct (producer, job type) pairs interned
	KeepDone    int           // jobs that ended (acked or cancelled) FindDone still reports; 0 is none
	// Fair is the queue's limits and fair shares; the zero value is none.
	Fair fair.Config
	// Durable makes the Line write records to Effects.Records; without it
	// none are built.
	Durable bool
	// Rand returns a number in [0, 1) for the retry jitter; nil is
	// math/rand/v2's Float64.
	Rand func() float64
}

// NackAction says what a nack does with its job.
type NackAction int

// Nack actions.
const (
	// Requeue puts the job back in line at once, at its place, or
	// dead-letters it once it has had its attempts.
	Requeue NackAction = iota
	// RequeueAfter holds the job back for the nack's delay first.
	RequeueAfter
	// DeadLetter moves the job to the dead letters at once.
	DeadLetter
	// Retry holds the job back for its retry policy's delay (exponential
	// with jitter), then requeues it.
	Retry
)

// State says where a job stood when it was cancelled.
type State string

// Job states, as Cancel reports them.
const (
	Waiting State = "waiting" // in line: removed
	Delayed State = "delayed" // scheduled or nacked with a delay: removed
	Running State = "running" // delivered: its holder is told, and it ends when it settles
	Dead    State = "dead"    // a dead letter (Find only: Cancel does not take one)
)

// Effects is what a Line's calls did that the world must hear of, in the
// order they happened. The caller carries them out and calls Clear.
type Effects struct {
	// Records to append to the log, in order (only when Config.Durable).
	Records []*store.Record
	// Released jobs the Line no longer holds anywhere (acked, dropped,
	// cancelled, their dead letter gone): their bytes can be given back.
	Released []*Job
	// Ready counts jobs that joined the line: as many consumers may be
	// woken.
	Ready int
	// Settled counts deliveries that ended (acked, nacked, lease expired,
	// holder gone, returned).
	Settled int
	// Cancels are running jobs cancelled: tell their holders to stop them.
	Cancels []Cancel

	// Records and their jobs given back by Clear, for the next ones: a
	// store encodes a record when it is appended, so the caller is done
	// with them by then, and a durable queue does not make garbage of a
	// record or two for every job it moves.
	spare     []*store.Record
	spareJobs []*store.Job
}

// maxSpare bounds the records an Effects keeps for reuse.
const maxSpare = 64

// Cancel is a cancelled running job and who holds it.
type Cancel struct {
	Holder Holder
	ID     string
}

// Clear empties e, keeping its storage.
func (e *Effects) Clear() {
	e.ClearRecords()
	clear(e.Released)
	e.Released, e.Cancels = e.Released[:0], e.Cancels[:0]
	e.Ready, e.Settled = 0, 0
}

// ClearRecords empties e.Records alone, keeping the records for reuse: for
// a caller that has stored them (a store encodes a record when it is
// appended) ahead of the other effects.
func (e *Effects) ClearRecords() {
	for _, r := range e.Records {
		if len(e.spare) == maxSpare {
			break
		}
		if r.Job != nil && len(e.spareJobs) < maxSpare {
			*r.Job = store.Job{}
			e.spareJobs = append(e.spareJobs, r.Job)
		}
		*r = store.Record{}
		e.spare = append(e.spare, r)
	}
	clear(e.Records)
	e.Records = e.Records[:0]
}

// Stats counts what a Line has done since it was made.
type Stats struct {
	Published, Delivered, Acked, Nacked, Redelivered uint64
	DeadLettered, Expired, BadDurations, DeadDropped uint64
	Cancelled                                        uint64
}

// Line is one queue's jobs: waiting (in the scheduler), delayed, in flight
// under leases, and dead. Not safe for concurrent use.
type Line struct {
	name    string
	cfg     Config
	sq      *sched.Queue
	nextSeq uint64
	leases  timeHeap // in flight, by lease end
	delayed timeHeap // not yet due, by due time
	dead    []DeadLetterEntry
	held    map[string]flight // in flight, by id
	holders Holder            // the last Holder handed out
	names   map[Names]*meta
	expBuf  []*sched.Item
	// byID finds a held job by its id, for Cancel and Find. It is nil
	// until the first of them builds it from every job held, and kept
	// from then on, so a queue that never looks a job up pays nothing.
	byID map[string]*Job
	// done keeps the last Config.KeepDone jobs to end, for FindDone.
	done doneLog
	// waits counts the waiting jobs by when they entered the line, for
	// OldestWaiting and WaitQuantiles.
	waits ages
	// fq holds the waiting jobs instead of sq's scheduler when the queue
	// declares limits or fair shares; nil otherwise.
	fq      *fair.Fair
	workers int // as SetWorkers last said
	// lost are jobs in flight when the broker stopped, held back (in
	// delayed) and counted against their limits until a lease from the
	// restart has passed: see Restore.
	lost map[*Job]bool

	// Quiet stops records from being written (while the caller replays
	// the log into the Line).
	Quiet bool
	Stats Stats
	Fx    Effects
}

// New returns an empty Line for the queue name, scheduling with sq (and,
// when cfg declares limits or fair shares, a fair.Fair over lanes of its
// policy). cfg.Fair must validate.
func New(name string, cfg Config, sq *sched.Queue) *Line {
	l := &Line{name: name, cfg: cfg, sq: sq, held: map[string]flight{}}
	l.fq = l.newFair(cfg, sq, time.Time{})
	return l
}

// Name is the queue's name.
func (l *Line) Name() string { return l.name }

// Config returns the settings in force.
func (l *Line) Config() Config { return l.cfg }

// Sched is the Line's scheduler and predictor, for reading.
func (l *Line) Sched() *sched.Queue { return l.sq }

// Len is the number of jobs waiting in line.
func (l *Line) Len() int { return l.waiting().Len() }

// InFlight is the number of jobs delivered and not settled.
func (l *Line) InFlight() int { return len(l.leases) }

// OldestWaiting is when the job that has waited longest entered the line
// (to the millisecond), and false when none waits. O(1).
func (l *Line) OldestWaiting() (time.Time, bool) { return l.waits.oldest() }

// AppendWaitCounts appends how many waiting jobs entered the line in each
// millisecond, in no order: one entry per distinct millisecond, not per
// job. WaitQuantiles reads percentiles of the waits from them.
func (l *Line) AppendWaitCounts(dst []WaitCount) []WaitCount { return l.waits.appendCounts(dst) }

// DelayedLen is the number of jobs waiting for a due time.
func (l *Line) DelayedLen() int { return len(l.delayed) }

// Dead is the dead-letter list, oldest first. The caller must not change it.
func (l *Line) Dead() []DeadLetterEntry { return l.dead }

// Stale reports whether j will be classified afresh at its next push: it
// was last in line under a scheduler the Line has since replaced, or is a
// requeued dead letter.
func (l *Line) Stale(j *Job) bool { return j.is(flagStale) }

// Admit readies j, a new job, for the line at now: it fills in the
// queue's defaults, gives it its place in the line's order and, unless
// runAt is after now, classifies it. Its record (only when
// Config.Durable) goes to Effects.Records like every other call's, and is
// returned too; the caller must have stored Effects.Records before it
// calls Commit (ClearRecords then hands them back), and if storing fails
// it drops j and nothing else changes.
func (l *Line) Admit(j *Job, names Names, runAt, now time.Time) (*store.Record, error) {
	if l.Len() >= l.cfg.MaxDepth {
		return nil, ErrFull
	}
	j.published = nanos(now)
	l.setNames(j, names)
	if j.MaxAttempts == 0 {
		j.SetMaxAttempts(l.cfg.MaxAttempts)
	}
	if j.TTL() == 0 && l.cfg.DefaultTTL != 0 {
		j.SetOptions(j.Headers(), l.cfg.DefaultTTL, j.RetryBase(), j.RetryMax())
	}
	j.item = sched.Item{ID: l.nextID()}
	j.setHeapIdx(-1)
	state := store.Ready
	if runAt.After(now) {
		// Invisible until due; it is classified and takes its place in
		// line then, as if published at that moment.
		j.set(flagScheduled|flagStale, true) // classified when due
		j.setDeadline(nanos(runAt))
		state = store.Delayed
	} else {
		l.enter(j, now)
	}
	if !l.cfg.Durable {
		return nil, nil
	}
	var rec *store.Record
	l.log(func(r *store.Record) {
		l.fill(r, j, state, "", time.Time{})
		rec = r
	})
	return rec, nil
}

// Commit puts an admitted job in line, or holds it until it is due.
func (l *Line) Commit(j *Job, now time.Time) {
	l.Stats.Published++
	if l.byID != nil {
		l.byID[j.ID()] = j
	}
	if j.is(flagScheduled) {
		l.delayed.push(j)
		return
	}
	l.push(j, now)
}

// enter gives j its place in line: its FIFO position and expiry count from
// now, and its tier and cost are predicted now.
func (l *Line) enter(j *Job, now time.Time) {
	j.setEnqueued(nanos(now))
	if ttl := j.TTL(); ttl > 0 {
		j.item.SetExpires(now.Add(ttl))
	}
	j.setPrediction(l.sq.Classify(&j.item, l.keyOf(j)))
	j.set(flagStale, false)
	j.set(flagScheduled, false)
}

// setNames gives j, a job the Line has not seen, its names: the meta the
// Line shares among the jobs of those names that carry no options, or,
// for a job with options, in its own meta.
func (l *Line) setNames(j *Job, n Names) {
	if j.m == nil || j.m.opts.isZero() {
		j.m = l.intern(n)
		return
	}
	j.m.names = n // its own: setOptions made it for this job
}

// intern returns the Line's meta of n without options, so that the
// thousands of jobs of one producer and job type share one. The table is
// bounded; past it each job gets a meta of its own.
func (l *Line) intern(n Names) *meta {
	if n == (Names{}) {
		return nil
	}
	if v, ok := l.names[n]; ok {
		return v
	}
	if l.names == nil {
		l.names = map[Names]*meta{}
	}
	v := &meta{names: n}
	if len(l.names) < l.cfg.MaxNames {
		l.names[n] = v
	}
	return v
}

// namesOf is j's names, from the Line's table where it can: the done log
// keeps them after the job has gone, and not its options with them.
func (l *Line) namesOf(j *Job) *Names {
	m := j.m
	if m != nil && !m.opts.isZero() {
		m = l.intern(m.names)
	}
	if m == nil {
		return nil
	}
	return &m.names
}

// keyOf is j's predictor key, rebuilt when needed rather than kept on every
// waiting job.
func (l *Line) keyOf(j *Job) predict.Key {
	return l.sq.Predictor.KeyFor(l.name, j.Producer(), j.JobType(), j.SizeHint())
}

// push puts j (new or retried) in line.
func (l *Line) push(j *Job, now time.Time) {
	if j.is(flagStale) {
		// Last pushed to another scheduler (the queue was redeclared while
		// the job was out, or a dead letter is requeued): start afresh in
		// this one, classified against what the queue knows now, keeping
		// its id and expiry; it joins at the back of the line.
		l.reset(j)
		j.item.ID = l.nextID()
		l.log(func(r *store.Record) { l.fill(r, j, store.Ready, "", time.Time{}) })
	}
	if err := l.waiting().Push(&j.item, now); err != nil {
		panic(fmt.Sprintf("delivery: job %s pushed twice: %v", j.ID(), err)) // a bug here, not bad input
	}
	l.waits.add(j.enqueued())
	l.Fx.Ready++
}

// unwait uncounts j, which has just left the scheduler, from waits.
func (l *Line) unwait(j *Job) {
	if !l.waits.remove(j.enqueued()) {
		panic(fmt.Sprintf("delivery: job %s left the line without having entered it", j.ID())) // a bug here, not bad input
	}
}

// nextID is the next place in the line's order: the scheduler takes jobs
// of equal rank by it (sched.Item.ID), and it is the Seq a job's record
// keeps.
func (l *Line) nextID() uint64 {
	l.nextSeq++
	return l.nextSeq
}

// reset gives j a fresh item in the current scheduler, keeping its place
// in the line's order.
func (l *Line) reset(j *Job) {
	it := j.item
	j.item = sched.Item{ID: it.ID}
	j.setHeapIdx(-1)
	j.item.SetExpires(it.Expires())
	j.setPrediction(l.sq.Classify(&j.item, l.keyOf(j)))
	j.set(flagStale, false)
}

// Reconfigure swaps in sq, a scheduler for new settings, and moves the
// waiting jobs over in their order, each classified afresh; jobs
// out of line (in flight, delayed, dead) are when they come back. A
// durable caller logs the queue's new declaration before it calls this.
func (l *Line) Reconfigure(cfg Config, sq *sched.Queue, now time.Time) {
	var waiting []*Job
	l.waiting().Each(func(it *sched.Item) { waiting = append(waiting, jobOf(it)) })
	slices.SortFunc(waiting, func(a, b *Job) int { return cmp.Compare(a.item.ID, b.item.ID) })
	for _, j := range waiting {
		l.waiting().Remove(&j.item)
		l.unwait(j)
	}
	l.sq, l.cfg = sq, cfg
	// Limits and shares afresh, under the new declaration: the jobs
	// running count against the new limits at once (a key over a lowered
	// limit starts nothing until it is below), and the waiting ones join
	// below. Nothing waiting is stranded: each is pushed again, and each
	// key frees as its running jobs end.
	l.fq = l.newFair(cfg, sq, now)
	if l.fq != nil {
		for _, j := range l.leases {
			l.fq.Run(&j.item, keysOf(j), now)
		}
		for j := range l.lost {
			l.fq.Run(&j.item, keysOf(j), now)
		}
	} else {
		clear(l.lost) // no limits left to hold them for
	}
	l.done.resize(cfg.KeepDone)
	// Jobs out of line were classified by the old scheduler: each starts
	// afresh in this one at its next push. (A job between Admit and Commit
	// would be missed: the caller does both under one lock.)
	for _, j := range l.leases {
		j.set(flagStale, true)
	}
	for _, j := range l.delayed {
		j.set(flagStale, true)
	}
	for _, d := range l.dead {
		d.Job.set(flagStale, true)
	}
	for _, j := range waiting {
		l.reset(j)
		l.push(j, now)
		l.log(func(r *store.Record) { l.fill(r, j, store.Ready, "", time.Time{}) })
	}
}

// Shutdown returns every job in flight to the line, its attempt not
// counted (the broker, not the job, cut it short; a cancelled one is
// dropped), and says how many it returned.
func (l *Line) Shutdown(now time.Time) int {
	n := 0
	for len(l.leases) > 0 {
		j := l.leases[0]
		l.settle(j, now)
		if j.is(flagCancelled) {
			l.dropCancelled(j, now)
			continue
		}
		l.logID(store.KindReturn, j)
		j.attempt = max(j.attempt, 1) - 1
		l.push(j, now)
		n++
	}
	return n
}
