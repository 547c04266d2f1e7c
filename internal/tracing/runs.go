package tracing

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/harbinger-mq/harbinger/internal/broker"
)

// Runs holds the run spans of one consumer's deliveries from each
// delivery to its settle. Its methods may be called from different
// goroutines (a Consume stream delivers from one and reads acks on
// another).
type Runs struct {
	t        *Tracer
	consumer string

	mu     sync.Mutex
	open   map[string]trace.Span // by job id
	closed bool
}

// Runs returns the run spans of a consumer named consumer, or nil when t
// is nil (tracing off).
func (t *Tracer) Runs(consumer string) *Runs {
	if t == nil {
		return nil
	}
	return &Runs{t: t, consumer: consumer, open: map[string]trace.Span{}}
}

// Delivered records d's wait span, from when the job took its place in
// line (its publish, or when a delayed or retried job fell due) to now,
// and starts its run span; both are children of the trace context in the
// job's headers (its publish span). It returns the headers to deliver:
// the job's own with traceparent set to the run span, so that a handler
// continuing the trace is the run's child. A job without a trace context
// (published with tracing off, or by a schedule) starts a trace at its
// wait span. The job's own headers are never modified.
func (r *Runs) Delivered(d *broker.Delivery, now time.Time) map[string]string {
	t := r.t
	attrs := []attribute.KeyValue{
		AttrSystem.String("harbinger"), AttrQueue.String(d.Queue), AttrJobID.String(d.ID),
		AttrProducer.String(d.Producer), AttrJobType.String(d.JobType), AttrAttempt.Int(d.Attempt),
		AttrTier.Int(d.Tier), AttrPredictedMS.Float64(float64(d.Predicted) / float64(time.Millisecond)),
		AttrConsumer.String(r.consumer),
	}
	parent := propagator.Extract(context.Background(), propagation.MapCarrier(d.Headers))
	start := d.Enqueued
	if start.IsZero() || start.After(now) {
		start = now
	}
	wctx, wait := t.t.Start(parent, SpanWait, trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	wait.End(trace.WithTimestamp(now))
	if !trace.SpanContextFromContext(parent).IsValid() {
		parent = wctx
	}
	rctx, run := t.t.Start(parent, SpanRun, trace.WithTimestamp(now), trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attrs...))
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		run.SetStatus(codes.Error, "the consumer closed")
		run.End(trace.WithTimestamp(now))
		return d.Headers
	}
	if old := r.open[d.ID]; old != nil {
		// The same job again on this stream: its lease ran out before the
		// worker settled it.
		end(old, now, "lost", "its lease expired and it was delivered again")
	}
	r.open[d.ID] = run
	r.mu.Unlock()
	h, _ := t.inject(rctx, d.Headers, true)
	return h
}

// take removes and returns the run span of job id, nil if none is open
// or r is nil (tracing off).
func (r *Runs) take(id string) trace.Span {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sp := r.open[id]
	delete(r.open, id)
	return sp
}

// Acked ends job id's run span at now as acked. Acked, Nacked, Lost and
// Close do nothing on a nil Runs (tracing off).
func (r *Runs) Acked(id string, now time.Time) {
	if sp := r.take(id); sp != nil {
		sp.SetAttributes(AttrOutcome.String("ack"))
		sp.End(trace.WithTimestamp(now))
	}
}

// Nacked ends job id's run span at now as failed, with the nack's action
// and the worker's reason.
func (r *Runs) Nacked(id, action, reason string, now time.Time) {
	if sp := r.take(id); sp != nil {
		end(sp, now, "nack "+action, reason)
	}
}

// Lost ends job id's run span at now as an error: the consumer no longer
// held the job (its lease ran out, or the delivery never left), why says
// which.
func (r *Runs) Lost(id, why string, now time.Time) {
	if sp := r.take(id); sp != nil {
		end(sp, now, "lost", why)
	}
}

// Close ends every run span still open at now: the consumer went with its
// jobs unsettled, and they return to their queue. Later deliveries record
// a run span that ends at once.
func (r *Runs) Close(now time.Time) {
	if r == nil {
		return
	}
	r.mu.Lock()
	open := r.open
	r.open, r.closed = nil, true
	r.mu.Unlock()
	for _, sp := range open {
		end(sp, now, "returned", "the consumer closed with the job unsettled; it returns to its queue")
	}
}

func end(sp trace.Span, now time.Time, outcome, why string) {
	sp.SetAttributes(AttrOutcome.String(outcome))
	sp.SetStatus(codes.Error, why)
	sp.End(trace.WithTimestamp(now))
}
