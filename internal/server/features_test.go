package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// A job scheduled an hour ahead is delivered when the clock passes the
// hour, not before, and then takes its place in line as if published then:
// behind what was published meanwhile.
func TestScheduledJobs(t *testing.T) {
	t.Parallel()
	clk := fakeClock()
	tb := setup(t, broker.Config{Clock: clk, Queue: broker.QueueConfig{Policy: "fifo", Lease: 2 * time.Hour}})
	at := clk.Now().Add(time.Hour)
	later := pmsg("q", "at")
	later.RunAt = timestamppb.New(at)
	delayed := pmsg("q", "delay")
	delayed.Delay = durationpb.New(30 * time.Minute)
	tb.publish(t, later, delayed)
	if in := tb.info(t, "q"); in.Ready != 0 || in.Delayed != 2 {
		t.Fatalf("scheduled jobs are visible: %+v", in)
	}
	c := tb.consume(t, "q", 1)
	tb.waitFor(t, "the consumer", func() bool { return tb.info(t, "q").Consumers == 1 })

	clk.Advance(30*time.Minute - time.Second)
	tb.publish(t, pmsg("q", "now"))
	d := c.recv(t)
	if d.JobType != "now" {
		t.Fatalf("delivered %s before its time", d.JobType)
	}
	clk.Advance(time.Second)
	c.ack(t, d.Id, time.Millisecond, 1)
	if d = c.recv(t); d.JobType != "delay" {
		t.Fatalf("at 30 min got %s", d.JobType)
	}
	tb.publish(t, pmsg("q", "meanwhile"))
	clk.Advance(30 * time.Minute)
	c.ack(t, d.Id, time.Millisecond, 1)
	// FIFO from when it came due: "meanwhile" was in line first.
	if d = c.recv(t); d.JobType != "meanwhile" {
		t.Fatalf("got %s, want the job published before the scheduled one came due", d.JobType)
	}
	c.ack(t, d.Id, time.Millisecond, 1)
	if d = c.recv(t); d.JobType != "at" {
		t.Fatalf("got %s", d.JobType)
	}

	// Bad schedules are refused per message.
	both := pmsg("q", "x")
	both.RunAt, both.Delay = timestamppb.New(at), durationpb.New(time.Minute)
	wantCode(t, tb.refused(t, both), codes.InvalidArgument, "not both")
	far := pmsg("q", "x")
	far.Delay = durationpb.New(400 * 24 * time.Hour)
	wantCode(t, tb.refused(t, far), codes.InvalidArgument, "delay")
	neg := pmsg("q", "x")
	neg.Delay = &durationpb.Duration{Seconds: -5}
	wantCode(t, tb.refused(t, neg), codes.InvalidArgument, "negative")
}

// Cancelling a running job cancels its handler's context (cause
// client.ErrCancelled) and the job is not retried; a waiting one is gone.
func TestCancelJobs(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	started := make(chan string, 1)
	causes := make(chan error, 1)
	ctx, stop := context.WithCancel(tb.ctx)
	done := make(chan error, 1)
	go func() {
		done <- tb.cl.RunWorker(ctx, client.WorkerConfig{Queue: "q"}, func(ctx context.Context, d *client.Delivery) error {
			started <- d.ID
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		})
	}()
	defer func() { stop(); <-done }()
	ids := tb.publish(t, pmsg("q", "long"), pmsg("q", "next"))
	running := <-started
	if running != ids[0] {
		t.Fatalf("started %s, want %s", running, ids[0])
	}
	if st, err := tb.cl.CancelJob(tb.ctx, "q", ids[1]); err != nil || st != "waiting" {
		t.Fatalf("cancel waiting: %q, %v", st, err)
	}
	if st, err := tb.cl.CancelJob(tb.ctx, "q", running); err != nil || st != "running" {
		t.Fatalf("cancel running: %q, %v", st, err)
	}
	if cause := <-causes; !errors.Is(cause, client.ErrCancelled) {
		t.Fatalf("handler's cause = %v", cause)
	}
	tb.waitFor(t, "the cancelled job to settle", func() bool { in := tb.info(t, "q"); return in.InFlight == 0 })
	if in := tb.info(t, "q"); in.Ready != 0 || in.DeadLetters != 0 || in.Delayed != 0 || in.Cancelled != 2 {
		t.Fatalf("after cancelling: %+v", in)
	}
	_, err := tb.cl.CancelJob(tb.ctx, "q", running)
	wantCode(t, err, codes.NotFound, running)
}

// A worker without its own RetryBackoff leaves the delay to the broker's
// retry policy, so workers in every language back off alike.
func TestWorkerUsesBrokerRetryPolicy(t *testing.T) {
	t.Parallel()
	clk := fakeClock()
	tb := setup(t, broker.Config{Clock: clk})
	if _, err := tb.cl.DeclareQueue(tb.ctx, "q", &pb.QueueConfig{RetryBase: durationpb.New(time.Hour), RetryMax: durationpb.New(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	runs := make(chan int, 2)
	ctx, stop := context.WithCancel(tb.ctx)
	done := make(chan error, 1)
	go func() {
		done <- tb.cl.RunWorker(ctx, client.WorkerConfig{Queue: "q"}, func(_ context.Context, d *client.Delivery) error {
			runs <- d.Attempt
			if d.Attempt == 1 {
				return errors.New("first try fails")
			}
			return nil
		})
	}()
	defer func() { stop(); <-done }()
	tb.publish(t, pmsg("q", "a"))
	if a := <-runs; a != 1 {
		t.Fatalf("first run: attempt %d", a)
	}
	tb.waitFor(t, "the retry to be scheduled", func() bool { return tb.info(t, "q").Delayed == 1 })
	clk.Advance(48 * time.Minute) // under the jittered hour: not yet
	if in := tb.info(t, "q"); in.Delayed != 1 {
		t.Fatalf("retried early: %+v", in)
	}
	clk.Advance(25 * time.Minute)
	if a := <-runs; a != 2 {
		t.Fatalf("second run: attempt %d", a)
	}
	tb.waitFor(t, "the ack", func() bool { return tb.info(t, "q").Acked == 1 })
}

func TestUniqueJobsOverGRPC(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	m := &client.Message{Queue: "q", JobType: "charge", UniqueKey: "order-7", UniqueFor: time.Hour}
	res, err := tb.cl.PublishEach(tb.ctx, m, m, &client.Message{Queue: "q", UniqueKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Duplicate || res[0].Err != nil || !res[1].Duplicate || res[1].ID != res[0].ID {
		t.Fatalf("results: %+v", res)
	}
	if st, _ := status.FromError(res[2].Err); st.Code() != codes.InvalidArgument || res[2].ID != "" {
		t.Fatalf("a unique key without a window: %+v", res[2])
	}
	// Publish reports a duplicate as the first job's id, without an error.
	ids, err := tb.cl.Publish(tb.ctx, m)
	if err != nil || len(ids) != 1 || ids[0] != res[0].ID {
		t.Fatalf("Publish of a duplicate: %v, %v", ids, err)
	}
	if in := tb.info(t, "q"); in.Ready != 1 {
		t.Fatalf("%d jobs stored, want 1", in.Ready)
	}
}

func TestSchedulesOverGRPC(t *testing.T) {
	t.Parallel()
	clk := fakeClock()
	tb := setup(t, broker.Config{Clock: clk})
	s, err := tb.cl.DeclareSchedule(tb.ctx, &pb.Schedule{Name: "digest", Queue: "mail", Cron: "30 7 * * 1-5", TimeZone: "America/New_York", JobType: "digest"})
	if err != nil {
		t.Fatal(err)
	}
	// 2026-01-01 is a Thursday; 07:30 in New York is 12:30 UTC.
	if want := time.Date(2026, 1, 1, 12, 30, 0, 0, time.UTC); !s.NextTick.AsTime().Equal(want) {
		t.Fatalf("next tick %v, want %v", s.NextTick.AsTime(), want)
	}
	clk.Advance(12*time.Hour + 30*time.Minute)
	tb.waitFor(t, "the tick's job", func() bool { in, err := tb.b.Queue("mail"); return err == nil && in.Ready == 1 })
	list, err := tb.cl.ListSchedules(tb.ctx)
	if err != nil || len(list) != 1 || list[0].Fired != 1 || list[0].LastTick == nil {
		t.Fatalf("list: %v, %v", list, err)
	}
	if s, err = tb.cl.PauseSchedule(tb.ctx, "digest", true); err != nil || !s.Paused || s.NextTick != nil {
		t.Fatalf("pause: %v, %v", s, err)
	}
	_, err = tb.cl.DeclareSchedule(tb.ctx, &pb.Schedule{Name: "bad", Queue: "mail", Cron: "every day"})
	wantCode(t, err, codes.InvalidArgument, "cron")
	if err := tb.cl.DeleteSchedule(tb.ctx, "digest"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, tb.cl.DeleteSchedule(tb.ctx, "digest"), codes.NotFound, "digest")
}

func TestDeleteDeadLettersOverGRPC(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	tb.publish(t, pmsg("q", "poison"), pmsg("q", "poison"))
	c := tb.consume(t, "q", 2)
	for range 2 {
		d := c.recv(t)
		c.nack(t, &pb.Nack{Id: d.Id, Action: pb.NackAction_NACK_ACTION_DEAD_LETTER})
	}
	tb.waitFor(t, "two dead letters", func() bool { return tb.info(t, "q").DeadLetters == 2 })
	dls, _ := tb.cl.ListDeadLetters(tb.ctx, "q", 0)
	if n, err := tb.cl.DeleteDeadLetters(tb.ctx, "q", dls[0].Id); err != nil || n != 1 {
		t.Fatalf("delete one: %d, %v", n, err)
	}
	if n, err := tb.cl.DeleteDeadLetters(tb.ctx, "q"); err != nil || n != 1 {
		t.Fatalf("delete the rest: %d, %v", n, err)
	}
	if in := tb.info(t, "q"); in.DeadLetters != 0 {
		t.Fatalf("dead letters left: %+v", in)
	}
}
