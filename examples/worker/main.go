// Command worker runs jobs from a Harbinger queue, pretending each kind of
// job takes a different time, and reports what the broker learned.
//
//	go run ./examples/worker -addr 127.0.0.1:7070 -concurrency 4
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/harbinger-mq/harbinger/client"
)

// cost is how long each job type pretends to run.
var cost = map[string]time.Duration{
	"thumbnail": 2 * time.Millisecond,
	"email":     20 * time.Millisecond,
	"report":    200 * time.Millisecond,
}

func main() {
	addr := flag.String("addr", "127.0.0.1:7070", "broker gRPC address")
	queue := flag.String("queue", "demo", "queue to consume")
	concurrency := flag.Int("concurrency", 4, "jobs run at once")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	c, err := client.Dial(ctx, *addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	err = c.RunWorker(ctx, client.WorkerConfig{Queue: *queue, Concurrency: *concurrency, Name: "example-worker"},
		func(ctx context.Context, d *client.Delivery) error {
			t := time.NewTimer(cost[d.JobType])
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return ctx.Err()
			}
			log.Printf("%s %s tier=%d predicted=%v attempt=%d", d.ID, d.JobType, d.Tier, d.Predicted, d.Attempt)
			return nil
		})
	if err != nil {
		log.Fatal(err)
	}
	keys, err := c.ListKeys(context.Background(), *queue, 0)
	if err == nil {
		for _, k := range keys {
			fmt.Printf("%-10s count=%-5d ewma=%.1fms tier=%d cold=%v\n", k.JobType, k.Count, k.EwmaMs, k.Tier, k.Cold)
		}
	}
}
