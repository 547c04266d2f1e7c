package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
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
	// MaxAttempts, when positive, bounds how often a failing message is
	// handled: a failure before the last attempt sends the message to the
	// back of its queue (see HeaderFailures) and the last one rejects it,
	// as ErrReject does. Zero requeues every failure, without limit.
	MaxAttempts int
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
	case o.MaxAttempts < 0:
		return fmt.Errorf("rabbitmq: max attempts must not be negative (0 is no limit), got %d", o.MaxAttempts)
	}
	return nil
}

func randomTag() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "harbinger-" + hex.EncodeToString(b[:])
}

// Handler handles one delivery. Returning an error (or panicking) requeues
// the message, or rejects it if the error wraps ErrReject or it was the
// message's last attempt (ConsumerOptions.MaxAttempts); returning nil
// acks it.
type Handler func(ctx context.Context, d amqp.Delivery) error

// Consume consumes queue with manual acks until ctx is done (it then returns
// nil, after requeueing what it had not started) or the channel closes (it
// returns ErrChannelClosed). Each handler call is timed; on success the
// message is acked and, once the ack is sent, the duration is reported to p
// under the key in the message's headers. A handler error, panic or call to
// runtime.Goexit is a failure, settled as ConsumerOptions.MaxAttempts and
// ErrReject say, and reports nothing: a failed attempt is not learned as a
// success, and a rejected message leaves the queue's backlog. If the ack
// itself fails, RabbitMQ will redeliver the message, so its duration is not
// reported either.
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
	w := worker{queue: queue, ch: ch, p: p, h: h, onObserveError: opts.OnObserveError, maxAttempts: opts.MaxAttempts, now: time.Now}
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
			w.handle(ctx, d, queue)
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
	queue          string        // the queue of the messages' keys
	ch             *amqp.Channel // where a failed message goes back (maxAttempts)
	p              Predictor
	h              func(ctx context.Context, d amqp.Delivery) error
	onObserveError func(error)
	maxAttempts    int
	now            func() time.Time
}

// handle runs the handler on d, delivered from the queue named from.
func (w worker) handle(ctx context.Context, d amqp.Delivery, from string) {
	start := w.now()
	returned := false
	defer func() {
		if !returned {
			// The handler called runtime.Goexit, which no recover stops:
			// a failure like a panic, settled now rather than when the
			// channel closes.
			w.fail(ctx, d, from, errGoexit)
		}
	}()
	err := callHandler(ctx, w.h, d)
	returned = true
	took := w.now().Sub(start)
	if err != nil {
		w.fail(ctx, d, from, err)
		return
	}
	if err := d.Ack(false); err != nil {
		return // the channel is gone; RabbitMQ redelivers, so this was not a success
	}
	// The message is acked: report it even if ctx ended meanwhile.
	if br, ok := w.p.(batchReporter); ok {
		// A predictor in another process: the report goes with others,
		// and the handler takes its next message without waiting for it.
		var sp *Stamp
		if s, ok := stampOf(d); ok {
			sp = &s
		}
		br.report(KeyOf(w.queue, d), sp, took, w.onObserveError)
		return
	}
	if err := w.observe(context.WithoutCancel(ctx), d, took); err != nil && w.onObserveError != nil {
		w.onObserveError(err)
	}
}

// batchReporter is a predictor in another process (Remote) that sends a
// consumer's reports in batches of its own.
type batchReporter interface {
	report(k Key, s *Stamp, took time.Duration, onErr func(error))
}

// errGoexit is the failure of a handler that called runtime.Goexit.
var errGoexit = errors.New("rabbitmq: handler called runtime.Goexit")

// fail settles a message whose handling failed with err: rejected when err
// wraps ErrReject or this was its last attempt, else back in its queue.
// With a limit on attempts it goes back as a copy at the back of the queue
// that counts its failures (HeaderFailures), published before the original
// is acked: a consumer that dies in between leaves both, so the message
// may run once more than its limit, but it is never lost. Without a limit
// it is requeued where it was, as is a message that failed while the
// consumer was stopping (ctx done).
func (w worker) fail(ctx context.Context, d amqp.Delivery, from string, err error) {
	stopping := ctx.Err() != nil // no fault of the message's: not counted
	if errors.Is(err, ErrReject) || (w.maxAttempts > 0 && Failures(d)+1 >= w.maxAttempts && !stopping) {
		if d.Nack(false, false) == nil {
			w.forget(ctx, d)
		}
		return
	}
	if w.maxAttempts == 0 || stopping {
		_ = d.Nack(false, true)
		return
	}
	if w.ch.PublishWithContext(ctx, "", from, false, false, retryOf(d, Failures(d)+1)) != nil {
		_ = d.Nack(false, true) // the channel is failing; RabbitMQ keeps the original
		return
	}
	_ = d.Ack(false)
}

// forget takes a rejected message out of its queue's backlog: it will
// never complete, and counted it would lengthen every later hold.
func (w worker) forget(ctx context.Context, d amqp.Delivery) {
	bt, ok := w.p.(backlogTracker)
	if !ok {
		return
	}
	if s, ok := stampOf(d); ok {
		bt.Forget(context.WithoutCancel(ctx), w.queue, s.Predicted)
	}
}

// Failures is how many times d failed before this delivery, as counted by
// a consumer with ConsumerOptions.MaxAttempts (HeaderFailures); 0 when it
// carries no count.
func Failures(d amqp.Delivery) int {
	switch n := d.Headers[HeaderFailures].(type) {
	case int32:
		return max(int(n), 0)
	case int64:
		return int(max(min(n, math.MaxInt32), 0))
	}
	return 0
}

// retryOf is d published again with failures counted in its headers.
func retryOf(d amqp.Delivery, failures int) amqp.Publishing {
	h := make(amqp.Table, len(d.Headers)+1)
	maps.Copy(h, d.Headers)
	h[HeaderFailures] = int32(min(failures, math.MaxInt32))
	return amqp.Publishing{
		Headers: h, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: d.DeliveryMode, Priority: d.Priority, CorrelationId: d.CorrelationId,
		ReplyTo: d.ReplyTo, Expiration: d.Expiration, MessageId: d.MessageId,
		Timestamp: d.Timestamp, Type: d.Type, UserId: d.UserId, AppId: d.AppId, Body: d.Body,
	}
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
