package rabbitmq

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/harbinger-mq/harbinger/internal/predict"
)

// PublisherOptions configures a Publisher. The zero value of a field means
// its default.
type PublisherOptions struct {
	MaxPriority uint8 // the queue's x-max-priority, default 5; long messages get it
	Tiers       int   // the predictor's tier count, default 5
	Mandatory   bool  // publish with the mandatory flag
	// HoldQueue, when set, is the hold queue (DeclareHoldQueue) of the
	// queues this publisher publishes to: a long message with a Hold goes
	// there, through the default exchange, and joins its queue at the top
	// priority when the hold ends. A message with its own Expiration is
	// never held. Empty: long messages take the top priority at once.
	HoldQueue string
}

// WithDefaults returns o with every zero field set to its default.
func (o PublisherOptions) WithDefaults() PublisherOptions {
	if o.MaxPriority == 0 {
		o.MaxPriority = DefaultMaxPriority
	}
	if o.Tiers == 0 {
		o.Tiers = DefaultTiers
	}
	return o
}

// Publisher publishes messages with the AMQP priority their predicted
// duration earns, and records their key in headers for the consumer. It is
// as safe for concurrent use as the channel it wraps.
type Publisher struct {
	ch   *amqp.Channel
	p    Predictor
	opts PublisherOptions
	now  func() time.Time

	fallbacks, held atomic.Uint64
}

// NewPublisher returns a Publisher on ch that asks p for priorities.
func NewPublisher(ch *amqp.Channel, p Predictor, opts PublisherOptions) *Publisher {
	return &Publisher{ch: ch, p: p, opts: opts.WithDefaults(), now: time.Now}
}

// Publish sets msg.Priority from the predictor (the middle priority if the
// predictor fails), adds the x-harbinger-* headers and publishes. msg's own
// headers are copied, not modified.
func (pb *Publisher) Publish(ctx context.Context, exchange, routingKey string, k Key, msg amqp.Publishing) error {
	pr := pb.prepare(ctx, k, &msg)
	msg.Priority = PriorityFor(pr.Tier, pb.opts.Tiers, pr.Long, pb.opts.MaxPriority)
	if pr.Long && pr.Hold >= minHold && pb.opts.HoldQueue != "" && msg.Expiration == "" {
		// The hold queue dead-letters to its own target queue, whatever
		// exchange and routing key the message was published with.
		exchange, routingKey = "", pb.opts.HoldQueue
		msg.Expiration = expiration(pr.Hold)
		pb.held.Add(1)
	}
	if err := pb.ch.PublishWithContext(ctx, exchange, routingKey, pb.opts.Mandatory, false, msg); err != nil {
		if bt, ok := pb.p.(backlogTracker); ok {
			bt.Forget(ctx, k.Queue, pr.Predicted) // never queued: out of the backlog
		}
		return fmt.Errorf("rabbitmq: publish: %w", err)
	}
	return nil
}

// Fallbacks returns how many publishes took the middle priority because the
// predictor returned an error.
func (pb *Publisher) Fallbacks() uint64 { return pb.fallbacks.Load() }

// Held returns how many long messages went through the hold queue.
func (pb *Publisher) Held() uint64 { return pb.held.Load() }

// prepare asks the predictor, stamps the headers and returns the priority
// with its tier clamped to the configured tiers.
func (pb *Publisher) prepare(ctx context.Context, k Key, msg *amqp.Publishing) Priority {
	pr, err := pb.p.Predict(ctx, k)
	if err != nil {
		pb.fallbacks.Add(1)
		pr = middle(pb.opts.Tiers, pb.opts.MaxPriority)
	}
	pr.Tier = max(0, min(pr.Tier, pb.opts.Tiers-1))
	msg.Headers = stampHeaders(msg.Headers, k, pr, pb.now())
	return pr
}

func stampHeaders(h amqp.Table, k Key, pr Priority, now time.Time) amqp.Table {
	out := make(amqp.Table, len(h)+8)
	for name, v := range h {
		out[name] = v
	}
	out[HeaderQueue] = k.Queue
	out[HeaderProducer] = k.Producer
	out[HeaderJobType] = k.JobType
	out[HeaderSize] = int64(min(k.Size, math.MaxInt64))
	out[HeaderPublishedNS] = now.UnixNano()
	out[HeaderTier] = int32(pr.Tier)
	out[HeaderPredictedNS] = int64(pr.Predicted)
	if pr.Cold {
		out[HeaderCold] = true
	}
	return out
}

// Stamp is what the Publisher said of a message, read back from its
// headers: the predicted duration, the tier and whether the prediction was
// the default one.
type Stamp struct {
	Predicted time.Duration
	Tier      int
	Cold      bool
}

// stampOf reads a delivery's stamp; false when it carries no prediction.
func stampOf(d amqp.Delivery) (Stamp, bool) {
	n, ok := headerInt(d.Headers[HeaderPredictedNS])
	if !ok || n < 0 {
		return Stamp{}, false
	}
	tier, ok := headerInt(d.Headers[HeaderTier])
	if !ok || tier < 0 || tier > predict.MaxTiers {
		return Stamp{}, false
	}
	cold, _ := d.Headers[HeaderCold].(bool)
	return Stamp{Predicted: time.Duration(n), Tier: int(tier), Cold: cold}, true
}

// KeyOf reads a delivery's key from its x-harbinger-* headers. queue is used
// when the message carries no x-harbinger-queue header.
func KeyOf(queue string, d amqp.Delivery) Key {
	k := Key{Queue: queue}
	// A queue name is at most 255 bytes in AMQP: a header that could not
	// be one is not taken.
	if s, ok := d.Headers[HeaderQueue].(string); ok && s != "" && len(s) <= 255 && utf8.ValidString(s) {
		k.Queue = s
	}
	k.Producer, _ = d.Headers[HeaderProducer].(string)
	k.JobType, _ = d.Headers[HeaderJobType].(string)
	if n, ok := headerInt(d.Headers[HeaderSize]); ok && n > 0 {
		k.Size = uint64(n)
	}
	return k
}

// PublishedAt returns when the Publisher stamped a delivery, if it did.
func PublishedAt(d amqp.Delivery) (time.Time, bool) {
	n, ok := headerInt(d.Headers[HeaderPublishedNS])
	if !ok || n <= 0 {
		return time.Time{}, false
	}
	return time.Unix(0, n), true
}

// headerInt reads an integer header whatever width the wire gave it.
func headerInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int32:
		return int64(n), true
	case int16:
		return int64(n), true
	case int8:
		return int64(n), true
	case int:
		return int64(n), true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case uint64:
		return int64(min(n, math.MaxInt64)), true
	}
	return 0, false
}
