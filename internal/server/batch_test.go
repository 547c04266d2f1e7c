package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/rawproto"
)

// consumeBatched opens a Consume stream that asks for batches of up to
// maxBatch deliveries, with a receive limit of one delivery's, as the SDK
// sets it.
func (tb *testBundle) consumeBatched(t testing.TB, queue string, prefetch, maxBatch uint32) *consumer {
	t.Helper()
	lim, err := tb.bc.GetLimits(tb.ctx, &pb.GetLimitsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(tb.ctx)
	s, err := tb.bc.Consume(ctx, grpc.MaxCallRecvMsgSize(int(lim.MaxDeliveryBytes)))
	if err != nil {
		t.Fatal(err)
	}
	sub := &pb.Subscribe{Queue: queue, Prefetch: prefetch, MaxBatch: maxBatch}
	if err := s.Send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Subscribe{Subscribe: sub}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return &consumer{s: s, cancel: cancel}
}

// recvFrame reads the next response, which must carry deliveries, and
// returns them: one for a plain delivery, all of a DeliveryBatch.
func (c *consumer) recvFrame(t testing.TB) []*pb.Delivery {
	t.Helper()
	r, err := c.s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if d := r.GetDelivery(); d != nil {
		return []*pb.Delivery{d}
	}
	if b := r.GetDeliveries(); b != nil && len(b.Deliveries) > 0 {
		return b.Deliveries
	}
	t.Fatalf("want deliveries, got %v", r)
	return nil
}

// recvN reads frames until n deliveries have come, and returns them with
// the size of each frame.
func (c *consumer) recvN(t testing.TB, n int) (ds []*pb.Delivery, frames []int) {
	t.Helper()
	for len(ds) < n {
		f := c.recvFrame(t)
		ds = append(ds, f...)
		frames = append(frames, len(f))
	}
	if len(ds) > n {
		t.Fatalf("got %d deliveries, want %d", len(ds), n)
	}
	return ds, frames
}

func (c *consumer) batch(t testing.TB, b *pb.ConsumeBatch) {
	t.Helper()
	if err := c.s.Send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Batch{Batch: b}}); err != nil {
		t.Fatal(err)
	}
}

func ackOf(id string, d time.Duration, credit uint32) *pb.Ack {
	return &pb.Ack{Id: id, Duration: durationpb.New(d), Credit: credit}
}

func (tb *testBundle) fifo(t testing.TB, queue string) {
	t.Helper()
	if _, err := tb.ac.DeclareQueue(tb.ctx, &pb.DeclareQueueRequest{Name: queue, Config: &pb.QueueConfig{Policy: "fifo"}}); err != nil {
		t.Fatal(err)
	}
}

func numbered(queue string, n int) []*pb.Message {
	msgs := make([]*pb.Message, n)
	for i := range msgs {
		msgs[i] = pmsg(queue, fmt.Sprint("job-", i))
	}
	return msgs
}

// The broker says it reads and sends batches.
func TestLimitsReportConsumeBatch(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	lim, err := tb.bc.GetLimits(tb.ctx, &pb.GetLimitsRequest{})
	if err != nil || lim.MaxConsumeBatch != MaxConsumeBatch {
		t.Fatalf("limits = %v, %v; want max_consume_batch %d", lim, err, MaxConsumeBatch)
	}
}

// A consumer that asked for batches and holds 16 credits gets 16 waiting
// jobs in one response, in the order a prefetch-1 consumer would have
// taken them; a ConsumeBatch of 16 acks, each granting a credit, settles
// them all and lets the next 16 through, again in one response.
func TestBatchedDeliveriesAndAcks(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	tb.fifo(t, "q")
	ids := tb.publish(t, numbered("q", 32)...)
	c := tb.consumeBatched(t, "q", 16, 16)
	ds := c.recvFrame(t)
	if len(ds) != 16 {
		t.Fatalf("first frame holds %d deliveries, want 16", len(ds))
	}
	b := &pb.ConsumeBatch{}
	for i, d := range ds {
		if d.Id != ids[i] || d.Attempt != 1 {
			t.Fatalf("delivery %d = %s attempt %d, want %s attempt 1", i, d.Id, d.Attempt, ids[i])
		}
		b.Acks = append(b.Acks, ackOf(d.Id, time.Millisecond, 1))
	}
	c.batch(t, b)
	ds = c.recvFrame(t)
	if len(ds) != 16 || ds[0].Id != ids[16] || ds[15].Id != ids[31] {
		t.Fatalf("second frame = %d deliveries from %s, want 16 from %s", len(ds), ds[0].Id, ids[16])
	}
	tb.waitFor(t, "16 acks", func() bool { return tb.info(t, "q").Acked == 16 })
	if in := tb.info(t, "q"); in.InFlight != 16 || in.Ready != 0 {
		t.Fatalf("in flight %d, ready %d; want 16 and 0", in.InFlight, in.Ready)
	}
}

// Batches never change how much a consumer holds: max_batch above the
// credit gets no more than the credit, and a frame never holds more than
// max_batch.
func TestBatchesKeepToCreditAndMaxBatch(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	tb.fifo(t, "q")
	tb.publish(t, numbered("q", 40)...)
	c := tb.consumeBatched(t, "q", 10, 4)
	_, frames := c.recvN(t, 10)
	for _, n := range frames {
		if n > 4 {
			t.Fatalf("frames %v: one is over max_batch 4", frames)
		}
	}
	tb.waitFor(t, "10 in flight", func() bool { return tb.info(t, "q").InFlight == 10 })
	if in := tb.info(t, "q"); in.InFlight != 10 || in.Ready != 30 {
		t.Fatalf("in flight %d, ready %d; want 10 and 30", in.InFlight, in.Ready)
	}
}

// A client that does not ask for batches (every client before them) gets
// every delivery as a response of its own, whatever its prefetch, and its
// single acks work as ever.
func TestUnbatchedConsumerGetsSingleDeliveries(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	tb.fifo(t, "q")
	ids := tb.publish(t, numbered("q", 16)...)
	c := tb.consume(t, "q", 16)
	for i := range 16 {
		d := c.recv(t) // fails on anything but a plain delivery
		if d.Id != ids[i] {
			t.Fatalf("delivery %d = %s, want %s", i, d.Id, ids[i])
		}
		c.ack(t, d.Id, time.Millisecond, 0)
	}
	tb.waitFor(t, "16 acks", func() bool { return tb.info(t, "q").Acked == 16 })
}

// A batch with bad items answers each bad item alone, as a request of its
// own would have been answered, and applies every other item.
func TestBatchAnswersBadItemsAlone(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	tb.fifo(t, "q")
	tb.publish(t, numbered("q", 4)...)
	c := tb.consumeBatched(t, "q", 4, 4)
	ds, _ := c.recvN(t, 4)
	c.batch(t, &pb.ConsumeBatch{
		Extends: []*pb.Extend{{Id: "no-such-job"}, {Id: ds[3].Id, Lease: durationpb.New(time.Minute)}},
		Acks: []*pb.Ack{
			ackOf(ds[0].Id, time.Millisecond, 0),
			ackOf("no-such-job", time.Millisecond, 0),
			{Id: ds[1].Id, Duration: durationpb.New(-time.Second)}, // settles, not learned
		},
		Nacks: []*pb.Nack{
			{Id: ds[2].Id, Action: pb.NackAction(99)}, // refused: the job stays held
			{Id: ds[3].Id, Action: pb.NackAction_NACK_ACTION_DEAD_LETTER, Reason: "bad input"},
		},
	})
	type answer struct {
		kind, id string
		code     codes.Code
		applied  bool
	}
	want := []answer{
		{"extend", "no-such-job", codes.FailedPrecondition, false},
		{"ack", "no-such-job", codes.FailedPrecondition, false},
		{"ack", ds[1].Id, codes.InvalidArgument, true},
		{"nack", ds[2].Id, codes.InvalidArgument, false},
	}
	for i, w := range want {
		re := c.recvError(t)
		if got := (answer{re.Request, re.Id, codes.Code(re.Code), re.Applied}); got != w {
			t.Fatalf("answer %d = %+v (%s), want %+v", i, got, re.Message, w)
		}
	}
	tb.waitFor(t, "the batch", func() bool { in := tb.info(t, "q"); return in.Acked == 2 && in.DeadLetters == 1 })
	if in := tb.info(t, "q"); in.InFlight != 1 {
		t.Fatalf("in flight %d, want 1 (the job of the refused nack)", in.InFlight)
	}
	// The job whose nack was refused is still this consumer's to settle.
	c.ack(t, ds[2].Id, time.Millisecond, 0)
	tb.waitFor(t, "the last ack", func() bool { return tb.info(t, "q").Acked == 3 })
}

// A batch item with a string that is not UTF-8 (which Go's protobuf will
// not send, but other clients may) is refused alone, naming the field;
// the stream and the batch's other items carry on. The same request
// outside a batch still ends the stream, as before batches.
func TestBatchRefusesBadUTF8ItemAlone(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	tb.fifo(t, "q")
	tb.publish(t, numbered("q", 2)...)
	conn := rawConn(t, tb.addr)
	stream, err := conn.NewStream(t.Context(), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/harbinger.v1.Broker/Consume")
	if err != nil {
		t.Fatal(err)
	}
	sub := &pb.ConsumeRequest{Request: &pb.ConsumeRequest_Subscribe{Subscribe: &pb.Subscribe{Queue: "q", Prefetch: 2, MaxBatch: 2}}}
	if err := stream.SendMsg(sub); err != nil {
		t.Fatal(err)
	}
	resp := new(pb.ConsumeResponse)
	if err := stream.RecvMsg(resp); err != nil || len(resp.GetDeliveries().GetDeliveries()) != 2 {
		t.Fatalf("first response %v, %v; want a batch of 2", resp, err)
	}
	ds := resp.GetDeliveries().Deliveries
	req := &pb.ConsumeRequest{Request: &pb.ConsumeRequest_Batch{Batch: &pb.ConsumeBatch{
		Acks:  []*pb.Ack{ackOf(ds[0].Id, time.Millisecond, 0)},
		Nacks: []*pb.Nack{{Id: ds[1].Id, Action: pb.NackAction_NACK_ACTION_DEAD_LETTER, Reason: "web-@@"}},
	}}}
	if err := stream.SendMsg(rawproto.BadUTF8(t, req, utf8Swaps)); err != nil {
		t.Fatal(err)
	}
	resp = new(pb.ConsumeResponse)
	if err := stream.RecvMsg(resp); err != nil {
		t.Fatal(err)
	}
	re := resp.GetError()
	if re == nil || re.Request != "nack" || re.Id != ds[1].Id || codes.Code(re.Code) != codes.InvalidArgument ||
		!strings.Contains(re.Message, "reason") || !strings.Contains(re.Message, "UTF-8") || re.Applied {
		t.Fatalf("answer %v, want the nack refused for its reason", resp)
	}
	tb.waitFor(t, "the ack", func() bool { return tb.info(t, "q").Acked == 1 })
	if in := tb.info(t, "q"); in.InFlight != 1 || in.DeadLetters != 0 {
		t.Fatalf("in flight %d, dead %d; want the refused nack's job still held", in.InFlight, in.DeadLetters)
	}
}

// A worker that dies holding a batch of 16 gets all 16 redelivered, each
// once, with its attempt counted.
func TestWorkerDyingWithABatchGetsAllRedelivered(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	tb.fifo(t, "q")
	ids := tb.publish(t, numbered("q", 16)...)
	c1 := tb.consumeBatched(t, "q", 16, 16)
	if ds := c1.recvFrame(t); len(ds) != 16 {
		t.Fatalf("first frame holds %d deliveries, want 16", len(ds))
	}
	c1.cancel() // the worker dies with all 16
	tb.waitFor(t, "the jobs back in line", func() bool { return tb.info(t, "q").Ready == 16 })
	c2 := tb.consumeBatched(t, "q", 32, 32)
	ds, _ := c2.recvN(t, 16)
	seen := map[string]int{}
	b := &pb.ConsumeBatch{}
	for i, d := range ds {
		seen[d.Id]++
		if d.Id != ids[i] || d.Attempt != 2 {
			t.Fatalf("redelivery %d = %s attempt %d, want %s attempt 2", i, d.Id, d.Attempt, ids[i])
		}
		b.Acks = append(b.Acks, ackOf(d.Id, time.Millisecond, 0))
	}
	if len(seen) != 16 {
		t.Fatalf("redelivered %d distinct jobs of 16: %v", len(seen), seen)
	}
	c2.batch(t, b)
	tb.waitFor(t, "16 acks", func() bool { return tb.info(t, "q").Acked == 16 })
	if in := tb.info(t, "q"); in.Ready != 0 || in.InFlight != 0 {
		t.Fatalf("after the acks: ready %d, in flight %d", in.Ready, in.InFlight)
	}
}

// A frame never passes the client's receive limit, which is sized for one
// delivery: deliveries near the largest payload go one to a frame, and
// small ones share.
func TestBatchFramesFitTheReceiveLimit(t *testing.T) {
	t.Parallel()
	const maxPayload = 256 << 10
	tb := setup(t, broker.Config{MaxPayload: maxPayload, MaxHeaderBytes: 1 << 10})
	tb.fifo(t, "q")
	big := make([]byte, maxPayload)
	tb.publish(t, &pb.Message{Queue: "q", Payload: big}, &pb.Message{Queue: "q", Payload: big},
		&pb.Message{Queue: "q", Payload: big}, pmsg("q", "small"), pmsg("q", "small"))
	c := tb.consumeBatched(t, "q", 8, 8)
	// A frame over the limit would fail the stream with ResourceExhausted.
	ds, frames := c.recvN(t, 5)
	if len(frames) != 3 || frames[0] != 1 || frames[1] != 1 || len(ds[0].Payload) != maxPayload {
		t.Fatalf("frames %v: want the large deliveries apart, the small ones with the last", frames)
	}
}
