package broker

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/harbinger-mq/harbinger/internal/fair"
	"github.com/harbinger-mq/harbinger/internal/predict"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// QueueInfo is a snapshot of one queue: its config and counters. The gRPC
// Admin service and the metrics collector both read it.
type QueueInfo struct {
	Name string
	// Generation tells a queue from an earlier one of the same name that
	// was deleted: each queue the broker makes takes a larger number, so
	// counters that fall back to zero are a new queue, not a reset.
	Generation   uint64
	Config       QueueConfig
	DepthPerTier []int // ready jobs per level, level 0 first
	Ready        int
	InFlight     int
	Delayed      int // nacked with a delay, waiting to be requeued
	DeadLetters  int
	Consumers    int
	Paused       bool // nothing is delivered until it is resumed
	// OldestWait is how long the job that has waited longest has waited
	// so far (to the millisecond; asynq's "latency"), zero when none
	// waits: the signal to alert on when long jobs starve or consumers
	// fall behind.
	OldestWait time.Duration

	// Counters since the broker started.
	Published    uint64
	Delivered    uint64
	Acked        uint64
	Nacked       uint64
	Redelivered  uint64 // deliveries after the first
	DeadLettered uint64
	Expired      uint64
	BadDurations uint64 // acks whose duration the predictor refused
	DeadDropped  uint64 // dead letters dropped past MaxDeadLetters
	Cancelled    uint64

	Predictor predict.Summary
	Durations DurationHistogram
	// RunTime is the median and 99th percentile run time of the jobs
	// acked since the broker started, within QuantileAccuracy.
	RunTime Quantiles

	// Groups are the queue's groups under limits or fair shares (see
	// QueueConfig.GroupBy; one group, named "", without it), at most
	// MaxGroupsShown of them, the busiest, sorted by name; nil when the
	// queue declares no limits. GroupCount is how many there are.
	Groups     []fair.GroupInfo
	GroupCount int
	// Throttled counts jobs that found a key of theirs at its limit or
	// out of tokens; Reserved, the times a worker was left free for the
	// fair shares' reservation.
	Throttled, Reserved uint64
}

// MaxGroupsShown bounds QueueInfo.Groups, and so the series /metrics
// exports per group.
const MaxGroupsShown = 100

// DurationHistogram counts the predicted and actual durations of acked jobs
// in the buckets of HistogramBounds (not cumulative; the last is +Inf).
type DurationHistogram struct {
	Count                   uint64
	Predicted, Actual       []uint64
	PredictedSum, ActualSum float64 // seconds
}

func (q *queue) info() QueueInfo {
	q.mu.Lock()
	defer q.mu.Unlock()
	l, st := q.line, q.line.Stats
	in := QueueInfo{
		Name: q.name, Generation: q.gen, Config: q.cfg, Ready: l.Len(), Delayed: l.DelayedLen(),
		DeadLetters: len(l.Dead()), Consumers: len(q.cons), InFlight: l.InFlight(), Paused: q.paused,
		Published: st.Published, Delivered: st.Delivered, Acked: st.Acked, Nacked: st.Nacked,
		Redelivered: st.Redelivered, DeadLettered: st.DeadLettered, Expired: st.Expired,
		BadDurations: st.BadDurations, DeadDropped: st.DeadDropped, Cancelled: st.Cancelled,
		Predictor: l.Sched().Predictor.Summary(),
		Durations: DurationHistogram{
			Count:     q.hist.count,
			Predicted: slices.Clone(q.hist.predicted[:]), Actual: slices.Clone(q.hist.actual[:]),
			PredictedSum: q.hist.predictedSum, ActualSum: q.hist.actualSum,
		},
		RunTime: quantiles(q.runs.all),
	}
	if at, ok := l.OldestWaiting(); ok {
		in.OldestWait = max(0, q.b.clk.Now().Sub(at))
	}
	in.DepthPerTier = make([]int, l.Sched().Config().Levels)
	for i := range in.DepthPerTier {
		in.DepthPerTier[i] = l.Sched().LevelLen(i)
	}
	if fq := l.Fair(); fq != nil {
		now := q.b.clk.Now()
		for i := range in.DepthPerTier {
			in.DepthPerTier[i] = fq.LevelLen(i)
		}
		in.Groups = fq.Groups(now, MaxGroupsShown)
		in.GroupCount = fq.GroupCount()
		in.Throttled, in.Reserved = fq.Stats.Throttled, fq.Stats.Reserved
	}
	return in
}

// Queues reports every queue, sorted by name.
func (b *Broker) Queues() []QueueInfo {
	qs := *b.queues.Load()
	out := make([]QueueInfo, 0, len(qs))
	for _, q := range qs {
		out = append(out, q.info())
	}
	slices.SortFunc(out, func(a, b QueueInfo) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Queue reports one queue.
func (b *Broker) Queue(name string) (QueueInfo, error) {
	q, err := b.lookup(name, false)
	if err != nil {
		return QueueInfo{}, err
	}
	return q.info(), nil
}

// Keys reports up to limit of a queue's predictor keys (all when limit <= 0),
// busiest first, ties broken by producer, job type and size bucket (see
// predict.SortKeys).
func (b *Broker) Keys(name string, limit int) ([]predict.KeyStats, error) {
	q, err := b.lookup(name, false)
	if err != nil {
		return nil, err
	}
	ks := q.keys(limit)
	// Sorting is left until the lock is released: a queue may track 100k
	// keys, and publish and ack wait on that lock.
	predict.SortKeys(ks)
	return ks, nil
}

// Groups reports up to limit (0: all) of the named queue's groups under
// its limits and fair shares, the busiest when there are more, sorted by
// name, with the queue's counts (QueueInfo's Groups, GroupCount, Throttled
// and Reserved). ErrNoGroups when the queue declares none.
func (b *Broker) Groups(name string, limit int) (QueueInfo, error) {
	q, err := b.lookup(name, false)
	if err != nil {
		return QueueInfo{}, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	fq := q.line.Fair()
	if fq == nil {
		return QueueInfo{}, fmt.Errorf("queue %q: %w", name, ErrNoGroups)
	}
	return QueueInfo{
		Name: q.name, Groups: fq.Groups(q.b.clk.Now(), limit), GroupCount: fq.GroupCount(),
		Throttled: fq.Stats.Throttled, Reserved: fq.Stats.Reserved,
	}, nil
}

// keys copies out, unsorted, the stats of the keys Keys reports. The lock is
// held for one pass over the keys (a heap selection of the limit busiest, or
// a plain copy of all), never for a sort.
//
// A key's P50 and P99 are those of its run times since the broker started
// (within QuantileAccuracy; zero when none was acked since), not the
// predictor's coarser estimates.
func (q *queue) keys(limit int) []predict.KeyStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	ks := q.sq().Predictor.SelectKeys(nil, limit)
	for i := range ks {
		r := q.runs.key(ks[i].Key)
		ks[i].P50, ks[i].P99 = r.P50, r.P99
	}
	return ks
}

// DeadLetters reports up to limit of a queue's dead letters (all when
// limit <= 0), oldest first.
func (b *Broker) DeadLetters(name string, limit int) ([]DeadLetter, error) {
	return b.DeadLettersFrom(name, 0, limit)
}

// DeadLettersFrom is DeadLetters after skipping the oldest offset.
func (b *Broker) DeadLettersFrom(name string, offset, limit int) ([]DeadLetter, error) {
	q, err := b.lookup(name, false)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	dead := q.line.Dead()
	dead = dead[min(max(offset, 0), len(dead)):]
	n := len(dead)
	if limit > 0 {
		n = min(n, limit)
	}
	out := make([]DeadLetter, n)
	for i := range out {
		d := dead[i]
		j := d.Job
		out[i] = DeadLetter{
			ID: j.ID(), Queue: q.name, Producer: j.Producer(), JobType: j.JobType(),
			Payload: j.Payload(), Headers: j.Headers(), Attempts: j.Attempt(),
			Reason: d.Reason, PublishedAt: j.PublishedAt(), DeadAt: d.At,
		}
	}
	return out, nil
}

// Stats is the broker as a whole.
type Stats struct {
	Queues    int
	Consumers int
	InFlight  int
	Draining  bool
	Log       *store.Stats // the log's counters; nil without a store (--memory)
}

// Stats reports broker-wide figures.
func (b *Broker) Stats() Stats {
	st := Stats{
		Queues:    len(*b.queues.Load()),
		Consumers: int(b.consumers.Load()),
		InFlight:  int(b.inflight.Load()),
		Draining:  b.draining.Load(),
	}
	if b.cfg.Store != nil {
		log := b.cfg.Store.Stats()
		st.Log = &log
	}
	return st
}
