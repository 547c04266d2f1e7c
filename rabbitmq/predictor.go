package rabbitmq

import (
	"context"
	"errors"
	"math"
	"time"
)

// Key identifies what the predictor learns about: the queue, the producer,
// an optional job type and an optional size hint (0 means none; sizes are
// bucketed by powers of two).
type Key struct {
	Queue, Producer, JobType string
	Size                     uint64
}

// Priority is a predictor's answer for one message.
type Priority struct {
	Tier      int           // 0 is the shortest tier, served first
	AMQP      uint8         // AMQP priority for the predictor's max priority; higher is served first
	Predicted time.Duration // predicted duration; for a cold key, the typical duration
	Cold      bool          // the key has too few observations, or the prediction fell back
	// SpreadGated marks a prediction that fell back because the key's
	// durations are too spread (p99/p50) to tier; Cold is set too.
	SpreadGated bool
	// Long marks a message that must not wait behind shorter ones for long:
	// predicted far longer than typical, or not predictable. It takes the
	// highest priority, after Hold.
	Long bool
	// Hold is how long a Publisher with a HoldQueue keeps a Long message
	// out of its queue before it joins it at the top priority; 0 means at
	// once. See HoldQueueArgs.
	Hold time.Duration
}

// Predictor is what Publisher and Consume need from a duration predictor.
// Local and Remote implement it; both are safe for concurrent use.
type Predictor interface {
	// Predict returns the priority of a message about to be published.
	Predict(ctx context.Context, k Key) (Priority, error)
	// Observe reports how long a successfully handled message took.
	Observe(ctx context.Context, k Key, d time.Duration) error
}

// Defaults shared by the options structs. A classic queue with
// x-max-priority 5 (the most RabbitMQ recommends) has six priorities: the
// top one for long messages and one for each of five tiers. Five tiers
// approximate Harbinger's shortest-first order much better than three; see
// docs/sidecar.md for the measurement.
const (
	DefaultTiers       = 5
	DefaultMaxPriority = 5
)

// Headers the Publisher sets so that consumers (and the Ager) know a
// message's key and age without asking anyone.
const (
	HeaderQueue       = "x-harbinger-queue"
	HeaderProducer    = "x-harbinger-producer"
	HeaderJobType     = "x-harbinger-job-type"
	HeaderSize        = "x-harbinger-size"
	HeaderPublishedNS = "x-harbinger-published-ns"
	HeaderTier        = "x-harbinger-tier"
	HeaderPredictedNS = "x-harbinger-predicted-ns" // Priority.Predicted, for the queue's backlog and the predictor's error
	HeaderCold        = "x-harbinger-cold"         // set (true) when the prediction was the default, not the key's own
	HeaderAged        = "x-harbinger-aged"         // set on a message served early because it waited past AgeAfter
	HeaderFailures    = "x-harbinger-failures"     // failed attempts so far, on a message a consumer with MaxAttempts sent back (Failures)
)

var (
	// ErrHandlerPanic wraps a panic recovered from a consumer's handler; the
	// message is requeued as for any other handler error (unless the panic's
	// value is an error wrapping ErrReject).
	ErrHandlerPanic = errors.New("rabbitmq: handler panicked")
	// ErrReject: a handler returns an error wrapping it (or panics with
	// one) to reject the message without requeueing it, for a message no
	// retry can fix (unreadable, invalid). RabbitMQ then dead-letters it
	// where the queue has a dead-letter exchange (x-dead-letter-exchange,
	// or a policy's dead-letter-exchange) and drops it where it has none.
	// Any other error requeues the message, which RabbitMQ redelivers
	// without limit (a classic queue does not count deliveries) unless the
	// consumer sets MaxAttempts.
	ErrReject = errors.New("rabbitmq: reject this message")
	// ErrChannelClosed: the AMQP channel closed under a consumer. Unacked
	// messages are redelivered by RabbitMQ; open a new channel and consume again.
	ErrChannelClosed = errors.New("rabbitmq: channel closed")
)

// AMQPPriority maps a tier onto AMQP priorities 0..maxPriority, spread
// evenly: tier 0 (shortest) gets maxPriority, the last tier gets 0. Messages
// published without a priority (0) therefore queue with the longest tier.
func AMQPPriority(tier, tiers int, maxPriority uint8) uint8 {
	if tiers <= 1 {
		return maxPriority
	}
	tier = max(0, min(tier, tiers-1))
	p := math.Round(float64(tiers-1-tier) * float64(maxPriority) / float64(tiers-1))
	return uint8(p)
}

// PriorityFor maps a prediction onto AMQP priorities 0..maxPriority, as the
// publisher sends it. RabbitMQ never ages a waiting message, so the only way
// to keep shortest-first from starving long work there is not to make the
// long work wait: a long message takes maxPriority and starts no later than
// FIFO would have started it (the simulator's bounded policy with stretch
// -1). The tiers share the priorities below it, shortest highest. With long
// false for every message (or maxPriority below 2) it is AMQPPriority.
func PriorityFor(tier, tiers int, long bool, maxPriority uint8) uint8 {
	if maxPriority < 2 {
		return AMQPPriority(tier, tiers, maxPriority)
	}
	if long {
		return maxPriority
	}
	return AMQPPriority(tier, tiers, maxPriority-1)
}

// middle returns the default (middle) priority used when there is no
// prediction: the same tier a cold key takes.
func middle(tiers int, maxPriority uint8) Priority {
	t := tiers / 2
	return Priority{Tier: t, AMQP: PriorityFor(t, tiers, false, maxPriority), Cold: true}
}
