package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/client"
)

func TestRatiosBestOf(t *testing.T) {
	t.Parallel()
	reps := []map[string]float64{
		{"harbinger-durable": 900, "nats-jetstream": 100, "rabbitmq-quorum": 300, "redis-aof": 200, "harbinger": 10, "redis": 5},
		{"harbinger-durable": 1200, "nats-jetstream": 100, "rabbitmq-quorum": 200, "redis-aof": 400, "harbinger": 10, "redis": 4},
	}
	got := map[string]Ratio{}
	for _, r := range ratios(reps) {
		got[r.ID] = r
	}
	if r := got["durable_vs_best_durable"]; r.Median != 3 || r.Min != 3 || r.Max != 3 {
		t.Errorf("durable / best = %+v, want 3 in both repetitions (900/300, 1200/400)", r)
	}
	if r := got["harbinger_vs_redis"]; r.Median != 2.25 {
		t.Errorf("harbinger / redis median = %v, want 2.25 (of 2 and 2.5)", r.Median)
	}
	if _, ok := got["harbinger_vs_rabbitmq"]; ok {
		t.Error("a ratio with an arm that did not run was reported")
	}
}

func TestParseCostArms(t *testing.T) {
	t.Parallel()
	got, err := ParseCostArms("registered, harbinger-inprocess")
	if err != nil {
		t.Fatal(err)
	}
	want := append(ArmNames(CostArms), InProcessArm.Name)
	if fmt.Sprint(ArmNames(got)) != fmt.Sprint(want) {
		t.Errorf("ParseCostArms = %v, want %v", ArmNames(got), want)
	}
	got, err = ParseCostArms("durable,harbinger-durable")
	if err != nil || fmt.Sprint(ArmNames(got)) != fmt.Sprint(ArmNames(DurableArms)) {
		t.Errorf("ParseCostArms(durable) = %v, %v; want %v", ArmNames(got), err, ArmNames(DurableArms))
	}
	if _, err := ParseCostArms("harbinger-fifo"); err == nil {
		t.Error("ParseCostArms accepted a flow arm")
	}
}

// TestBareQueueSDK drives the bare queue through the client SDK, as the
// bare-grpc arm does: everything published is delivered once, in order.
func TestBareQueueSDK(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addrc := make(chan string, 1)
	sctx, stopServer := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- ServeBareQueue(sctx, "127.0.0.1:0", func(a string) { addrc <- a }) }()
	defer func() {
		stopServer()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()
	c, err := client.Dial(ctx, <-addrc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.DeclareQueue(ctx, "q", nil); err != nil {
		t.Fatal(err)
	}
	const n = 200
	p := c.NewProducer(client.ProducerConfig{})
	for i := range n {
		if _, err := p.Publish(ctx, &client.Message{Queue: "q", Payload: EncodeBody(uint64(i), time.Now(), 64)}); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	if info, err := c.Queue(ctx, "q"); err != nil || info.Ready != n {
		t.Fatalf("Queue = %v, %v; want %d ready", info, err, n)
	}
	var mu sync.Mutex
	var got []uint64
	all := make(chan struct{})
	wctx, stopWorker := context.WithCancel(ctx)
	werr := make(chan error, 1)
	go func() {
		werr <- c.RunWorker(wctx, client.WorkerConfig{Queue: "q", Concurrency: 1, Prefetch: 1}, func(_ context.Context, d *client.Delivery) error {
			seq, _, _ := DecodeBody(d.Payload)
			mu.Lock()
			defer mu.Unlock()
			got = append(got, seq)
			if len(got) == n {
				close(all)
			}
			return nil
		})
	}()
	select {
	case <-all:
	case <-ctx.Done():
		t.Fatalf("delivered %d of %d", len(got), n)
	}
	stopWorker()
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	for i, seq := range got {
		if seq != uint64(i) {
			t.Fatalf("delivery %d was message %d: not FIFO", i, seq)
		}
	}
}
