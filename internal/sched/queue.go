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
	return &Queue{Scheduler: s, Policy: pol, Predictor: pred}, nil
}

// Classify sets its tier and predicted cost for a newly published message
// and returns the prediction (made for every policy, so shadow mode and the
// metrics can report accuracy). A shadow queue's prediction carries the
// predicted tier while the message itself goes to level 0.
func (q *Queue) Classify(it *Item, k predict.Key) predict.Prediction {
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
