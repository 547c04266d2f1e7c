package sdk_test

import (
	"context"
	"fmt"
	"time"

	"github.com/harbinger-mq/harbinger/client"
)

// A worker consumes a queue; the SDK measures each handler and acks with
// the duration, so the broker learns which jobs are short.
func Example_runWorker() {
	addr, stop := startBroker()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := client.Dial(ctx, addr)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	if _, err := c.Publish(ctx, &client.Message{Queue: "emails", Producer: "signup", JobType: "welcome", Payload: []byte("ada@example.com")}); err != nil {
		panic(err)
	}

	wctx, stopWorker := context.WithCancel(ctx)
	err = c.RunWorker(wctx, client.WorkerConfig{Queue: "emails", Concurrency: 2}, func(ctx context.Context, d *client.Delivery) error {
		fmt.Printf("sending %s (%s, attempt %d)\n", d.Payload, d.JobType, d.Attempt)
		stopWorker() // one job is enough for the example
		return nil
	})
	fmt.Println("worker stopped:", err)
	// Output:
	// sending ada@example.com (welcome, attempt 1)
	// worker stopped: <nil>
}
