package broker

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/harbinger-mq/harbinger/internal/delivery"
)

// MaxJobsListed bounds WaitingJobs and InFlightJobs: they are for a person
// looking at a queue, and each job listed is copied under the queue's lock.
const MaxJobsListed = 1000

// Now is the time by the broker's clock, against which the times it
// reports (a job's Enqueued, Leased) are to be read.
func (b *Broker) Now() time.Time { return b.clk.Now() }

// WaitingJob is a job waiting in line, as WaitingJobs reports it.
type WaitingJob struct {
	ID       string
	Producer string
	JobType  string
	Tier     int           // the tier it was given
	Level    int           // the level it waits at now, after any aging
	Cost     time.Duration // its predicted duration
	Long     bool          // predicted far longer than typical
	Cold     bool          // its key had too few observations to trust
	Attempts int           // deliveries so far
	Enqueued time.Time     // when it took its place in line
	Expires  time.Time     // when its TTL runs out; zero is never
}

// WaitingJobs reports up to limit (at most MaxJobsListed; all up to it when
// limit <= 0) of a queue's waiting jobs in the order they would be handed
// out if consumers asked now: the scheduler's own order, tiers, aging,
// bounds and expiry included (see sched.Scheduler.Peek). Jobs published
// later may still go ahead of them.
func (b *Broker) WaitingJobs(name string, limit int) ([]WaitingJob, error) {
	return b.WaitingJobsFrom(name, 0, limit)
}

// MaxJobsOffset bounds how far into the line WaitingJobsFrom reaches: the
// scheduler's order is computed job by job, under the queue's lock.
const MaxJobsOffset = 10 * MaxJobsListed

// WaitingJobsFrom is WaitingJobs after skipping the first offset (at most
// MaxJobsOffset) jobs of that order: a page further down the line.
func (b *Broker) WaitingJobsFrom(name string, offset, limit int) ([]WaitingJob, error) {
	q, err := b.lookup(name, false)
	if err != nil {
		return nil, err
	}
	limit = listLimit(limit)
	offset = min(max(offset, 0), MaxJobsOffset)
	now := b.clk.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	jobs := q.line.Peek(now, offset+limit)
	jobs = jobs[min(offset, len(jobs)):]
	out := make([]WaitingJob, len(jobs))
	for i, j := range jobs {
		out[i] = WaitingJob{
			ID: j.ID(), Producer: j.Producer(), JobType: j.JobType(),
			Tier: j.Tier(), Level: j.Level(), Cost: j.Cost(), Long: j.Long(), Cold: j.Prediction().Cold,
			Attempts: j.Attempt(), Enqueued: j.Enqueued(), Expires: j.Expires(),
		}
	}
	return out, nil
}

// InFlightJob is a job delivered to a consumer and not yet settled.
type InFlightJob struct {
	ID       string
	Producer string
	JobType  string
	Consumer string        // the consumer's name as given to Subscribe
	Attempt  int           // 1 for the first delivery
	Cost     time.Duration // its predicted duration
	Leased   time.Time     // when this delivery started
	Deadline time.Time     // when its lease runs out
}

// InFlightJobs reports up to limit (at most MaxJobsListed; all up to it
// when limit <= 0) of a queue's in-flight jobs, the longest running first.
func (b *Broker) InFlightJobs(name string, limit int) ([]InFlightJob, error) {
	q, err := b.lookup(name, false)
	if err != nil {
		return nil, err
	}
	if limit <= 0 || limit > MaxJobsListed {
		limit = MaxJobsListed
	}
	q.mu.Lock()
	out := make([]InFlightJob, 0, q.line.InFlight())
	q.line.Each(nil, func(j *delivery.Job) {
		f := InFlightJob{
			ID: j.ID(), Producer: j.Producer(), JobType: j.JobType(),
			Attempt: j.Attempt(), Cost: j.Cost(), Deadline: j.Deadline(),
		}
		h, leased, _ := q.line.Flight(j)
		f.Leased = leased
		if c := q.cons[h]; c != nil {
			f.Consumer = c.name
		}
		out = append(out, f)
	}, nil, nil)
	q.mu.Unlock()
	// A queue may have many thousands in flight: sorted outside the lock.
	slices.SortFunc(out, func(a, b InFlightJob) int {
		return cmp.Or(a.Leased.Compare(b.Leased), cmp.Compare(a.ID, b.ID))
	})
	return out[:min(len(out), limit)], nil
}

// JobInfo is one job as GetJob finds it. Payload and Headers are the
// job's own: the caller must not change them.
type JobInfo struct {
	ID, Queue, Producer, JobType string
	State                        JobState // JobWaiting, JobDelayed, JobRunning, JobDead; JobDone, JobCancelled
	Payload                      []byte
	Headers                      map[string]string
	Attempts                     int // deliveries so far, the current one included while running
	MaxAttempts                  int
	PublishedAt                  time.Time
	// What the predictor said when it took its place in line.
	Tier       int
	Cost       time.Duration
	Long, Cold bool

	Enqueued time.Time // waiting: when it took its place in line
	Expires  time.Time // when its TTL runs out once due; zero is never
	Due      time.Time // delayed: when it takes its place in line
	Consumer string    // running: the consumer's name as given to Subscribe
	// Running and cancelled: its worker was told to stop, and it ends,
	// not retried, when the worker lets it go.
	Cancelled bool
	Leased    time.Time // running: when this delivery started
	Deadline  time.Time // running: when its lease runs out
	Reason    string    // dead: why
	DeadAt    time.Time // dead: when
	// Ended (JobDone or JobCancelled, while among the queue's last
	// QueueConfig.KeepDone to end): when, and for a done job the time its
	// worker reported. Payload, headers and prediction are not kept.
	EndedAt time.Time
	Took    time.Duration
}

// GetJob finds a job of a queue by id: one it holds, or one among the
// last QueueConfig.KeepDone to end (acked or cancelled). It returns
// ErrUnknownMessage when the queue has no such job: ended and not kept,
// purged, dropped, or never published to it. It uses the queue's index by
// id when a Cancel has built one, and otherwise scans the queue without
// building it (see delivery.Line.Lookup).
func (b *Broker) GetJob(queue, id string) (JobInfo, error) {
	q, err := b.lookup(queue, false)
	if err != nil {
		return JobInfo{}, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	j, state := q.line.Lookup(id)
	if j == nil && !q.deleted {
		if d, ok := q.line.FindDone(id); ok {
			return JobInfo{ID: d.ID, Queue: q.name, Producer: d.Producer, JobType: d.JobType, State: JobState(d.State),
				Attempts: d.Attempts, EndedAt: d.At, Took: d.Took}, nil
		}
	}
	if j == nil || q.deleted {
		return JobInfo{}, fmt.Errorf("%w: queue %q holds no job %q (ended and not kept, purged, dropped or never published to it)", ErrUnknownMessage, queue, id)
	}
	info := JobInfo{
		ID: j.ID(), Queue: q.name, Producer: j.Producer(), JobType: j.JobType(), State: JobState(state),
		Payload: j.Payload(), Headers: j.Headers(), Attempts: j.Attempt(), MaxAttempts: int(j.MaxAttempts),
		PublishedAt: j.PublishedAt(), Tier: j.Tier(), Cost: j.Cost(), Long: j.Long(), Cold: j.Prediction().Cold, Expires: j.Expires(),
	}
	switch state {
	case delivery.Waiting:
		info.Enqueued = j.Enqueued()
	case delivery.Delayed:
		info.Due = j.Deadline()
	case delivery.Running:
		h, leased, _ := q.line.Flight(j)
		info.Leased, info.Deadline, info.Cancelled = leased, j.Deadline(), j.Cancelled()
		if c := q.cons[h]; c != nil {
			info.Consumer = c.name
		}
	case delivery.Dead:
		d, _ := q.line.DeadEntry(j)
		info.Reason, info.DeadAt = d.Reason, d.At
	}
	return info, nil
}

// Waits describes how long a queue's waiting jobs have waited so far:
// the starvation signal of a shortest-first broker, whose long jobs wait
// while short ones go first.
type Waits struct {
	Waiting int
	// Oldest is the wait of the job that has waited longest (asynq's
	// "latency"); zero when none waits.
	Oldest time.Duration
	// P50 and P99 are percentiles of the waits of the jobs waiting now.
	P50, P99 time.Duration
}

// Waits reports how long a queue's waiting jobs have waited, to the
// millisecond. The queue counts its waiting jobs by the millisecond they
// entered the line: this copies those counts under the queue's lock (one
// per distinct millisecond, not per job) and sorts them after.
func (b *Broker) Waits(name string) (Waits, error) {
	q, err := b.lookup(name, false)
	if err != nil {
		return Waits{}, err
	}
	now := b.clk.Now()
	q.mu.Lock()
	w := Waits{Waiting: q.line.Len()}
	counts := q.line.AppendWaitCounts(nil)
	q.mu.Unlock()
	// The p-th percentile wait belongs to the job at rank 1-p in entry
	// order: the oldest, P99 and P50.
	at := delivery.WaitQuantiles(counts, 0, 0.01, 0.5)
	if w.Waiting == 0 {
		return w, nil
	}
	w.Oldest, w.P99, w.P50 = max(0, now.Sub(at[0])), max(0, now.Sub(at[1])), max(0, now.Sub(at[2]))
	return w, nil
}

// DelayedJob is a job waiting for a due time: published to run later, or
// nacked with a delay and waiting to be retried.
type DelayedJob struct {
	ID       string
	Producer string
	JobType  string
	// Retry is true for a job nacked with a delay (it ran Attempts times
	// and waits for its next try); false for one published to run later.
	Retry       bool
	Attempts    int // deliveries so far
	MaxAttempts int
	PublishedAt time.Time
	Due         time.Time // when it takes its place in line
}

// DelayedJobs reports a queue's delayed jobs, soonest due first: up to
// limit (at most MaxJobsListed; all up to it when limit <= 0) after
// skipping offset, and how many there are in all.
func (b *Broker) DelayedJobs(name string, offset, limit int) ([]DelayedJob, int, error) {
	q, err := b.lookup(name, false)
	if err != nil {
		return nil, 0, err
	}
	limit = listLimit(limit)
	q.mu.Lock()
	all := q.line.Delayed()
	total := len(all)
	page := all[min(max(offset, 0), total):]
	page = page[:min(len(page), limit)]
	out := make([]DelayedJob, len(page))
	for i, j := range page {
		out[i] = DelayedJob{
			ID: j.ID(), Producer: j.Producer(), JobType: j.JobType(), Retry: !j.Scheduled() && j.Attempt() > 0,
			Attempts: j.Attempt(), MaxAttempts: int(j.MaxAttempts), PublishedAt: j.PublishedAt(), Due: j.Deadline(),
		}
	}
	q.mu.Unlock()
	return out, total, nil
}

// DoneJob is a job that ended and that its queue still keeps
// (QueueConfig.KeepDone): acked (JobDone) or cancelled (JobCancelled).
type DoneJob struct {
	ID, Producer, JobType string
	State                 JobState
	Attempts              int
	EndedAt               time.Time
	Took                  time.Duration // done: the time its worker reported
}

// DoneJobs reports the ended jobs a queue keeps, the most recent first:
// up to limit (at most MaxJobsListed) after skipping offset, and how many
// it keeps in all. A queue without keep_done keeps none.
func (b *Broker) DoneJobs(name string, offset, limit int) ([]DoneJob, int, error) {
	q, err := b.lookup(name, false)
	if err != nil {
		return nil, 0, err
	}
	limit = listLimit(limit)
	q.mu.Lock()
	all := q.line.Done()
	q.mu.Unlock()
	total := len(all)
	page := all[min(max(offset, 0), total):]
	page = page[:min(len(page), limit)]
	out := make([]DoneJob, len(page))
	for i, d := range page {
		out[i] = DoneJob{ID: d.ID, Producer: d.Producer, JobType: d.JobType, State: JobState(d.State),
			Attempts: d.Attempts, EndedAt: d.At, Took: d.Took}
	}
	return out, total, nil
}

func listLimit(limit int) int {
	if limit <= 0 || limit > MaxJobsListed {
		return MaxJobsListed
	}
	return limit
}

// RunNow makes the named delayed jobs of a queue due at once: each joins
// the line as if its due time had come. Ids of jobs that are not delayed
// (waiting, running, dead, ended or unknown) are skipped; it says how
// many it moved.
func (b *Broker) RunNow(queueName string, ids []string) (int, error) {
	q, err := b.lockQueue(queueName, false)
	if err != nil {
		return 0, err
	}
	if q.closed {
		q.unlockChanged()
		return 0, ErrShuttingDown
	}
	now := b.clk.Now()
	n := q.line.RunNow(ids, now)
	q.applyLocked(now)
	pos := q.wrote
	q.unlockChanged()
	return n, b.persisted(pos, fmt.Sprintf("running %d delayed jobs now", n))
}

// FindJob looks a job up by id in every queue (see GetJob), in name order,
// and returns the first queue's answer that holds it; allowed, when not
// nil, limits the search to the queues it accepts (a token's).
func (b *Broker) FindJob(id string, allowed func(queue string) bool) (JobInfo, error) {
	qs := *b.queues.Load()
	names := make([]string, 0, len(qs))
	for name := range qs {
		if allowed == nil || allowed(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		if j, err := b.GetJob(name, id); err == nil {
			return j, nil
		}
	}
	return JobInfo{}, fmt.Errorf("%w: no queue holds a job %q (ended and not kept, purged, dropped or never published)", ErrUnknownMessage, id)
}
