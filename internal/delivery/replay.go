package delivery

import (
	"cmp"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/harbinger-mq/harbinger/internal/fair"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// Replay folds the records a Line writes, read back from the log in order,
// into each job's state at the end of the log: what a Line restored from
// it (Restore) holds. It is the reading side of the records this package
// writes, kept beside them so that the two change together; the broker
// feeds it one queue's job records and keeps the queue's own (config,
// pause, predictor, unique keys) itself.
//
// A job's life in the log starts with its state (store.KindJob, at publish
// and at each checkpoint) and ends with an ack or a remove; the records
// between change one field. Records for a job the fold does not know are
// skipped: a checkpoint dropped its earlier records, and it had ended.
type Replay struct {
	jobs map[string]*Recovered
	obs  []Observation
	// The rate buckets of the last KindRates record, and the starts
	// recorded after it, in order: see Line.RestoreRates.
	buckets []fair.Bucket
	starts  []start
}

// start is a delivery of a job of keys k at at, under rate limits.
type start struct {
	k  fair.Keys
	at time.Time
}

// Recovered is a job as the log leaves it.
type Recovered struct {
	Job *store.Job
	// Reset: classify it afresh when it is next in line, as the broker
	// would have (a requeued dead letter, or a job out of line when its
	// queue's config changed).
	Reset bool
}

// Observation is a duration an ack taught the predictor, to teach again
// after the predictor's last snapshot.
type Observation struct {
	Producer, JobType string
	SizeHint          uint64
	Took              time.Duration
}

// NewReplay returns an empty fold.
func NewReplay() *Replay { return &Replay{jobs: map[string]*Recovered{}} }

// Apply folds r, one of the queue's records in log order, and reports
// whether it was a job record (a kind a Line writes); the caller folds the
// others.
func (p *Replay) Apply(r *store.Record) bool {
	switch r.Kind {
	case store.KindJob:
		p.jobs[r.ID] = &Recovered{Job: r.Job, Reset: r.Job.Reset}
		return true
	case store.KindRates:
		// The buckets as they were; the starts before it are in them. A
		// record that does not decode leaves them full, as before there
		// were any.
		p.buckets, p.starts = p.buckets[:0], p.starts[:0]
		if err := json.Unmarshal(r.Data, &p.buckets); err != nil {
			p.buckets = p.buckets[:0]
		}
		return true
	}
	switch r.Kind {
	case store.KindDeliver, store.KindReturn, store.KindRetry, store.KindDelay, store.KindDead,
		store.KindRequeue, store.KindAck, store.KindRemove:
	default:
		return false
	}
	rj := p.jobs[r.ID]
	if rj == nil {
		return true // a checkpoint dropped this job's earlier records: it had ended
	}
	j := rj.Job
	switch r.Kind {
	case store.KindDeliver:
		j.Attempts++
		j.State, j.Until = store.Ready, time.Time{}
		if !r.At.IsZero() {
			p.starts = append(p.starts, start{fair.Keys{Producer: j.Producer, JobType: j.JobType, Tenant: j.Headers[fair.TenantHeader]}, r.At})
		}
	case store.KindReturn:
		j.Attempts = max(j.Attempts-1, 0)
	case store.KindDelay:
		j.State, j.Until = store.Delayed, r.At
	case store.KindDead:
		j.State, j.Reason, j.DeadAt = store.Dead, r.Reason, r.At
	case store.KindRequeue:
		j.State, j.Attempts, j.Expires, j.Enqueued, j.Reason = store.Ready, 0, time.Time{}, r.At, ""
		rj.Reset = true
	case store.KindAck:
		if r.Duration > 0 {
			p.obs = append(p.obs, Observation{j.Producer, j.JobType, j.SizeHint, r.Duration})
		}
		delete(p.jobs, r.ID)
	case store.KindRemove:
		delete(p.jobs, r.ID)
	}
	return true
}

// Reconfigured marks every job folded so far to be classified afresh: the
// queue's config changed, and the jobs out of line then were reclassified
// when they came back (those in line have state records after it).
func (p *Replay) Reconfigured() {
	for _, rj := range p.jobs {
		rj.Reset = true
	}
	// A redeclare starts the rate buckets full.
	p.buckets, p.starts = p.buckets[:0], p.starts[:0]
}

// Snapshotted forgets the durations folded so far: a predictor snapshot
// followed them, and holds what they taught.
func (p *Replay) Snapshotted() { p.obs = p.obs[:0] }

// Len is the number of jobs the log holds.
func (p *Replay) Len() int { return len(p.jobs) }

// Observations are the durations acked after the last snapshot, oldest
// first.
func (p *Replay) Observations() []Observation { return p.obs }

// Jobs lists the jobs in their queue's order: by FIFO position, and for
// jobs that share one (which only a log the broker did not write can
// have) by id, so that every recovery of a log agrees.
func (p *Replay) Jobs() []*Recovered {
	all := make([]*Recovered, 0, len(p.jobs))
	for _, rj := range p.jobs {
		all = append(all, rj)
	}
	slices.SortFunc(all, func(a, b *Recovered) int {
		return cmp.Or(cmp.Compare(a.Job.Seq, b.Job.Seq), strings.Compare(a.Job.ID, b.Job.ID))
	})
	return all
}
