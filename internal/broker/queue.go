package broker

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/delivery"
	"github.com/harbinger-mq/harbinger/internal/fair"
	"github.com/harbinger-mq/harbinger/internal/history"
	"github.com/harbinger-mq/harbinger/internal/predict"
	"github.com/harbinger-mq/harbinger/internal/sched"
	"github.com/harbinger-mq/harbinger/internal/store"
	"github.com/harbinger-mq/harbinger/internal/unique"
)

// queue is one named queue: the pure delivery line (internal/delivery) plus
// everything that needs a lock, a timer or the store. Every field below mu
// is guarded by it. Lock order: a queue's mu may be taken while holding
// Broker.mu, never the reverse, and no two queue locks are ever held
// together.
type queue struct {
	b    *Broker
	name string
	gen  uint64 // QueueInfo.Generation

	mu      sync.Mutex
	cfg     QueueConfig
	line    *delivery.Line
	closed  bool // the broker finished shutting down
	deleted bool // DeleteQueue removed it: nothing may change it any more
	paused  bool // publishes are taken, nothing is delivered
	cons    map[delivery.Holder]*Consumer
	waiters waitList
	lastPos store.Pos // the log position of the queue's last publish
	wrote   store.Pos // the log position of the queue's last record
	// declared: the log holds the queue's config (a declare, or a
	// checkpoint), so it comes back from a restart even with no jobs.
	declared bool
	unique   unique.Index

	// One timer for the line's next deadline: the earliest lease end, TTL
	// or due time.
	timer wake
	hist  durationHist
	runs  runTimes
	// record is the queue's history (history.go); nil when it is off.
	// histBytes is what it counted when Broker.histBytes last heard.
	record    *history.Record
	histBytes int64
}

func newQueue(b *Broker, name string, cfg QueueConfig, pol sched.Policy) (*queue, error) {
	sq, err := sched.NewQueue(pol, b.predictConfig())
	if err != nil {
		return nil, invalid("policy", err.Error())
	}
	q := &queue{b: b, name: name, gen: b.queueGen.Add(1), cfg: cfg, cons: map[delivery.Holder]*Consumer{}}
	q.line = delivery.New(name, q.lineConfig(cfg), sq)
	if !b.cfg.History.Off {
		if q.record, err = history.New(b.cfg.History); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// lineConfig is what the delivery line needs of the queue's and broker's
// settings.
func (q *queue) lineConfig(cfg QueueConfig) delivery.Config {
	bc := q.b.cfg
	return delivery.Config{
		MaxDepth: cfg.MaxDepth, MaxAttempts: cfg.MaxAttempts, Lease: cfg.Lease, DefaultTTL: cfg.DefaultTTL,
		RetryBase: cfg.RetryBase, RetryMax: cfg.RetryMax, RetryJitter: cfg.RetryJitter, MaxDelay: MaxNackDelay,
		MaxDuration: bc.MaxDuration, MaxDead: bc.MaxDeadLetters, MaxNames: bc.MaxKeysPerQueue, KeepDone: cfg.KeepDone,
		Durable: bc.Store != nil, Fair: fairOf(cfg),
	}
}

// fairOf is cfg's limits and fair shares, which Declare has validated.
func fairOf(cfg QueueConfig) fair.Config {
	c, err := cfg.fairConfig()
	if err != nil {
		panic(fmt.Sprintf("broker: a queue's limits were not validated: %v", err)) // a bug here
	}
	return c
}

// sq is the line's scheduler and predictor.
func (q *queue) sq() *sched.Queue { return q.line.Sched() }

// applyLocked carries out what the line's calls since the last one did:
// their records go to the log, the jobs it let go of give their bytes
// back, consumers are woken for the jobs that joined the line, holders
// are told of cancels, and the timer is armed for the next deadline.
func (q *queue) applyLocked(now time.Time) {
	fx := &q.line.Fx
	if len(fx.Records) > 0 {
		q.logLocked(fx.Records...)
	}
	for _, j := range fx.Released {
		q.release(j)
	}
	wake := fx.Ready
	if lim := q.cfg.MaxInFlight; lim > 0 {
		// Under a limit a settle frees a place for a job already waiting,
		// and no more consumers are woken than there are places.
		wake = min(fx.Ready+fx.Settled, max(lim-q.line.InFlight(), 0), q.line.Len())
	}
	for range wake {
		if !q.wakeOneLocked() {
			break
		}
	}
	for _, cn := range fx.Cancels {
		if c := q.cons[cn.Holder]; c != nil {
			c.cancels = append(c.cancels, cn.ID)
			c.signal()
		}
	}
	q.b.settled(fx.Settled)
	fx.Clear()
	q.armLocked(now)
}

// publishLocked admits a new job to the line: its record is on its way to
// the log before the job is in line.
func (q *queue) publishLocked(j *delivery.Job, names delivery.Names, runAt, now time.Time) error {
	if q.closed {
		return ErrShuttingDown
	}
	_, err := q.line.Admit(j, names, runAt, now)
	if errors.Is(err, delivery.ErrFull) {
		return &QueueFullError{Queue: q.name, MaxDepth: q.cfg.MaxDepth}
	}
	if err != nil {
		return err
	}
	if fx := &q.line.Fx; len(fx.Records) > 0 {
		// The job's record (and any before it) on its way to the log
		// before the job is in line: a refused append refuses the job.
		pos, err := q.b.cfg.Store.Append(fx.Records...)
		fx.ClearRecords()
		if err != nil {
			return fmt.Errorf("%w: %v", ErrNotDurable, err)
		}
		q.lastPos, q.wrote = pos, pos
		q.b.maybeCheckpoint()
	}
	q.line.Commit(j, now)
	return nil
}

// deliverLocked pops the next job for c, if one is ready.
func (q *queue) deliverLocked(c *Consumer, now time.Time) (Delivery, bool) {
	if lim := q.cfg.MaxInFlight; lim > 0 && q.line.InFlight() >= lim {
		return Delivery{}, false
	}
	if q.line.Fair() != nil {
		q.line.SetWorkers(q.workersLocked(), now)
	}
	j := q.line.Deliver(c.holder, now)
	if j == nil {
		q.applyLocked(now) // it may have expired jobs
		return Delivery{}, false
	}
	c.credit--
	q.b.inflight.Add(1)
	q.applyLocked(now)
	return q.delivery(j), true
}

func (q *queue) delivery(j *delivery.Job) Delivery {
	return Delivery{
		ID: j.ID(), Queue: q.name, Producer: j.Producer(), JobType: j.JobType(),
		SizeHint: j.SizeHint(), Payload: j.Payload(), Headers: j.Headers(),
		Attempt: j.Attempt(), PublishedAt: j.PublishedAt(), Enqueued: j.Enqueued(), Lease: q.cfg.Lease,
		Tier: j.Tier(), Predicted: j.Prediction().Cost,
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

// due reports whether the timer must be armed anew to fire by at. Callers
// check it before arm, so that the hot path does not even build the
// callback (a method value, allocated wherever it is made).
func (w *wake) due(at time.Time) bool { return w.t == nil || w.at.After(at) }

// arm makes the timer fire at at, calling fire with its generation.
func (w *wake) arm(clk clock.Clock, at, now time.Time, fire func(gen uint64)) {
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

// armLocked makes sure the queue's timer fires by the line's next deadline.
func (q *queue) armLocked(now time.Time) {
	if at, ok := q.line.NextDeadline(); ok && !q.closed && q.timer.due(at) {
		q.timer.arm(q.b.clk, at, now, q.onTimer)
	}
}

// onTimer has the line do what has come due.
func (q *queue) onTimer(g uint64) {
	q.mu.Lock()
	defer q.unlockChanged()
	if !q.timer.fired(g) || q.closed {
		return
	}
	now := q.b.clk.Now()
	q.line.Tick(now)
	q.applyLocked(now)
}

// workersLocked is how many workers take the queue's jobs, for fair
// shares: the jobs in flight and the credit its consumers have left.
// O(consumers).
func (q *queue) workersLocked() int {
	n := q.line.InFlight()
	for _, c := range q.cons {
		n += c.credit
	}
	return n
}

// wakeOneLocked wakes the consumer that has waited longest, and reports
// whether there was one.
func (q *queue) wakeOneLocked() bool {
	c := q.waiters.popFront()
	if c != nil {
		c.signal()
	}
	return c != nil
}

// reconfigureLocked swaps in a scheduler for a new config and moves the
// waiting jobs over in their original order.
func (q *queue) reconfigureLocked(cfg QueueConfig, pol sched.Policy, now time.Time) error {
	nsq, err := sched.NewQueue(pol, q.b.predictConfig())
	if err != nil {
		return invalid("policy", err.Error())
	}
	if nsq.Predictor.Config().Tiers == q.sq().Predictor.Config().Tiers {
		nsq.Predictor = q.sq().Predictor // keep what was learned
	}
	q.cfg = cfg
	if q.b.cfg.Store != nil {
		// Jobs the declare finds out of line are reclassified when they
		// come back; the waiting ones are now, and their records after
		// the declare say how.
		q.logLocked(q.declareRecord())
		q.declared = true
	}
	q.line.Reconfigure(q.lineConfig(cfg), nsq, now)
	q.timer.stop() // the new scheduler's expiries may be later
	q.applyLocked(now)
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
