package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/harbinger-mq/harbinger/internal/delivery"
	"github.com/harbinger-mq/harbinger/internal/history"
	"github.com/harbinger-mq/harbinger/internal/predict"
	"github.com/harbinger-mq/harbinger/internal/store"
	"github.com/harbinger-mq/harbinger/internal/text"
)

// NackAction says what happens to a nacked job.
type NackAction int

// Nack actions.
const (
	// NackRequeue puts the job back in line at once (it keeps its tier and
	// its place), or dead-letters it if it has had its attempts.
	NackRequeue NackAction = iota
	// NackRequeueAfter holds the job back for the nack's delay first.
	NackRequeueAfter
	// NackDeadLetter moves the job to the dead-letter list at once.
	NackDeadLetter
	// NackRetry holds the job back for the delay its retry policy gives
	// (the job's, else the queue's: exponential with jitter), then
	// requeues it; it is dead-lettered once it has had its attempts.
	NackRetry
)

// Consumer is one subscription to a queue, with credit-based flow control:
// Next hands out at most as many deliveries as the consumer has credit for,
// and pops each one from the scheduler only at that moment (late binding).
// A Consumer's methods may be called from different goroutines.
type Consumer struct {
	q    *queue
	name string

	holder delivery.Holder // what the queue's line knows it as

	// Guarded by q.mu.
	credit    int
	waiting   bool // blocked in Next
	inWaiters bool // in q.waiters: has credit and waits for a message
	closed    bool
	wprev     *Consumer
	wnext     *Consumer
	cancels   []string // ids of held jobs cancelled, not yet told to the worker

	ready chan struct{} // capacity 1: a wake-up for Next
}

func (c *Consumer) signal() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// Name is the consumer's name as given to Subscribe.
func (c *Consumer) Name() string { return c.name }

// Queue is the name of the consumer's queue.
func (c *Consumer) Queue() string { return c.q.name }

// Next blocks until the consumer has credit and a job is ready, then
// delivers it under a lease. It returns ctx's error when ctx ends,
// ErrShuttingDown once the broker drains, ErrConsumerClosed after Close and
// ErrQueueDeleted once its queue is deleted.
// When a job the consumer holds was cancelled, Next returns a Delivery
// with Cancel set and that job's ID first: the worker should stop it.
func (c *Consumer) Next(ctx context.Context) (Delivery, error) {
	var one [1]Delivery
	ds, err := c.NextBatch(ctx, 1, one[:0])
	if err != nil {
		return Delivery{}, err
	}
	return ds[0], nil
}

// NextBatch is Next for a consumer that takes several deliveries at a
// time: it blocks as Next does until it can hand out one, then appends to
// out, under the same lock, every further job the consumer has credit for
// and the queue has ready, up to max deliveries in all. Each is picked,
// leased and charged a credit exactly as Next would have, one after the
// other, so the order of work is the same as at prefetch 1 with the same
// free slots. A cancel notice comes alone, as the only element.
func (c *Consumer) NextBatch(ctx context.Context, max int, out []Delivery) ([]Delivery, error) {
	q := c.q
	b := q.b
	q.mu.Lock()
	for {
		if c.closed {
			q.mu.Unlock()
			if q.deleted {
				return out, ErrQueueDeleted
			}
			return out, ErrConsumerClosed
		}
		if len(c.cancels) > 0 {
			id := c.cancels[0]
			c.cancels = c.cancels[1:]
			q.mu.Unlock()
			return append(out, Delivery{ID: id, Queue: q.name, Cancel: true}), nil
		}
		if b.draining.Load() || q.closed {
			q.mu.Unlock()
			return out, ErrShuttingDown
		}
		if c.credit > 0 && !q.paused {
			now := b.clk.Now()
			d, ok := q.deliverLocked(c, now)
			if ok {
				out = append(out, d)
				out = q.moreLocked(c, max-1, now, out)
				pos := q.deliveredPosLocked()
				q.unlockChanged()
				b.awaitDelivered(pos)
				return out, nil
			}
			if !c.inWaiters {
				q.waiters.pushBack(c)
			}
		}
		c.waiting = true
		q.unlockChanged() // deliverLocked may have expired messages
		select {
		case <-c.ready:
		case <-b.stopping:
		case <-ctx.Done():
			q.mu.Lock()
			c.waiting = false
			q.waiters.remove(c)
			// We may have been woken for a message we will not take.
			if q.line.Len() > 0 {
				q.wakeOneLocked()
			}
			q.mu.Unlock()
			return out, ctx.Err()
		}
		q.mu.Lock()
		c.waiting = false
	}
}

// moreLocked appends up to n more deliveries to out while c has credit
// and a job is ready.
func (q *queue) moreLocked(c *Consumer, n int, now time.Time, out []Delivery) []Delivery {
	for ; n > 0 && c.credit > 0; n-- {
		d, ok := q.deliverLocked(c, now)
		if !ok {
			break
		}
		out = append(out, d)
	}
	return out
}

// MaxCredit bounds a consumer's outstanding credit, and so the jobs one
// consumer can hold at once (the same bound as AMQP's prefetch count).
const MaxCredit = 65_535

// AddCredit lets the consumer receive n more deliveries.
func (c *Consumer) AddCredit(n int) {
	if n <= 0 {
		return
	}
	q := c.q
	q.mu.Lock()
	c.credit = min(c.credit+n, MaxCredit)
	if c.waiting && !c.inWaiters {
		c.signal()
	}
	q.mu.Unlock()
}

// AddCreditTake is AddCredit for the goroutine that reads the consumer's
// acks and credit while another waits in Next: when Next is waiting only
// for credit and a job is ready, it takes that job for the caller to send
// instead of waking Next to take it, which saves a goroutine hand-off per
// delivery at prefetch 1. ok is false when it took nothing; the credit is
// added either way, and Next is woken for whatever it must still hand out
// (remaining credit, cancel notices, a shutdown). A caller that cannot
// send the delivery gives it back with Return, as Next's caller does.
func (c *Consumer) AddCreditTake(n int) (d Delivery, ok bool) {
	var one [1]Delivery
	ds := c.AddCreditTakeBatch(n, 1, one[:0])
	if len(ds) == 0 {
		return Delivery{}, false
	}
	return ds[0], true
}

// AddCreditTakeBatch is AddCreditTake for a consumer that takes several
// deliveries at a time: when it takes a job, it appends to out every
// further one the consumer has credit for and the queue has ready, up to
// max in all, as NextBatch does. It appends nothing when Next (or
// NextBatch) is busy or nothing is ready; the credit is added either way.
func (c *Consumer) AddCreditTakeBatch(n, max int, out []Delivery) []Delivery {
	if n <= 0 {
		return out
	}
	q := c.q
	b := q.b
	q.mu.Lock()
	c.credit = min(c.credit+n, MaxCredit)
	if !c.waiting || c.inWaiters {
		// Next is busy (it will see the credit when it loops) or already
		// waits for a message with credit to spare.
		q.mu.Unlock()
		return out
	}
	if c.closed || len(c.cancels) > 0 || b.draining.Load() || q.closed || q.paused {
		c.signal()
		q.mu.Unlock()
		return out
	}
	now := b.clk.Now()
	d, ok := q.deliverLocked(c, now)
	if ok {
		out = append(out, d)
		out = q.moreLocked(c, max-1, now, out)
	}
	switch {
	case !ok:
		// Nothing ready: wait for a message in Next's place, as Next
		// would have after waking.
		q.waiters.pushBack(c)
	case c.credit > 0:
		c.signal() // credit left: Next hands out the rest
	}
	pos := store.Pos(0)
	if ok {
		pos = q.deliveredPosLocked()
	}
	q.unlockChanged()
	b.awaitDelivered(pos)
	return out
}

// deliveredPosLocked is the log position a delivery just made must reach
// before its job is sent, or 0 when it need not wait: under limits or
// rate limits a job counts from its delivery, also across a crash, and
// recovery knows of the delivery only from its record (see
// delivery.Line.DurableDeliveries).
func (q *queue) deliveredPosLocked() store.Pos {
	if q.b.cfg.Store == nil || !q.line.DurableDeliveries() {
		return 0
	}
	return q.wrote
}

// awaitDelivered waits, with no lock held, until the log holds pos. A log
// that fails is logged where it failed; the jobs go out all the same, as
// every other record's loss costs at most a repeat.
func (b *Broker) awaitDelivered(pos store.Pos) {
	if pos > 0 {
		_ = b.cfg.Store.Wait(pos)
	}
}

// Ack settles a delivery as done and teaches the predictor its duration d.
// A bad duration (zero, negative or over Config.MaxDuration) returns a
// *BadDurationError, but the job is acked all the same: it is never lost
// or redelivered because of a clock glitch on the consumer.
func (c *Consumer) Ack(id string, d time.Duration) error {
	q := c.q
	q.mu.Lock()
	defer q.unlockChanged()
	if q.deleted {
		return unknown(id)
	}
	now := q.b.clk.Now()
	s, rec := q.beforeSettleLocked(id)
	j, err := q.line.Ack(c.holder, id, d, now)
	if rec && err == nil && !j.Cancelled() {
		q.recordLocked(s, d, history.Ack, now)
	}
	q.applyLocked(now)
	switch {
	case errors.Is(err, delivery.ErrNotHeld):
		return unknown(id)
	case errors.Is(err, delivery.ErrBadDuration):
		return &BadDurationError{ID: id, Duration: d, Max: q.b.cfg.MaxDuration}
	case err != nil:
		return err
	}
	if !j.Cancelled() {
		q.hist.observe(j.Prediction(), d)
		pr := q.sq().Predictor
		q.runs.observe(pr.KeyFor(q.name, j.Producer(), j.JobType(), j.SizeHint()), d, pr.Config().MaxKeys, func() map[predict.Key]bool {
			live := map[predict.Key]bool{}
			for _, k := range pr.SelectKeys(nil, 0) {
				live[k.Key] = true
			}
			return live
		})
	}
	return nil
}

// Nack settles a delivery as failed. reason is kept on a dead letter (cut
// to maxReason bytes on a character boundary, invalid UTF-8 replaced);
// delay is used with NackRequeueAfter. A delay outside 0 to MaxNackDelay
// is capped to that range and the nack applied, with an *AdjustedError.
func (c *Consumer) Nack(id string, action NackAction, delay time.Duration, reason string) error {
	if action < NackRequeue || action > NackRetry {
		return invalid("nack action", fmt.Sprintf("unknown action %d", action))
	}
	var adjusted error
	if action == NackRequeueAfter && (delay < 0 || delay > MaxNackDelay) {
		capped := min(max(delay, 0), MaxNackDelay)
		adjusted = &AdjustedError{ID: id, Field: "nack delay", Got: delay, Capped: capped}
		delay = capped
	}
	reason = text.Clean(reason, maxReason)
	q := c.q
	q.mu.Lock()
	defer q.unlockChanged()
	if q.deleted {
		return unknown(id)
	}
	now := q.b.clk.Now()
	s, rec := q.beforeSettleLocked(id)
	err := q.line.Nack(c.holder, id, delivery.NackAction(action), delay, reason, q.b.draining.Load(), now)
	if rec && err == nil && !s.j.Cancelled() {
		q.recordLocked(s, 0, history.Nack, now)
	}
	q.applyLocked(now)
	if err != nil {
		return unknown(id)
	}
	return adjusted
}

// MaxNackDelay bounds the delay of a NackRequeueAfter.
const MaxNackDelay = 24 * time.Hour

// maxReason bounds the reason kept on a dead letter.
const maxReason = 1024

// Extend renews a delivery's lease to lease from now; 0 means the queue's
// lease. A lease over MaxLease is capped to it, one under MinLease raised
// to it, and a negative one taken as the queue's lease; each is applied
// with an *AdjustedError.
func (c *Consumer) Extend(id string, lease time.Duration) error {
	q := c.q
	q.mu.Lock()
	defer q.unlockChanged() // the inspector shows the lease's end
	var adjusted error
	if lease < 0 || (lease > 0 && lease < MinLease) || lease > MaxLease {
		capped := min(max(lease, MinLease), MaxLease)
		if lease < 0 {
			capped = q.cfg.Lease
		}
		adjusted = &AdjustedError{ID: id, Field: "lease", Got: lease, Capped: capped}
		lease = capped
	}
	now := q.b.clk.Now()
	if q.deleted {
		return unknown(id)
	}
	if err := q.line.Extend(c.holder, id, lease, now); err != nil {
		return unknown(id)
	}
	q.armLocked(now)
	return adjusted
}

// Return gives back a delivery that never reached the consumer (its send
// failed): the job goes back in line at its place, its attempt not counted.
func (c *Consumer) Return(id string) {
	q := c.q
	q.mu.Lock()
	defer q.unlockChanged()
	if q.deleted {
		return
	}
	now := q.b.clk.Now()
	q.line.Return(c.holder, id, now)
	q.applyLocked(now)
}

// InFlight is how many deliveries the consumer holds unsettled.
func (c *Consumer) InFlight() int {
	c.q.mu.Lock()
	defer c.q.mu.Unlock()
	if c.q.deleted {
		return 0
	}
	return c.q.line.Held(c.holder)
}

// Close ends the subscription. Jobs the consumer still holds go back to the
// queue with their attempt counted (or to the dead-letter list once they
// have had their attempts), as a crashed consumer's would.
func (c *Consumer) Close() {
	q := c.q
	q.mu.Lock()
	if c.closed {
		q.mu.Unlock()
		return
	}
	c.closed = true
	q.waiters.remove(c)
	delete(q.cons, c.holder)
	now := q.b.clk.Now()
	q.line.Detach(c.holder, now)
	q.applyLocked(now)
	q.mu.Unlock()
	c.signal()
	q.b.consumers.Add(-1)
	q.b.changes.notify()
}

func unknown(id string) error {
	return fmt.Errorf("%w: %q is not held by this consumer (already settled, or its lease expired)", ErrUnknownMessage, id)
}
