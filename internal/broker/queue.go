package broker

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/predict"
	"github.com/harbinger-mq/harbinger/internal/sched"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// queue is one named queue: the pure scheduler plus everything that needs a
// lock or a timer. Every field below mu is guarded by it. Lock order: a
// queue's mu may be taken while holding Broker.mu, never the reverse, and no
// two queue locks are ever held together.
type queue struct {
	b    *Broker
	name string

	mu      sync.Mutex
	cfg     QueueConfig
	sq      *sched.Queue
	gen     uint64 // bumped when sq is replaced; items pushed under an older one are reset
	nextID  uint64 // sched.Item.ID
	closed  bool   // the broker finished shutting down
	paused  bool   // publishes are taken, nothing is delivered
	cons    map[*Consumer]struct{}
	waiters waitList
	leases  timeHeap // in flight, by lease deadline
	delayed timeHeap // not yet due (scheduled, or nacked with a delay), by due time
	dead    []deadLetter
	expBuf  []*sched.Item
	lastPos store.Pos // the log position of the queue's last publish
	unique  uniqueIndex
	names   map[string]string // interned producers and job types

	// One timer for the queue's next deadline: the earliest lease end, TTL
	// or due time.
	timer wake

	published, delivered, acked, nacked, redelivered uint64
	deadLettered, expired, badDurations, deadDropped uint64
	cancelled                                        uint64
	hist                                             durationHist
}

func newQueue(b *Broker, name string, cfg QueueConfig, pol sched.Policy) (*queue, error) {
	sq, err := sched.NewQueue(pol, b.predictConfig())
	if err != nil {
		return nil, invalid("policy", err.Error())
	}
	return &queue{b: b, name: name, cfg: cfg, sq: sq, gen: 1, cons: map[*Consumer]struct{}{}}, nil
}

// publishLocked classifies and enqueues a new message.
func (q *queue) publishLocked(m *Message, now time.Time) error {
	if q.closed {
		return ErrShuttingDown
	}
	if q.sq.Len() >= q.cfg.MaxDepth {
		return &QueueFullError{Queue: q.name, MaxDepth: q.cfg.MaxDepth}
	}
	m.PublishedAt = now
	m.Queue, m.Producer, m.JobType = q.name, q.intern(m.Producer), q.intern(m.JobType)
	if m.MaxAttempts == 0 {
		m.MaxAttempts = q.cfg.MaxAttempts
	}
	if m.TTL == 0 {
		m.TTL = q.cfg.DefaultTTL
	}
	q.nextID++
	m.heapIdx = -1
	m.item = sched.Item{ID: q.nextID, Data: m}
	state := store.Ready
	if m.RunAt.After(now) {
		// Invisible until due; it is classified and takes its place in
		// line then, as if published at that moment.
		m.scheduled, m.deadline = true, m.RunAt
		state = store.Delayed
	} else {
		q.enterLocked(m, now)
	}
	if st := q.b.cfg.Store; st != nil {
		pos, err := st.Append(q.jobRecord(m, state, "", time.Time{}))
		if err != nil {
			return fmt.Errorf("%w: %v", ErrNotDurable, err)
		}
		q.lastPos = pos
	}
	q.published++
	if m.scheduled {
		q.delayLocked(m, now)
	} else {
		q.pushLocked(m, now)
	}
	return nil
}

// enterLocked gives a job its place in line: its FIFO position and expiry
// count from now, and its tier and cost are predicted now.
func (q *queue) enterLocked(m *Message, now time.Time) {
	m.item.Enqueued = now
	if m.TTL > 0 {
		m.item.Expires = now.Add(m.TTL)
	}
	m.pred = q.sq.Classify(&m.item, q.keyOf(m))
	m.gen = q.gen
	m.scheduled = false
}

// intern returns the queue's copy of s, so that the thousands of jobs of
// one producer or job type share one string rather than hold a copy each.
// The table is bounded like the predictor's keys; past it s is kept as is.
func (q *queue) intern(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := q.names[s]; ok {
		return v
	}
	if q.names == nil {
		q.names = map[string]string{}
	}
	if len(q.names) < 2*q.b.cfg.MaxKeysPerQueue {
		q.names[s] = s
	}
	return s
}

// keyOf is m's predictor key. It is rebuilt when needed rather than kept
// on every waiting job: it repeats the job's strings.
func (q *queue) keyOf(m *Message) predict.Key {
	return q.sq.Predictor.KeyFor(q.name, m.Producer, m.JobType, m.SizeHint)
}

// pushLocked puts a message (new or retried) in line and wakes a consumer.
func (q *queue) pushLocked(m *Message, now time.Time) {
	if m.gen != q.gen {
		// Last pushed to another scheduler (the queue was redeclared while
		// the job was out, or a dead letter is requeued): start afresh in
		// this one, classified against what the queue knows now as the
		// waiting jobs were, keeping its id, FIFO position and expiry.
		q.resetLocked(m)
		if q.b.cfg.Store != nil && !q.b.recovering.Load() {
			q.logLocked(q.jobRecord(m, store.Ready, "", time.Time{}))
		}
	}
	if err := q.sq.Push(&m.item, now); err != nil {
		panic(fmt.Sprintf("broker: message %s pushed twice: %v", m.ID, err)) // a broker bug, not bad input
	}
	if !m.item.Expires.IsZero() {
		q.armLocked(now)
	}
	q.wakeOneLocked()
}

// resetLocked gives m a fresh item in the current scheduler.
func (q *queue) resetLocked(m *Message) {
	it := m.item
	m.item = sched.Item{ID: it.ID, Enqueued: it.Enqueued, Expires: it.Expires, Data: m}
	m.pred = q.sq.Classify(&m.item, q.keyOf(m))
	m.gen = q.gen
}

// deliverLocked pops the next message for c, if one is ready.
func (q *queue) deliverLocked(c *Consumer, now time.Time) (Delivery, bool) {
	if q.sq.Len() == 0 {
		return Delivery{}, false
	}
	if at, ok := q.sq.NextExpiry(); ok && !at.After(now) {
		q.expireLocked(now)
	}
	it := q.sq.Pop(now)
	if it == nil {
		return Delivery{}, false
	}
	m := it.Data.(*Message)
	q.logID(store.KindDeliver, m)
	m.attempt++
	m.owner = c
	m.leased = now.UnixNano()
	m.deadline = now.Add(q.cfg.Lease)
	q.leases.push(m)
	q.armLocked(now)
	c.inflight[m.ID] = m
	c.credit--
	q.delivered++
	if m.attempt > 1 {
		q.redelivered++
	}
	q.b.inflight.Add(1)
	return m.delivery(q.cfg.Lease), true
}

// settleLocked takes an in-flight message away from its consumer.
func (q *queue) settleLocked(m *Message) {
	q.leases.remove(m)
	delete(m.owner.inflight, m.ID)
	m.owner = nil
	if q.b.inflight.Add(-1) == 0 && q.b.draining.Load() {
		select {
		case q.b.drained <- struct{}{}:
		default:
		}
	}
}

// retryLocked requeues a settled message whose delivery failed, or
// dead-letters it once it has had its attempts. A cancelled job is dropped.
func (q *queue) retryLocked(m *Message, now time.Time, reason string) {
	if m.cancelled {
		q.dropLocked(m)
		return
	}
	if int(m.attempt) >= m.MaxAttempts {
		q.deadLetterLocked(m, now, fmt.Sprintf("%s (attempt %d of %d)", reason, m.attempt, m.MaxAttempts))
		return
	}
	q.pushLocked(m, now)
}

// dropLocked ends a job the broker no longer holds anywhere.
func (q *queue) dropLocked(m *Message) {
	q.logID(store.KindRemove, m)
	q.b.release(m)
}

func (q *queue) deadLetterLocked(m *Message, now time.Time, reason string) {
	q.deadLettered++
	q.logLocked(&store.Record{Kind: store.KindDead, Queue: q.name, ID: m.ID, Reason: reason, At: now})
	if len(q.dead) >= q.b.cfg.MaxDeadLetters {
		q.logID(store.KindRemove, q.dead[0].m)
		q.b.release(q.dead[0].m)
		q.dead[0] = deadLetter{}
		q.dead = q.dead[1:]
		q.deadDropped++
	}
	q.dead = append(q.dead, deadLetter{m: m, reason: reason, at: now})
}

func (q *queue) expireLocked(now time.Time) {
	q.expBuf = q.sq.Expire(now, q.expBuf[:0])
	for i, it := range q.expBuf {
		q.expired++
		q.deadLetterLocked(it.Data.(*Message), now, "expired")
		q.expBuf[i] = nil
	}
}

// wake is one of a queue's timers: it fires by the earliest deadline it was
// armed for, and is re-armed only when an earlier one appears (deadlines
// mostly grow, so the hot path rarely touches the clock). gen tells a
// stale firing from the current one.
type wake struct {
	t   clock.Timer
	at  time.Time
	gen uint64
}

// arm makes sure the timer fires by at, calling fire with its generation.
func (w *wake) arm(clk clock.Clock, at, now time.Time, fire func(gen uint64)) {
	if w.t != nil && !w.at.After(at) {
		return
	}
	w.stop()
	w.gen++
	g := w.gen
	w.at = at
	w.t = clk.AfterFunc(at.Sub(now), func() { fire(g) })
}

// fired reports whether a firing of generation g is the current one, and
// if so forgets the timer.
func (w *wake) fired(g uint64) bool {
	if g != w.gen {
		return false
	}
	w.t = nil
	return true
}

func (w *wake) stop() {
	if w.t != nil {
		w.t.Stop()
		w.t = nil
	}
}

// nextDeadlineLocked is the earliest moment the queue has work to do by
// itself: a lease ending, a TTL passing, a delayed job coming due.
func (q *queue) nextDeadlineLocked() (time.Time, bool) {
	var at time.Time
	earliest := func(t time.Time) {
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	if m := q.leases.min(); m != nil {
		earliest(m.deadline)
	}
	if t, ok := q.sq.NextExpiry(); ok {
		earliest(t)
	}
	if m := q.delayed.min(); m != nil {
		earliest(m.deadline)
	}
	return at, !at.IsZero()
}

// armLocked makes sure the queue's timer fires by its next deadline.
func (q *queue) armLocked(now time.Time) {
	if at, ok := q.nextDeadlineLocked(); ok && !q.closed {
		q.timer.arm(q.b.clk, at, now, q.onTimer)
	}
}

// onTimer does what has come due: leases that ended go back in line (or
// to the dead letters), jobs whose TTL passed expire, delayed jobs join
// the line.
func (q *queue) onTimer(g uint64) {
	q.mu.Lock()
	defer q.unlockChanged()
	if !q.timer.fired(g) || q.closed {
		return
	}
	now := q.b.clk.Now()
	for m := q.leases.min(); m != nil && !m.deadline.After(now); m = q.leases.min() {
		q.settleLocked(m)
		q.retryLocked(m, now, "lease expired")
	}
	if at, ok := q.sq.NextExpiry(); ok && !at.After(now) {
		q.expireLocked(now)
	}
	q.releaseDueLocked(now)
	q.armLocked(now)
}

// requeueAfterLocked holds a settled message back for d, then requeues it
// at its old place (a retry keeps its priority).
func (q *queue) requeueAfterLocked(m *Message, d time.Duration, now time.Time) {
	m.deadline = now.Add(d)
	q.logLocked(&store.Record{Kind: store.KindDelay, Queue: q.name, ID: m.ID, At: m.deadline})
	q.delayLocked(m, now)
}

// delayLocked holds m until m.deadline.
func (q *queue) delayLocked(m *Message, now time.Time) {
	q.delayed.push(m)
	q.armLocked(now)
}

// releaseDueLocked puts every job that has come due in line: a scheduled
// job enters as if published now, a delayed retry at its old place.
func (q *queue) releaseDueLocked(now time.Time) {
	for m := q.delayed.min(); m != nil && !m.deadline.After(now); m = q.delayed.min() {
		q.delayed.remove(m)
		m.deadline = time.Time{}
		if m.scheduled {
			q.enterLocked(m, now)
			if q.b.cfg.Store != nil {
				q.logLocked(q.jobRecord(m, store.Ready, "", time.Time{})) // its place in line, as it got it
			}
		}
		q.pushLocked(m, now)
	}
}

func (q *queue) wakeOneLocked() {
	if c := q.waiters.popFront(); c != nil {
		c.signal()
	}
}

// reconfigureLocked swaps in a scheduler for a new config and moves the
// waiting messages over in their original order.
func (q *queue) reconfigureLocked(cfg QueueConfig, pol sched.Policy, now time.Time) error {
	nsq, err := sched.NewQueue(pol, q.b.predictConfig())
	if err != nil {
		return invalid("policy", err.Error())
	}
	if nsq.Predictor.Config().Tiers == q.sq.Predictor.Config().Tiers {
		nsq.Predictor = q.sq.Predictor // keep what was learned
	}
	var waiting []*Message
	q.sq.Each(func(it *sched.Item) { waiting = append(waiting, it.Data.(*Message)) })
	slices.SortFunc(waiting, func(a, b *Message) int { return cmp.Compare(a.item.ID, b.item.ID) })
	for _, m := range waiting {
		q.sq.Remove(&m.item)
	}
	q.sq = nsq
	q.cfg = cfg
	q.gen++
	logged := q.b.cfg.Store != nil
	if logged {
		// Jobs the declare finds out of line are reclassified when they
		// come back (see pushLocked); the waiting ones are now, and their
		// records after the declare say how.
		q.logLocked(q.declareRecord())
	}
	for _, m := range waiting {
		q.resetLocked(m)
		q.pushLocked(m, now)
		if logged {
			q.logLocked(q.jobRecord(m, store.Ready, "", time.Time{}))
		}
	}
	q.timer.stop() // the new scheduler's expiries may be later
	q.armLocked(now)
	return nil
}

// waitList is an intrusive FIFO of consumers that have credit and are
// blocked waiting for a message.
type waitList struct{ head, tail *Consumer }

func (l *waitList) pushBack(c *Consumer) {
	c.inWaiters = true
	c.wprev, c.wnext = l.tail, nil
	if l.tail != nil {
		l.tail.wnext = c
	} else {
		l.head = c
	}
	l.tail = c
}

func (l *waitList) remove(c *Consumer) {
	if !c.inWaiters {
		return
	}
	if c.wprev != nil {
		c.wprev.wnext = c.wnext
	} else {
		l.head = c.wnext
	}
	if c.wnext != nil {
		c.wnext.wprev = c.wprev
	} else {
		l.tail = c.wprev
	}
	c.wprev, c.wnext, c.inWaiters = nil, nil, false
}

func (l *waitList) popFront() *Consumer {
	c := l.head
	if c != nil {
		l.remove(c)
	}
	return c
}

// durationHist counts predicted and actual durations of acked jobs in fixed
// buckets, so the metrics can export them at scrape time.
type durationHist struct {
	predicted, actual       [len(HistogramBounds) + 1]uint64
	predictedSum, actualSum float64 // seconds
	count                   uint64
}

// HistogramBounds are the upper bounds, in seconds, of the duration
// histogram buckets; the last bucket is unbounded.
var HistogramBounds = [...]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800}

func (h *durationHist) observe(pred predict.Prediction, actual time.Duration) {
	h.count++
	a := actual.Seconds()
	h.actual[bucket(a)]++
	h.actualSum += a
	p := pred.Cost.Seconds()
	h.predicted[bucket(p)]++
	h.predictedSum += p
}

func bucket(s float64) int {
	i, _ := slices.BinarySearch(HistogramBounds[:], s)
	return i
}
