package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/tracing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type testBundle struct {
	b    *broker.Broker
	srv  *Server
	gs   *grpc.Server
	clk  *clock.Fake // nil unless setup was given one
	addr string
	bc   pb.BrokerClient
	ac   pb.AdminClient
	cl   *client.Client
	ctx  context.Context
}

// setup runs a broker behind a gRPC server on a loopback port and dials it.
func setup(t testing.TB, cfg broker.Config) *testBundle {
	t.Helper()
	return setupFull(t, cfg, false, nil)
}

// setupTraced is setup with the server recording spans through tr (nil
// is tracing off).
func setupTraced(t testing.TB, cfg broker.Config, tr *tracing.Tracer) *testBundle {
	t.Helper()
	return setupFull(t, cfg, false, tr)
}

// setupUnbatched is setup with a broker that answers GetLimits as one from
// before batches did (max_consume_batch 0), so clients send and ask for
// single items only, as they would of it.
func setupUnbatched(t testing.TB, cfg broker.Config) *testBundle {
	t.Helper()
	return setupFull(t, cfg, true, nil)
}

// unbatched is the Broker service of a broker that reports no batches.
type unbatched struct{ *Server }

func (u unbatched) GetLimits(ctx context.Context, req *pb.GetLimitsRequest) (*pb.Limits, error) {
	l, err := u.Server.GetLimits(ctx, req)
	if err == nil {
		l.MaxConsumeBatch = 0
	}
	return l, err
}

// setupWith is setup with a broker that reports no batches if old, and
// the server options extra besides the broker's own.
func setupWith(t testing.TB, cfg broker.Config, old bool, extra ...grpc.ServerOption) *testBundle {
	t.Helper()
	return setupFull(t, cfg, old, nil, extra...)
}

// setupFull is setup with every choice: old (no batches), tr (tracing;
// nil is off) and extra server options.
func setupFull(t testing.TB, cfg broker.Config, old bool, tr *tracing.Tracer, extra ...grpc.ServerOption) *testBundle {
	t.Helper()
	cfg.Logger = quiet
	b, err := broker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(b, quiet)
	srv.SetTracer(tr)
	gs := grpc.NewServer(append(extra, ServerOptions(cfg)...)...)
	if old {
		pb.RegisterBrokerServer(gs, unbatched{srv})
		pb.RegisterAdminServer(gs, &srv.admin)
	} else {
		srv.Register(gs)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.Dial(context.Background(), lis.Addr().String(), client.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	tb := &testBundle{b: b, srv: srv, gs: gs, addr: lis.Addr().String(), bc: pb.NewBrokerClient(conn), ac: pb.NewAdminClient(conn), cl: cl, ctx: context.Background()}
	if f, ok := cfg.Clock.(*clock.Fake); ok {
		tb.clk = f
	}
	t.Cleanup(func() {
		_ = cl.Close()
		_ = conn.Close()
		gs.Stop()
		<-served
		_ = b.Shutdown(context.Background())
	})
	return tb
}

func fakeClock() *clock.Fake { return clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) }

func (tb *testBundle) publish(t testing.TB, msgs ...*pb.Message) []string {
	t.Helper()
	resp, err := tb.bc.Publish(tb.ctx, &pb.PublishRequest{Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Results) != len(msgs) {
		t.Fatalf("%d results for %d messages", len(resp.Results), len(msgs))
	}
	ids := make([]string, len(msgs))
	for i, r := range resp.Results {
		if r.Id == "" || r.Code != 0 {
			t.Fatalf("message %d not stored: %v %s", i, codes.Code(r.Code), r.Error)
		}
		ids[i] = r.Id
	}
	return ids
}

// refused publishes one message that the broker must refuse, and returns
// its result as a status error.
func (tb *testBundle) refused(t testing.TB, m *pb.Message) error {
	t.Helper()
	resp, err := tb.bc.Publish(tb.ctx, &pb.PublishRequest{Messages: []*pb.Message{m}})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.Results[0]
	if r.Id != "" || r.Code == 0 {
		t.Fatalf("message stored as %q, want it refused", r.Id)
	}
	return status.Error(codes.Code(r.Code), r.Error)
}

type consumer struct {
	s      grpc.BidiStreamingClient[pb.ConsumeRequest, pb.ConsumeResponse]
	cancel context.CancelFunc
}

func (tb *testBundle) consume(t testing.TB, queue string, prefetch uint32) *consumer {
	t.Helper()
	ctx, cancel := context.WithCancel(tb.ctx)
	s, err := tb.bc.Consume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Subscribe{Subscribe: &pb.Subscribe{Queue: queue, Prefetch: prefetch}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return &consumer{s: s, cancel: cancel}
}

// recv reads the next delivery, failing on anything else.
func (c *consumer) recv(t testing.TB) *pb.Delivery {
	t.Helper()
	r, err := c.s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	d := r.GetDelivery()
	if d == nil {
		t.Fatalf("want a delivery, got %v", r)
	}
	return d
}

// recvError reads the next response, failing unless it is a RequestError.
func (c *consumer) recvError(t testing.TB) *pb.RequestError {
	t.Helper()
	r, err := c.s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	e := r.GetError()
	if e == nil {
		t.Fatalf("want a request error, got %v", r)
	}
	return e
}

func (c *consumer) ack(t testing.TB, id string, d time.Duration, credit uint32) {
	t.Helper()
	if err := c.s.Send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Ack{Ack: &pb.Ack{Id: id, Duration: durationpb.New(d), Credit: credit}}}); err != nil {
		t.Fatal(err)
	}
}

func (c *consumer) nack(t testing.TB, n *pb.Nack) {
	t.Helper()
	if err := c.s.Send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Nack{Nack: n}}); err != nil {
		t.Fatal(err)
	}
}

func pmsg(queue, jobType string) *pb.Message {
	return &pb.Message{Queue: queue, Producer: "p", JobType: jobType, Payload: []byte(jobType)}
}

// waitFor waits until cond, which reads the broker's inspector, holds. The
// waits are for another goroutine's gRPC messages to reach the broker; the
// broker's Changed channel wakes the test at each change, so nothing polls.
func (tb *testBundle) waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	timeout := time.NewTimer(20 * time.Second)
	defer timeout.Stop()
	for {
		changed := tb.b.Changed() // before cond, so no change is missed
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-timeout.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (tb *testBundle) info(t testing.TB, queue string) broker.QueueInfo {
	t.Helper()
	in, err := tb.b.Queue(queue)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func wantCode(t testing.TB, err error, want codes.Code, contains string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != want || !strings.Contains(st.Message(), contains) {
		t.Fatalf("err = %v, want %v containing %q", err, want, contains)
	}
}

func TestPublishConsumeAck(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	ids := tb.publish(t, pmsg("q", "a"), pmsg("q", "b"))
	c := tb.consume(t, "q", 1)
	d := c.recv(t)
	if d.Id != ids[0] || string(d.Payload) != "a" || d.Attempt != 1 || d.Lease.AsDuration() != broker.DefaultLease {
		t.Fatalf("delivery = %v", d)
	}
	c.ack(t, d.Id, time.Millisecond, 1) // ack and ask for the next in one message
	if d := c.recv(t); d.Id != ids[1] {
		t.Fatalf("second delivery = %v", d)
	}
	tb.waitFor(t, "the ack", func() bool { return tb.info(t, "q").Acked == 1 })

	// Admin and health see the queue.
	qs, err := tb.ac.ListQueues(tb.ctx, &pb.ListQueuesRequest{})
	if err != nil || len(qs.Queues) != 1 || qs.Queues[0].Published != 2 || qs.Queues[0].InFlight != 1 {
		t.Fatalf("queues = %v, %v", qs, err)
	}
	conn, _ := grpc.NewClient(tb.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	h, err := healthpb.NewHealthClient(conn).Check(tb.ctx, &healthpb.HealthCheckRequest{Service: pb.Broker_ServiceDesc.ServiceName})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v", h, err)
	}
}

func TestErrorCodes(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{MaxPayload: 100, Queue: broker.QueueConfig{MaxDepth: 1}})
	wantCode(t, tb.refused(t, &pb.Message{Queue: "q", Payload: make([]byte, 101)}), codes.InvalidArgument, "limit of 100 bytes")
	_, err := tb.bc.Publish(tb.ctx, &pb.PublishRequest{})
	wantCode(t, err, codes.InvalidArgument, "at least one")
	tb.publish(t, pmsg("q", "a"))
	wantCode(t, tb.refused(t, pmsg("q", "b")), codes.ResourceExhausted, `queue "q" is full`)
	_, err = tb.ac.ListDeadLetters(tb.ctx, &pb.ListDeadLettersRequest{Queue: "nope"})
	wantCode(t, err, codes.NotFound, `"nope"`)
	_, err = tb.ac.DeclareQueue(tb.ctx, &pb.DeclareQueueRequest{Name: "x", Config: &pb.QueueConfig{Policy: "lifo"}})
	wantCode(t, err, codes.InvalidArgument, "lifo")

	// A Consume stream must start with Subscribe.
	s, err := tb.bc.Consume(tb.ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Credit{Credit: &pb.Credit{N: 1}}})
	_, err = s.Recv()
	wantCode(t, err, codes.InvalidArgument, "Subscribe")
}

func TestStreamCutRedeliversToAnotherWorker(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	ids := tb.publish(t, pmsg("q", "a"))
	c1 := tb.consume(t, "q", 1)
	if d := c1.recv(t); d.Id != ids[0] {
		t.Fatalf("got %v", d)
	}
	c2 := tb.consume(t, "q", 1)
	c1.cancel() // the worker dies mid-job
	d := c2.recv(t)
	if d.Id != ids[0] || d.Attempt != 2 {
		t.Fatalf("redelivery = %v", d)
	}
}

func TestLeaseExpiryRedelivers(t *testing.T) {
	t.Parallel()
	clk := fakeClock()
	tb := setup(t, broker.Config{Clock: clk, Queue: broker.QueueConfig{Lease: 10 * time.Second}})
	ids := tb.publish(t, pmsg("q", "a"))
	c1 := tb.consume(t, "q", 1)
	c1.recv(t)
	c2 := tb.consume(t, "q", 1)
	tb.waitFor(t, "second consumer", func() bool { return tb.info(t, "q").Consumers == 2 })
	clk.Advance(10 * time.Second)
	if d := c2.recv(t); d.Id != ids[0] || d.Attempt != 2 {
		t.Fatalf("redelivery = %v", d)
	}
}

func TestMaxAttemptsAndTTLDeadLetter(t *testing.T) {
	t.Parallel()
	clk := fakeClock()
	tb := setup(t, broker.Config{Clock: clk})
	if _, err := tb.ac.DeclareQueue(tb.ctx, &pb.DeclareQueueRequest{Name: "q", Config: &pb.QueueConfig{MaxAttempts: 2}}); err != nil {
		t.Fatal(err)
	}
	ids := tb.publish(t, pmsg("q", "poison"))
	c := tb.consume(t, "q", 1)
	for range 2 {
		d := c.recv(t)
		c.nack(t, &pb.Nack{Id: d.Id, Reason: "boom", Credit: 1})
	}
	tb.publish(t, &pb.Message{Queue: "q", JobType: "stale", Ttl: durationpb.New(time.Minute)})
	tb.waitFor(t, "the poison job to die", func() bool { return tb.info(t, "q").DeadLetters == 1 })
	clk.Advance(time.Minute)
	dl, err := tb.ac.ListDeadLetters(tb.ctx, &pb.ListDeadLettersRequest{Queue: "q"})
	if err != nil || len(dl.DeadLetters) != 2 {
		t.Fatalf("dead letters = %v, %v", dl, err)
	}
	if d := dl.DeadLetters[0]; d.Id != ids[0] || d.Attempts != 2 || !strings.Contains(d.Reason, "boom") {
		t.Fatalf("first = %v", d)
	}
	if d := dl.DeadLetters[1]; d.JobType != "stale" || d.Reason != "expired" {
		t.Fatalf("second = %v", d)
	}
	rq, err := tb.ac.RequeueDeadLetters(tb.ctx, &pb.RequeueDeadLettersRequest{Queue: "q", Ids: []string{ids[0]}})
	if err != nil || rq.Requeued != 1 {
		t.Fatalf("requeue = %v, %v", rq, err)
	}
}

func TestNackRequeueAfter(t *testing.T) {
	t.Parallel()
	clk := fakeClock()
	tb := setup(t, broker.Config{Clock: clk})
	ids := tb.publish(t, pmsg("q", "a"))
	c := tb.consume(t, "q", 1)
	d := c.recv(t)
	c.nack(t, &pb.Nack{Id: d.Id, Action: pb.NackAction_NACK_ACTION_REQUEUE_AFTER, Delay: durationpb.New(time.Minute), Credit: 1})
	tb.waitFor(t, "the nack", func() bool { return tb.info(t, "q").Delayed == 1 })
	clk.Advance(time.Minute)
	if d := c.recv(t); d.Id != ids[0] || d.Attempt != 2 {
		t.Fatalf("got %v", d)
	}
}

// Jobs in flight when the broker shuts down are acked if their handlers
// finish in time and returned to the queue if not: none is lost.
func TestShutdownLosesNothing(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	const n = 20
	for i := range n {
		tb.publish(t, pmsg("q", string(rune('a'+i))))
	}
	release := make(chan struct{})
	started := make(chan struct{}, n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	workerDone := make(chan error)
	go func() {
		workerDone <- tb.cl.RunWorker(ctx, client.WorkerConfig{Queue: "q", Concurrency: 4}, func(ctx context.Context, d *client.Delivery) error {
			started <- struct{}{}
			if d.JobType == "a" {
				<-ctx.Done() // never finishes before shutdown gives up
				return ctx.Err()
			}
			<-release
			return nil
		})
	}()
	for range 4 {
		<-started
	}
	sctx, scancel := context.WithCancel(context.Background())
	shut := make(chan error)
	go func() { shut <- tb.b.Shutdown(sctx) }()
	tb.waitFor(t, "draining", tb.b.Draining)
	close(release)
	tb.waitFor(t, "three acks", func() bool { return tb.info(t, "q").Acked == 3 })
	scancel() // job "a" is still running
	<-shut
	in := tb.info(t, "q")
	if in.Acked != 3 || in.Ready != n-3 || in.InFlight != 0 {
		t.Fatalf("after shutdown: acked %d ready %d in flight %d", in.Acked, in.Ready, in.InFlight)
	}
	cancel()
	<-workerDone
}

// A predictive queue learns from acks and then serves short keys first.
func TestPredictiveShortFirst(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	if _, err := tb.ac.DeclareQueue(tb.ctx, &pb.DeclareQueueRequest{Name: "q", Config: &pb.QueueConfig{Policy: "predictive", AgingOff: true}}); err != nil {
		t.Fatal(err)
	}
	cost := map[string]time.Duration{"short": time.Millisecond, "mid": 100 * time.Millisecond, "long": 10 * time.Second}
	c := tb.consume(t, "q", 1)
	for range 50 {
		for _, jt := range []string{"long", "mid", "short"} {
			tb.publish(t, pmsg("q", jt))
			d := c.recv(t)
			c.ack(t, d.Id, cost[d.JobType], 1)
		}
	}
	tb.waitFor(t, "acks", func() bool { return tb.info(t, "q").Acked == 150 })
	// Hold the consumer's credit while the backlog builds.
	var backlog []*pb.Message
	for range 10 {
		backlog = append(backlog, pmsg("q", "long"), pmsg("q", "mid"), pmsg("q", "short"))
	}
	tb.publish(t, backlog...)
	order := ""
	c2 := tb.consume(t, "q", 1)
	c.cancel()
	for range 30 {
		d := c2.recv(t)
		order += d.JobType[:1]
		c2.ack(t, d.Id, cost[d.JobType], 1)
	}
	if want := strings.Repeat("s", 10) + strings.Repeat("m", 10) + strings.Repeat("l", 10); order != want {
		t.Fatalf("order = %s, want %s", order, want)
	}
	keys, err := tb.ac.ListKeys(tb.ctx, &pb.ListKeysRequest{Queue: "q"})
	if err != nil || len(keys.Keys) != 3 {
		t.Fatalf("keys = %v, %v", keys, err)
	}
}

func TestHTTPMetricsAndHealthz(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	tb.publish(t, pmsg("q", "a"))
	c := tb.consume(t, "q", 1)
	d := c.recv(t)
	c.ack(t, d.Id, 5*time.Millisecond, 0)
	tb.waitFor(t, "ack", func() bool { return tb.info(t, "q").Acked == 1 })
	hs := httptest.NewServer(HTTPHandler(tb.b))
	defer hs.Close()
	get := func(path string) (int, string) {
		resp, err := hs.Client().Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	code, body := get("/metrics")
	for _, want := range []string{
		`harbinger_published_total{queue="q"} 1`,
		`harbinger_acks_total{queue="q"} 1`,
		`harbinger_ready{queue="q",tier="0"} 0`,
		`harbinger_job_duration_seconds_count{kind="actual",queue="q"} 1`,
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Fatalf("metrics lack %q:\n%s", want, body)
		}
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("healthz = %d %q", code, body)
	}
	_ = tb.b.Shutdown(context.Background())
	if code, _ := get("/healthz"); code != http.StatusServiceUnavailable {
		t.Fatalf("healthz while stopped = %d", code)
	}
}
