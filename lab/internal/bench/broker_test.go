package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestRabbitPriorityReorders checks that the rabbitmq-priority arm really
// reorders: a backlog of tier-2 messages (priority 0) published before any
// consumer exists is overtaken by a later tier-0 message (priority 2).
func TestRabbitPriorityReorders(t *testing.T) {
	d := rabbitForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q, err := d.Setup(ctx, QueueSpec{Name: queueName("priority-test", 0), Policy: PolicyStatic,
		Static: map[string]int{"slow": 2, "urgent": 0}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Teardown(context.WithoutCancel(ctx))
	pub, err := q.NewPublisher(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const backlog = 20
	for i := range backlog {
		if err := pub.Publish(ctx, Message{Key: Key{Producer: "p", JobType: "slow"}, Body: EncodeBody(uint64(i), time.Now(), 32)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Publish(ctx, Message{Key: Key{Producer: "p", JobType: "urgent"}, Body: EncodeBody(backlog, time.Now(), 32)}); err != nil {
		t.Fatal(err)
	}
	pub.Close()

	var mu sync.Mutex
	var order []uint64
	all := make(chan struct{})
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- q.Work(wctx, 0, nil, func(_ context.Context, body []byte) error {
			seq, _, _ := DecodeBody(body)
			mu.Lock()
			defer mu.Unlock()
			order = append(order, seq)
			if len(order) == backlog+1 {
				close(all)
			}
			return nil
		})
	}()
	select {
	case <-all:
	case <-ctx.Done():
		t.Fatal("not every message was delivered")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if order[0] != backlog {
		t.Errorf("first delivery was message %d, want the late high-priority message %d; order %v", order[0], backlog, order)
	}
	for i, seq := range order[1:] {
		if seq != uint64(i) {
			t.Errorf("backlog out of order: %v", order)
			break
		}
	}
}

// TestRedisWorkerCrash crashes a worker mid-handler and checks that its
// processing list is pushed back when it restarts and nothing is lost.
func TestRedisWorkerCrash(t *testing.T) {
	d := redisForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dq, err := d.Setup(ctx, QueueSpec{Name: queueName("crash-test", 0), Policy: PolicyFIFO})
	if err != nil {
		t.Fatal(err)
	}
	q := dq.(*RedisQueue)
	defer q.Teardown(context.WithoutCancel(ctx))
	pub, _ := q.NewPublisher(ctx)
	const n = 5
	for i := range n {
		if err := pub.Publish(ctx, Message{Body: EncodeBody(uint64(i), time.Now(), 32)}); err != nil {
			t.Fatal(err)
		}
	}

	// The first worker takes message 0 and dies inside the handler.
	crashCtx, crash := context.WithCancel(ctx)
	inHandler := make(chan uint64, 1)
	crashed := make(chan error, 1)
	go func() {
		crashed <- q.Work(crashCtx, 0, nil, func(hctx context.Context, body []byte) error {
			seq, _, _ := DecodeBody(body)
			inHandler <- seq
			<-hctx.Done()
			return hctx.Err()
		})
	}()
	var first uint64
	select {
	case first = <-inHandler:
	case <-ctx.Done():
		t.Fatal("the worker never got a message")
	}
	crash()
	if err := <-crashed; err != nil {
		t.Fatal(err)
	}
	if first != 0 {
		t.Errorf("first delivery was %d, want 0 (FIFO)", first)
	}
	if p, _ := q.Processing(ctx, 0); p != 1 {
		t.Fatalf("processing list holds %d after the crash, want 1", p)
	}
	if l, _ := q.Len(ctx); l != n-1 {
		t.Fatalf("queue holds %d after the crash, want %d", l, n-1)
	}

	// The restarted worker pushes the list back and finishes everything,
	// the crashed message first.
	var mu sync.Mutex
	var got []uint64
	all := make(chan struct{})
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- q.Work(wctx, 0, nil, func(_ context.Context, body []byte) error {
			seq, _, _ := DecodeBody(body)
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
		t.Fatalf("only %v delivered after the restart", got)
	}
	// The last ack (LREM) follows its handler; stopping the worker before
	// it would be a crash, which leaves the message in the processing list.
	// Redis has no signal for it, so poll.
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for p, _ := q.Processing(ctx, 0); p != 0; p, _ = q.Processing(ctx, 0) {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("processing list still holds %d", p)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[0 1 2 3 4]" {
		t.Errorf("deliveries after restart = %v, want [0 1 2 3 4]", got)
	}
	if p, _ := q.Processing(ctx, 0); p != 0 {
		t.Errorf("processing list holds %d at the end, want 0", p)
	}
	if l, _ := q.Len(ctx); l != 0 {
		t.Errorf("queue holds %d at the end, want 0", l)
	}
}

// TestCostShort runs the registered cost arms briefly: harbinger serve in
// its own process, the bare gRPC queue, RabbitMQ and Redis.
func TestCostShort(t *testing.T) {
	drivers := map[string]Driver{RabbitMQ: rabbitForTest(t), Redis: redisForTest(t)}
	for k, d := range harbingerProcessDrivers(t, HarbingerServe, BareGRPC) {
		drivers[k] = d
	}
	res := shortCost(t, CostArms, drivers)
	for _, id := range []string{"harbinger_vs_redis", "harbinger_vs_rabbitmq", "harbinger_vs_bare_grpc"} {
		if res.ratio(id) == nil {
			t.Errorf("ratio %s missing", id)
		}
	}
	for _, name := range ArmNames(CostArms) {
		if res.Arms[name].PeakCPU.BrokerUS == nil {
			t.Errorf("%s: no broker CPU figure (the broker process was not found)", name)
		}
	}
}

// shortCost runs RunCost with tiny durations and checks every arm
// delivered and lost nothing.
func shortCost(t *testing.T, arms []Arm, drivers map[string]Driver) *CostResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := RunCost(ctx, CostConfig{Arms: arms, Duration: time.Second, Warmup: 300 * time.Millisecond, Reps: 1,
		Rate: 500, Drain: 3 * time.Second}, drivers)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range res.ArmOrder {
		a := res.Arms[name]
		if a.PeakPerS <= 0 {
			t.Errorf("%s: peak %v msg/s", name, a.PeakPerS)
		}
		if a.FixedRate == nil || len(a.Runs) != 1 {
			t.Fatalf("%s: no fixed-rate run", name)
		}
		if r := a.Runs[0]; r.Lost != 0 || r.Sent == 0 {
			t.Errorf("%s: fixed-rate run sent %d, lost %d", name, r.Sent, r.Lost)
		}
		t.Logf("%s: peak %.0f/s (CPU per message: %s); at 500/s P50 %.2f ms P99 %.2f ms kept up %v %s", name, a.PeakPerS, a.PeakCPU,
			a.FixedRate.P50ms, a.FixedRate.P99ms, a.Runs[0].KeptUp, a.Runs[0].Why)
	}
	return res
}

// queueName is a queue name unique to one test run.
func queueName(arm string, seed uint64) string {
	return fmt.Sprintf("bench-%s-s%d-%d", arm, seed, time.Now().UnixNano())
}
