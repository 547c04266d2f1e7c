package server

import (
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// Every bad ack, nack or extend is answered for its job alone; the stream
// and the jobs it holds carry on.
func TestBadRequestsAnsweredPerJob(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	tb.publish(t, pmsg("q", "a"), pmsg("q", "b"), pmsg("q", "c"), pmsg("q", "d"))
	c := tb.consume(t, "q", 1)
	send := func(r *pb.ConsumeRequest) {
		t.Helper()
		if err := c.s.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	ack := func(id string, d *durationpb.Duration, credit uint32) *pb.ConsumeRequest {
		return &pb.ConsumeRequest{Request: &pb.ConsumeRequest_Ack{Ack: &pb.Ack{Id: id, Duration: d, Credit: credit}}}
	}

	// An ack for a job this consumer never held.
	d := c.recv(t)
	send(ack("", durationpb.New(time.Millisecond), 0))
	if e := c.recvError(t); e.Request != "ack" || codes.Code(e.Code) != codes.FailedPrecondition || e.Applied {
		t.Fatalf("empty-id ack answered %v", e)
	}
	// An absurd duration: the job is acked, not learned, and the answer
	// says what was sent.
	send(ack(d.Id, &durationpb.Duration{Seconds: math.MaxInt64}, 1))
	e := c.recvError(t)
	if e.Id != d.Id || !e.Applied || codes.Code(e.Code) != codes.InvalidArgument || !strings.Contains(e.Message, "9223372036854775807s") {
		t.Fatalf("absurd ack answered %v", e)
	}
	// Zero and negative durations, likewise.
	for _, dur := range []*durationpb.Duration{nil, durationpb.New(-time.Second)} {
		d := c.recv(t)
		send(ack(d.Id, dur, 1))
		if e := c.recvError(t); e.Id != d.Id || !e.Applied {
			t.Fatalf("ack with %v answered %v", dur, e)
		}
	}
	// A nack with a delay of a month (a runaway backoff) is capped, not fatal.
	d = c.recv(t)
	c.nack(t, &pb.Nack{Id: d.Id, Action: pb.NackAction_NACK_ACTION_REQUEUE_AFTER, Delay: durationpb.New(30 * 24 * time.Hour), Credit: 1})
	if e := c.recvError(t); e.Id != d.Id || !e.Applied || !strings.Contains(e.Message, "24h0m0s was used") {
		t.Fatalf("long nack answered %v", e)
	}
	// An unknown nack action leaves the job leased to this consumer.
	tb.publish(t, pmsg("q", "e"))
	d = c.recv(t)
	c.nack(t, &pb.Nack{Id: d.Id, Action: pb.NackAction(42)})
	if e := c.recvError(t); e.Id != d.Id || e.Applied || codes.Code(e.Code) != codes.InvalidArgument {
		t.Fatalf("unknown action answered %v", e)
	}
	// An extend with a malformed lease.
	send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Extend{Extend: &pb.Extend{Id: d.Id, Lease: &durationpb.Duration{Seconds: 1, Nanos: -5}}}})
	if e := c.recvError(t); e.Request != "extend" || e.Applied {
		t.Fatalf("bad extend answered %v", e)
	}
	// The session is whole: the held job acks normally.
	c.ack(t, d.Id, time.Millisecond, 0)
	tb.waitFor(t, "every ack", func() bool { return tb.info(t, "q").Acked == 4 })
	in := tb.info(t, "q")
	if in.Consumers != 1 || in.Delayed != 1 || in.BadDurations != 3 {
		t.Fatalf("queue after bad requests: %+v", in)
	}
}

func TestGetLimitsFollowsConfig(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{MaxPayload: 8 << 20, MaxHeaderBytes: 1 << 10})
	l, err := tb.bc.GetLimits(tb.ctx, &pb.GetLimitsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if l.MaxPayloadBytes != 8<<20 || l.MaxHeaderBytes != 1<<10 || l.MaxBatch != MaxBatch || l.MaxCredit != broker.MaxCredit {
		t.Fatalf("limits = %v", l)
	}
	// One full-size message with full headers fits a request and a delivery.
	if one := l.MaxPayloadBytes + l.MaxHeaderBytes; l.MaxRequestBytes <= one || l.MaxDeliveryBytes <= one {
		t.Fatalf("limits leave no room for a full-size message: %v", l)
	}
}

func TestPauseQueueOverGRPC(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	tb.publish(t, pmsg("q", "a"))
	q, err := tb.cl.PauseQueue(tb.ctx, "q")
	if err != nil || !q.Paused {
		t.Fatalf("pause: %v, %v", q, err)
	}
	c := tb.consume(t, "q", 1)
	tb.waitFor(t, "the consumer", func() bool { return tb.info(t, "q").Consumers == 1 })
	if in := tb.info(t, "q"); in.InFlight != 0 || in.Ready != 1 {
		t.Fatalf("a paused queue delivered: %+v", in)
	}
	if q, err = tb.cl.ResumeQueue(tb.ctx, "q"); err != nil || q.Paused {
		t.Fatalf("resume: %v, %v", q, err)
	}
	if d := c.recv(t); d.JobType != "a" {
		t.Fatalf("after resume: %v", d)
	}
	_, err = tb.cl.PauseQueue(tb.ctx, "nope")
	wantCode(t, err, codes.NotFound, "nope")
}
