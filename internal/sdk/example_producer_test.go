package sdk_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/harbinger-mq/harbinger/client"
)

// A Producer batches publishes from any number of goroutines over one
// stream.
func Example_producer() {
	addr, stop := startBroker()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := client.Dial(ctx, addr)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	p := c.NewProducer(client.ProducerConfig{MaxBatch: 100})
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for i := range 1000 {
		wg.Add(1)
		err := p.PublishAsync(&client.Message{Queue: "thumbnails", Producer: "uploads", JobType: "resize", SizeHint: uint64(i)}, func(id string, err error) {
			if err != nil {
				mu.Lock()
				failed++
				mu.Unlock()
			}
			wg.Done()
		})
		if err != nil {
			panic(err)
		}
	}
	wg.Wait()
	_ = p.Close()

	qs, err := c.ListQueues(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s holds %d ready jobs; %d publishes failed\n", qs[0].Name, qs[0].Ready, failed)
	// Output:
	// thumbnails holds 1000 ready jobs; 0 publishes failed
}

// DeclareQueue picks a queue's policy and limits before use.
func Example_declareQueue() {
	addr, stop := startBroker()
	defer stop()
	ctx := context.Background()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	info, err := c.DeclareQueue(ctx, "reports", nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(info.Name, info.Config.Policy, info.Config.Tiers, info.Config.MaxAttempts)
	// Output:
	// reports bounded 3 5
}
