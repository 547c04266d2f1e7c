package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
			cpu0 := processCPU()
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
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/1e3, "cpu-µs/msg")
			b.StopTimer()
			cancel()
			wg.Wait()
		})
	}
}

// BenchmarkBusyWorkers is the busy-workers shape of the lab's bench cost
// in miniature: 4 producers on publish streams, each keeping at most 64
// publishes unanswered, 4 workers of 16 handlers each on connections of
// their own, empty handlers, 64-byte payloads, over loopback gRPC in this
// process. "batched" is this broker; "single" is the same broker
// reporting no batches, as a broker before them did, so that the SDK
// sends and asks for one item per message. ns/op is per message
// published, delivered and acked.
func BenchmarkBusyWorkers(b *testing.B) {
	b.ReportAllocs()
	for _, mode := range []string{"batched", "single"} {
		b.Run(mode, func(b *testing.B) {
			tb := setupWith(b, broker.Config{}, mode == "single")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			const producers, workers, slots, window = 4, 4, 16, 64
			payload := make([]byte, 64)
			var done atomic.Int64
			all := make(chan struct{})
			total := int64(b.N)
			var wg sync.WaitGroup
			for w := range workers {
				cl, err := client.Dial(ctx, tb.addr, client.WithLogger(quiet))
				if err != nil {
					b.Fatal(err)
				}
				defer cl.Close()
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = cl.RunWorker(ctx, client.WorkerConfig{Queue: "busy", Name: fmt.Sprint("w", w), Concurrency: slots, Prefetch: slots},
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
			cpu0 := processCPU()
			var pwg sync.WaitGroup
			for p := range producers {
				cl, err := client.Dial(ctx, tb.addr, client.WithLogger(quiet))
				if err != nil {
					b.Fatal(err)
				}
				defer cl.Close()
				pwg.Add(1)
				go func() {
					defer pwg.Done()
					pr := cl.NewProducer(client.ProducerConfig{MaxPending: window})
					defer pr.Close()
					n := b.N / producers
					if p == 0 {
						n += b.N % producers
					}
					for range n {
						m := &client.Message{Queue: "busy", Producer: fmt.Sprint("p", p), JobType: "empty", Payload: payload}
						if err := pr.PublishAsync(m, nil); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			pwg.Wait()
			<-all
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/1e3, "cpu-µs/msg")
			b.StopTimer()
			cancel()
			wg.Wait()
		})
	}
}

// processCPU is the CPU time this process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
