package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/client"
)

// A job that must not run before a given moment: published now, invisible
// until then.
func Example_messageDelay() {
	addr, stop := startBroker()
	defer stop()
	ctx := context.Background()
	c, _ := client.Dial(ctx, addr)
	defer c.Close()

	ids, err := c.Publish(ctx, &client.Message{Queue: "mail", JobType: "reminder", Delay: 24 * time.Hour})
	if err != nil {
		panic(err)
	}
	q, _ := c.Queue(ctx, "mail")
	fmt.Println(len(ids), "published;", q.Ready, "ready,", q.Delayed, "delayed")
	// Output: 1 published; 0 ready, 1 delayed
}

// Publishing the same order twice (a retried HTTP request, say) stores one
// job: the second publish answers with the first job's id.
func Example_publishEachUnique() {
	addr, stop := startBroker()
	defer stop()
	ctx := context.Background()
	c, _ := client.Dial(ctx, addr)
	defer c.Close()

	charge := &client.Message{Queue: "billing", JobType: "charge", UniqueKey: "order-1042", UniqueFor: time.Hour}
	first, _ := c.PublishEach(ctx, charge)
	again, _ := c.PublishEach(ctx, charge)
	fmt.Println(again[0].Duplicate, again[0].ID == first[0].ID)
	// Output: true true
}

// Cancelling a running job cancels its handler's context.
func Example_cancelJob() {
	addr, stop := startBroker()
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, _ := client.Dial(ctx, addr)
	defer c.Close()

	started := make(chan string)
	stopped := make(chan error)
	go c.RunWorker(ctx, client.WorkerConfig{Queue: "video"}, func(ctx context.Context, d *client.Delivery) error {
		started <- d.ID
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return ctx.Err()
	})
	ids, _ := c.Publish(ctx, &client.Message{Queue: "video", JobType: "transcode"})
	<-started
	state, _ := c.CancelJob(ctx, "video", ids[0])
	fmt.Println(state, errors.Is(<-stopped, client.ErrCancelled))
	// Output: running true
}

// Pausing a queue stops its deliveries; publishes are still taken.
func Example_pauseQueue() {
	addr, stop := startBroker()
	defer stop()
	ctx := context.Background()
	c, _ := client.Dial(ctx, addr)
	defer c.Close()

	_, _ = c.Publish(ctx, &client.Message{Queue: "exports"})
	q, _ := c.PauseQueue(ctx, "exports")
	fmt.Println("paused:", q.Paused)
	q, _ = c.ResumeQueue(ctx, "exports")
	fmt.Println("paused:", q.Paused)
	// Output:
	// paused: true
	// paused: false
}

// A periodic job on the broker: every weekday at 07:30 New York time.
func Example_declareSchedule() {
	addr, stop := startBroker()
	defer stop()
	ctx := context.Background()
	c, _ := client.Dial(ctx, addr)
	defer c.Close()

	s, err := c.DeclareSchedule(ctx, &pb.Schedule{
		Name: "daily-digest", Queue: "mail", JobType: "digest",
		Cron: "30 7 * * 1-5", TimeZone: "America/New_York",
	})
	if err != nil {
		panic(err)
	}
	ny, _ := time.LoadLocation("America/New_York")
	next := s.NextTick.AsTime().In(ny)
	fmt.Println(next.Format("15:04"), next.Weekday() != time.Saturday && next.Weekday() != time.Sunday)
	// Output: 07:30 true
}
