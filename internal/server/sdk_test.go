package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// These tests drive the broker through the Go SDK (client.Publish,
// client.Producer, client.RunWorker), where the previous ones speak gRPC
// by hand.

// logRecorder is a slog.Handler that counts a worker's reconnects, so a
// test can tell that a session survived, and signals each one.
type logRecorder struct {
	reconnects atomic.Int64
	signal     chan struct{} // one value per reconnect, dropped if nobody reads
	mu         sync.Mutex
	errs       []string
}

func newLogRecorder() *logRecorder { return &logRecorder{signal: make(chan struct{}, 16)} }

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	if !strings.Contains(rec.Message, "reconnecting") {
		return nil
	}
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			r.mu.Lock()
			r.errs = append(r.errs, a.Value.String())
			r.mu.Unlock()
		}
		return true
	})
	r.reconnects.Add(1)
	select {
	case r.signal <- struct{}{}:
	default:
	}
	return nil
}

func (r *logRecorder) noReconnects(t testing.TB) {
	t.Helper()
	if n := r.reconnects.Load(); n != 0 {
		r.mu.Lock()
		defer r.mu.Unlock()
		t.Fatalf("the worker reconnected %d times: %v", n, r.errs)
	}
}

// dialRecorded dials addr with a logger that records reconnects.
func dialRecorded(t testing.TB, addr string, opts ...client.Option) (*client.Client, *logRecorder) {
	t.Helper()
	rec := newLogRecorder()
	cl, err := client.Dial(context.Background(), addr, append([]client.Option{client.WithLogger(slog.New(rec))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl, rec
}

// runWorker runs cl.RunWorker until the test ends (or stop is called) and
// returns stop, which cancels it and returns RunWorker's error, failing
// the test if RunWorker does not return.
func runWorker(t testing.TB, cl *client.Client, cfg client.WorkerConfig, h client.Handler) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cl.RunWorker(ctx, cfg, h) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = within(t, done, "RunWorker to return")
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// within receives from ch, failing the test if nothing comes in 20
// seconds (the bound of waitFor).
func within[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	timeout := time.NewTimer(20 * time.Second)
	defer timeout.Stop()
	select {
	case v := <-ch:
		return v
	case <-timeout.C:
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// dialSignal is a dial option that signals each dial on the returned
// channel (dropped if nobody reads).
func dialSignal() (grpc.DialOption, <-chan struct{}) {
	dialed := make(chan struct{}, 1)
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		select {
		case dialed <- struct{}{}:
		default:
		}
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}), dialed
}

// closedAddr is a loopback address where nothing listens.
func closedAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// serveStoppable runs a broker behind a gRPC server on a loopback port
// and returns its address and the server, for a test that kills it with
// gs.Stop (connections cut, no drain).
func serveStoppable(t testing.TB, cfg broker.Config) (string, *grpc.Server, *broker.Broker) {
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
	gs := grpc.NewServer(ServerOptions(cfg)...)
	New(b, quiet).Register(gs)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-served
		_ = b.Shutdown(context.Background())
	})
	return lis.Addr().String(), gs, b
}

// outcome is one message's answer to a Producer.
type outcome struct {
	i   int
	id  string
	err error
}

// produce publishes msgs through p and returns each one's outcome, in
// message order.
func produce(t testing.TB, p *client.Producer, msgs ...*client.Message) []outcome {
	t.Helper()
	ch := make(chan outcome, len(msgs))
	for i, m := range msgs {
		if err := p.PublishAsync(m, func(id string, err error) { ch <- outcome{i, id, err} }); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]outcome, len(msgs))
	for range msgs {
		o := within(t, ch, "the producer's answers")
		out[o.i] = o
	}
	return out
}

// drain consumes n deliveries from queue on a raw stream, acks them, and
// returns their ids and payloads in delivery order.
func (tb *testBundle) drain(t testing.TB, queue string, n int) (ids, payloads []string) {
	t.Helper()
	c := tb.consume(t, queue, uint32(n))
	defer c.cancel()
	for range n {
		d := c.recv(t)
		ids = append(ids, d.Id)
		payloads = append(payloads, string(d.Payload))
		c.ack(t, d.Id, time.Millisecond, 0)
	}
	return ids, payloads
}

// counts is a queue's job counts, for failure messages.
func counts(in broker.QueueInfo) string {
	return fmt.Sprintf("published %d delivered %d redelivered %d acked %d; ready %d in flight %d delayed %d dead %d; consumers %d",
		in.Published, in.Delivered, in.Redelivered, in.Acked, in.Ready, in.InFlight, in.Delayed, in.DeadLetters, in.Consumers)
}

func wantFailed(t testing.TB, err error, total int, want map[int]codes.Code) {
	t.Helper()
	var pe *client.PublishError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want a *client.PublishError", err)
	}
	if pe.Total != total || len(pe.Failed) != len(want) {
		t.Fatalf("PublishError = %+v, want %d of %d failed", pe, len(want), total)
	}
	for _, f := range pe.Failed {
		if c, ok := want[f.Index]; !ok || status.Code(f.Err) != c {
			t.Fatalf("message %d failed with %v, want failures %v", f.Index, f.Err, want)
		}
	}
}

// A batch that meets a full queue stores what fits, in order, and says
// which messages were refused and why, through Publish and through a
// Producer alike.
func TestPublishPartialAtMaxDepth(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	msgs := func(queue string) []*client.Message {
		var ms []*client.Message
		for i := range 5 {
			ms = append(ms, &client.Message{Queue: queue, Producer: "p", JobType: "j", Payload: fmt.Appendf(nil, "m%d", i)})
		}
		return ms
	}
	for _, q := range []string{"direct", "producer"} {
		if _, err := tb.cl.DeclareQueue(tb.ctx, q, &pb.QueueConfig{MaxDepth: 3}); err != nil {
			t.Fatal(err)
		}
	}

	ids, err := tb.cl.Publish(tb.ctx, msgs("direct")...)
	wantFailed(t, err, 5, map[int]codes.Code{3: codes.ResourceExhausted, 4: codes.ResourceExhausted})
	if len(ids) != 3 {
		t.Fatalf("ids = %v, want 3", ids)
	}
	got, payloads := tb.drain(t, "direct", 3)
	if strings.Join(got, ",") != strings.Join(ids, ",") || strings.Join(payloads, ",") != "m0,m1,m2" {
		t.Fatalf("stored %v %v, Publish returned %v", got, payloads, ids)
	}

	p := tb.cl.NewProducer(client.ProducerConfig{})
	out := produce(t, p, msgs("producer")...)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	var pids []string
	for i, o := range out {
		switch {
		case i < 3 && (o.err != nil || o.id == ""):
			t.Fatalf("message %d: %q %v, want it stored", i, o.id, o.err)
		case i < 3:
			pids = append(pids, o.id)
		case o.id != "" || status.Code(o.err) != codes.ResourceExhausted:
			t.Fatalf("message %d: %q %v, want ResourceExhausted", i, o.id, o.err)
		}
	}
	got, payloads = tb.drain(t, "producer", 3)
	if strings.Join(got, ",") != strings.Join(pids, ",") || strings.Join(payloads, ",") != "m0,m1,m2" {
		t.Fatalf("stored %v %v, producer returned %v", got, payloads, pids)
	}
	if in := tb.info(t, "direct"); in.Published != 3 {
		t.Fatalf("published %d", in.Published)
	}
}

// An invalid message between valid ones fails alone: the others are
// stored.
func TestPublishInvalidAmongValid(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	batch := func(queue string) []*client.Message {
		return []*client.Message{
			{Queue: queue, Producer: "p", Payload: []byte("first")},
			{Queue: queue, Producer: strings.Repeat("p", broker.DefaultMaxKeyLen+1), Payload: []byte("bad")},
			{Queue: queue, Producer: "p", Payload: []byte("last")},
		}
	}
	ids, err := tb.cl.Publish(tb.ctx, batch("direct")...)
	wantFailed(t, err, 3, map[int]codes.Code{1: codes.InvalidArgument})
	got, payloads := tb.drain(t, "direct", 2)
	if len(ids) != 2 || strings.Join(got, ",") != strings.Join(ids, ",") || strings.Join(payloads, ",") != "first,last" {
		t.Fatalf("stored %v %v, Publish returned %v", got, payloads, ids)
	}

	p := tb.cl.NewProducer(client.ProducerConfig{})
	out := produce(t, p, batch("producer")...)
	_ = p.Close()
	if out[0].err != nil || out[2].err != nil || status.Code(out[1].err) != codes.InvalidArgument || !strings.Contains(out[1].err.Error(), "producer") {
		t.Fatalf("outcomes = %+v", out)
	}
	got, payloads = tb.drain(t, "producer", 2)
	if got[0] != out[0].id || got[1] != out[2].id || strings.Join(payloads, ",") != "first,last" {
		t.Fatalf("stored %v %v, producer returned %+v", got, payloads, out)
	}
}

// A message whose strings are not valid UTF-8 cannot be encoded; through
// Publish and PublishEach it fails alone, with InvalidArgument naming the
// field, and the valid messages around it (non-ASCII text and
// kilobyte payloads among them) are stored in order. Before, protobuf
// refused the whole call.
func TestPublishInvalidUTF8AmongValid(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	body := bytes.Repeat([]byte("ü€"), 2<<10) // 10 KiB of multi-byte text
	batch := func(queue string) []*client.Message {
		return []*client.Message{
			{Queue: queue, Producer: "web", JobType: "bild.größe", Payload: body},
			{Queue: queue, Producer: "web\xff", Payload: []byte("bad producer")},
			{Queue: queue, Producer: "web", JobType: "メール", Payload: []byte("second")},
			{Queue: queue, Producer: "web", Headers: map[string]string{"trace": "\xc3\x28"}, Payload: []byte("bad header")},
			{Queue: queue, Producer: "web", UniqueKey: "order-\xfe", UniqueFor: time.Minute, Payload: []byte("bad unique key")},
			{Queue: queue, Producer: "web", Payload: []byte("last")},
		}
	}
	ids, err := tb.cl.Publish(tb.ctx, batch("direct")...)
	wantFailed(t, err, 6, map[int]codes.Code{1: codes.InvalidArgument, 3: codes.InvalidArgument, 4: codes.InvalidArgument})
	var pe *client.PublishError
	errors.As(err, &pe)
	for i, want := range []string{"producer", "header", "unique key"} {
		if msg := pe.Failed[i].Err.Error(); !strings.Contains(msg, want) || !utf8.ValidString(msg) {
			t.Errorf("failure %d = %q, want it to name the %s", i, msg, want)
		}
	}
	got, payloads := tb.drain(t, "direct", 3)
	if strings.Join(got, ",") != strings.Join(ids, ",") || payloads[0] != string(body) || payloads[1] != "second" || payloads[2] != "last" {
		t.Fatalf("stored %v (%d payloads), Publish returned %v", got, len(payloads), ids)
	}

	res, err := tb.cl.PublishEach(tb.ctx, batch("each")...)
	if err != nil || len(res) != 6 {
		t.Fatalf("PublishEach = %d results, %v", len(res), err)
	}
	for i, r := range res {
		bad := i == 1 || i == 3 || i == 4
		if bad != (r.Err != nil) || bad != (r.ID == "") || (bad && status.Code(r.Err) != codes.InvalidArgument) {
			t.Fatalf("result %d = %+v", i, r)
		}
	}
	// Nothing valid at all: every message answered, nothing sent.
	res, err = tb.cl.PublishEach(tb.ctx, batch("none")[1:2]...)
	if err != nil || len(res) != 1 || status.Code(res[0].Err) != codes.InvalidArgument {
		t.Fatalf("PublishEach of one invalid message = %+v, %v", res, err)
	}
}

// A Producer cuts batches by bytes: messages larger than its byte target
// go alone, a message larger than the broker's payload limit is refused
// by the broker alone, and one no request can carry, or one that cannot be
// encoded, fails locally without being sent. None of them disturbs the
// stream or the messages around it.
func TestProducerCutsBatchesBySize(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	p := tb.cl.NewProducer(client.ProducerConfig{MaxBatchBytes: 64 << 10})
	defer p.Close()
	msg := func(size int) *client.Message {
		return &client.Message{Queue: "q", Producer: "p", JobType: "j", Payload: bytes.Repeat([]byte{'x'}, size)}
	}
	var msgs []*client.Message
	for range 8 {
		msgs = append(msgs, msg(100<<10)) // over the byte target: one per request
	}
	msgs = append(msgs,
		msg(broker.DefaultMaxPayload+1), // sendable, but over the broker's payload limit
		msg(5<<20),                      // over the broker's 4 MiB request limit
		&client.Message{Queue: "q", Producer: "p\xff", Payload: []byte("not UTF-8")},
		msg(10),
	)
	out := produce(t, p, msgs...)
	for i, o := range out {
		switch i {
		case 8:
			if status.Code(o.err) != codes.InvalidArgument || !strings.Contains(o.err.Error(), "limit of 1048576 bytes") {
				t.Fatalf("over max payload: %v", o.err)
			}
		case 9:
			want := fmt.Sprintf("request limit of %d bytes", Limits(broker.Config{}).MaxRequestBytes)
			if status.Code(o.err) != codes.InvalidArgument || !strings.Contains(o.err.Error(), want) {
				t.Fatalf("over the request limit: %v, want InvalidArgument naming %q", o.err, want)
			}
		case 10:
			if status.Code(o.err) != codes.InvalidArgument || !strings.Contains(o.err.Error(), "UTF-8") {
				t.Fatalf("invalid UTF-8: %v", o.err)
			}
		default:
			if o.err != nil || o.id == "" {
				t.Fatalf("message %d: %q %v", i, o.id, o.err)
			}
		}
	}
	// The broker saw the message over its payload limit, and none of the
	// two that failed locally.
	if in := tb.info(t, "q"); in.Published != 9 {
		t.Fatalf("published %d, want 9", in.Published)
	}
}

// Through a Producer, a duplicate of a unique job is told from a new one:
// PublishResult and PublishAsyncResult report Duplicate with the first
// job's id, and only the new jobs are stored. Publish and PublishAsync
// keep answering a duplicate with that id and no error.
func TestProducerTellsDuplicates(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	p := tb.cl.NewProducer(client.ProducerConfig{})
	defer p.Close()
	ctx := t.Context()
	const keys = 200
	key := func(i int) string { return fmt.Sprintf("commande-№%d-✓", i) } // non-ASCII keys
	first := make([]string, keys)
	for i := range keys {
		r, err := p.PublishResult(ctx, &client.Message{Queue: "orders", JobType: "charge", UniqueKey: key(i), UniqueFor: time.Hour, Payload: bytes.Repeat([]byte{'x'}, 2<<10)})
		if err != nil || r.Err != nil || r.Duplicate || r.ID == "" {
			t.Fatalf("first publish of %s: %+v, %v", key(i), r, err)
		}
		first[i] = r.ID
	}
	// Every key again, asynchronously and interleaved with new jobs.
	var wg sync.WaitGroup
	results := make([]client.Result, keys)
	fresh := make([]client.Result, keys)
	for i := range keys {
		wg.Add(2)
		if err := p.PublishAsyncResult(&client.Message{Queue: "orders", JobType: "charge", UniqueKey: key(i), UniqueFor: time.Hour}, func(r client.Result) {
			results[i] = r
			wg.Done()
		}); err != nil {
			t.Fatal(err)
		}
		if err := p.PublishAsyncResult(&client.Message{Queue: "orders", JobType: "charge"}, func(r client.Result) {
			fresh[i] = r
			wg.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	for i := range keys {
		if r := results[i]; !r.Duplicate || r.ID != first[i] || r.Err != nil {
			t.Fatalf("second publish of %s: %+v, want a duplicate of %s", key(i), r, first[i])
		}
		if r := fresh[i]; r.Duplicate || r.ID == "" || r.Err != nil {
			t.Fatalf("new job %d: %+v", i, r)
		}
	}
	id, err := p.Publish(ctx, &client.Message{Queue: "orders", UniqueKey: key(0), UniqueFor: time.Hour})
	if err != nil || id != first[0] {
		t.Fatalf("Publish of a duplicate: %q, %v; want %q and no error", id, err, first[0])
	}
	if in := tb.info(t, "orders"); in.Published != 2*keys {
		t.Fatalf("published %d, want %d (each key once, and the new jobs)", in.Published, 2*keys)
	}
	// A call error is the call's; a refused message's error is its own.
	bad, err := p.PublishResult(ctx, &client.Message{Queue: "orders", Producer: "p\xff"})
	if err != nil || status.Code(bad.Err) != codes.InvalidArgument {
		t.Fatalf("invalid UTF-8: %+v, %v; want InvalidArgument in the Result", bad, err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.PublishResult(done, &client.Message{Queue: "orders"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("with an ended context: %v", err)
	}
}

// A handler error of 100 KiB of multi-byte characters, and one of invalid
// UTF-8, are sent as reasons the stream can carry: the session survives,
// only those jobs are retried, and their dead letters encode.
func TestWorkerLongAndInvalidErrors(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	if _, err := tb.cl.DeclareQueue(tb.ctx, "q", &pb.QueueConfig{MaxAttempts: 2}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("ж€😀", (100<<10)/9) // 2, 3 and 4 bytes
	invalid := "bad \xff\xfe\xc3 bytes"
	errs := map[string]string{"long": long, "invalid": invalid}
	ids := map[string]string{}
	for _, jt := range []string{"ok1", "long", "ok2", "invalid", "ok3"} {
		got, err := tb.cl.Publish(tb.ctx, &client.Message{Queue: "q", Producer: "p", JobType: jt, Payload: []byte(jt)})
		if err != nil {
			t.Fatal(err)
		}
		ids[jt] = got[0]
	}
	cl, rec := dialRecorded(t, tb.addr)
	var mu sync.Mutex
	attempts := map[string][]int{}
	stop := runWorker(t, cl, client.WorkerConfig{
		Queue: "q", Concurrency: 2,
		RetryBackoff: func(int) time.Duration { return 0 }, // retry at once
	}, func(_ context.Context, d *client.Delivery) error {
		mu.Lock()
		attempts[d.JobType] = append(attempts[d.JobType], d.Attempt)
		mu.Unlock()
		if e, ok := errs[d.JobType]; ok {
			return errors.New(e)
		}
		return nil
	})
	tb.waitFor(t, "3 acks and 2 dead letters", func() bool {
		in := tb.info(t, "q")
		return in.Acked == 3 && in.DeadLetters == 2 || rec.reconnects.Load() > 0
	})
	rec.noReconnects(t)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	tb.waitFor(t, "the consumer to close", func() bool { return tb.info(t, "q").Consumers == 0 })
	in := tb.info(t, "q")
	if in.Delivered != 7 || in.Redelivered != 2 || in.Ready != 0 || in.InFlight != 0 {
		t.Fatalf("queue: %s", counts(in))
	}
	mu.Lock()
	for jt, as := range attempts {
		want := "[1]"
		if _, bad := errs[jt]; bad {
			want = "[1 2]"
		}
		if fmt.Sprint(as) != want {
			t.Fatalf("%s ran attempts %v, want %s", jt, as, want)
		}
	}
	mu.Unlock()

	dls, err := tb.cl.ListDeadLetters(tb.ctx, "q", 0)
	if err != nil || len(dls) != 2 {
		t.Fatalf("dead letters = %v, %v", dls, err)
	}
	for _, dl := range dls {
		if _, err := proto.Marshal(dl); err != nil {
			t.Fatalf("dead letter %s does not encode: %v", dl.JobType, err)
		}
		if !utf8.ValidString(dl.Reason) || len(dl.Reason) > 1024 {
			t.Fatalf("reason of %s: %d bytes, valid %v", dl.JobType, len(dl.Reason), utf8.ValidString(dl.Reason))
		}
		// The broker wraps the worker's reason: "nacked: %s (attempt 2 of 2)".
		r := strings.TrimSuffix(strings.TrimPrefix(dl.Reason, "nacked: "), " (attempt 2 of 2)")
		switch dl.Id {
		case ids["long"]:
			if len(r) < 500 || !strings.HasPrefix(long, r) {
				t.Fatalf("long reason = %q", r)
			}
		case ids["invalid"]:
			if r != strings.ToValidUTF8(invalid, "\uFFFD") {
				t.Fatalf("invalid reason = %q", r)
			}
		default:
			t.Fatalf("unexpected dead letter %v", dl)
		}
	}
}

// A nack the broker applies with a change (a retry delay over its 24-hour
// cap) is answered for that job alone, through OnRequestError, and the
// session carries on.
func TestWorkerRequestErrorKeepsSession(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	first, err := tb.cl.Publish(tb.ctx,
		&client.Message{Queue: "q", JobType: "fail"},
		&client.Message{Queue: "q", JobType: "next"})
	if err != nil {
		t.Fatal(err)
	}
	cl, rec := dialRecorded(t, tb.addr)
	reqErrs := make(chan *client.RequestError, 4)
	handled := make(chan string, 4)
	stop := runWorker(t, cl, client.WorkerConfig{
		Queue:          "q",
		RetryBackoff:   func(int) time.Duration { return 48 * time.Hour },
		OnRequestError: func(err *client.RequestError) { reqErrs <- err },
	}, func(_ context.Context, d *client.Delivery) error {
		handled <- d.JobType
		if d.JobType == "fail" {
			return errors.New("try again in two days")
		}
		return nil
	})
	re := within(t, reqErrs, "the nack's answer")
	if re.ID != first[0] || re.Request != "nack" || !re.Applied || re.Code == codes.OK || !strings.Contains(re.Message, "24h0m0s") {
		t.Fatalf("request error = %+v", re)
	}
	if a, b := within(t, handled, "a job"), within(t, handled, "a job"); a != "fail" || b != "next" {
		t.Fatalf("handled %s then %s", a, b)
	}
	tb.waitFor(t, "the second job's ack", func() bool { return tb.info(t, "q").Acked == 1 })
	if in := tb.info(t, "q"); in.Delayed != 1 || in.Consumers != 1 || in.Delivered != 2 {
		t.Fatalf("queue: %s", counts(in))
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rec.noReconnects(t)
}

// maxStop is how soon a cancelled worker, or a producer closed against a
// dead broker (beyond its CloseTimeout), must return. Nothing CPU-bound
// runs meanwhile, so the generous bound holds under the race detector.
const maxStop = time.Second

// A worker whose broker cannot be reached returns promptly once its ctx
// ends, both when the broker was never there and when it died mid-session.
func TestWorkerCancelledWhileBrokerDown(t *testing.T) {
	t.Parallel()
	t.Run("never up", func(t *testing.T) {
		t.Parallel()
		dialer, dialed := dialSignal()
		cl, _ := dialRecorded(t, closedAddr(t), client.WithDialOptions(dialer))
		stop := runWorker(t, cl, client.WorkerConfig{Queue: "q"}, func(context.Context, *client.Delivery) error { return nil })
		within(t, dialed, "a dial") // the session is waiting for the broker
		start := time.Now()
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took >= maxStop {
			t.Fatalf("RunWorker took %v to return", took)
		}
	})
	t.Run("dies mid-session", func(t *testing.T) {
		t.Parallel()
		addr, gs, b := serveStoppable(t, broker.Config{})
		dialer, dialed := dialSignal()
		cl, rec := dialRecorded(t, addr, client.WithDialOptions(dialer))
		running := make(chan struct{})
		var once sync.Once
		stop := runWorker(t, cl, client.WorkerConfig{Queue: "q", Concurrency: 2}, func(ctx context.Context, d *client.Delivery) error {
			once.Do(func() { close(running) })
			<-ctx.Done() // holds the job until the session ends
			return ctx.Err()
		})
		if _, err := b.Publish(&broker.Message{Queue: "q", Payload: []byte("held")}); err != nil {
			t.Fatal(err)
		}
		within(t, running, "the job")
		within(t, dialed, "the first dial")
		gs.Stop()
		within(t, rec.signal, "a reconnect") // the worker saw the stream die
		// gRPC dials again when the next session asks for a connection:
		// that session is now waiting for the broker.
		within(t, dialed, "a dial for the next session")
		start := time.Now()
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took >= maxStop {
			t.Fatalf("RunWorker took %v to return", took)
		}
	})
}

// Close against a broker that is down fails what is queued with
// Unavailable within CloseTimeout, whether the broker was never reached or
// died after the stream opened, and wakes a PublishAsync blocked on a full
// buffer.
func TestProducerCloseWhileBrokerDown(t *testing.T) {
	t.Parallel()
	const closeTimeout = 200 * time.Millisecond
	check := func(t *testing.T, p *client.Producer, n int) {
		t.Helper()
		outs := make(chan error, n)
		queued := make(chan struct{})
		accepted := make(chan int, 1)
		go func() {
			// A buffer of 2 (MaxBatch 1): the later calls block until Close.
			k := 0
			for range n {
				err := p.PublishAsync(&client.Message{Queue: "q", Payload: []byte("x")}, func(_ string, err error) { outs <- err })
				if err != nil {
					if !errors.Is(err, client.ErrClosed) {
						t.Error(err)
					}
					break
				}
				if k++; k == 3 {
					close(queued)
				}
			}
			accepted <- k
		}()
		within(t, queued, "three messages queued")
		start := time.Now()
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			_ = p.Close()
		}()
		within(t, closed, "Close")
		if took := time.Since(start); took >= closeTimeout+maxStop {
			t.Fatalf("Close took %v with CloseTimeout %v", took, closeTimeout)
		}
		k := within(t, accepted, "PublishAsync to return")
		if len(outs) != k {
			t.Fatalf("%d of %d queued messages answered when Close returned", len(outs), k)
		}
		for range k {
			if err := <-outs; status.Code(err) != codes.Unavailable {
				t.Fatalf("pending message: %v, want Unavailable", err)
			}
		}
	}
	t.Run("never up", func(t *testing.T) {
		t.Parallel()
		cl, _ := dialRecorded(t, closedAddr(t))
		check(t, cl.NewProducer(client.ProducerConfig{MaxBatch: 1, CloseTimeout: closeTimeout}), 10)
	})
	t.Run("dies after open", func(t *testing.T) {
		t.Parallel()
		addr, gs, _ := serveStoppable(t, broker.Config{})
		cl, _ := dialRecorded(t, addr)
		p := cl.NewProducer(client.ProducerConfig{MaxBatch: 1, CloseTimeout: closeTimeout})
		if _, err := p.Publish(context.Background(), &client.Message{Queue: "q"}); err != nil {
			t.Fatal(err)
		}
		gs.Stop()
		check(t, p, 10)
	})
}

// Whatever the broker accepts, a worker with default settings receives:
// with an 8 MiB max payload, 6 MB payloads published directly and through a
// Producer reach the handler intact.
func TestPayloadLimitsAgree(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{MaxPayload: 8 << 20})
	payload := func(seed byte) []byte {
		b := make([]byte, 6_000_000)
		for i := range b {
			b[i] = seed + byte(i*7)
		}
		return b
	}
	want := map[string][]byte{"direct": payload(1), "producer": payload(2)}
	if _, err := tb.cl.Publish(tb.ctx, &client.Message{Queue: "q", JobType: "direct", Payload: want["direct"]}); err != nil {
		t.Fatal(err)
	}
	p := tb.cl.NewProducer(client.ProducerConfig{})
	if _, err := p.Publish(tb.ctx, &client.Message{Queue: "q", JobType: "producer", Payload: want["producer"]}); err != nil {
		t.Fatal(err)
	}
	_ = p.Close()
	cl, rec := dialRecorded(t, tb.addr)
	got := make(chan *client.Delivery, 8)
	stop := runWorker(t, cl, client.WorkerConfig{Queue: "q"}, func(_ context.Context, d *client.Delivery) error {
		got <- d
		return nil
	})
	tb.waitFor(t, "two acks", func() bool {
		in := tb.info(t, "q")
		return in.Acked == 2 || in.DeadLetters > 0
	})
	if in := tb.info(t, "q"); in.Acked != 2 {
		t.Fatalf("queue: %s", counts(in))
	}
	for range 2 {
		d := <-got
		if !bytes.Equal(d.Payload, want[d.JobType]) || d.Attempt != 1 {
			t.Fatalf("%s: %d bytes, attempt %d", d.JobType, len(d.Payload), d.Attempt)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rec.noReconnects(t)
	if in := tb.info(t, "q"); in.DeadLetters != 0 || in.Redelivered != 0 {
		t.Fatalf("queue: %s", counts(in))
	}
}

// A worker whose queue or name is not valid UTF-8 can never open a
// stream (its request cannot be encoded): RunWorker says so at once with
// InvalidArgument instead of reconnecting forever.
func TestWorkerInvalidUTF8Config(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	for _, cfg := range []client.WorkerConfig{
		{Queue: "bilder-\xff"},
		{Queue: "bilder", Name: "arbeiter-\xc3\x28"},
	} {
		ctx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
		err := tb.cl.RunWorker(ctx, cfg, func(context.Context, *client.Delivery) error { return nil })
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut || status.Code(err) != codes.InvalidArgument || !utf8.ValidString(err.Error()) {
			t.Errorf("RunWorker(%+q) = %v (ran until its deadline: %v), want InvalidArgument at once", cfg.Queue+"/"+cfg.Name, err, timedOut)
		}
	}
}

// A unary call whose request cannot be encoded (a queue name or id that
// is not valid UTF-8) fails with InvalidArgument, not Internal, and the
// broker is left as it was.
func TestUnaryCallsWithInvalidUTF8(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	if _, err := tb.cl.DeclareQueue(tb.ctx, "warteschlange", nil); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"DeclareQueue": func() error { _, err := tb.cl.DeclareQueue(tb.ctx, "warteschlange-\xff", nil); return err },
		"PurgeQueue":   func() error { _, err := tb.cl.PurgeQueue(tb.ctx, "\xc3\x28"); return err },
		"CancelJob":    func() error { _, err := tb.cl.CancelJob(tb.ctx, "warteschlange", "id-\xfe"); return err },
		"ListKeys":     func() error { _, err := tb.cl.ListKeys(tb.ctx, "warteschlange-\xff", 0); return err },
	}
	for name, call := range calls {
		err := call()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), name) || !utf8.ValidString(err.Error()) {
			t.Errorf("%s = %v, want InvalidArgument naming the call", name, err)
		}
	}
	qs, err := tb.cl.ListQueues(tb.ctx)
	if err != nil || len(qs) != 1 || qs[0].Name != "warteschlange" {
		t.Fatalf("queues after the refused calls: %v, %v", qs, err)
	}
}

// A queue's max_in_flight holds through the SDK: six workers with a
// handler each run at most two jobs at once, every job completes, and the
// limit is reported back.
func TestMaxInFlightThroughWorkers(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	info, err := tb.cl.DeclareQueue(tb.ctx, "api-calls", &pb.QueueConfig{MaxInFlight: 2})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetConfig().GetMaxInFlight() != 2 {
		t.Fatalf("declared config %v, want max_in_flight 2", info.GetConfig())
	}
	const jobs = 60
	for i := range jobs {
		if _, err := tb.cl.Publish(tb.ctx, &client.Message{Queue: "api-calls", JobType: "call", Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	var running, most atomic.Int32
	done := make(chan struct{}, jobs)
	ctx, cancel := context.WithCancel(tb.ctx)
	defer cancel()
	for range 6 {
		go tb.cl.RunWorker(ctx, client.WorkerConfig{Queue: "api-calls"}, func(context.Context, *client.Delivery) error {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			runtime.Gosched() // give the others a chance to overlap
			running.Add(-1)
			done <- struct{}{}
			return nil
		})
	}
	for i := range jobs {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d jobs done", i, jobs)
		}
	}
	if m := most.Load(); m > 2 {
		t.Errorf("%d handlers ran at once, the queue allows 2", m)
	}
}
