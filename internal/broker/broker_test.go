package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/delivery"
	"github.com/harbinger-mq/harbinger/internal/sched"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testBundle struct {
	b   *Broker
	clk *clock.Fake
	ctx context.Context
}

func setup(t *testing.T, cfg Config) *testBundle {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg.Clock = clk
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	return &testBundle{b: b, clk: clk, ctx: t.Context()}
}

func (tb *testBundle) publish(t *testing.T, ms ...*Message) []string {
	t.Helper()
	ids, err := tb.b.Publish(ms...)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func (tb *testBundle) sub(t *testing.T, queue string, prefetch int) *Consumer {
	t.Helper()
	c, err := tb.b.Subscribe(queue, "test", prefetch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// next takes a ready delivery without blocking: the test fails if none is ready.
func next(t *testing.T, c *Consumer) Delivery {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d, err := c.Next(ctx)
	if err != nil {
		t.Fatalf("no delivery ready: %v", err)
	}
	return d
}

func noneReady(t *testing.T, c *Consumer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d, err := c.Next(ctx); err == nil {
		t.Fatalf("unexpected delivery %s (attempt %d)", d.ID, d.Attempt)
	}
}

func msg(queue, jobType string) *Message {
	return &Message{Queue: queue, Producer: "p", JobType: jobType, Payload: []byte("x")}
}

func TestPublishConsumeAck(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	ids := tb.publish(t, &Message{Queue: "q", Producer: "p", JobType: "j", Payload: []byte("hello"), Headers: map[string]string{"a": "b"}})
	c := tb.sub(t, "q", 1)
	d := next(t, c)
	if d.ID != ids[0] || string(d.Payload) != "hello" || d.Attempt != 1 || d.Headers["a"] != "b" || d.SizeHint != 5 || d.Lease != DefaultLease {
		t.Fatalf("delivery = %+v", d)
	}
	noneReady(t, c) // no credit and nothing ready
	if err := c.Ack(d.ID, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(d.ID, 10*time.Millisecond); !errors.Is(err, ErrUnknownMessage) {
		t.Fatalf("second ack: %v, want ErrUnknownMessage", err)
	}
	in, err := tb.b.Queue("q")
	if err != nil {
		t.Fatal(err)
	}
	if in.Published != 1 || in.Acked != 1 || in.Ready != 0 || in.InFlight != 0 || in.Durations.Count != 1 {
		t.Fatalf("info = %+v", in)
	}
}

func TestIDsUnique(t *testing.T) {
	t.Parallel()
	g1, g2 := newIDGen(), newIDGen()
	seen := map[string]bool{}
	for range 1000 {
		for _, g := range []*idGen{g1, g2} {
			j := &delivery.Job{}
			g.give(j)
			id := j.ID()
			if seen[id] {
				t.Fatalf("duplicate id %s", id)
			}
			if len(id) > 15 {
				t.Fatalf("id %q is %d bytes: too long for the job to keep in itself", id, len(id))
			}
			seen[id] = true
		}
	}
}

func TestNextWaitsForPublish(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	c := tb.sub(t, "q", 1)
	got := make(chan Delivery)
	go func() {
		d, err := c.Next(tb.ctx)
		if err == nil {
			got <- d
		}
	}()
	ids := tb.publish(t, msg("q", "j"))
	if d := <-got; d.ID != ids[0] {
		t.Fatalf("got %s want %s", d.ID, ids[0])
	}
}

func TestCreditWakesWaitingConsumer(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	c := tb.sub(t, "q", 1)
	tb.publish(t, msg("q", "a"), msg("q", "b"))
	d := next(t, c)
	got := make(chan Delivery)
	go func() {
		d, err := c.Next(tb.ctx)
		if err == nil {
			got <- d
		}
	}()
	if err := c.Ack(d.ID, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	c.AddCredit(1)
	if d2 := <-got; d2.JobType != "b" {
		t.Fatalf("got %+v", d2)
	}
}

func TestLeaseExpiryRedelivers(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{Queue: QueueConfig{Lease: 10 * time.Second}})
	tb.publish(t, msg("q", "j"))
	c1 := tb.sub(t, "q", 1)
	d := next(t, c1)
	tb.clk.Advance(9 * time.Second)
	c2 := tb.sub(t, "q", 1)
	noneReady(t, c2)
	tb.clk.Advance(time.Second)
	d2 := next(t, c2)
	if d2.ID != d.ID || d2.Attempt != 2 {
		t.Fatalf("redelivery = %+v", d2)
	}
	if err := c1.Ack(d.ID, time.Millisecond); !errors.Is(err, ErrUnknownMessage) {
		t.Fatalf("late ack by first consumer: %v", err)
	}
	if err := c2.Ack(d.ID, time.Millisecond); err != nil {
		t.Fatal(err)
	}
}

func TestExtendLease(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{Queue: QueueConfig{Lease: 10 * time.Second}})
	tb.publish(t, msg("q", "j"))
	c := tb.sub(t, "q", 2)
	d := next(t, c)
	tb.clk.Advance(8 * time.Second)
	if err := c.Extend(d.ID, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	tb.clk.Advance(8 * time.Second)
	noneReady(t, c)
	if err := c.Extend(d.ID, MaxLease+time.Hour); !errors.Is(err, ErrAdjusted) {
		t.Fatalf("over-long extend: %v", err)
	}
	if err := c.Extend(d.ID, -time.Second); !errors.Is(err, ErrAdjusted) {
		t.Fatalf("negative extend: %v", err)
	}
	tb.clk.Advance(10 * time.Second) // the negative extend gave it the queue's 10 s lease
	if d2 := next(t, c); d2.ID != d.ID || d2.Attempt != 2 {
		t.Fatalf("got %+v", d2)
	}
}

func TestMaxAttemptsDeadLetters(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{Queue: QueueConfig{Lease: time.Second, MaxAttempts: 3}})
	ids := tb.publish(t, msg("q", "j"))
	c := tb.sub(t, "q", 10)
	for i := 1; i <= 3; i++ {
		d := next(t, c)
		if d.Attempt != i {
			t.Fatalf("attempt %d, want %d", d.Attempt, i)
		}
		tb.clk.Advance(time.Second)
	}
	noneReady(t, c)
	dls, err := tb.b.DeadLetters("q", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].ID != ids[0] || dls[0].Attempts != 3 || !strings.Contains(dls[0].Reason, "lease expired") {
		t.Fatalf("dead letters = %+v", dls)
	}
	n, err := tb.b.RequeueDeadLetters("q", nil)
	if err != nil || n != 1 {
		t.Fatalf("requeue: %d, %v", n, err)
	}
	if d := next(t, c); d.ID != ids[0] || d.Attempt != 1 {
		t.Fatalf("requeued delivery = %+v", d)
	}
}

func TestTTLDeadLetters(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	tb.publish(t, &Message{Queue: "q", TTL: 5 * time.Second}, &Message{Queue: "q", JobType: "keep"})
	tb.clk.Advance(5 * time.Second)
	dls, _ := tb.b.DeadLetters("q", 0)
	if len(dls) != 1 || dls[0].Reason != "expired" {
		t.Fatalf("dead letters = %+v", dls)
	}
	c := tb.sub(t, "q", 5)
	if d := next(t, c); d.JobType != "keep" {
		t.Fatalf("got %+v", d)
	}
	noneReady(t, c)
}

func TestDefaultTTLAndExpiryAtPop(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	if _, err := tb.b.Declare("q", QueueConfig{DefaultTTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	tb.publish(t, msg("q", "j"))
	c := tb.sub(t, "q", 1)
	tb.clk.Advance(time.Second)
	noneReady(t, c)
	in, _ := tb.b.Queue("q")
	if in.Expired != 1 || in.DeadLetters != 1 {
		t.Fatalf("info = %+v", in)
	}
}

func TestQueueFull(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{Queue: QueueConfig{MaxDepth: 2}})
	tb.publish(t, msg("q", "a"), msg("q", "b"))
	_, err := tb.b.Publish(msg("q", "c"))
	var full *QueueFullError
	if !errors.Is(err, ErrQueueFull) || !errors.As(err, &full) || full.Queue != "q" || full.MaxDepth != 2 {
		t.Fatalf("err = %v", err)
	}
	// A redelivery is never refused: nothing is lost to backpressure.
	c := tb.sub(t, "q", 1)
	d := next(t, c)
	tb.publish(t, msg("q", "c"))
	if err := c.Nack(d.ID, NackRequeue, 0, ""); err != nil {
		t.Fatal(err)
	}
	if in, _ := tb.b.Queue("q"); in.Ready != 3 {
		t.Fatalf("ready = %d, want 3", in.Ready)
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{MaxPayload: 10})
	cases := []struct {
		m    *Message
		want error
	}{
		{&Message{}, ErrInvalid},
		{&Message{Queue: "a b"}, ErrInvalid},
		{&Message{Queue: strings.Repeat("q", 129)}, ErrInvalid},
		{&Message{Queue: "q", Payload: make([]byte, 11)}, ErrPayloadTooLarge},
		{&Message{Queue: "q", Producer: strings.Repeat("p", 257)}, ErrInvalid},
		{&Message{Queue: "q", JobType: "\xff"}, ErrInvalid},
		{&Message{Queue: "q", TTL: -1}, ErrInvalid},
		{&Message{Queue: "q", MaxAttempts: -1}, ErrInvalid},
	}
	for _, c := range cases {
		if _, err := tb.b.Publish(c.m); !errors.Is(err, c.want) {
			t.Errorf("Publish(%+v) = %v, want %v", c.m, err, c.want)
		}
	}
	var tooLarge *PayloadTooLargeError
	_, err := tb.b.Publish(&Message{Queue: "q", Payload: make([]byte, 11)})
	if !errors.As(err, &tooLarge) || tooLarge.Limit != 10 {
		t.Fatalf("err = %v", err)
	}
	if got := len(tb.b.Queues()); got != 0 {
		t.Fatalf("invalid publishes created %d queues", got)
	}
}

func TestNackVariants(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	tb.publish(t, msg("q", "j"))
	c := tb.sub(t, "q", 10)

	d := next(t, c)
	if err := c.Nack(d.ID, NackRequeue, 0, "flaky"); err != nil {
		t.Fatal(err)
	}
	d = next(t, c)
	if d.Attempt != 2 {
		t.Fatalf("attempt = %d", d.Attempt)
	}
	if err := c.Nack(d.ID, NackRequeueAfter, 5*time.Second, "later"); err != nil {
		t.Fatal(err)
	}
	noneReady(t, c)
	if in, _ := tb.b.Queue("q"); in.Delayed != 1 {
		t.Fatalf("delayed = %d", in.Delayed)
	}
	tb.clk.Advance(5 * time.Second)
	d = next(t, c)
	if d.Attempt != 3 {
		t.Fatalf("attempt = %d", d.Attempt)
	}
	if err := c.Nack(d.ID, NackDeadLetter, 0, "poison"); err != nil {
		t.Fatal(err)
	}
	dls, _ := tb.b.DeadLetters("q", 0)
	if len(dls) != 1 || dls[0].Reason != "nacked: poison" {
		t.Fatalf("dead letters = %+v", dls)
	}
	if err := c.Nack("nope", NackRequeue, 0, ""); !errors.Is(err, ErrUnknownMessage) {
		t.Fatalf("unknown nack: %v", err)
	}
	if err := c.Nack("nope", NackAction(9), 0, ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad action: %v", err)
	}
}

func TestNackDelayOutOfRangeIsCapped(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	tb.publish(t, msg("q", "j"))
	c := tb.sub(t, "q", 1)
	d := next(t, c)
	// A custom backoff that overflows: capped to a day, not a dead session.
	err := c.Nack(d.ID, NackRequeueAfter, 30*24*time.Hour, "")
	var ae *AdjustedError
	if !errors.As(err, &ae) || ae.Capped != MaxNackDelay {
		t.Fatalf("over-long delay: %v", err)
	}
	c.AddCredit(1)
	tb.clk.Advance(MaxNackDelay - time.Second)
	noneReady(t, c)
	tb.clk.Advance(time.Second)
	d = next(t, c)
	if d.Attempt != 2 {
		t.Fatalf("attempt = %d", d.Attempt)
	}
	// A negative delay requeues at once.
	if err := c.Nack(d.ID, NackRequeueAfter, -time.Second, ""); !errors.Is(err, ErrAdjusted) {
		t.Fatalf("negative delay: %v", err)
	}
	c.AddCredit(1)
	if d = next(t, c); d.Attempt != 3 {
		t.Fatalf("attempt = %d", d.Attempt)
	}
}

func TestConsumerCloseRedelivers(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	tb.publish(t, msg("q", "j"))
	c1, _ := tb.b.Subscribe("q", "one", 1)
	d := next(t, c1)
	c2 := tb.sub(t, "q", 1)
	noneReady(t, c2)
	c1.Close()
	if d2 := next(t, c2); d2.ID != d.ID || d2.Attempt != 2 {
		t.Fatalf("got %+v", d2)
	}
	if _, err := c1.Next(tb.ctx); !errors.Is(err, ErrConsumerClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
}

func TestRetryKeepsTier(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	_, err := tb.b.Declare("q", QueueConfig{Policy: sched.Static, Tiers: 3, StaticTiers: map[string]int{"fast": 0, "slow": 2}})
	if err != nil {
		t.Fatal(err)
	}
	tb.publish(t, msg("q", "slow"))
	c := tb.sub(t, "q", 10)
	d := next(t, c)
	if d.Tier != 2 {
		t.Fatalf("tier = %d", d.Tier)
	}
	tb.publish(t, msg("q", "fast"))
	if err := c.Nack(d.ID, NackRequeue, 0, ""); err != nil {
		t.Fatal(err)
	}
	in, _ := tb.b.Queue("q")
	if in.DepthPerTier[2] != 1 || in.DepthPerTier[0] != 1 {
		t.Fatalf("depth per tier = %v", in.DepthPerTier)
	}
	if d := next(t, c); d.JobType != "fast" {
		t.Fatalf("got %+v", d)
	}
	if d := next(t, c); d.JobType != "slow" || d.Tier != 2 || d.Attempt != 2 {
		t.Fatalf("got %+v", d)
	}
}

func TestBadDurationStillAcks(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	for _, dur := range []time.Duration{0, -time.Second, 25 * time.Hour} {
		tb.publish(t, msg("q", "j"))
		c := tb.sub(t, "q", 1)
		d := next(t, c)
		err := c.Ack(d.ID, dur)
		if !errors.Is(err, ErrBadDuration) {
			t.Fatalf("Ack(%v) = %v, want ErrBadDuration", dur, err)
		}
		if c.InFlight() != 0 {
			t.Fatalf("message still in flight after a bad-duration ack")
		}
	}
	in, _ := tb.b.Queue("q")
	if in.Acked != 3 || in.BadDurations != 3 || in.Ready != 0 || in.Predictor.Observations != 0 {
		t.Fatalf("info = %+v", in)
	}
}

func TestShutdownLosesNothing(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	var ids []string
	for i := range 10 {
		ids = append(ids, tb.publish(t, msg("q", fmt.Sprint(i)))...)
	}
	c := tb.sub(t, "q", 4)
	var ds []Delivery
	for range 4 {
		ds = append(ds, next(t, c))
	}
	if err := c.Nack(ds[3].ID, NackRequeueAfter, time.Hour, ""); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- tb.b.Shutdown(ctx) }()
	<-tb.b.stopping
	if _, err := tb.b.Publish(msg("q", "late")); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("publish while draining: %v", err)
	}
	if _, err := c.Next(tb.ctx); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("Next while draining: %v", err)
	}
	if err := c.Ack(ds[0].ID, time.Millisecond); err != nil { // acks still count while draining
		t.Fatal(err)
	}
	cancel() // two still in flight
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown = %v", err)
	}
	in, _ := tb.b.Queue("q")
	// The delayed job stays delayed: a durable broker finds it so again.
	if in.Acked != 1 || in.Ready != 8 || in.InFlight != 0 || in.Delayed != 1 {
		t.Fatalf("after shutdown: %+v", in)
	}
	if err := c.Ack(ds[1].ID, time.Millisecond); !errors.Is(err, ErrUnknownMessage) {
		t.Fatalf("ack after shutdown: %v", err)
	}
}

func TestShutdownWaitsForAcks(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	tb.publish(t, msg("q", "j"))
	c := tb.sub(t, "q", 1)
	d := next(t, c)
	done := make(chan error)
	go func() { done <- tb.b.Shutdown(context.Background()) }()
	<-tb.b.stopping
	if err := c.Ack(d.ID, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if in, _ := tb.b.Queue("q"); in.Acked != 1 || in.Ready != 0 {
		t.Fatalf("info = %+v", in)
	}
}

func TestDeclareReconfigureKeepsJobs(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	for i := range 5 {
		tb.publish(t, msg("q", fmt.Sprint(i)))
	}
	c := tb.sub(t, "q", 1)
	d := next(t, c)
	in, err := tb.b.Declare("q", QueueConfig{Policy: sched.FIFO})
	if err != nil {
		t.Fatal(err)
	}
	if in.Config.Policy != sched.FIFO || in.Ready != 4 || len(in.DepthPerTier) != 1 {
		t.Fatalf("info = %+v", in)
	}
	if err := c.Nack(d.ID, NackRequeue, 0, ""); err != nil {
		t.Fatal(err)
	}
	c.AddCredit(5)
	// Waiting jobs keep their order; the one that was in flight during the
	// redeclaration joins the new scheduler behind them.
	for i, want := range []string{"1", "2", "3", "4", "0"} {
		if d := next(t, c); d.JobType != want {
			t.Fatalf("delivery %d is %s, want %s", i, d.JobType, want)
		}
	}
	if _, err := tb.b.Declare("q", QueueConfig{Policy: "nope"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad policy: %v", err)
	}
	if _, err := tb.b.Declare("q", QueueConfig{Policy: sched.Predictive, Shadow: true}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("shadow with predictive: %v", err)
	}
}

func TestAdminUnknownQueue(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	for _, err := range []error{
		func() error { _, err := tb.b.Queue("x"); return err }(),
		func() error { _, err := tb.b.Purge("x"); return err }(),
		func() error { _, err := tb.b.Keys("x", 0); return err }(),
		func() error { _, err := tb.b.DeadLetters("x", 0); return err }(),
		func() error { _, err := tb.b.RequeueDeadLetters("x", nil); return err }(),
	} {
		var nf *QueueNotFoundError
		if !errors.As(err, &nf) || nf.Queue != "x" {
			t.Errorf("err = %v", err)
		}
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{MaxQueues: 1, MaxConsumers: 1})
	tb.publish(t, msg("a", "j"))
	if _, err := tb.b.Publish(msg("b", "j")); !errors.Is(err, ErrTooManyQueues) {
		t.Fatalf("err = %v", err)
	}
	tb.sub(t, "a", 1)
	if _, err := tb.b.Subscribe("a", "", 1); !errors.Is(err, ErrTooManyConsumers) {
		t.Fatalf("err = %v", err)
	}
}

func TestPurge(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	tb.publish(t, msg("q", "a"), msg("q", "b"), msg("q", "c"))
	c := tb.sub(t, "q", 1)
	next(t, c)
	n, err := tb.b.Purge("q")
	if err != nil || n != 2 {
		t.Fatalf("purge = %d, %v", n, err)
	}
	if in, _ := tb.b.Queue("q"); in.Ready != 0 || in.InFlight != 1 {
		t.Fatalf("info = %+v", in)
	}
}

// A predictive queue learns from acks and then serves short keys first.
func TestPredictiveLearnsShortFirst(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	if _, err := tb.b.Declare("q", QueueConfig{Policy: sched.Predictive, AgingOff: true}); err != nil {
		t.Fatal(err)
	}
	c := tb.sub(t, "q", 1)
	cost := map[string]time.Duration{"short": time.Millisecond, "mid": 100 * time.Millisecond, "long": 10 * time.Second}
	for range 50 {
		for _, jt := range []string{"long", "mid", "short"} {
			tb.publish(t, msg("q", jt))
			d := next(t, c)
			if err := c.Ack(d.ID, cost[d.JobType]); err != nil {
				t.Fatal(err)
			}
			c.AddCredit(1)
		}
	}
	for range 10 {
		tb.publish(t, msg("q", "long"), msg("q", "mid"), msg("q", "short"))
	}
	order := ""
	for range 30 {
		d := next(t, c)
		order += d.JobType[:1]
		_ = c.Ack(d.ID, cost[d.JobType])
		c.AddCredit(1)
	}
	if want := strings.Repeat("s", 10) + strings.Repeat("m", 10) + strings.Repeat("l", 10); order != want {
		t.Fatalf("order = %s, want %s", order, want)
	}
	keys, _ := tb.b.Keys("q", 0)
	if len(keys) != 3 {
		t.Fatalf("keys = %+v", keys)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := (Config{}).WithDefaults().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []Config{
		{MaxPayload: -1},
		{MaxDuration: -1},
		{Queue: QueueConfig{Policy: "nope"}},
		{Queue: QueueConfig{Lease: -time.Second}},
		{Queue: QueueConfig{Tiers: 99}},
	}
	for _, c := range bad {
		if err := c.WithDefaults().Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", c)
		}
	}
}

// parked waits until c's Next is blocked waiting (for credit or for a
// message), yielding instead of sleeping.
func parked(c *Consumer) {
	for {
		c.q.mu.Lock()
		w := c.waiting
		c.q.mu.Unlock()
		if w {
			return
		}
		runtime.Gosched()
	}
}

func TestAddCreditTake(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	c := tb.sub(t, "q", 1)
	tb.publish(t, msg("q", "a"), msg("q", "b"))
	d := next(t, c)
	got := make(chan Delivery, 4)
	go func() {
		for {
			d, err := c.Next(tb.ctx)
			if err != nil {
				return
			}
			got <- d
		}
	}()
	parked(c)
	if err := c.Ack(d.ID, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// A job is ready and Next waits only for credit: the caller takes it.
	d, ok := c.AddCreditTake(1)
	if !ok || d.JobType != "b" || d.Attempt != 1 {
		t.Fatalf("AddCreditTake = %+v, %v; want job b", d, ok)
	}
	if err := c.Ack(d.ID, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// Nothing ready: the credit stays with the consumer, and Next gets
	// the next publish.
	if d, ok := c.AddCreditTake(1); ok {
		t.Fatalf("AddCreditTake took %+v from an empty queue", d)
	}
	tb.publish(t, msg("q", "c"))
	d = <-got
	if d.JobType != "c" {
		t.Fatalf("Next got %+v, want job c", d)
	}
	if len(got) != 0 {
		t.Fatalf("Next also got %+v", <-got)
	}
	// With prefetch above 1, the caller takes one and Next the rest.
	if err := c.Ack(d.ID, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	tb.publish(t, msg("q", "d"), msg("q", "e"), msg("q", "f"))
	parked(c)
	d, ok = c.AddCreditTake(2)
	if !ok || d.JobType != "d" {
		t.Fatalf("AddCreditTake = %+v, %v; want job d", d, ok)
	}
	if d := <-got; d.JobType != "e" {
		t.Fatalf("Next got %+v, want job e", d)
	}
	in, err := tb.b.Queue("q")
	if err != nil {
		t.Fatal(err)
	}
	if in.Ready != 1 || in.InFlight != 2 {
		t.Fatalf("ready %d, in flight %d; want 1 and 2", in.Ready, in.InFlight)
	}
}

func TestAddCreditTakeWithoutWaitingNext(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	c := tb.sub(t, "q", 1)
	tb.publish(t, msg("q", "a"), msg("q", "b"))
	d := next(t, c)
	if err := c.Ack(d.ID, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// No Next waits: the credit is only added, for the next Next.
	if d, ok := c.AddCreditTake(1); ok {
		t.Fatalf("AddCreditTake took %+v with no Next waiting", d)
	}
	if d := next(t, c); d.JobType != "b" {
		t.Fatalf("Next got %+v, want job b", d)
	}
}
