package sched

import (
	"time"

	"github.com/harbinger-mq/harbinger/internal/predict"
)

// Queue is one queue's scheduling state: a policy, its scheduler and, for the
// policies that learn, the queue's own predictor. The broker and the
// simulator both drive a Queue, so they cannot drift apart.
type Queue struct {
	*Scheduler
	Policy    Policy
	Predictor *predict.Predictor // always present: shadow and fifo queues still learn, for the metrics
	tune      *tuner             // with Policy.Tune: what sets the guard
}

// NewQueue builds a queue for pol with a predictor configured by pcfg. The
// predictor's tier count is the policy's levels when its tiers route
// messages, else pol.Tiers (when set): a shadow queue routes on one level
// but predicts as many tiers as the queue is configured for. The policy's
// long share and long-keys share apply unless pcfg sets them.
func NewQueue(pol Policy, pcfg predict.Config) (*Queue, error) {
	if pcfg.LongShare == 0 {
		pcfg.LongShare = pol.LongShare
	}
	if pcfg.LongKeys == 0 {
		pcfg.LongKeys = pol.LongKeys
	}
	pcfg.GatedMean = pcfg.GatedMean || pol.GatedMean
	pcfg.LongKeysByTail = pcfg.LongKeysByTail || pol.LongKeysByTail
	if pcfg.TailKeys == 0 {
		pcfg.TailKeys = pol.TailKeys
	}
	pcfg.TailKeysGated = pcfg.TailKeysGated || pol.TailKeysGated
	if pcfg.NearLongKeys == 0 {
		pcfg.NearLongKeys = pol.NearLongKeys
	}
	switch {
	case pol.UsePredictor && !pol.Shadow:
		pcfg.Tiers = pol.Sched.Levels // a predicted tier is a level
	case pol.Tiers > 0:
		pcfg.Tiers = pol.Tiers
	}
	pred, err := predict.New(pcfg)
	if err != nil {
		return nil, err
	}
	s, err := New(pol.Sched)
	if err != nil {
		return nil, err
	}
	q := &Queue{Scheduler: s, Policy: pol, Predictor: pred}
	if pol.Tune {
		q.tune = newTuner()
		s.SetGuard(Ladder[q.tune.rung])
	}
	return q, nil
}

// SetWorkers says how many workers take the queue's messages (the
// simulator's workers, a broker queue's consumers): the scheduler's
// virtual FIFO run and the tuner's replays run on as many.
func (q *Queue) SetWorkers(n int, now time.Time) {
	if q.tune != nil {
		q.tune.workers = max(n, 0)
	}
	q.Scheduler.SetWorkers(n, now)
}

// Finished records that it, a message of key k that the queue dispatched,
// ran for took (what its ack measured) and finished at now: the scheduler
// (Scheduler.Ran), the predictor (Learn) and the tuner, which may set a new
// guard, learn of it.
func (q *Queue) Finished(it *Item, k predict.Key, pr predict.Prediction, took time.Duration, now time.Time) error {
	q.Ran(it, took)
	if t := q.tune; t != nil && took > 0 {
		t.add(it.ID, tuneSample{pushed: it.pushedAt, took: int64(took), cost: it.Cost, tier: it.Tier, long: it.Long,
			unsure: it.Unsure(), tail: it.TailLong(), key: k})
		if t.due(now.UnixNano()) {
			t.retune(q.Config(), now.UnixNano())
			q.SetGuard(Ladder[t.rung])
		}
	}
	return q.Learn(k, pr, took)
}

// Rung is the guard's setting the tuner chose last, and whether the queue
// has a tuner.
func (q *Queue) Rung() (Rung, bool) {
	if q.tune == nil {
		return Rung{}, false
	}
	return Ladder[q.tune.rung], true
}

// Classify sets its tier and predicted cost for a newly published message
// and returns the prediction (made for every policy, so shadow mode and the
// metrics can report accuracy). A shadow queue's prediction carries the
// predicted tier while the message itself goes to level 0.
func (q *Queue) Classify(it *Item, k predict.Key) predict.Prediction {
	if q.tune != nil {
		q.tune.arrive(it.ID)
	}
	pr := q.Predictor.Predict(k)
	it.Cost = pr.Cost
	it.Long = pr.Long
	it.SetUnsure(pr.Cold || pr.SpreadGated)
	it.SetTailLong(pr.TailLong)
	switch {
	case q.Policy.Shadow:
		it.Tier = 0
	case q.Policy.UsePredictor:
		it.SetTier(pr.Tier)
	case q.Policy.StaticTiers != nil:
		t, ok := q.Policy.StaticTiers[k.JobType]
		if !ok {
			t = q.Policy.Sched.Levels / 2
		}
		it.SetTier(t)
	default:
		it.Tier = 0
	}
	return pr
}

// ClassifyKnown places a message whose true cost is known in advance: the
// oracle arm of the simulator.
func (q *Queue) ClassifyKnown(it *Item, cost time.Duration) predict.Prediction {
	pr := q.Predictor.Place(cost)
	it.Cost = pr.Cost
	it.SetTier(pr.Tier)
	it.Long = pr.Long
	it.SetUnsure(false)
	it.SetTailLong(false)
	return pr
}

// Learn records a finished message's duration under its key.
func (q *Queue) Learn(k predict.Key, pr predict.Prediction, d time.Duration) error {
	return q.Predictor.Observe(k, pr, d)
}
