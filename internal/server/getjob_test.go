package server

import (
	"bytes"
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// GetJob through the SDK: a job a worker is running, with the worker's
// name, its lease and its whole payload; NotFound once it is acked.
func TestGetJobThroughSDK(t *testing.T) {
	t.Parallel()
	clk := fakeClock()
	tb := setup(t, broker.Config{Clock: clk, MaxPayload: 64 << 10})
	ctx := context.Background()
	payload := bytes.Repeat([]byte{0xff, 'a'}, 32<<10) // the limit, invalid UTF-8
	ids := tb.publish(t, &pb.Message{Queue: "媒体", Producer: "wéb", JobType: "thumbnail", Payload: payload, Headers: map[string]string{"ключ": "значение"}})

	started, release := make(chan struct{}), make(chan struct{})
	stop := runWorker(t, tb.cl, client.WorkerConfig{Queue: "媒体", Name: "worker-7"}, func(ctx context.Context, d *client.Delivery) error {
		close(started)
		<-release
		return nil
	})
	within(t, started, "the worker to start the job")
	j, err := tb.cl.GetJob(ctx, "媒体", ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if j.State != "running" || j.Consumer != "worker-7" || j.Attempts != 1 || !bytes.Equal(j.Payload, payload) ||
		j.Headers["ключ"] != "значение" || !j.LeaseDeadline.AsTime().After(j.Leased.AsTime()) || j.Producer != "wéb" {
		t.Errorf("the running job: state %q, consumer %q, attempts %d, %d bytes, headers %v", j.State, j.Consumer, j.Attempts, len(j.Payload), j.Headers)
	}
	if _, err := proto.Marshal(j); err != nil {
		t.Errorf("the answer does not encode: %v", err)
	}
	close(release)
	// A stopping worker sends its last acks and waits for the broker to
	// read them and end the stream.
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.cl.GetJob(ctx, "媒体", ids[0]); status.Code(err) != codes.NotFound {
		t.Errorf("the acked job: %v, want NotFound", err)
	}
	if _, err := tb.cl.GetJob(ctx, "nope", ids[0]); status.Code(err) != codes.NotFound {
		t.Errorf("a job of a queue that does not exist: %v", err)
	}
}
