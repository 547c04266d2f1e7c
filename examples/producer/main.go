// Command producer publishes jobs of three kinds to a Harbinger broker, so
// a worker (examples/worker) has something to learn from.
//
//	go run ./examples/producer -addr 127.0.0.1:7070 -n 1000
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"

	"github.com/harbinger-mq/harbinger/client"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7070", "broker gRPC address")
	queue := flag.String("queue", "demo", "queue to publish to")
	n := flag.Int("n", 1000, "jobs to publish")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	c, err := client.Dial(ctx, *addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	p := c.NewProducer(client.ProducerConfig{})
	kinds := []string{"thumbnail", "email", "report"}
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := 0; i < *n && ctx.Err() == nil; i++ {
		wg.Add(1)
		m := &client.Message{Queue: *queue, Producer: "example", JobType: kinds[i%len(kinds)], Payload: fmt.Appendf(nil, "job %d", i)}
		if err := p.PublishAsync(m, func(_ string, err error) {
			if err != nil && failed.Add(1) == 1 {
				log.Printf("publish failed: %v", err)
			}
			wg.Done()
		}); err != nil {
			log.Fatal(err)
		}
	}
	wg.Wait()
	_ = p.Close()
	fmt.Printf("published %d jobs to %s (%d failed)\n", *n, *queue, failed.Load())
}
