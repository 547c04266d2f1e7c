package cli

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/tracing"
)

// collector is an OTLP/gRPC trace collector that keeps the names of the
// spans it receives.
type collector struct {
	coltrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names map[string]int
}

func (c *collector) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.names[s.Name]++
			}
		}
	}
	c.mu.Unlock()
	return &coltrace.ExportTraceServiceResponse{}, nil
}

func (c *collector) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.names[name]
}

// serve with an OTLP endpoint exports a job's publish, wait and run spans
// to it; they reach the collector by the time serve has stopped.
func TestServeExportsSpansByOTLP(t *testing.T) {
	t.Parallel()
	col := &collector{names: map[string]int{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(gs, col)
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()

	addr, stop := runServeFor(t, ServeConfig{Memory: true, OTLPEndpoint: lis.Addr().String()})
	ctx := t.Context()
	cl, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Publish(ctx, &client.Message{Queue: "q", JobType: "j"}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	worked := make(chan error, 1)
	ran := make(chan map[string]string, 1)
	go func() {
		worked <- cl.RunWorker(wctx, client.WorkerConfig{Queue: "q"}, func(_ context.Context, d *client.Delivery) error {
			ran <- d.Headers
			cancel() // one job; the worker acks it before it returns
			return nil
		})
	}()
	if h := <-ran; h[tracing.HeaderTraceparent] == "" {
		t.Errorf("delivered headers %v lack a traceparent", h)
	}
	if err := <-worked; err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil { // flushes the spans
		t.Fatal(err)
	}
	for _, name := range []string{tracing.SpanPublish, tracing.SpanWait, tracing.SpanRun} {
		if n := col.count(name); n != 1 {
			t.Errorf("the collector got %d %q spans, want 1", n, name)
		}
	}
}

// The endpoint comes from the flag, the file or HARBINGER_OTLP_ENDPOINT,
// else from OpenTelemetry's own variables; off turns it off.
func TestServeOTLPEndpointConfig(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		env  map[string]string
		want string
		err  bool
	}{
		{nil, nil, "", false},
		{[]string{"-otlp-endpoint", "127.0.0.1:4317"}, nil, "127.0.0.1:4317", false},
		{nil, map[string]string{"HARBINGER_OTLP_ENDPOINT": "collector:4317"}, "collector:4317", false},
		{nil, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, "http://c:4317", false},
		{nil, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:4317"}, "http://t:4317", false},
		{[]string{"-otlp-endpoint", "off"}, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, "off", false},
		{[]string{"-otlp-endpoint", "collector"}, nil, "", true},
	} {
		cfg, err := loadServeConfig(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
		if (err != nil) != tt.err || (err == nil && cfg.OTLPEndpoint != tt.want) {
			t.Errorf("args %v, env %v: endpoint %q, %v; want %q, error %v", tt.args, tt.env, cfg.OTLPEndpoint, err, tt.want, tt.err)
		}
	}
}
