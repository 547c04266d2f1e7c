package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// A handler that runs past WorkerConfig.Timeout: its context ends with
// ErrTimeout, and with one attempt allowed the job is dead-lettered with a
// reason that says it timed out; the next job runs as usual.
func TestWorkerTimeout(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{Clock: fakeClock(), Queue: broker.QueueConfig{MaxAttempts: 1}})
	ctx := context.Background()
	ids := tb.publish(t, &pb.Message{Queue: "reports", JobType: "slow", Payload: make([]byte, 4<<10)},
		&pb.Message{Queue: "reports", JobType: "quick"})

	noop := func(context.Context, *client.Delivery) error { return nil }
	if err := tb.cl.RunWorker(ctx, client.WorkerConfig{Queue: "reports", Timeout: -time.Second}, noop); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a negative timeout: %v, want InvalidArgument", err)
	}
	causes := make(chan error, 1)
	quick := make(chan string, 1)
	stop := runWorker(t, tb.cl, client.WorkerConfig{Queue: "reports", Timeout: 20 * time.Millisecond}, func(ctx context.Context, d *client.Delivery) error {
		if d.JobType == "quick" {
			quick <- d.ID
			return nil
		}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	})
	if err := within(t, causes, "the slow job's context to end"); !errors.Is(err, client.ErrTimeout) {
		t.Errorf("the slow job's context ended with %v, want ErrTimeout", err)
	}
	if id := within(t, quick, "the quick job to run"); id != ids[1] {
		t.Errorf("ran %s, want the quick job %s", id, ids[1])
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	dl, err := tb.cl.ListDeadLetters(ctx, "reports", 0)
	if err != nil || len(dl) != 1 || dl[0].Id != ids[0] || !strings.Contains(dl[0].Reason, "timed out after 20ms") {
		t.Fatalf("dead letters %v, %v: want the slow job, timed out", dl, err)
	}
}
