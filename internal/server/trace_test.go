package server

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/tracing"
)

// spanRecorder is an in-memory exporter that also signals each ended
// span, so a test waits for the span it wants instead of sleeping.
type spanRecorder struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
	ended chan struct{} // one value per ended span, dropped if nobody reads
}

func newSpanRecorder() *spanRecorder { return &spanRecorder{ended: make(chan struct{}, 64)} }

func (r *spanRecorder) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (r *spanRecorder) Shutdown(context.Context) error                  { return nil }
func (r *spanRecorder) ForceFlush(context.Context) error                { return nil }
func (r *spanRecorder) OnEnd(s sdktrace.ReadOnlySpan) {
	r.mu.Lock()
	r.spans = append(r.spans, s)
	r.mu.Unlock()
	select {
	case r.ended <- struct{}{}:
	default:
	}
}

// named returns the ended spans called name.
func (r *spanRecorder) named(name string) []sdktrace.ReadOnlySpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func (r *spanRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.spans)
}

// waitFor waits until n spans called name have ended.
func (r *spanRecorder) waitFor(t *testing.T, name string, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	timeout := time.NewTimer(20 * time.Second)
	defer timeout.Stop()
	for {
		if got := r.named(name); len(got) >= n {
			return got
		}
		select {
		case <-r.ended:
		case <-timeout.C:
			t.Fatalf("timed out waiting for %d %q spans; have %d", n, name, len(r.named(name)))
		}
	}
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	for _, a := range s.Attributes() {
		if a.Key == k {
			return a.Value
		}
	}
	return attribute.Value{}
}

// one returns the only span called name.
func one(t *testing.T, r *spanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	got := r.named(name)
	if len(got) != 1 {
		t.Fatalf("%d %q spans, want 1", len(got), name)
	}
	return got[0]
}

func wantChild(t *testing.T, child, parent sdktrace.ReadOnlySpan) {
	t.Helper()
	if child.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("%q's parent is span %s, want %q (%s)", child.Name(), child.Parent().SpanID(), parent.Name(), parent.SpanContext().SpanID())
	}
	if child.SpanContext().TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("%q is in trace %s, %q in %s", child.Name(), child.SpanContext().TraceID(), parent.Name(), parent.SpanContext().TraceID())
	}
}

// A producer's trace goes on through the broker's publish, wait and run
// into the worker's handler, which continues it from the delivery's
// headers as a user's would: one trace, each span the child of the one
// before, with the job's attributes on the broker's spans.
func TestTraceSpansProducerBrokerWorker(t *testing.T) {
	t.Parallel()
	rec := newSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tb := setupTraced(t, broker.Config{}, tracing.New(tp, broker.DefaultMaxHeaderBytes))
	tracer := tp.Tracer("test")
	tc := propagation.TraceContext{}

	// The producer: its own span, injected into the job's headers.
	pctx, prod := tracer.Start(context.Background(), "producer")
	headers := map[string]string{"team": "media"}
	tc.Inject(pctx, propagation.MapCarrier(headers))
	ids, err := tb.cl.Publish(pctx, &client.Message{Queue: "traced", Producer: "web", JobType: "thumbnail", Headers: headers})
	if err != nil {
		t.Fatal(err)
	}
	prod.End()
	j, err := tb.b.GetJob("traced", ids[0])
	if err != nil {
		t.Fatal(err)
	}
	stored := j.Headers[tracing.HeaderTraceparent]

	// The worker: continues the trace from the delivery's headers.
	got := make(chan map[string]string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	worked := make(chan error, 1)
	go func() {
		worked <- tb.cl.RunWorker(ctx, client.WorkerConfig{Queue: "traced", Name: "w1"}, func(ctx context.Context, d *client.Delivery) error {
			_, sp := tracer.Start(tc.Extract(ctx, propagation.MapCarrier(d.Headers)), "handler")
			sp.End()
			got <- maps.Clone(d.Headers)
			return nil
		})
	}()
	delivered := <-got
	rec.waitFor(t, tracing.SpanRun, 1)
	cancel()
	if err := <-worked; err != nil {
		t.Fatal(err)
	}

	producer, publish := one(t, rec, "producer"), one(t, rec, tracing.SpanPublish)
	wait, run, handler := one(t, rec, tracing.SpanWait), one(t, rec, tracing.SpanRun), one(t, rec, "handler")
	wantChild(t, publish, producer)
	wantChild(t, wait, publish)
	wantChild(t, run, publish)
	wantChild(t, handler, run)

	for _, s := range []sdktrace.ReadOnlySpan{publish, wait, run} {
		if q := attr(s, tracing.AttrQueue).AsString(); q != "traced" {
			t.Errorf("%q: queue %q", s.Name(), q)
		}
		if id := attr(s, tracing.AttrJobID).AsString(); id != ids[0] {
			t.Errorf("%q: job id %q, want %q", s.Name(), id, ids[0])
		}
		if p, jt := attr(s, tracing.AttrProducer).AsString(), attr(s, tracing.AttrJobType).AsString(); p != "web" || jt != "thumbnail" {
			t.Errorf("%q: producer %q, job type %q", s.Name(), p, jt)
		}
		if s.Status().Code == codes.Error {
			t.Errorf("%q: status %v", s.Name(), s.Status())
		}
	}
	if a := attr(run, tracing.AttrAttempt).AsInt64(); a != 1 {
		t.Errorf("run: attempt %d, want 1", a)
	}
	if o := attr(run, tracing.AttrOutcome).AsString(); o != "ack" {
		t.Errorf("run: outcome %q, want ack", o)
	}
	if c := attr(run, tracing.AttrConsumer).AsString(); c != "w1" {
		t.Errorf("run: consumer %q, want w1", c)
	}
	// The spans follow each other in time: wait from the publish to the
	// delivery, run from the delivery to the ack.
	if wait.StartTime().Before(publish.StartTime()) || !wait.EndTime().Equal(run.StartTime()) || run.EndTime().Before(handler.EndTime()) {
		t.Errorf("publish %v, wait %v-%v, run %v-%v, handler ended %v", publish.StartTime(), wait.StartTime(), wait.EndTime(),
			run.StartTime(), run.EndTime(), handler.EndTime())
	}

	// The job keeps the producer's other headers; what the worker gets
	// names the run span, what the job holds the publish span.
	if delivered["team"] != "media" {
		t.Errorf("delivered headers %v lost the producer's", delivered)
	}
	if want := traceparent(run.SpanContext()); delivered[tracing.HeaderTraceparent] != want {
		t.Errorf("delivered traceparent %q, want the run span's %q", delivered[tracing.HeaderTraceparent], want)
	}
	if stored != traceparent(publish.SpanContext()) {
		t.Errorf("the job holds traceparent %q, want the publish span's %q", stored, traceparent(publish.SpanContext()))
	}
}

func traceparent(sc trace.SpanContext) string {
	return fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
}

// A job nacked by its worker has a run span with status error and the
// nack in its outcome; a job published without a trace context starts a
// trace at the broker's publish.
func TestTraceNackAndNoParent(t *testing.T) {
	t.Parallel()
	rec := newSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tb := setupTraced(t, broker.Config{}, tracing.New(tp, broker.DefaultMaxHeaderBytes))
	if _, err := tb.cl.Publish(context.Background(), &client.Message{Queue: "fails", JobType: "bad"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	worked := make(chan error, 1)
	go func() {
		worked <- tb.cl.RunWorker(ctx, client.WorkerConfig{Queue: "fails"}, func(context.Context, *client.Delivery) error {
			return fmt.Errorf("%w: unreadable input", client.ErrDeadLetter)
		})
	}()
	rec.waitFor(t, tracing.SpanRun, 1)
	cancel()
	if err := <-worked; err != nil {
		t.Fatal(err)
	}
	publish, run := one(t, rec, tracing.SpanPublish), one(t, rec, tracing.SpanRun)
	if publish.Parent().IsValid() {
		t.Errorf("publish without a trace context has parent %v", publish.Parent())
	}
	wantChild(t, run, publish)
	if st := run.Status(); st.Code != codes.Error {
		t.Errorf("nacked run: status %v, want an error", st)
	}
	if o := attr(run, tracing.AttrOutcome).AsString(); o != "nack dead_letter" {
		t.Errorf("nacked run: outcome %q", o)
	}
}

// With tracing off the broker records nothing, not even into a global
// tracer provider, and passes a job's headers through as they were
// published: a producer's traceparent reaches the worker untouched, and a
// job without one gets none. Not parallel: it sets the global provider.
func TestTraceOffAddsNothing(t *testing.T) {
	rec := newSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	tb := setupTraced(t, broker.Config{}, nil)

	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sent := []map[string]string{
		{tracing.HeaderTraceparent: parent, tracing.HeaderTracestate: "vendor=1", "team": "a"},
		{"team": "b"},
	}
	for _, h := range sent {
		if _, err := tb.cl.Publish(context.Background(), &client.Message{Queue: "plain", Headers: h}); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan map[string]string, len(sent))
	ctx, cancel := context.WithCancel(context.Background())
	worked := make(chan error, 1)
	go func() {
		worked <- tb.cl.RunWorker(ctx, client.WorkerConfig{Queue: "plain"}, func(_ context.Context, d *client.Delivery) error {
			got <- maps.Clone(d.Headers)
			return nil
		})
	}()
	for range sent {
		h := <-got
		if !maps.Equal(h, sent[0]) && !maps.Equal(h, sent[1]) {
			t.Errorf("delivered headers %v, want one of %v as published", h, sent)
		}
	}
	tb.waitFor(t, "both acks", func() bool { return tb.info(t, "plain").Acked == 2 })
	cancel()
	if err := <-worked; err != nil {
		t.Fatal(err)
	}
	if n := rec.count(); n != 0 {
		t.Errorf("%d spans recorded with tracing off", n)
	}
}
