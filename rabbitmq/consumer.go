package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DefaultPrefetch is the consumer's default QoS: one unacked message at a
// time, so that RabbitMQ, not a consumer's buffer, decides what runs next.
const DefaultPrefetch = 1

// ConsumerOptions configures Consume. The zero value of a field means its
// default.
type ConsumerOptions struct {
	Prefetch int    // unacked messages per consumer (basic.qos), default 1
	Workers  int    // handlers running at once, default 1; more than Prefetch is pointless
	Tag      string // consumer tag, default a random one
	// OnObserveError, if set, is told when the predictor did not take an
	// observation. The message is acked regardless.
	OnObserveError func(error)
}

// WithDefaults returns o with every zero field set to its default.
func (o ConsumerOptions) WithDefaults() ConsumerOptions {
	if o.Prefetch == 0 {
		o.Prefetch = DefaultPrefetch
	}
	if o.Workers == 0 {
		o.Workers = 1
	}
	if o.Tag == "" {
		o.Tag = randomTag()
	}
	return o
}

func (o ConsumerOptions) validate() error {
	switch {
	case o.Prefetch < 1:
		return fmt.Errorf("rabbitmq: prefetch must be at least 1, got %d", o.Prefetch)
	case o.Workers < 1:
		return fmt.Errorf("rabbitmq: workers must be at least 1, got %d", o.Workers)
	}
	return nil
}

func randomTag() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "harbinger-" + hex.EncodeToString(b[:])
}

// Handler handles one delivery. Returning an error (or panicking) requeues
// the message, or rejects it if the error wraps ErrReject; returning nil
// acks it.
type Handler func(ctx context.Context, d amqp.Delivery) error

// Consume consumes queue with manual acks until ctx is done (it then returns
// nil, after requeueing what it had not started) or the channel closes (it
// returns ErrChannelClosed). Each handler call is timed; on success the
// message is acked and, once the ack is sent, the duration is reported to p
// under the key in the message's headers. A handler error, panic or call to
// runtime.Goexit nacks the message with requeue (without, if the error
// wraps ErrReject) and reports nothing: a failed attempt is not learned
// as a success. If the ack itself fails, RabbitMQ will redeliver the message,
// so its duration is not reported either.
func Consume(ctx context.Context, ch *amqp.Channel, queue string, p Predictor, opts ConsumerOptions, h func(ctx context.Context, d amqp.Delivery) error) error {
	opts = opts.WithDefaults()
	if err := opts.validate(); err != nil {
		return err
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Qos(opts.Prefetch, 0, false); err != nil {
		return fmt.Errorf("rabbitmq: qos: %w", err)
	}
	deliveries, err := ch.Consume(queue, opts.Tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("rabbitmq: consume %q: %w", queue, err)
	}
	if bt, ok := p.(backlogTracker); ok {
		bt.Attach(ctx, queue, opts.Workers)
		defer bt.Attach(context.WithoutCancel(ctx), queue, -opts.Workers)
	}
	w := worker{queue: queue, p: p, h: h, onObserveError: opts.OnObserveError, now: time.Now}
	w.reports = startReporter(p)
	defer w.reports.stop()
	var wg sync.WaitGroup
	var loop func()
	loop = func() {
		done := false
		defer func() {
			if !done { // a handler called runtime.Goexit: this worker goes on in a new goroutine
				wg.Go(loop)
			}
		}()
		for d := range deliveries {
			if ctx.Err() != nil {
				_ = d.Nack(false, true)
				continue
			}
			w.handle(ctx, d)
		}
		done = true
	}
	for range opts.Workers {
		wg.Go(loop)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-ctx.Done():
		_ = ch.Cancel(opts.Tag, false) // closes deliveries; the workers drain it
		<-done
		return nil
	case <-done:
		// deliveries closed under us: the channel closed or the server
		// cancelled the consumer (queue deleted).
		select {
		case e := <-closed:
			if e != nil {
				return fmt.Errorf("%w: %v", ErrChannelClosed, e)
			}
		default:
		}
		return ErrChannelClosed
	}
}

// worker runs one handler call: time it, settle the message, report the
// duration of a success.
type worker struct {
	queue          string
	p              Predictor
	h              func(ctx context.Context, d amqp.Delivery) error
	onObserveError func(error)
	now            func() time.Time
	reports        *reporter // nil: report in the handler's goroutine
}

func (w worker) handle(ctx context.Context, d amqp.Delivery) {
	start := w.now()
	returned := false
	defer func() {
		if !returned {
			// The handler called runtime.Goexit, which no recover stops:
			// a failure like a panic, so the message goes back now rather
			// than when the channel closes.
			_ = d.Nack(false, true)
		}
	}()
	err := callHandler(ctx, w.h, d)
	returned = true
	took := w.now().Sub(start)
	if err != nil {
		_ = d.Nack(false, !errors.Is(err, ErrReject))
		return
	}
	if err := d.Ack(false); err != nil {
		return // the channel is gone; RabbitMQ redelivers, so this was not a success
	}
	// The message is acked: report it even if ctx ended meanwhile (a
	// Remote predictor bounds the call with its own timeout).
	report := func() {
		if err := w.observe(context.WithoutCancel(ctx), d, took); err != nil && w.onObserveError != nil {
			w.onObserveError(err)
		}
	}
	if !w.reports.send(report) {
		report()
	}
}

// remoteObserver is a predictor in another process (Remote): each report
// is a round trip.
type remoteObserver interface{ remote() }

// reportBuffer is how many reports to a remote predictor may wait for the
// reporter before a handler sends its own.
const reportBuffer = 256

// reporter sends a consumer's reports to a remote predictor from a
// goroutine of its own, so that a handler takes its next message without
// waiting for the round trip: with prefetch 1 the report would otherwise
// sit between every two messages, and for jobs of a millisecond or two a
// loopback call to a sidecar on a busy machine costs a good share of the
// worker's capacity. Reports are never dropped: when the buffer is full the
// handler sends its own (send returns false). A nil reporter (a predictor
// in this process, whose reports are cheap) sends nothing.
type reporter struct {
	queue chan func()
	done  chan struct{}
}

func startReporter(p Predictor) *reporter {
	if _, ok := p.(remoteObserver); !ok {
		return nil
	}
	r := &reporter{queue: make(chan func(), reportBuffer), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for f := range r.queue {
			f()
		}
	}()
	return r
}

// send queues f; false when f must run in the caller instead.
func (r *reporter) send(f func()) bool {
	if r == nil {
		return false
	}
	select {
	case r.queue <- f:
		return true
	default:
		return false
	}
}

// stop waits for the queued reports (each bounded by the predictor's own
// timeout). Every send must have returned.
func (r *reporter) stop() {
	if r == nil {
		return
	}
	close(r.queue)
	<-r.done
}

// observe reports a success. A predictor in this process (Local) also gets
// the prediction the publisher stamped on the message, to take it out of
// the queue's backlog and to score it.
func (w worker) observe(ctx context.Context, d amqp.Delivery, took time.Duration) error {
	k := KeyOf(w.queue, d)
	if lp, ok := w.p.(backlogTracker); ok {
		if s, ok := stampOf(d); ok {
			return lp.ObserveStamped(ctx, k, s, took)
		}
	}
	return w.p.Observe(ctx, k, took)
}

// backlogTracker is a predictor that tracks its queues' backlogs to hold
// long messages (Local, and Remote for a sidecar run with --hold). Consume
// tells it how many handlers drain a queue and reports completions with
// their stamps; a Publisher takes back a message it failed to publish.
type backlogTracker interface {
	Attach(ctx context.Context, queue string, handlers int)
	Forget(ctx context.Context, queue string, predicted time.Duration)
	ObserveStamped(ctx context.Context, k Key, s Stamp, took time.Duration) error
}

func callHandler(ctx context.Context, h func(ctx context.Context, d amqp.Delivery) error, d amqp.Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok {
				err = fmt.Errorf("%w: %w", ErrHandlerPanic, e) // errors.Is sees ErrReject in it
			} else {
				err = fmt.Errorf("%w: %v", ErrHandlerPanic, r)
			}
		}
	}()
	return h(ctx, d)
}
