package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/tracing"
)

// BenchmarkEndToEnd is the broker-cost shape in miniature: 4 producers on
// publish streams, 4 workers with prefetch 1 and empty handlers, 64-byte
// payloads, all over loopback gRPC in this process. ns/op is per message
// published, delivered and acked; msgs/s is the same figure inverted.
// fifo-traced records each job's spans and batches them to an exporter
// that drops them: what tracing costs the broker beyond the export.
func BenchmarkEndToEnd(b *testing.B) {
	b.ReportAllocs()
	for _, policy := range []string{"fifo", "bounded", "fifo-traced"} {
		b.Run(policy, func(b *testing.B) {
			var tr *tracing.Tracer
			if p, ok := strings.CutSuffix(policy, "-traced"); ok {
				policy = p
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				defer func() { _ = tp.Shutdown(context.Background()) }()
				tr = tracing.New(tp, broker.DefaultMaxHeaderBytes)
			}
			tb := setupTraced(b, broker.Config{Queue: broker.QueueConfig{Policy: policy}}, tr)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			const producers, workers = 4, 4
			payload := make([]byte, 64)
			var done atomic.Int64
			all := make(chan struct{})
			total := int64(b.N)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = tb.cl.RunWorker(ctx, client.WorkerConfig{Queue: "cost", Name: fmt.Sprint("w", w)},
						func(context.Context, *client.Delivery) error {
							if done.Add(1) == total {
								close(all)
							}
							return nil
						})
				}()
			}
			b.ResetTimer()
			start := time.Now()
			var pwg sync.WaitGroup
			for p := range producers {
				pwg.Add(1)
				go func() {
					defer pwg.Done()
					pr := tb.cl.NewProducer(client.ProducerConfig{})
					defer pr.Close()
					n := b.N / producers
					if p == 0 {
						n += b.N % producers
					}
					for range n {
						m := &client.Message{Queue: "cost", Producer: fmt.Sprint("p", p), JobType: "empty", Payload: payload}
						if err := pr.PublishAsync(m, func(string, error) {}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			pwg.Wait()
			<-all
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
			b.StopTimer()
			cancel()
			wg.Wait()
		})
	}
}
