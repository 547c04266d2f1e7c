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
	"math"
	"math/rand/v2"
	"slices"
	"time"

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
	clear(e.Released)
	e.Records, e.Released, e.Cancels = e.Records[:0], e.Released[:0], e.Cancels[:0]
	e.Ready, e.Settled = 0, 0
}

// Stats counts what a Line has done since it was made.
type Stats struct {
	Published, Delivered, Acked, Nacked, Redelivered uint64
	DeadLettered, Expired, BadDurations, DeadDropped uint64
	Cancelled                                        uint64
}

// DeadLetterEntry is a job on the dead-letter list.
type DeadLetterEntry struct {
	Job    *Job
	Reason string
	At     time.Time
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
	// admitted is the record Admit returns, reused by each.
	admitted store.Record

	// Quiet stops records from being written (while the caller replays
	// the log into the Line).
	Quiet bool
	Stats Stats
	Fx    Effects
}

// New returns an empty Line for the queue name, scheduling with sq.
func New(name string, cfg Config, sq *sched.Queue) *Line {
	return &Line{name: name, cfg: cfg, sq: sq, held: map[string]flight{}}
}

// Name is the queue's name.
func (l *Line) Name() string { return l.name }

// Config returns the settings in force.
func (l *Line) Config() Config { return l.cfg }

// Sched is the Line's scheduler and predictor, for reading.
func (l *Line) Sched() *sched.Queue { return l.sq }

// Len is the number of jobs waiting in line.
func (l *Line) Len() int { return l.sq.Len() }

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

// Attach makes a new Holder, for a consumer that will take deliveries.
func (l *Line) Attach() Holder {
	l.holders++
	return l.holders
}

// Stale reports whether j will be classified afresh at its next push: it
// was last in line under a scheduler the Line has since replaced, or is a
// requeued dead letter.
func (l *Line) Stale(j *Job) bool { return j.is(flagStale) }

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

// Admit readies j, a new job, for the line at now: it fills in the
// queue's defaults, gives it its place in the line's order and, unless
// runAt is after now, classifies it. It returns the job's record (nil
// unless Config.Durable), which the caller must have stored before it
// calls Commit; if storing fails it drops j and nothing else changes. The
// record is the Line's own, rewritten by the next Admit: a store encodes a
// record when it is appended, so a publish makes no garbage of it.
func (l *Line) Admit(j *Job, names Names, runAt, now time.Time) (*store.Record, error) {
	if l.sq.Len() >= l.cfg.MaxDepth {
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
	l.admitted = store.Record{Job: l.admitted.Job}
	l.fill(&l.admitted, j, state, "", time.Time{})
	return &l.admitted, nil
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
	if err := l.sq.Push(&j.item, now); err != nil {
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

// Deliver pops the next job for h, if one is ready, and leases it.
func (l *Line) Deliver(h Holder, now time.Time) *Job {
	if l.sq.Len() == 0 {
		return nil
	}
	if at, ok := l.sq.NextExpiry(); ok && !at.After(now) {
		l.expire(now)
	}
	it := l.sq.Pop(now)
	if it == nil {
		return nil
	}
	j := jobOf(it)
	l.unwait(j)
	l.logID(store.KindDeliver, j)
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

// settle takes an in-flight job away from its holder.
func (l *Line) settle(j *Job) {
	l.leases.remove(j)
	delete(l.held, j.ID())
	l.Fx.Settled++
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
	l.settle(j)
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
	if err := l.sq.Learn(l.keyOf(j), j.Prediction(), d); err != nil {
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
	l.settle(j)
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
	l.settle(j)
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
		l.settle(j)
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

func (l *Line) expire(now time.Time) {
	l.expBuf = l.sq.Expire(now, l.expBuf[:0])
	for i, it := range l.expBuf {
		l.unwait(jobOf(it))
		l.Stats.Expired++
		l.deadLetter(jobOf(it), now, "expired")
		l.expBuf[i] = nil
	}
}

// NextDeadline is the earliest moment the Line has work of its own: a lease
// ending, a TTL passing, a delayed job coming due.
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
	if t, ok := l.sq.NextExpiry(); ok {
		earliest(t)
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
		l.settle(j)
		l.retry(j, now, "lease expired")
	}
	if at, ok := l.sq.NextExpiry(); ok && !at.After(now) {
		l.expire(now)
	}
	for j := l.delayed.min(); j != nil && j.deadline() <= nanos(now); j = l.delayed.min() {
		l.delayed.remove(j)
		j.setDeadline(0)
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
		l.dropCancelled(j, now)
		l.Stats.Cancelled++
		return Delayed, nil
	}
	l.sq.Remove(&j.item)
	l.unwait(j)
	l.dropCancelled(j, now)
	l.Stats.Cancelled++
	return Waiting, nil
}

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
		l.sq.Each(func(it *sched.Item) { match(jobOf(it)) })
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

// inFlight reports whether j is delivered and not settled.
func (l *Line) inFlight(j *Job) bool {
	_, _, ok := l.Flight(j)
	return ok
}

// Purge drops every waiting job and says how many; jobs in flight and
// delayed are kept.
func (l *Line) Purge() int {
	var all []*Job
	l.sq.Each(func(it *sched.Item) { all = append(all, jobOf(it)) })
	for _, j := range all {
		l.sq.Remove(&j.item)
		l.unwait(j)
		l.drop(j)
	}
	return len(all)
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

// Reconfigure swaps in sq, a scheduler for new settings, and moves the
// waiting jobs over in their order, each classified afresh; jobs
// out of line (in flight, delayed, dead) are when they come back. A
// durable caller logs the queue's new declaration before it calls this.
func (l *Line) Reconfigure(cfg Config, sq *sched.Queue, now time.Time) {
	var waiting []*Job
	l.sq.Each(func(it *sched.Item) { waiting = append(waiting, jobOf(it)) })
	slices.SortFunc(waiting, func(a, b *Job) int { return cmp.Compare(a.item.ID, b.item.ID) })
	for _, j := range waiting {
		l.sq.Remove(&j.item)
		l.unwait(j)
	}
	l.sq, l.cfg = sq, cfg
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
		l.settle(j)
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

// Each calls f for every job the Line holds and where it is: waiting,
// running (held), delayed or dead (with its reason and time).
func (l *Line) Each(waiting, running, delayed func(j *Job), dead func(d DeadLetterEntry)) {
	if waiting != nil {
		l.sq.Each(func(it *sched.Item) { waiting(jobOf(it)) })
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
	items := l.sq.Peek(now, n, make([]*sched.Item, 0, min(n, l.sq.Len())))
	out := make([]*Job, len(items))
	for i, it := range items {
		out[i] = jobOf(it)
	}
	return out
}

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
	s := &Snapshot{items: make([]*sched.Item, 0, l.sq.Len()+len(l.leases)+len(l.delayed)+len(l.dead))}
	l.sq.Each(func(it *sched.Item) { s.items = append(s.items, it) })
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

// SortDead orders the dead letters by when they died, after Restore.
func (l *Line) SortDead() {
	slices.SortStableFunc(l.dead, func(a, b DeadLetterEntry) int { return a.At.Compare(b.At) })
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
