package rabbitmq

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TierQueues is the layout for quorum queues, which honour only two
// priority levels: one queue per tier, named Name.t0 (shortest) to
// Name.t<Tiers-1>. A TierPublisher routes each message to its tier's queue
// and ConsumeTiers serves the queues by weight, so long jobs get a
// guaranteed share, optionally serving first any message that has waited
// past AgeAfter. The cost: per-tier FIFO order instead of one priority
// order, and Tiers queues (and consumers) per logical queue.
type TierQueues struct {
	Name   string
	Tiers  int  // default 3 (DefaultTierQueues)
	Quorum bool // declare quorum queues (else classic)
}

// DefaultTierQueues is TierQueues' default tier count: one queue, and one
// weight, per tier.
const DefaultTierQueues = 3

func (t TierQueues) tiers() int {
	if t.Tiers <= 0 {
		return DefaultTierQueues
	}
	return t.Tiers
}

// Queue returns the name of a tier's queue; the tier is clamped to range.
func (t TierQueues) Queue(tier int) string {
	return fmt.Sprintf("%s.t%d", t.Name, max(0, min(tier, t.tiers()-1)))
}

// Declare declares the durable tier queues.
func (t TierQueues) Declare(ch *amqp.Channel) error {
	typ := "classic"
	if t.Quorum {
		typ = "quorum"
	}
	for i := range t.tiers() {
		if _, err := ch.QueueDeclare(t.Queue(i), true, false, false, false, amqp.Table{"x-queue-type": typ}); err != nil {
			return fmt.Errorf("rabbitmq: declare queue %q: %w", t.Queue(i), err)
		}
	}
	return nil
}

// Delete deletes the tier queues and their messages.
func (t TierQueues) Delete(ch *amqp.Channel) error {
	for i := range t.tiers() {
		if _, err := ch.QueueDelete(t.Queue(i), false, false, false); err != nil {
			return fmt.Errorf("rabbitmq: delete queue %q: %w", t.Queue(i), err)
		}
	}
	return nil
}

// TierPublisher publishes each message to its tier's queue through the
// default exchange.
type TierPublisher struct {
	pub *Publisher
	tq  TierQueues
}

// NewTierPublisher returns a TierPublisher; opts.Tiers is taken from tq.
func NewTierPublisher(ch *amqp.Channel, p Predictor, tq TierQueues, opts PublisherOptions) *TierPublisher {
	opts.Tiers = tq.tiers()
	return &TierPublisher{pub: NewPublisher(ch, p, opts), tq: tq}
}

// Publish publishes msg to the queue of the tier predicted for k. k.Queue is
// the key's queue (usually tq.Name), not a tier queue's name.
func (tp *TierPublisher) Publish(ctx context.Context, k Key, msg amqp.Publishing) error {
	pr := tp.pub.prepare(ctx, k, &msg)
	if err := tp.pub.ch.PublishWithContext(ctx, "", tp.tq.Queue(pr.Tier), tp.pub.opts.Mandatory, false, msg); err != nil {
		return fmt.Errorf("rabbitmq: publish: %w", err)
	}
	return nil
}

// TierConsumerOptions configures ConsumeTiers. The zero value of a field
// means its default.
type TierConsumerOptions struct {
	// Weights are the tiers' shares of the messages served when every tier
	// has work: default 8:3:1 for three tiers, else 2^(Tiers-1-i).
	Weights []int
	// Prefetch is the unacked messages held per tier queue, default 2: with
	// one, a tier's next message is still in flight when the consumer picks
	// again, and the weights degrade to round robin over what has arrived.
	Prefetch int
	// AgeAfter, if positive, serves first (oldest first) any held message
	// that has waited this long since it was published, whatever its tier.
	AgeAfter time.Duration
	// OnObserveError, if set, is told when the predictor did not take an
	// observation.
	OnObserveError func(error)
	// MaxAttempts bounds how often a failing message is handled, as
	// ConsumerOptions.MaxAttempts does; zero is no limit.
	MaxAttempts int
}

// DefaultTierPrefetch is ConsumeTiers' default per-tier prefetch.
const DefaultTierPrefetch = 2

// DefaultWeights returns the default weights for n tiers.
func DefaultWeights(n int) []int {
	if n == 3 {
		return []int{8, 3, 1}
	}
	w := make([]int, n)
	for i := range w {
		w[i] = 1 << min(n-1-i, 20)
	}
	return w
}

func (o TierConsumerOptions) withDefaults(tiers int) TierConsumerOptions {
	if o.Weights == nil {
		o.Weights = DefaultWeights(tiers)
	}
	if o.Prefetch == 0 {
		o.Prefetch = DefaultTierPrefetch
	}
	return o
}

func (o TierConsumerOptions) validate(tiers int) error {
	if len(o.Weights) != tiers {
		return fmt.Errorf("rabbitmq: want one weight per tier (%d), got %d", tiers, len(o.Weights))
	}
	for i, w := range o.Weights {
		if w < 1 {
			return fmt.Errorf("rabbitmq: weight of tier %d must be at least 1, got %d", i, w)
		}
	}
	if o.Prefetch < 1 {
		return fmt.Errorf("rabbitmq: prefetch must be at least 1, got %d", o.Prefetch)
	}
	if o.AgeAfter < 0 {
		return fmt.Errorf("rabbitmq: age-after must not be negative, got %v", o.AgeAfter)
	}
	if o.MaxAttempts < 0 {
		return fmt.Errorf("rabbitmq: max attempts must not be negative (0 is no limit), got %d", o.MaxAttempts)
	}
	return nil
}

type tierDelivery struct {
	tier int
	d    amqp.Delivery
}

// ConsumeTiers consumes tq's queues on ch, one message at a time, choosing
// among the messages held (up to Prefetch per tier) by weighted round robin,
// except that a message older than AgeAfter goes first. Acks, requeues and
// observations are as for Consume. It returns nil when ctx is done and
// ErrChannelClosed when the channel closes.
func ConsumeTiers(ctx context.Context, ch *amqp.Channel, tq TierQueues, p Predictor, opts TierConsumerOptions, h func(ctx context.Context, d amqp.Delivery) error) error {
	n := tq.tiers()
	opts = opts.withDefaults(n)
	if err := opts.validate(n); err != nil {
		return err
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Qos(opts.Prefetch, 0, false); err != nil {
		return fmt.Errorf("rabbitmq: qos: %w", err)
	}
	in := make(chan tierDelivery, n*opts.Prefetch) // room for everything RabbitMQ may push
	fwdDone := make(chan struct{}, n)
	tags := make([]string, n)
	for i := range n {
		tags[i] = randomTag()
		ds, err := ch.Consume(tq.Queue(i), tags[i], false, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("rabbitmq: consume %q: %w", tq.Queue(i), err)
		}
		go func() {
			defer func() { fwdDone <- struct{}{} }()
			for d := range ds {
				select {
				case in <- tierDelivery{i, d}:
				case <-ctx.Done():
					_ = d.Nack(false, true)
				}
			}
		}()
	}
	w := worker{queue: tq.Name, ch: ch, p: p, h: h, onObserveError: opts.OnObserveError, maxAttempts: opts.MaxAttempts, now: time.Now}
	pk := newPicker(opts.Weights, opts.AgeAfter)
	held := make([][]amqp.Delivery, n)
	heldN, open := 0, n
	take := func(td tierDelivery) {
		held[td.tier] = append(held[td.tier], td.d)
		heldN++
	}
	for {
		// Gather everything RabbitMQ has pushed (at most Prefetch per tier)
		// without blocking; block only when nothing is held.
		for gathering := true; gathering; {
			if heldN == 0 {
				if open == 0 {
					return channelClosed(closed)
				}
				select {
				case td := <-in:
					take(td)
				case <-fwdDone:
					open--
				case <-ctx.Done():
					return stopTiers(ch, tags, held, in, fwdDone, open)
				}
				continue
			}
			select {
			case td := <-in:
				take(td)
			case <-fwdDone:
				open--
			default:
				gathering = false
			}
		}
		if ctx.Err() != nil {
			return stopTiers(ch, tags, held, in, fwdDone, open)
		}
		now := w.now()
		heads := make([]time.Time, n)
		for i, q := range held {
			if len(q) > 0 {
				heads[i] = publishedOr(q[0], now)
			}
		}
		t := pk.pick(heads, now)
		d := held[t][0]
		held[t] = held[t][1:]
		heldN--
		w.handle(ctx, d, tq.Queue(t))
	}
}

func publishedOr(d amqp.Delivery, now time.Time) time.Time {
	if t, ok := PublishedAt(d); ok {
		return t
	}
	return now
}

func channelClosed(closed <-chan *amqp.Error) error {
	select {
	case e := <-closed:
		if e != nil {
			return fmt.Errorf("%w: %v", ErrChannelClosed, e)
		}
	default:
	}
	return ErrChannelClosed
}

// stopTiers cancels the consumers, requeues every held or in-flight message
// and waits for the forwarders to finish.
func stopTiers(ch *amqp.Channel, tags []string, held [][]amqp.Delivery, in chan tierDelivery, fwdDone chan struct{}, open int) error {
	for _, tag := range tags {
		_ = ch.Cancel(tag, false)
	}
	for _, q := range held {
		for _, d := range q {
			_ = d.Nack(false, true)
		}
	}
	for open > 0 {
		select {
		case td := <-in:
			_ = td.d.Nack(false, true)
		case <-fwdDone:
			open--
		}
	}
	return nil
}

// picker chooses the tier to serve next. It is pure: the caller passes the
// publish time of each tier's head (zero when the tier has nothing held)
// and the time now.
type picker struct {
	weights  []int
	credit   []int
	ageAfter time.Duration
}

func newPicker(weights []int, ageAfter time.Duration) *picker {
	return &picker{weights: weights, credit: make([]int, len(weights)), ageAfter: ageAfter}
}

// pick returns the tier to serve. A head older than ageAfter wins (the
// oldest); otherwise smooth weighted round robin among the tiers that have
// a head: each gains its weight in credit, the richest is served and pays
// the total. At least one head must be non-zero.
func (p *picker) pick(heads []time.Time, now time.Time) int {
	if p.ageAfter > 0 {
		best := -1
		for i, h := range heads {
			if !h.IsZero() && now.Sub(h) >= p.ageAfter && (best < 0 || h.Before(heads[best])) {
				best = i
			}
		}
		if best >= 0 {
			return best
		}
	}
	best, total := -1, 0
	for i, h := range heads {
		if h.IsZero() {
			continue
		}
		p.credit[i] += p.weights[i]
		total += p.weights[i]
		if best < 0 || p.credit[i] > p.credit[best] {
			best = i
		}
	}
	if best >= 0 {
		p.credit[best] -= total
	}
	return best
}
