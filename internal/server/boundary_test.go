package server

import (
	"context"
	"io"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/client"
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

// A nack whose delay is out of range is applied with the delay capped, and
// the answer quotes the delay that was sent. Before, any negative delay
// was passed to the broker as -1 ns and reported as "nack delay -1ns", and
// one past what a time.Duration holds as 2562047h47m16.854775807s.
func TestNackDelayOutOfRangeQuotesWhatWasSent(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{Clock: fakeClock()})
	tb.publish(t, pmsg("q", "a"))
	c := tb.consume(t, "q", 1)
	for _, tc := range []struct {
		delay *durationpb.Duration
		want  string
	}{
		{durationpb.New(-time.Second), "nack delay -1s is out of range; 0s was used"},
		{durationpb.New(-1500 * time.Millisecond), "nack delay -1.5s is out of range; 0s was used"},
		{&durationpb.Duration{Seconds: 1e12}, "nack delay 1000000000000s is out of range; 24h0m0s was used"},
		{&durationpb.Duration{Seconds: -1e12}, "nack delay -1000000000000s is out of range; 0s was used"},
	} {
		d := c.recv(t) // the one job, back at once after each nack capped to no delay
		c.nack(t, &pb.Nack{Id: d.Id, Action: pb.NackAction_NACK_ACTION_REQUEUE_AFTER, Delay: tc.delay, Credit: 1})
		e := c.recvError(t)
		if e.Id != d.Id || !e.Applied || codes.Code(e.Code) != codes.InvalidArgument || !strings.Contains(e.Message, tc.want) {
			t.Fatalf("a nack with delay %v answered %v, want applied, saying %q", tc.delay, e, tc.want)
		}
		if tc.delay.Seconds > 0 {
			tb.clk.Advance(broker.MaxNackDelay) // due again
		}
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
	_, err = tb.cl.ResumeQueue(tb.ctx, "nope")
	wantCode(t, err, codes.NotFound, "nope")
	// Pausing a queue before its first job makes it, paused.
	if q, err := tb.cl.PauseQueue(tb.ctx, "soon"); err != nil || !q.Paused {
		t.Fatalf("pausing a queue that does not exist yet: %v, %v", q, err)
	}
}

// A publish is answered message by message however its messages fare, so
// a caller knows which were stored. gRPC refuses to send a response over
// the server's send limit and fails the whole call instead; before, that
// limit was a delivery's, and the call failed with ResourceExhausted after
// its stored messages were stored, naming none of them: a caller that
// published the batch again stored them twice. It happened to a full batch
// meeting a full queue (9,000 refusals naming a long queue name), to any
// large batch with a small max payload (its ids alone were over a
// delivery's 66 KiB), and to a batch of bad queue names (InvalidArgument
// texts quoting them), answered ResourceExhausted, the code of a full
// queue.
func TestPublishAnswersEveryMessageOfAFullBatch(t *testing.T) {
	t.Parallel()
	long := "rechnungen-" + strings.Repeat("ü", 50) // 111 bytes
	body := []byte(`{"kunde":"Müller","betrag":"12,50 €","zeilen":"` + strings.Repeat("x", 200) + `"}`)
	batch := func(queue string, n int) *pb.PublishRequest {
		req := &pb.PublishRequest{}
		for range n {
			req.Messages = append(req.Messages, &pb.Message{Queue: queue, Producer: "billing", JobType: "pdf", Payload: body})
		}
		return req
	}
	cases := []struct {
		name   string
		cfg    broker.Config
		req    *pb.PublishRequest
		stored int
		code   codes.Code // of the others
		says   string
	}{
		{"the queue fills midway", broker.Config{Queue: broker.QueueConfig{MaxDepth: 1000}}, batch(long, MaxBatch), 1000, codes.ResourceExhausted, "is full"},
		{"a small max payload", broker.Config{MaxPayload: 1 << 10, MaxHeaderBytes: 1 << 10}, batch("q", MaxBatch), MaxBatch, codes.OK, ""},
		{"bad queue names", broker.Config{}, batch(strings.Repeat("\x01", 128), MaxBatch), 0, codes.InvalidArgument, "invalid queue"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, tc.cfg)
			check := func(how string, resp *pb.PublishResponse, err error) {
				t.Helper()
				if err != nil {
					t.Fatalf("%s: %v, want an answer per message", how, err)
				}
				if len(resp.Results) != len(tc.req.Messages) {
					t.Fatalf("%s: %d results for %d messages", how, len(resp.Results), len(tc.req.Messages))
				}
				for i, r := range resp.Results {
					stored := i < tc.stored
					if stored != (r.Id != "" && r.Code == 0) {
						t.Fatalf("%s: message %d answered %v, want stored %v", how, i, r, stored)
					}
					if !stored && (codes.Code(r.Code) != tc.code || !strings.Contains(r.Error, tc.says) || !utf8.ValidString(r.Error)) {
						t.Fatalf("%s: message %d answered %v %q, want %v saying %q", how, i, codes.Code(r.Code), r.Error, tc.code, tc.says)
					}
				}
			}
			resp, err := tb.bc.Publish(tb.ctx, tc.req)
			check("Publish", resp, err)
			if tc.stored == MaxBatch {
				// And on a stream, whose end would have cut off the rest.
				s, err := tb.bc.PublishStream(tb.ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Send(tc.req); err != nil {
					t.Fatal(err)
				}
				resp, err := s.Recv()
				check("PublishStream", resp, err)
				if err := s.CloseSend(); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Recv(); err != io.EOF {
					t.Fatalf("stream ended with %v", err)
				}
			}
		})
	}
}

// ListDeadLetters answers the oldest dead letters that fit one response,
// however large their payloads. Before, 100 dead letters of 64 KiB (the
// default limit of a list) made a response over gRPC's send limit, and
// the call failed with ResourceExhausted, the code of a full queue: an
// operator could not see a queue's dead letters at all.
func TestListDeadLettersOfLargePayloads(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	const n = DefaultListLimit
	payload := []byte(strings.Repeat("Grüße, ", (64<<10)/9)) // 9 bytes each
	var ids []string
	for range n / 10 {
		var msgs []*pb.Message
		for range 10 {
			msgs = append(msgs, &pb.Message{Queue: "q", Producer: "p", JobType: "scan", Payload: payload, Headers: map[string]string{"seite": "ü"}})
		}
		ids = append(ids, tb.publish(t, msgs...)...)
	}
	c := tb.consume(t, "q", n)
	for range n {
		d := c.recv(t)
		c.nack(t, &pb.Nack{Id: d.Id, Action: pb.NackAction_NACK_ACTION_DEAD_LETTER, Reason: "unlesbar: ß"})
	}
	tb.waitFor(t, "every dead letter", func() bool { return tb.info(t, "q").DeadLetters == n })
	for _, limit := range []uint32{0, 1, n} {
		dl, err := tb.ac.ListDeadLetters(tb.ctx, &pb.ListDeadLettersRequest{Queue: "q", Limit: limit})
		if err != nil {
			t.Fatalf("ListDeadLetters(limit %d): %v", limit, err)
		}
		got := dl.DeadLetters
		if len(got) == 0 || (limit > 0 && len(got) > int(limit)) {
			t.Fatalf("limit %d: %d dead letters", limit, len(got))
		}
		for i, d := range got {
			if d.Id != ids[i] || string(d.Payload) != string(payload) || d.Headers["seite"] != "ü" || !strings.HasSuffix(d.Reason, "unlesbar: ß") {
				t.Fatalf("limit %d: dead letter %d is %s with %d bytes, %v, %q, want %s whole, oldest first", limit, i, d.Id, len(d.Payload), d.Headers, d.Reason, ids[i])
			}
		}
		if size := proto.Size(dl); size > int(Limits(tb.b.Config()).MaxRequestBytes) {
			t.Fatalf("limit %d: a response of %d bytes", limit, size)
		}
	}
}

// An extend whose lease is negative or over the limit is applied with the
// queue's lease or the limit, as the contract says, and answered with a
// RequestError saying so. Before, the server refused both and left the
// lease unchanged, so a worker that asked for more time lost the job to
// another worker when the lease ran out, and the job ran twice.
func TestExtendOutOfRangeIsApplied(t *testing.T) {
	t.Parallel()
	clk := fakeClock()
	const lease = 10 * time.Second
	tb := setup(t, broker.Config{Clock: clk, Queue: broker.QueueConfig{Lease: lease}})
	id := tb.publish(t, &pb.Message{Queue: "q", Producer: "p", JobType: "video", Payload: make([]byte, 4<<10)})[0]
	c := tb.consume(t, "q", 1)
	c.recv(t)
	extend := func(d *durationpb.Duration) *pb.RequestError {
		t.Helper()
		if err := c.s.Send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Extend{Extend: &pb.Extend{Id: id, Lease: d}}}); err != nil {
			t.Fatal(err)
		}
		return c.recvError(t) // sent once the extend was applied
	}
	clk.Advance(lease * 8 / 10)
	if e := extend(durationpb.New(-time.Minute)); !e.Applied || codes.Code(e.Code) != codes.InvalidArgument {
		t.Fatalf("a negative lease answered %v, want applied", e)
	}
	if got, want := tb.deadline(t, "q", id), clk.Now().Add(lease); !got.Equal(want) {
		t.Fatalf("after a negative lease the lease ends at %v, want %v (the queue's lease from now)", got, want)
	}
	// Under the minimum: raised to it.
	if e := extend(durationpb.New(time.Nanosecond)); !e.Applied || !strings.Contains(e.Message, "lease 1ns is out of range; 1s was used") {
		t.Fatalf("a lease of 1ns answered %v, want applied, raised to %v", e, broker.MinLease)
	}
	if got, want := tb.deadline(t, "q", id), clk.Now().Add(broker.MinLease); !got.Equal(want) {
		t.Fatalf("after a lease of 1ns the lease ends at %v, want %v", got, want)
	}
	// 300 years: a valid proto duration, past what a time.Duration holds.
	// The answer quotes what was sent, not the saturated value.
	if e := extend(&durationpb.Duration{Seconds: 300 * 365 * 24 * 3600}); !e.Applied || !strings.Contains(e.Message, "lease 9460800000s is out of range; 24h0m0s was used") {
		t.Fatalf("a lease of 300 years answered %v, want applied, capped", e)
	}
	if got, want := tb.deadline(t, "q", id), clk.Now().Add(broker.MaxLease); !got.Equal(want) {
		t.Fatalf("after a lease of 300 years the lease ends at %v, want %v", got, want)
	}
	// A malformed lease is still refused, and says so once.
	e := extend(&durationpb.Duration{Seconds: 5, Nanos: -1})
	if e.Applied || codes.Code(e.Code) != codes.InvalidArgument || strings.Contains(e.Message, "rpc error") {
		t.Fatalf("a malformed lease answered %v", e)
	}
	clk.Advance(time.Hour)
	if in := tb.info(t, "q"); in.InFlight != 1 || in.Ready != 0 {
		t.Fatalf("an hour on: %d in flight, %d ready; want the job still with its worker", in.InFlight, in.Ready)
	}
}

// A message the broker accepts reaches a worker with the SDK's default
// settings, however its headers are cut up. Headers of many short keys
// encode to several times the bytes the broker counts of them; before,
// the delivery limit allowed only what was counted, so a message with a
// 64 KiB payload and 64 KiB of three-byte header keys (a 262 KB delivery
// against a limit of 192 KiB) was stored and then never delivered: every
// send failed with ResourceExhausted, ended the worker's stream and put
// the job back uncounted, ahead of the others, for ever.
func TestManyShortHeadersAreDelivered(t *testing.T) {
	t.Parallel()
	const limit = 64 << 10
	tb := setup(t, broker.Config{MaxPayload: limit, MaxHeaderBytes: limit})
	headers := map[string]string{}
	for r, n := rune(0x800), 0; n+3 <= limit; r++ { // three bytes each
		headers[string(r)] = ""
		n += 3
	}
	payload := []byte(strings.Repeat("ä", limit/2))
	id := tb.publish(t, &pb.Message{Queue: "q", Producer: "p", JobType: "tagged", Payload: payload, Headers: headers})[0]
	got := make(chan *client.Delivery, 1)
	stop := runWorker(t, tb.cl, client.WorkerConfig{Queue: "q"}, func(_ context.Context, d *client.Delivery) error {
		got <- d
		return nil
	})
	d := within(t, got, "the delivery")
	if d.ID != id || d.Attempt != 1 || string(d.Payload) != string(payload) || len(d.Headers) != len(headers) {
		t.Fatalf("delivered %s attempt %d with %d bytes and %d headers, want %s whole at its first attempt", d.ID, d.Attempt, len(d.Payload), len(d.Headers), id)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// An ack naming an id of megabytes is answered for that id alone, briefly,
// and the session carries on. Before, the answer quoted the id twice (as
// its id and in its message), came to over gRPC's send limit, and its
// failed send ended the stream: the worker's other jobs went back to the
// queue, each attempt counted.
func TestHugeAckIDAnsweredAlone(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	ids := tb.publish(t, &pb.Message{Queue: "q", Producer: "p", JobType: "mail", Payload: []byte(strings.Repeat("Grüße ", 1<<10))}, pmsg("q", "next"))
	c := tb.consume(t, "q", 1)
	d := c.recv(t)
	huge := strings.Repeat("ü", 3<<19) // 3 MiB, under the request limit
	if err := c.s.Send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Ack{Ack: &pb.Ack{Id: huge, Duration: durationpb.New(time.Millisecond)}}}); err != nil {
		t.Fatal(err)
	}
	e := c.recvError(t)
	if codes.Code(e.Code) != codes.FailedPrecondition || e.Applied || !strings.HasPrefix(huge, e.Id) || proto.Size(e) > 8<<10 {
		t.Fatalf("the huge ack answered %v with %d bytes, want FailedPrecondition naming its id's start", codes.Code(e.Code), proto.Size(e))
	}
	c.ack(t, d.Id, time.Millisecond, 1)
	if d := c.recv(t); d.Id != ids[1] || d.Attempt != 1 {
		t.Fatalf("after the huge ack the session delivered %v", d)
	}
	if in := tb.info(t, "q"); in.Acked != 1 || in.InFlight != 1 {
		t.Fatalf("after the huge ack: %d acked, %d in flight", in.Acked, in.InFlight)
	}
}
