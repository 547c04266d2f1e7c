package sdk_test

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/harbinger-mq/harbinger/client"
)

// A trace goes from the producer to the worker's handler in the job's
// traceparent header: the producer injects its span's context into the
// headers with OpenTelemetry's W3C propagator, and the handler extracts it
// from the delivery's. The SDK needs no OpenTelemetry of its own; the
// program brings its own. With tracing on, the broker's publish, wait and
// run spans come between the two (see docs/tracing.md); with it off, the
// header reaches the handler as the producer wrote it.
func Example_tracing() {
	addr, stop := startBroker()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tracer := sdktrace.NewTracerProvider().Tracer("example") // the program's own provider
	tc := propagation.TraceContext{}

	c, err := client.Dial(ctx, addr)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	// Producer: publish inside a span, its context in the headers.
	pctx, span := tracer.Start(ctx, "signup")
	headers := map[string]string{}
	tc.Inject(pctx, propagation.MapCarrier(headers))
	if _, err := c.Publish(pctx, &client.Message{Queue: "emails", JobType: "welcome", Headers: headers}); err != nil {
		panic(err)
	}
	span.End()

	// Worker: the handler's span continues the job's trace.
	wctx, stopWorker := context.WithCancel(ctx)
	err = c.RunWorker(wctx, client.WorkerConfig{Queue: "emails"}, func(ctx context.Context, d *client.Delivery) error {
		ctx, span := tracer.Start(tc.Extract(ctx, propagation.MapCarrier(d.Headers)), "send welcome email")
		defer span.End()
		same := trace.SpanContextFromContext(ctx).TraceID() == trace.SpanContextFromContext(pctx).TraceID()
		fmt.Println("the handler's span is in the producer's trace:", same)
		stopWorker()
		return nil
	})
	fmt.Println("worker stopped:", err)
	// Output:
	// the handler's span is in the producer's trace: true
	// worker stopped: <nil>
}
