package broker

import (
	"time"

	"github.com/harbinger-mq/harbinger/internal/predict"
)

// Prediction is the predictor's answer for a job, with the tier count it
// was made against.
type Prediction struct {
	predict.Prediction
	Tiers int
}

// Predict asks a queue's predictor (the queue is created if needed) about a
// job that is about to be published elsewhere; the RabbitMQ sidecar uses it.
func (b *Broker) Predict(queueName, producer, jobType string, size uint64) (Prediction, error) {
	if err := b.Validate(&Message{Queue: queueName, Producer: producer, JobType: jobType}); err != nil {
		return Prediction{}, err
	}
	q, err := b.lookup(queueName, true)
	if err != nil {
		return Prediction{}, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	k := q.sq.Predictor.KeyFor(queueName, producer, jobType, size)
	pr := q.sq.Predictor.Predict(k)
	return Prediction{Prediction: pr, Tiers: q.sq.Predictor.Config().Tiers}, nil
}

// Observe teaches a queue's predictor one measured duration.
func (b *Broker) Observe(queueName, producer, jobType string, size uint64, d time.Duration) error {
	if err := b.Validate(&Message{Queue: queueName, Producer: producer, JobType: jobType}); err != nil {
		return err
	}
	if d <= 0 || d > b.cfg.MaxDuration {
		return &BadDurationError{Duration: d}
	}
	q, err := b.lookup(queueName, true)
	if err != nil {
		return err
	}
	q.mu.Lock()
	defer q.unlockChanged()
	k := q.sq.Predictor.KeyFor(queueName, producer, jobType, size)
	if err := q.sq.Predictor.Observe(k, predict.Prediction{}, d); err != nil {
		return &BadDurationError{Duration: d}
	}
	return nil
}
