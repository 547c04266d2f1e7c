package server

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// Deleting a queue through the SDK: refused with what it holds, then
// forced; a worker running on it stops with NotFound instead of
// reconnecting (which would create the queue again), and the job it was
// running is forgotten.
func TestDeleteQueueThroughSDK(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{Clock: fakeClock()})
	ctx := context.Background()
	payload := strings.Repeat("données ", 512) // 4.5 KB, not ASCII
	tb.publish(t, &pb.Message{Queue: "exports", JobType: "csv", Payload: []byte(payload)},
		&pb.Message{Queue: "exports", JobType: "csv", Payload: []byte(payload)})

	if _, err := tb.cl.DeleteQueue(ctx, "missing", true); status.Code(err) != codes.NotFound {
		t.Fatalf("deleting a queue that does not exist: %v", err)
	}
	_, err := tb.cl.DeleteQueue(ctx, "exports", false)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "2 waiting") {
		t.Fatalf("deleting a queue with two waiting jobs: %v", err)
	}

	running, release := make(chan string, 1), make(chan struct{})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- tb.cl.RunWorker(wctx, client.WorkerConfig{Queue: "exports"}, func(ctx context.Context, d *client.Delivery) error {
			running <- string(d.Payload)
			<-release
			return nil
		})
	}()
	if got := within(t, running, "the worker to start a job"); got != payload {
		t.Fatalf("the worker got %d bytes, want the %d published", len(got), len(payload))
	}
	resp, err := tb.cl.DeleteQueue(ctx, "exports", true)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Waiting != 1 || resp.Running != 1 || resp.Consumers != 1 {
		t.Errorf("forced delete reported %v", resp)
	}
	close(release)
	err = within(t, done, "RunWorker to return by itself")
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "deleted") {
		t.Errorf("RunWorker on a deleted queue returned %v, want NotFound saying the queue was deleted", err)
	}
	if _, err := tb.b.Queue("exports"); err == nil {
		t.Error("the worker's session brought the deleted queue back")
	}
	qs, err := tb.ac.ListQueues(ctx, &pb.ListQueuesRequest{})
	if err != nil || len(qs.Queues) != 0 {
		t.Errorf("queues after the delete: %v, %v", qs, err)
	}
}
