package delivery

import (
	"time"

	"github.com/harbinger-mq/harbinger/internal/fair"
	"github.com/harbinger-mq/harbinger/internal/sched"
)

// waitLine is what holds a Line's waiting jobs: its policy's scheduler,
// or, under limits and fair shares, a fair.Fair over lanes of that policy.
// Both take the same calls.
type waitLine interface {
	Push(it *sched.Item, now time.Time) error
	Pop(now time.Time) *sched.Item
	Remove(it *sched.Item) bool
	Len() int
	Each(f func(*sched.Item))
	Expire(now time.Time, buf []*sched.Item) []*sched.Item
	NextExpiry() (time.Time, bool)
	Peek(now time.Time, n int, buf []*sched.Item) []*sched.Item
}

// waiting is the Line's waiting jobs.
func (l *Line) waiting() waitLine {
	if l.fq != nil {
		return l.fq
	}
	return l.sq.Scheduler
}

// newFair builds the Fair cfg declares over sq's policy, or nil when it
// declares none.
func (l *Line) newFair(cfg Config, sq *sched.Queue, now time.Time) *fair.Fair {
	if !cfg.Fair.Active() {
		return nil
	}
	fq, err := fair.New(cfg.Fair, sq.Config(), func(it *sched.Item) fair.Keys { return keysOf(jobOf(it)) })
	if err != nil {
		panic("delivery: limits not validated: " + err.Error()) // the caller validates declarations
	}
	fq.SetWorkers(l.workers, now)
	return fq
}

// keysOf is what limits and fair shares key j by: its producer, its job
// type and the tenant it names in its TenantHeader header.
func keysOf(j *Job) fair.Keys {
	return fair.Keys{Producer: j.Producer(), JobType: j.JobType(), Tenant: j.Headers()[fair.TenantHeader]}
}

// Fair is the Line's limits and fair shares, for reading; nil when the
// queue declares none.
func (l *Line) Fair() *fair.Fair { return l.fq }

// SetWorkers says how many workers take the queue's jobs (those running
// plus the free ones), for fair shares and their reservation. A Line
// without limits ignores it.
func (l *Line) SetWorkers(n int, now time.Time) {
	l.workers = n
	if l.fq != nil {
		l.fq.SetWorkers(n, now)
	}
}

// holdLost holds j, a job that may still run on a worker that outlived the
// broker, until a lease from now has passed: delayed, and counted as
// running against its limits.
func (l *Line) holdLost(j *Job, now time.Time) {
	if l.lost == nil {
		l.lost = map[*Job]bool{}
	}
	l.lost[j] = true
	l.fq.Run(&j.item, keysOf(j), now)
	j.setDeadline(nanos(now.Add(l.cfg.Lease)))
	l.delayed.push(j)
}

// releaseLost ends j's hold, if it has one: its keys are free of it.
func (l *Line) releaseLost(j *Job, now time.Time) {
	if !l.lost[j] {
		return
	}
	delete(l.lost, j)
	l.Fx.Ready += l.fq.Done(&j.item, now)
}

// Lost is how many jobs are held back after a restart, their workers
// perhaps still running them.
func (l *Line) Lost() int { return len(l.lost) }

// DurableDeliveries reports whether a delivery's record must reach the
// log before its job is sent: the queue has limits or rate limits. A job
// runs against them from its delivery, also on a worker that outlives a
// crash, and a restart holds it back (Restore) or takes its start from
// the bucket (RestoreRates) only if the log tells of the delivery.
func (l *Line) DurableDeliveries() bool {
	return l.cfg.Durable && l.fq != nil && (len(l.cfg.Fair.Limits) > 0 || len(l.cfg.Fair.Rates) > 0)
}
