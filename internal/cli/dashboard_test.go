package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/auth"
)

// live is a running `harbinger serve` for a test.
type live struct {
	grpc, http string
	stop       func() error
}

// startLive runs serve on cfg with both ports on 127.0.0.1:0, in memory
// unless cfg says otherwise, and stops it when the test ends.
func startLive(t *testing.T, cfg ServeConfig) *live {
	t.Helper()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.ShutdownTimeout = "127.0.0.1:0", "127.0.0.1:0", 5*time.Second
	if cfg.DataDir == "" {
		cfg.Memory = true
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	type addrs struct{ g, h string }
	ready := make(chan addrs, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, io.Discard, func(g, h string) { ready <- addrs{g, h} }) }()
	select {
	case a := <-ready:
		l := &live{grpc: a.g, http: a.h}
		stopped := false
		l.stop = func() error {
			if stopped {
				return nil
			}
			stopped = true
			cancel()
			return <-done
		}
		t.Cleanup(func() {
			if err := l.stop(); err != nil {
				t.Errorf("serve: %v", err)
			}
		})
		return l
	case err := <-done:
		cancel()
		t.Fatalf("serve did not start: %v", err)
		return nil
	}
}

// dialRaw opens a gRPC connection with a token (none when empty) and TLS
// (plaintext when tc is nil).
func dialRaw(t *testing.T, addr, token string, tc *tls.Config) *grpc.ClientConn {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if tc != nil {
		opts[0] = grpc.WithTransportCredentials(credentials.NewTLS(tc))
	}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(auth.Bearer{Token: token, Insecure: tc == nil}))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// demoJobs are the job types populate teaches the broker: how long each
// takes, so the dashboard has something learned to show.
var demoJobs = []struct {
	producer, jobType string
	took              time.Duration
}{
	{"web", "thumbnail", 4 * time.Millisecond},
	{"web", "resize", 35 * time.Millisecond},
	{"api", "send-email", 120 * time.Millisecond},
	{"billing", "invoice-pdf", 900 * time.Millisecond},
	{"reports", "monthly-export", 14 * time.Second},
}

// populated is what populate left behind.
type populated struct {
	dead        string // id of a dead letter in "media"
	inflight    int    // jobs of "media" held by consumer "worker-1"
	maxInFlight int    // "media"'s max_in_flight
	waiting     int    // jobs of "media" left waiting
	hold        context.CancelFunc
}

// populate teaches queue "media" the demo job types through the real Consume
// stream (acking each with its duration), dead-letters one job, leaves jobs
// waiting and two in flight with consumer "worker-1" under a max_in_flight
// of four, and leaves a few jobs in "emails".
func populate(t *testing.T, conn *grpc.ClientConn) populated {
	t.Helper()
	ctx := t.Context()
	bc := pb.NewBrokerClient(conn)
	publish := func(queue string, n int) {
		var msgs []*pb.Message
		for i := range n {
			j := demoJobs[i%len(demoJobs)]
			msgs = append(msgs, &pb.Message{Queue: queue, Producer: j.producer, JobType: j.jobType, Payload: fmt.Appendf(nil, "job %d", i)})
		}
		resp, err := bc.Publish(ctx, &pb.PublishRequest{Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.Results {
			if r.Error != "" {
				t.Fatalf("publish: %v", r.Error)
			}
		}
	}
	took := map[string]time.Duration{}
	for _, j := range demoJobs {
		took[j.jobType] = j.took
	}
	const learn = 100
	publish("media", learn)
	st, err := bc.Consume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Subscribe{Subscribe: &pb.Subscribe{Queue: "media", Prefetch: 50, ConsumerName: "trainer"}}}); err != nil {
		t.Fatal(err)
	}
	var dead string
	for i := 0; i < learn; {
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		d := resp.GetDelivery()
		if d == nil {
			continue
		}
		i++
		req := &pb.ConsumeRequest{Request: &pb.ConsumeRequest_Ack{Ack: &pb.Ack{Id: d.Id, Duration: durationpb.New(took[d.JobType]), Credit: 1}}}
		if dead == "" && d.JobType == "invoice-pdf" {
			dead = d.Id
			req = &pb.ConsumeRequest{Request: &pb.ConsumeRequest_Nack{Nack: &pb.Nack{Id: d.Id, Action: pb.NackAction_NACK_ACTION_DEAD_LETTER, Reason: "template missing: invoice-v3.tmpl", Credit: 1}}}
		}
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := st.Recv(); err != nil {
			break
		}
	}
	// What waits, and two jobs held by a worker until the test ends.
	p := populated{dead: dead, inflight: 2, maxInFlight: 4, waiting: 23}
	if _, err := pb.NewAdminClient(conn).DeclareQueue(ctx, &pb.DeclareQueueRequest{Name: "media", Config: &pb.QueueConfig{MaxInFlight: uint32(p.maxInFlight)}}); err != nil {
		t.Fatal(err)
	}
	publish("media", p.waiting+p.inflight)
	hctx, cancel := context.WithCancel(ctx)
	p.hold = cancel
	t.Cleanup(cancel)
	hs, err := bc.Consume(hctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := hs.Send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Subscribe{Subscribe: &pb.Subscribe{Queue: "media", Prefetch: uint32(p.inflight), ConsumerName: "worker-1"}}}); err != nil {
		t.Fatal(err)
	}
	for got := 0; got < p.inflight; {
		resp, err := hs.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetDelivery() != nil {
			got++
		}
	}
	publish("emails", 7)
	return p
}
