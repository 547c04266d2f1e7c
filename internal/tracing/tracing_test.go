package tracing

import (
	"maps"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/harbinger-mq/harbinger/internal/broker"
)

type testBundle struct {
	rec *tracetest.SpanRecorder
	tr  *Tracer
	now time.Time
}

func setup(t *testing.T, maxHeaderBytes int) *testBundle {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	return &testBundle{rec: rec, tr: New(tp, maxHeaderBytes), now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (tb *testBundle) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tb.rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestPublishSetsTraceparent(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		headers map[string]string
		limit   int
		set     bool // traceparent names the publish span
	}{
		{"no headers", nil, 1024, true},
		{"with the producer's", map[string]string{HeaderTraceparent: parent, HeaderTracestate: "v=1", "k": "v"}, 1024, true},
		// 11 + 55 bytes of traceparent: set only within the limit.
		{"fits exactly", map[string]string{"k": "v"}, 2 + 66, true},
		{"one byte over", map[string]string{"k": "v"}, 2 + 65, false},
		// Replacing the producer's own takes no more room.
		{"replaces within a full budget", map[string]string{HeaderTraceparent: parent}, 66, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, tt.limit)
			before := maps.Clone(tt.headers)
			m := &broker.Message{Queue: "q", Headers: tt.headers}
			sp := tb.tr.Publish(m, tb.now)
			tb.tr.Published(sp, broker.Result{ID: "7"}, tb.now)
			pub := tb.ended(SpanPublish)[0]
			got := m.Headers[HeaderTraceparent]
			if want := pub.SpanContext(); tt.set != (got != "" && strings.Contains(got, want.SpanID().String())) {
				t.Fatalf("traceparent %q after publish span %s; want it set: %v", got, want.SpanID(), tt.set)
			}
			if !tt.set && !maps.Equal(m.Headers, before) {
				t.Errorf("headers %v changed to %v", before, m.Headers)
			}
			if before[HeaderTraceparent] == parent && pub.Parent().SpanID().String() != "00f067aa0ba902b7" {
				t.Errorf("publish span's parent %v, want the producer's", pub.Parent())
			}
			if v := before[HeaderTracestate]; v != "" && m.Headers[HeaderTracestate] != v {
				t.Errorf("tracestate %q, want %q kept", m.Headers[HeaderTracestate], v)
			}
		})
	}
}

func TestPublishedError(t *testing.T) {
	t.Parallel()
	tb := setup(t, 1024)
	sp := tb.tr.Publish(&broker.Message{Queue: "q"}, tb.now)
	tb.tr.Published(sp, broker.Result{Err: broker.ErrQueueFull}, tb.now)
	if st := tb.ended(SpanPublish)[0].Status(); st.Code != codes.Error {
		t.Errorf("refused publish: status %v", st)
	}
}

// A delivery's headers are a copy: the job's own keep naming its publish.
func TestDeliveredLeavesTheJobsHeaders(t *testing.T) {
	t.Parallel()
	tb := setup(t, 1024)
	job := map[string]string{HeaderTraceparent: parent, "k": "v"}
	runs := tb.tr.Runs("c")
	d := &broker.Delivery{ID: "1", Queue: "q", Headers: job, Attempt: 1, Enqueued: tb.now.Add(-time.Second)}
	h := runs.Delivered(d, tb.now)
	if job[HeaderTraceparent] != parent {
		t.Fatalf("the job's traceparent changed to %q", job[HeaderTraceparent])
	}
	if h[HeaderTraceparent] == parent || h["k"] != "v" {
		t.Errorf("delivered headers %v", h)
	}
	wait := tb.ended(SpanWait)[0]
	if d := wait.EndTime().Sub(wait.StartTime()); d != time.Second {
		t.Errorf("wait span lasts %v, want 1s", d)
	}
	runs.Acked("1", tb.now.Add(time.Second))
	if n := len(tb.ended(SpanRun)); n != 1 {
		t.Errorf("%d run spans after the ack", n)
	}
	runs.Acked("1", tb.now) // settled already: nothing more
	if n := len(tb.ended(SpanRun)); n != 1 {
		t.Errorf("%d run spans after a second ack", n)
	}
}

// A run span left open ends as an error when the job is delivered again
// on the same stream and when the stream closes; nil Runs do nothing.
func TestRunsEndUnsettled(t *testing.T) {
	t.Parallel()
	tb := setup(t, 1024)
	runs := tb.tr.Runs("c")
	runs.Delivered(&broker.Delivery{ID: "1", Attempt: 1}, tb.now)
	runs.Delivered(&broker.Delivery{ID: "1", Attempt: 2}, tb.now)
	runs.Delivered(&broker.Delivery{ID: "2", Attempt: 1}, tb.now)
	runs.Close(tb.now)
	runs.Delivered(&broker.Delivery{ID: "3", Attempt: 1}, tb.now)
	outcomes := map[string]int{}
	for _, s := range tb.ended(SpanRun) {
		if s.Status().Code != codes.Error {
			t.Errorf("unsettled run span: status %v", s.Status())
		}
		for _, a := range s.Attributes() {
			if a.Key == AttrOutcome {
				outcomes[a.Value.AsString()]++
			}
		}
	}
	if want := map[string]int{"lost": 1, "returned": 2}; !maps.Equal(outcomes, want) {
		t.Errorf("outcomes %v, want %v (and one more ended at once after Close)", outcomes, want)
	}
	if n := len(tb.ended(SpanRun)); n != 4 {
		t.Errorf("%d run spans, want 4", n)
	}
	var off *Tracer
	if r := off.Runs("c"); r != nil {
		t.Fatal("a nil Tracer made Runs")
	} else {
		r.Acked("1", tb.now)
		r.Lost("1", "", tb.now)
		r.Close(tb.now)
	}
}

func TestParseEndpoint(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want Endpoint
		err  bool
	}{
		{"127.0.0.1:4317", Endpoint{"127.0.0.1:4317", true}, false},
		{"localhost:4317", Endpoint{"localhost:4317", true}, false},
		{"[::1]:4317", Endpoint{"[::1]:4317", true}, false},
		{"collector:4317", Endpoint{"collector:4317", false}, false},
		{"http://collector:4317", Endpoint{"collector:4317", true}, false},
		{"https://collector", Endpoint{"collector:4317", false}, false},
		{"collector", Endpoint{}, true},
		{"grpc://collector:4317", Endpoint{}, true},
	} {
		got, err := ParseEndpoint(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseEndpoint(%q) = %+v, %v; want %+v, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}
