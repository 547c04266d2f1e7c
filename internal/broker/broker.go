// Package broker owns the concurrency shell around the pure scheduler:
// queues with their own locks, consumers with credit, leases, redelivery,
// TTLs, dead letters and graceful shutdown. Every time read and timer goes
// through the injected clock, so tests drive leases and TTLs without
// sleeping. Transports (gRPC, metrics) call the Broker's methods and read
// its inspector; they hold no state of their own.
//
// Delivery is at least once: a job leaves the broker only when a consumer
// acks it, nacks it to the dead-letter list, it expires, or it runs out of
// attempts.
package broker

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/delivery"
	"github.com/harbinger-mq/harbinger/internal/predict"
	"github.com/harbinger-mq/harbinger/internal/store"
	"github.com/harbinger-mq/harbinger/internal/text"
)

// Broker is an in-memory job broker. Its methods are safe for concurrent use.
type Broker struct {
	cfg Config
	clk clock.Clock
	log *slog.Logger
	ids *idGen

	mu      sync.Mutex                        // serialises queue creation
	queues  atomic.Pointer[map[string]*queue] // copy on write: the hot path takes no broker lock
	changes changes

	consumers atomic.Int64
	queueGen  atomic.Uint64 // numbers the queues made, for QueueInfo.Generation
	inflight  atomic.Int64
	bytes     atomic.Int64 // held by every message not yet settled for good; see reserve
	histBytes atomic.Int64 // counted by every queue's history; see recordLocked

	storeFailed    atomic.Bool  // the store refused an append; logged once
	nextCheckpoint atomic.Int64 // log size that triggers the next checkpoint
	checkpointing  atomic.Bool
	batchJobs      int            // jobs a checkpoint writes per hold of a queue's lock; 0 is checkpointBatch
	bg             sync.WaitGroup // checkpoints in the background
	recovering     atomic.Bool    // New is replaying the store: declares write nothing
	periodic       schedules      // the periodic schedules and their one timer
	draining       atomic.Bool
	stopping       chan struct{} // closed when Shutdown starts
	drained        chan struct{} // poked when in-flight reaches zero while draining
	done           chan struct{} // closed when Shutdown has finished
	once           sync.Once
}

// New returns a broker with cfg (zero fields take their defaults).
func New(cfg Config) (*Broker, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &Broker{
		cfg: cfg, clk: cfg.Clock, log: cfg.Logger, ids: newIDGen(),
		stopping: make(chan struct{}),
		drained:  make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	b.queues.Store(&map[string]*queue{})
	if cfg.Store != nil {
		if err := b.recover(); err != nil {
			return nil, err
		}
		b.startSchedules()
		b.maybeCheckpoint()
	}
	return b, nil
}

// Config returns the configuration in force, defaults filled in.
func (b *Broker) Config() Config { return b.cfg }

func (b *Broker) predictConfig() predict.Config {
	return predict.Config{MaxKeys: b.cfg.MaxKeysPerQueue, MaxDuration: b.cfg.MaxDuration}
}

// lookup returns the named queue, creating it with the default config when
// create is set.
func (b *Broker) lookup(name string, create bool) (*queue, error) {
	if q := (*b.queues.Load())[name]; q != nil {
		return q, nil
	}
	if !create {
		return nil, &QueueNotFoundError{Queue: name}
	}
	if err := b.checkQueueName(name); err != nil {
		return nil, err
	}
	q, _, err := b.create(name, b.cfg.Queue)
	return q, err
}

// create returns the named queue, creating it with cfg if it does not
// exist; created says which.
func (b *Broker) create(name string, cfg QueueConfig) (q *queue, created bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	old := *b.queues.Load()
	if q := old[name]; q != nil {
		return q, false, nil
	}
	if len(old) >= b.cfg.MaxQueues {
		return nil, false, fmt.Errorf("%w: the limit is %d; delete unused queues or raise max queues", ErrTooManyQueues, b.cfg.MaxQueues)
	}
	pol, err := cfg.policy()
	if err != nil {
		return nil, false, err
	}
	q, err = newQueue(b, name, cfg, pol)
	if err != nil {
		return nil, false, err
	}
	if b.draining.Load() {
		q.closed = b.isDone()
	}
	next := maps.Clone(old)
	next[name] = q
	b.queues.Store(&next)
	return q, true, nil
}

func (b *Broker) isDone() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

func (b *Broker) checkQueueName(name string) error {
	if name == "" {
		return invalid("queue", "name is empty")
	}
	if len(name) > b.cfg.MaxQueueName {
		return invalid("queue", fmt.Sprintf("name is %d bytes, over the limit of %d", len(name), b.cfg.MaxQueueName))
	}
	i := strings.IndexFunc(name, text.BadNameRune)
	if i < 0 {
		return nil
	}
	// Before this rule only ASCII spaces and controls were refused: a log
	// may hold a queue named with another space or a format character,
	// and such a queue keeps working (recovered, published to, declared
	// again) while it exists. A new one may not be made.
	asciiRule := func(r rune) bool { return r < 0x21 || r == 0x7f || r == utf8.RuneError }
	if strings.IndexFunc(name, asciiRule) < 0 && (b.recovering.Load() || (*b.queues.Load())[name] != nil) {
		return nil
	}
	what := "invalid UTF-8"
	if r, size := utf8.DecodeRuneInString(name[i:]); r != utf8.RuneError || size > 1 {
		what = fmt.Sprintf("%U", r)
	}
	return invalid("queue", fmt.Sprintf("name %q has %s at byte %d; a queue name may not have spaces, control or format characters (such as zero-width spaces or bidi controls) or invalid UTF-8", name, what, i))
}

// Validate checks a message against the limits without publishing it.
func (b *Broker) Validate(m *Message) error {
	if err := b.checkQueueName(m.Queue); err != nil {
		return err
	}
	if len(m.Payload) > b.cfg.MaxPayload {
		return &PayloadTooLargeError{Size: len(m.Payload), Limit: b.cfg.MaxPayload}
	}
	for _, f := range [...]struct{ name, v string }{{"producer", m.Producer}, {"job_type", m.JobType}} {
		if len(f.v) > b.cfg.MaxKeyLen {
			return invalid(f.name, fmt.Sprintf("is %d bytes, over the limit of %d", len(f.v), b.cfg.MaxKeyLen))
		}
		if !utf8.ValidString(f.v) {
			return invalid(f.name, "is not valid UTF-8")
		}
	}
	if m.TTL < 0 || m.TTL > MaxTTL {
		return invalid("ttl", fmt.Sprintf("must be 0 (queue default) to %v, got %v", MaxTTL, m.TTL))
	}
	switch {
	case m.UniqueKey != "" && (m.UniqueFor <= 0 || m.UniqueFor > MaxUniqueFor):
		return invalid("unique_for", fmt.Sprintf("a unique key needs a window of more than 0 and at most %v, got %v", MaxUniqueFor, m.UniqueFor))
	case len(m.UniqueKey) > MaxUniqueKeyLen || !utf8.ValidString(m.UniqueKey):
		return invalid("unique_key", fmt.Sprintf("must be valid UTF-8 of at most %d bytes", MaxUniqueKeyLen))
	case m.RetryBase < 0 || m.RetryBase > MaxNackDelay || m.RetryMax < 0 || m.RetryMax > MaxNackDelay:
		return invalid("retry", fmt.Sprintf("retry base and max must be 0 (the queue's) to %v, got %v and %v", MaxNackDelay, m.RetryBase, m.RetryMax))
	case m.Delay < 0 || m.Delay > MaxDelay:
		return invalid("delay", fmt.Sprintf("must be 0 (at once) to %v, got %v", MaxDelay, m.Delay))
	case m.Delay > 0 && !m.RunAt.IsZero():
		return invalid("run_at", "give either run_at or delay, not both")
	case !m.RunAt.IsZero() && m.RunAt.Sub(b.clk.Now()) > MaxDelay:
		return invalid("run_at", fmt.Sprintf("%v is more than %v ahead", m.RunAt.UTC().Format(time.RFC3339), MaxDelay))
	}
	if m.MaxAttempts < 0 || m.MaxAttempts > MaxAttemptsLimit {
		return invalid("max_attempts", fmt.Sprintf("must be 0 (queue default) to %d, got %d", MaxAttemptsLimit, m.MaxAttempts))
	}
	if len(m.Headers) > 0 {
		n := 0
		for k, v := range m.Headers {
			n += len(k) + len(v)
		}
		if n > b.cfg.MaxHeaderBytes {
			return invalid("headers", fmt.Sprintf("are %d bytes, over the limit of %d", n, b.cfg.MaxHeaderBytes))
		}
	}
	return nil
}

// Result is one message's outcome in a batch publish: its id when stored,
// or why it was not. Duplicate is set, with the first job's id, for a
// message whose unique key was taken: nothing was stored for it.
type Result struct {
	ID        string
	Duplicate bool
	Err       error
}

// PublishEach stores each message that passes validation and the queue's
// and broker's limits, in order, and appends one Result per message to out.
// Messages are independent: an invalid one, or one that meets a full
// queue, is refused alone and the rest are stored. The broker owns the
// stored messages afterwards.
func (b *Broker) PublishEach(msgs []*Message, out []Result) []Result {
	first := len(out)
	out, d := b.Admit(msgs, out)
	if err := d.Wait(); err != nil {
		for i := first; i < len(out); i++ {
			if out[i].Err == nil {
				out[i] = Result{Err: err}
			}
		}
	}
	return out
}

// Durable is what the answer to an admitted publish waits for: the write
// of its records to the log. The zero value waits for nothing.
type Durable struct {
	b   *Broker
	pos store.Pos
}

// Wait returns once the publish's records are on disk (on a broker with a
// store), or an error wrapping ErrNotDurable when the log failed: then
// every message the publish stored is to be answered with it instead of
// its id. Waits of one broker's publishes may overlap: one fsync covers
// every record appended before it started.
func (d Durable) Wait() error {
	if d.b == nil || d.pos == 0 {
		return nil
	}
	defer d.b.maybeCheckpoint()
	// Answered only once on disk: one fsync covers every publish that
	// arrived while the last one ran.
	if err := d.b.cfg.Store.Wait(d.pos); err != nil {
		return fmt.Errorf("%w: %v; the job may still run, publish it again if it must", ErrNotDurable, err)
	}
	return nil
}

// Admit is PublishEach without waiting for the log: it stores the
// messages in their queues and appends their Results, and returns what
// their answer must wait for. A caller that answers only after
// Durable.Wait, and in admission order, may admit its next batch
// meanwhile, so that one fsync covers both (PublishStream does).
func (b *Broker) Admit(msgs []*Message, out []Result) ([]Result, Durable) {
	if b.draining.Load() {
		for range msgs {
			out = append(out, Result{Err: ErrShuttingDown})
		}
		return out, Durable{}
	}
	now := b.clk.Now()
	var wait store.Pos
	var q *queue
	for _, m := range msgs {
		if err := b.Validate(m); err != nil {
			out = append(out, Result{Err: err})
			continue
		}
		if q == nil || q.name != m.Queue {
			if q != nil {
				q.applyLocked(now)
				q.unlockChanged()
				q = nil
			}
			nq, err := b.lockQueue(m.Queue, true)
			if err != nil {
				out = append(out, Result{Err: err})
				continue
			}
			q = nq
		}
		if m.SizeHint == 0 {
			m.SizeHint = uint64(len(m.Payload))
		}
		if m.Delay > 0 {
			m.RunAt, m.Delay = now.Add(m.Delay), 0
		}
		if m.UniqueKey != "" {
			if id, dup, err := q.uniqueLocked(m.UniqueKey, now); err != nil || dup {
				out = append(out, Result{ID: id, Duplicate: dup, Err: err})
				continue
			}
		}
		j := &delivery.Job{}
		j.SetMaxAttempts(m.MaxAttempts)
		j.SetPayload(m.Payload)
		j.SetOptions(m.Headers, m.TTL, m.RetryBase, m.RetryMax)
		j.SetSizeHint(m.SizeHint)
		names := delivery.Names{Producer: m.Producer, JobType: m.JobType}
		if err := b.reserve(j, names, q.name); err != nil {
			out = append(out, Result{Err: err})
			continue
		}
		b.ids.give(j)
		if err := q.publishLocked(j, names, m.RunAt, now); err != nil {
			b.bytes.Add(-jobSize(j, names, q.name))
			out = append(out, Result{Err: err})
			continue
		}
		m.ID, m.PublishedAt = j.ID(), j.PublishedAt()
		out = append(out, Result{ID: m.ID})
		if q.lastPos > wait {
			wait = q.lastPos
		}
		if m.UniqueKey != "" {
			// A copy: the index outlives the job, whose id m.ID points into.
			// The answer waits for the key too: a publish repeated after a
			// crash must find it.
			wait = max(wait, q.claimLocked(m.UniqueKey, strings.Clone(m.ID), now.Add(m.UniqueFor)))
		}
	}
	if q != nil {
		q.applyLocked(now)
		q.unlockChanged()
	}
	if b.cfg.Store == nil || wait == 0 {
		return out, Durable{}
	}
	return out, Durable{b: b, pos: wait}
}

// Publish is PublishEach for callers that want the ids: it returns the ids
// of the stored messages in order and, when any message was refused, an
// error saying which (the message's own error for a batch of one, else a
// *BatchError).
func (b *Broker) Publish(msgs ...*Message) ([]string, error) {
	res := b.PublishEach(msgs, make([]Result, 0, len(msgs)))
	ids := make([]string, 0, len(msgs))
	var failed []FailedRecord
	for i, r := range res {
		if r.Err != nil {
			failed = append(failed, FailedRecord{Index: i, Err: r.Err})
			continue
		}
		ids = append(ids, r.ID)
	}
	switch {
	case len(failed) == 0:
		return ids, nil
	case len(msgs) == 1:
		return ids, failed[0].Err
	default:
		return ids, &BatchError{Total: len(msgs), Failed: failed}
	}
}

// msgOverhead is the broker's estimate of a job's memory beyond its
// payload, headers and names: the job, its scheduler item and index
// entries.
const msgOverhead = 176

// jobSize is the bytes a job is charged to the broker's budget, from what
// the job keeps and never changes after its publish, so that what is
// released is what was reserved without the job storing it. A job not yet
// admitted has no names of its own yet: the caller gives them.
func jobSize(j *delivery.Job, names delivery.Names, queueName string) int64 {
	size := int64(msgOverhead + len(j.Payload()) + len(queueName) + len(names.Producer) + len(names.JobType))
	for k, v := range j.Headers() {
		size += int64(len(k) + len(v))
	}
	return size
}

// reserve charges j's bytes to the broker's budget, or refuses it.
func (b *Broker) reserve(j *delivery.Job, names delivery.Names, queueName string) error {
	size := jobSize(j, names, queueName)
	limit := b.cfg.MaxBytes
	for {
		held := b.bytes.Load()
		if held+size > limit {
			return &OverBudgetError{Size: size, Held: held, Limit: limit}
		}
		if b.bytes.CompareAndSwap(held, held+size) {
			return nil
		}
	}
}

// release gives j's bytes back to the budget once the broker lets go of
// it (the line hands each job back once: Effects.Released).
func (q *queue) release(j *delivery.Job) {
	q.b.bytes.Add(-jobSize(j, delivery.Names{Producer: j.Producer(), JobType: j.JobType()}, q.name))
}

// Subscribe opens a consumer on a queue (created if needed) with prefetch
// initial credit (0 means 1).
func (b *Broker) Subscribe(queueName, consumerName string, prefetch int) (*Consumer, error) {
	if b.draining.Load() {
		return nil, ErrShuttingDown
	}
	if prefetch < 0 {
		return nil, invalid("prefetch", fmt.Sprintf("must not be negative, got %d", prefetch))
	}
	// The name is shown beside every job the consumer holds (ListJobs, the
	// dashboard) and is not charged to the memory budget: bounded as a
	// producer's name is.
	if len(consumerName) > b.cfg.MaxKeyLen {
		return nil, invalid("consumer", fmt.Sprintf("name is %d bytes, over the limit of %d", len(consumerName), b.cfg.MaxKeyLen))
	}
	if !utf8.ValidString(consumerName) {
		return nil, invalid("consumer", "name is not valid UTF-8")
	}
	if prefetch == 0 {
		prefetch = 1
	}
	if n := b.consumers.Add(1); n > int64(b.cfg.MaxConsumers) {
		b.consumers.Add(-1)
		return nil, fmt.Errorf("%w: the limit is %d", ErrTooManyConsumers, b.cfg.MaxConsumers)
	}
	q, err := b.lockQueue(queueName, true)
	if err != nil {
		b.consumers.Add(-1)
		return nil, err
	}
	c := &Consumer{q: q, name: consumerName, credit: prefetch, ready: make(chan struct{}, 1)}
	c.holder = q.line.Attach()
	q.cons[c.holder] = c
	q.unlockChanged()
	return c, nil
}

// Declare creates a queue with cfg, or reconfigures it: waiting jobs move to
// the new scheduler in their original order (jobs in flight at the time join
// behind them if they are requeued), and the predictor keeps what it learned
// when the number of tiers is unchanged.
func (b *Broker) Declare(name string, cfg QueueConfig) (QueueInfo, error) {
	if err := b.checkQueueName(name); err != nil {
		return QueueInfo{}, err
	}
	cfg = cfg.WithDefaults(b.cfg.Queue)
	pol, err := cfg.policy()
	if err != nil {
		return QueueInfo{}, err
	}
	q, _, err := b.create(name, cfg)
	if err != nil {
		return QueueInfo{}, err
	}
	q.mu.Lock()
	if q.deleted {
		// Deleted since create found it: declare the new one.
		q.mu.Unlock()
		return b.Declare(name, cfg)
	}
	if !equalConfig(q.cfg, cfg) {
		err = q.reconfigureLocked(cfg, pol, b.clk.Now())
	} else if b.cfg.Store != nil && !b.recovering.Load() && !q.declared {
		// An answered declare brings the queue back from a restart, also
		// one a publish or subscribe created before. The replay resets
		// jobs out of line only where the config changed.
		q.logLocked(q.declareRecord())
		q.declared = true
	}
	if b.recovering.Load() {
		q.declared = true
	}
	pos := q.wrote
	q.unlockChanged()
	if err != nil {
		return QueueInfo{}, err
	}
	if err := b.persisted(pos, "the declare"); err != nil {
		return QueueInfo{}, err
	}
	return q.info(), nil
}

// lockQueue returns the named queue with its lock held, creating it when
// create is set. A queue deleted between the lookup and the lock is looked
// up again, so the caller never works on a deleted queue: what it does goes
// to the queue of that name now, or fails as for one that never existed.
func (b *Broker) lockQueue(name string, create bool) (*queue, error) {
	for {
		q, err := b.lookup(name, create)
		if err != nil {
			return nil, err
		}
		q.mu.Lock()
		if !q.deleted {
			return q, nil
		}
		q.mu.Unlock()
	}
}

// Purge drops every ready job of a queue; jobs in flight are kept.
func (b *Broker) Purge(name string) (int, error) {
	q, err := b.lockQueue(name, false)
	if err != nil {
		return 0, err
	}
	n := q.line.Purge()
	q.applyLocked(b.clk.Now())
	pos := q.wrote
	q.unlockChanged()
	return n, b.persisted(pos, fmt.Sprintf("the purge of %d jobs", n))
}

// QueueDeleted counts what DeleteQueue dropped: the queue's jobs by state,
// and the consumers whose subscriptions it ended.
type QueueDeleted struct {
	Waiting, Delayed, Running, Dead, Consumers int
}

func (d QueueDeleted) jobs() int { return d.Waiting + d.Delayed + d.Running + d.Dead }

// DeleteQueue removes a queue and everything that goes with it: its config,
// predictor, unique keys and pause state. A queue that holds any job
// (waiting, delayed, running or dead-lettered) is deleted only with force,
// and then its jobs are dropped for good; one that a schedule publishes to
// is not deleted at all, since the schedule's next tick would create it
// again. Its consumers' Next returns ErrQueueDeleted, and whatever they
// still hold is forgotten: a later ack of it is an unknown message. A
// publish or subscribe to the name afterwards creates a new queue. On a
// durable broker the deletion is on disk before DeleteQueue returns.
func (b *Broker) DeleteQueue(name string, force bool) (QueueDeleted, error) {
	if b.draining.Load() {
		return QueueDeleted{}, ErrShuttingDown
	}
	if names := b.schedulesInto(name); len(names) > 0 {
		return QueueDeleted{}, &QueueInUseError{Queue: name, Schedules: names}
	}
	b.mu.Lock()
	old := *b.queues.Load()
	q := old[name]
	if q == nil {
		b.mu.Unlock()
		return QueueDeleted{}, &QueueNotFoundError{Queue: name}
	}
	q.mu.Lock()
	d := QueueDeleted{Waiting: q.line.Len(), Delayed: q.line.DelayedLen(), Running: q.line.InFlight(),
		Dead: len(q.line.Dead()), Consumers: len(q.cons)}
	var err error
	var pos store.Pos
	switch {
	case q.closed:
		err = ErrShuttingDown
	case !force && d.jobs() > 0:
		err = &QueueInUseError{Queue: name, Held: d}
	case b.cfg.Store != nil:
		// Logged before anything changes: if the log refuses it, the
		// queue stays as it was.
		if pos, err = b.cfg.Store.Append(&store.Record{Kind: store.KindDrop, Queue: name}); err != nil {
			err = fmt.Errorf("%w: %v; the queue was not deleted", ErrNotDurable, err)
		}
	}
	if err != nil {
		q.mu.Unlock()
		b.mu.Unlock()
		return QueueDeleted{}, err
	}
	q.deleted = true
	q.histSyncLocked() // its history goes with it
	q.line.Each(q.release, q.release, q.release, func(e delivery.DeadLetterEntry) { q.release(e.Job) })
	for _, c := range q.cons {
		c.closed = true
		q.waiters.remove(c)
		c.signal()
	}
	clear(q.cons)
	b.consumers.Add(-int64(d.Consumers))
	q.timer.stop()
	next := maps.Clone(old)
	delete(next, name)
	b.queues.Store(&next)
	q.mu.Unlock()
	b.mu.Unlock()
	b.settled(d.Running)
	b.changes.notify()
	if pos > 0 {
		if err := b.cfg.Store.Wait(pos); err != nil {
			return d, fmt.Errorf("%w: %v; the queue is deleted (it dropped %d waiting, %d delayed, %d running and %d dead-lettered jobs and stopped %d consumers), but it may come back with them if the broker restarts",
				ErrNotDurable, err, d.Waiting, d.Delayed, d.Running, d.Dead, d.Consumers)
		}
	}
	return d, nil
}

// JobState says where a job stands: when it was cancelled, or when GetJob
// found it.
type JobState string

// Job states reported by Cancel and GetJob.
const (
	JobWaiting = JobState(delivery.Waiting) // in line (Cancel removes it)
	JobDelayed = JobState(delivery.Delayed) // scheduled or nacked with a delay (Cancel removes it)
	JobRunning = JobState(delivery.Running) // delivered (Cancel tells its worker, and it ends when it settles)
	JobDead    = JobState(delivery.Dead)    // a dead letter (GetJob only: Cancel does not take one)
	// Ended, and still reported by GetJob (QueueConfig.KeepDone).
	JobDone      = JobState(delivery.Done)      // acked
	JobCancelled = JobState(delivery.Cancelled) // cancelled
)

// Cancel ends a job by id: a waiting or delayed job is removed at once; a
// running one stays with its worker, which is told to stop it (see
// Delivery.Cancel), and is dropped, not retried, when it settles or its
// lease ends. The queue's first Cancel indexes its jobs by id (O(jobs
// held)); later ones are O(1).
func (b *Broker) Cancel(queueName, id string) (JobState, error) {
	q, err := b.lockQueue(queueName, false)
	if err != nil {
		return "", err
	}
	st, err := q.line.Cancel(id, b.clk.Now())
	q.applyLocked(b.clk.Now())
	pos := q.wrote
	q.unlockChanged()
	if err != nil {
		return "", fmt.Errorf("%w: %q is not waiting, delayed or running in queue %q (finished, dead-lettered or never published)", ErrUnknownMessage, id, queueName)
	}
	return JobState(st), b.persisted(pos, "the cancel")
}

// Pause stops deliveries from a queue (paused true) or starts them again.
// While paused, publishes are taken and jobs in flight finish as usual. The
// state survives a restart of a durable broker. Pausing a queue that does
// not exist yet makes it, with the default settings, so that an operator
// can hold a queue before its first job is published.
func (b *Broker) Pause(name string, paused bool) error {
	q, err := b.lockQueue(name, paused)
	if err != nil {
		return err
	}
	if q.paused == paused {
		q.unlockChanged()
		return nil
	}
	q.paused = paused
	pos := q.logLocked(q.pauseRecord())
	if !paused {
		for _, c := range q.cons {
			if c.waiting {
				c.signal()
			}
		}
	}
	q.unlockChanged()
	what := "the pause"
	if !paused {
		what = "the resume"
	}
	return b.persisted(pos, what)
}

// RequeueDeadLetters moves dead letters (all of the queue's when ids is
// empty) back to the queue with fresh attempts and no TTL. It reports how
// many moved.
func (b *Broker) RequeueDeadLetters(name string, ids []string) (int, error) {
	return b.takeDeadLetters(name, ids, true)
}

// DeleteDeadLetters drops dead letters (all of the queue's when ids is
// empty) for good, and reports how many it dropped.
func (b *Broker) DeleteDeadLetters(name string, ids []string) (int, error) {
	return b.takeDeadLetters(name, ids, false)
}

func (b *Broker) takeDeadLetters(name string, ids []string, requeue bool) (int, error) {
	q, err := b.lockQueue(name, false)
	if err != nil {
		return 0, err
	}
	if q.closed {
		q.unlockChanged()
		return 0, ErrShuttingDown
	}
	now := b.clk.Now()
	n := q.line.TakeDead(ids, requeue, now)
	q.applyLocked(now)
	pos := q.wrote
	q.unlockChanged()
	what := fmt.Sprintf("the deletion of %d dead letters", n)
	if requeue {
		what = fmt.Sprintf("the requeue of %d dead letters", n)
	}
	return n, b.persisted(pos, what)
}

// settled uncounts n jobs that were in flight, and tells a Shutdown waiting
// for the last of them.
func (b *Broker) settled(n int) {
	if n > 0 && b.inflight.Add(-int64(n)) == 0 && b.draining.Load() {
		select {
		case b.drained <- struct{}{}:
		default:
		}
	}
}

// Done is closed when Shutdown has finished.
func (b *Broker) Done() <-chan struct{} { return b.done }

// Draining reports whether Shutdown has started.
func (b *Broker) Draining() bool { return b.draining.Load() }

// Shutdown stops taking publishes and handing out jobs, waits until every
// in-flight job is acked or nacked or ctx ends, then returns the jobs still
// in flight to their queues (their attempt not counted: the broker, not the
// job, cut them short) and stops every timer. Nothing is lost: afterwards
// every job is ready, delayed, dead-lettered or settled. It returns ctx's error if ctx
// ended first. Calling it again waits for the first call to finish.
func (b *Broker) Shutdown(ctx context.Context) error {
	first := false
	b.once.Do(func() { first = true })
	if !first {
		select {
		case <-b.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	start := b.clk.Now()
	b.draining.Store(true)
	b.periodic.mu.Lock()
	b.periodic.timer.stop()
	b.periodic.mu.Unlock()
	close(b.stopping)
	b.changes.notify()
	b.log.Info("broker: draining", "in_flight", b.inflight.Load())
	var err error
wait:
	for b.inflight.Load() > 0 {
		select {
		case <-b.drained:
		case <-ctx.Done():
			err = ctx.Err()
			break wait
		}
	}
	returned, delayed, ready := 0, 0, 0
	b.mu.Lock() // no queue is created while we close them
	for _, q := range *b.queues.Load() {
		q.mu.Lock()
		now := b.clk.Now()
		returned += q.line.Shutdown(now)
		q.applyLocked(now)
		q.closed = true
		delayed += q.line.DelayedLen() // stay delayed: a durable broker finds them so
		q.timer.stop()
		ready += q.line.Len()
		q.unlockChanged()
	}
	b.bg.Wait() // a checkpoint in progress
	if serr := b.saveLearning(); serr != nil {
		b.log.Error("broker: what the predictors learned was not saved", "err", serr)
	}
	close(b.done)
	b.mu.Unlock()
	b.log.Info("broker: stopped",
		"took", b.clk.Now().Sub(start),
		"returned_in_flight", returned,
		"delayed", delayed,
		"ready", ready,
		"timed_out", err != nil)
	return err
}

func equalConfig(a, b QueueConfig) bool {
	return a.Policy == b.Policy && a.Tiers == b.Tiers && slices.Equal(a.Weights, b.Weights) &&
		slices.Equal(a.Aging, b.Aging) && a.AgingOff == b.AgingOff && maps.Equal(a.StaticTiers, b.StaticTiers) &&
		a.MaxDepth == b.MaxDepth && a.MaxAttempts == b.MaxAttempts && a.Lease == b.Lease &&
		a.DefaultTTL == b.DefaultTTL && a.Shadow == b.Shadow &&
		a.RetryBase == b.RetryBase && a.RetryMax == b.RetryMax && a.RetryJitter == b.RetryJitter &&
		a.MaxInFlight == b.MaxInFlight && a.KeepDone == b.KeepDone &&
		a.GroupBy == b.GroupBy && maps.Equal(a.GroupWeights, b.GroupWeights) && slices.Equal(a.Limits, b.Limits) &&
		slices.Equal(a.RateLimits, b.RateLimits) && a.Reserve == b.Reserve && a.NoReserve == b.NoReserve &&
		a.ReserveAbove == b.ReserveAbove && a.ReserveWindow == b.ReserveWindow && a.Credit == b.Credit && a.NoCredit == b.NoCredit
}
