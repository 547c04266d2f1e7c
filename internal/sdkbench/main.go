// Command sdkbench measures the Go SDK's throughput against a running
// broker, as sdk/python/bench/worker_bench.py and
// sdk/typescript/bench/worker.ts measure theirs: it publishes n empty jobs
// through a Producer (timed), then runs a worker with empty handlers until
// every job was handled and acked (timed), and prints one JSON line.
// scripts/sdk-bench.sh runs all three against a fresh `harbinger serve
// --memory` each.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harbinger-mq/harbinger/client"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7070", "broker")
	queue := flag.String("queue", "bench", "queue")
	n := flag.Int("n", 20000, "jobs")
	concurrency := flag.Int("concurrency", 16, "worker handlers")
	flag.Parse()
	ctx := context.Background()
	c, err := client.Dial(ctx, *addr, client.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()

	p := c.NewProducer(client.ProducerConfig{})
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range *n {
		wg.Add(1)
		if err := p.PublishAsync(&client.Message{Queue: *queue, Producer: "bench", JobType: "empty"}, func(_ string, err error) {
			if err != nil {
				failed.Add(1)
			}
			wg.Done()
		}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	wg.Wait()
	publish := time.Since(start)
	_ = p.Close()
	if failed.Load() > 0 {
		fmt.Fprintf(os.Stderr, "%d publishes failed\n", failed.Load())
		os.Exit(1)
	}

	wctx, stop := context.WithCancel(ctx)
	var handled atomic.Int64
	done := make(chan struct{})
	start = time.Now()
	go func() {
		_ = c.RunWorker(wctx, client.WorkerConfig{Queue: *queue, Concurrency: *concurrency}, func(context.Context, *client.Delivery) error {
			if handled.Add(1) == int64(*n) {
				close(done)
			}
			return nil
		})
	}()
	<-done
	// The last acks are on their way: wait until the broker counts them.
	for {
		q, err := c.Queue(ctx, *queue)
		if err == nil && q.Acked >= uint64(*n) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	work := time.Since(start)
	stop()
	out, _ := json.Marshal(map[string]any{
		"sdk": "go", "jobs": *n, "concurrency": *concurrency,
		"publish_per_s": float64(*n) / publish.Seconds(), "worker_per_s": float64(*n) / work.Seconds(),
	})
	fmt.Println(string(out))
}
