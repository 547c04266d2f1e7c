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

// NewQueue builds a queue for pol with a predictor configured by pcfg; the
// predictor's tier count follows the policy's levels.
func NewQueue(pol Policy, pcfg predict.Config) (*Queue, error) {
	if pol.UsePredictor {
		pcfg.Tiers = pol.Sched.Levels
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

// Classify sets it's tier and predicted cost for a newly published message
// and returns the prediction (made for every policy, so shadow mode and the
// metrics can report accuracy).
func (q *Queue) Classify(it *Item, k predict.Key) predict.Prediction {
	pr := q.Predictor.Predict(k)
	it.Cost = pr.Cost
	it.Long = pr.Long
	switch {
	case q.Policy.UsePredictor:
		it.Tier = pr.Tier
	case q.Policy.StaticTiers != nil:
		t, ok := q.Policy.StaticTiers[k.JobType]
		if !ok {
			t = q.Policy.Sched.Levels / 2
		}
		it.Tier = t
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
	it.Tier = pr.Tier
	it.Long = pr.Long
	return pr
}

// Learn records a finished message's duration under its key.
func (q *Queue) Learn(k predict.Key, pr predict.Prediction, d time.Duration) error {
	return q.Predictor.Observe(k, pr, d)
}
