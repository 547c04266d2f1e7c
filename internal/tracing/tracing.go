// Package tracing records a job's life in the broker as OpenTelemetry
// spans (its publish, its wait in line and its run on a worker) and
// carries the trace context in the job's W3C traceparent and tracestate
// headers, so that a producer's trace goes on through the broker into the
// worker's handler.
//
// It is off unless serve is given an OTLP endpoint: the gRPC server holds
// a nil *Tracer then and checks for it, and nothing here runs. The broker
// core never imports this package; the server calls it around a publish,
// a delivery and its settle.
package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/harbinger-mq/harbinger/internal/broker"
)

// Span names.
const (
	SpanPublish = "harbinger publish"
	SpanWait    = "harbinger wait"
	SpanRun     = "harbinger run"
)

// The headers that carry a job's trace context (W3C Trace Context, keys in
// lower case as the propagator writes and reads them).
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// Attribute keys of the spans. The queue and the job's id take the
// OpenTelemetry messaging conventions' names.
const (
	AttrSystem      = attribute.Key("messaging.system")
	AttrQueue       = attribute.Key("messaging.destination.name")
	AttrJobID       = attribute.Key("messaging.message.id")
	AttrProducer    = attribute.Key("harbinger.producer")
	AttrJobType     = attribute.Key("harbinger.job_type")
	AttrAttempt     = attribute.Key("harbinger.attempt")
	AttrTier        = attribute.Key("harbinger.tier")
	AttrPredictedMS = attribute.Key("harbinger.predicted_ms")
	AttrConsumer    = attribute.Key("harbinger.consumer")
	AttrDuplicate   = attribute.Key("harbinger.duplicate")
	AttrOutcome     = attribute.Key("harbinger.outcome")
)

// instrumentation names the tracer the spans come from.
const instrumentation = "github.com/harbinger-mq/harbinger"

var propagator = propagation.TraceContext{}

// Tracer records jobs' spans through a trace.TracerProvider. A nil
// *Tracer is tracing off; callers check for it.
type Tracer struct {
	t trace.Tracer
	// maxHeaderBytes is the broker's limit on a job's headers: the trace
	// context is set only where it keeps them within it, so that turning
	// tracing on never makes a publish fail.
	maxHeaderBytes int
}

// New returns a Tracer that records into tp, for a broker whose jobs'
// headers may hold maxHeaderBytes (broker.Config.MaxHeaderBytes).
func New(tp trace.TracerProvider, maxHeaderBytes int) *Tracer {
	return &Tracer{t: tp.Tracer(instrumentation), maxHeaderBytes: maxHeaderBytes}
}

// Publish starts m's publish span at now: a child of the trace context in
// m's headers when they carry one, else the root of a new trace. It sets
// m's traceparent header to the span, so that the job's wait and run and
// the worker's handler join its trace; it leaves the headers as they are
// when the header would take them over the broker's limit. The caller
// owns m.Headers (a request's map) and ends the span with Published.
func (t *Tracer) Publish(m *broker.Message, now time.Time) trace.Span {
	parent := propagator.Extract(context.Background(), propagation.MapCarrier(m.Headers))
	ctx, sp := t.t.Start(parent, SpanPublish, trace.WithTimestamp(now), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(AttrSystem.String("harbinger"), AttrQueue.String(m.Queue),
			AttrProducer.String(m.Producer), AttrJobType.String(m.JobType)))
	if h, ok := t.inject(ctx, m.Headers, false); ok {
		m.Headers = h
	}
	return sp
}

// Published ends a publish span at now with the publish's outcome.
func (t *Tracer) Published(sp trace.Span, r broker.Result, now time.Time) {
	switch {
	case r.Err != nil:
		sp.SetStatus(codes.Error, r.Err.Error())
	case r.Duplicate:
		sp.SetAttributes(AttrJobID.String(r.ID), AttrDuplicate.Bool(true))
	default:
		sp.SetAttributes(AttrJobID.String(r.ID))
	}
	sp.End(trace.WithTimestamp(now))
}

// inject returns h with the trace context of ctx's span in it, and true;
// or h unchanged and false when that would take h over the limit. With
// fresh set it writes into a copy, leaving h as it was.
func (t *Tracer) inject(ctx context.Context, h map[string]string, fresh bool) (map[string]string, bool) {
	var tc [2]string // traceparent, tracestate
	propagator.Inject(ctx, tcCarrier{&tc})
	n := 0
	for k, v := range h {
		if k != HeaderTraceparent && k != HeaderTracestate {
			n += len(k) + len(v)
		}
	}
	for i, k := range [...]string{HeaderTraceparent, HeaderTracestate} {
		if tc[i] != "" {
			n += len(k) + len(tc[i])
		}
	}
	if tc[0] == "" || n > t.maxHeaderBytes {
		return h, false
	}
	if fresh || h == nil {
		c := make(map[string]string, len(h)+1)
		for k, v := range h {
			c[k] = v
		}
		h = c
	}
	h[HeaderTraceparent] = tc[0]
	if tc[1] != "" {
		h[HeaderTracestate] = tc[1]
	} else {
		delete(h, HeaderTracestate)
	}
	return h, true
}

// tcCarrier takes what the propagator injects without a map of its own.
type tcCarrier struct{ tc *[2]string }

func (c tcCarrier) Get(string) string { return "" }
func (c tcCarrier) Keys() []string    { return nil }
func (c tcCarrier) Set(k, v string) {
	switch k {
	case HeaderTraceparent:
		c.tc[0] = v
	case HeaderTracestate:
		c.tc[1] = v
	}
}
