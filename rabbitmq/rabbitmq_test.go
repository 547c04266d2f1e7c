package rabbitmq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"google.golang.org/grpc"

	harbingerv1 "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/rabbitmq"
)

var (
	shortKey = rabbitmq.Key{Queue: "jobs", Producer: "web", JobType: "thumbnail"}
	longKey  = rabbitmq.Key{Queue: "jobs", Producer: "web", JobType: "report"}
)

// learned returns a Local that has seen short jobs take 5 ms and long ones
// 500 ms, and has made predictions for both, as a running system would.
func learned(t *testing.T) *rabbitmq.Local {
	t.Helper()
	ctx := context.Background()
	l, err := rabbitmq.NewLocal(rabbitmq.LocalConfig{RecomputeEvery: 1, LongShare: -1}) // tiers only: with two keys the long one is all the work
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		_ = l.Observe(ctx, shortKey, 5*time.Millisecond)
		_ = l.Observe(ctx, longKey, 500*time.Millisecond)
	}
	for range 4 {
		_, _ = l.Predict(ctx, shortKey)
		_, _ = l.Predict(ctx, longKey)
	}
	return l
}

func TestPublisherShortFirstFromBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := dial(t)
	ch := channel(t, conn)
	q := unique("prio")
	deleteQueues(t, conn, q)
	if err := rabbitmq.DeclarePriorityQueue(ch, q, 3); err != nil {
		t.Fatal(err)
	}
	pub := rabbitmq.NewPublisher(ch, learned(t), rabbitmq.PublisherOptions{MaxPriority: 3})
	// The backlog: long jobs first, then short ones behind them.
	for _, k := range []rabbitmq.Key{longKey, longKey, longKey, shortKey, shortKey, shortKey} {
		if err := pub.Publish(ctx, "", q, k, amqp.Publishing{Body: []byte(k.JobType)}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	var prios []uint8
	for len(got) < 6 {
		d, ok, err := ch.Get(q, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			continue // publishes not yet enqueued
		}
		got = append(got, string(d.Body))
		prios = append(prios, d.Priority)
	}
	want := []string{"thumbnail", "thumbnail", "thumbnail", "report", "report", "report"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delivery order %v (priorities %v), want short ones first", got, prios)
		}
	}
	// Where the long jobs land (tier 1 or 2) depends on the mix of recent
	// predictions the tier boundaries are quantiles of; short is tier 0,
	// priority 2 (3 is kept for long and unpredictable messages).
	if prios[0] != 2 || prios[5] >= prios[0] {
		t.Errorf("priorities %v, want 2 for short and less for long", prios)
	}
}

func TestConsumeLearnsOnlySuccess(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		fail func(ch *amqp.Channel) error // first attempt
	}{
		{"handler error", func(*amqp.Channel) error { return errors.New("boom") }},
		{"handler panic", func(*amqp.Channel) error { panic("boom") }},
		{"handler calls runtime.Goexit", func(*amqp.Channel) error { runtime.Goexit(); return nil }},
		{"channel closed mid-message", func(ch *amqp.Channel) error { _ = ch.Close(); return nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
			defer cancel()
			conn := dial(t)
			pubCh := channel(t, conn)
			q := unique("crash")
			deleteQueues(t, conn, q)
			if err := rabbitmq.DeclarePriorityQueue(pubCh, q, 3); err != nil {
				t.Fatal(err)
			}
			l, _ := rabbitmq.NewLocal(rabbitmq.LocalConfig{})
			k := rabbitmq.Key{Queue: q, Producer: "p", JobType: "j"}
			if err := rabbitmq.NewPublisher(pubCh, l, rabbitmq.PublisherOptions{}).Publish(ctx, "", q, k, amqp.Publishing{Body: []byte("x")}); err != nil {
				t.Fatal(err)
			}
			// The failed attempt "works" 100 ms before failing; the retry
			// is instant. Only the retry may be learned.
			var attempts atomic.Int32
			done := make(chan struct{})
			h := func(ch *amqp.Channel) func(context.Context, amqp.Delivery) error {
				return func(ctx context.Context, d amqp.Delivery) error {
					if attempts.Add(1) == 1 {
						time.Sleep(100 * time.Millisecond) // the work
						return tt.fail(ch)
					}
					if !d.Redelivered {
						t.Error("second attempt not marked redelivered")
					}
					close(done)
					return nil
				}
			}
			cctx, stop := context.WithCancel(ctx)
			defer stop()
			ch1 := channel(t, conn)
			errc := make(chan error, 1)
			go func() { errc <- rabbitmq.Consume(cctx, ch1, q, l, rabbitmq.ConsumerOptions{}, h(ch1)) }()
			if tt.name == "channel closed mid-message" {
				if err := <-errc; !errors.Is(err, rabbitmq.ErrChannelClosed) {
					t.Fatalf("Consume returned %v, want ErrChannelClosed", err)
				}
				ch2 := channel(t, conn) // the restarted worker
				go func() { errc <- rabbitmq.Consume(cctx, ch2, q, l, rabbitmq.ConsumerOptions{}, h(ch2)) }()
			}
			select {
			case <-done:
			case <-ctx.Done():
				t.Fatal("message not redelivered")
			}
			stop()
			if err := <-errc; err != nil {
				t.Fatalf("Consume after cancel returned %v", err)
			}
			st, ok := l.Lookup(k)
			if !ok || st.Count != 1 {
				t.Fatalf("learned %d observations, want 1 (the success)", st.Count)
			}
			if st.EWMA >= 100*time.Millisecond {
				t.Errorf("learned %v, the failed attempt's duration", st.EWMA)
			}
			qi, err := pubCh.QueueDeclarePassive(q, true, false, false, false, amqp.Table{"x-queue-type": "classic", "x-max-priority": int32(3)})
			if err != nil || qi.Messages != 0 {
				t.Errorf("queue holds %d messages (%v), want 0", qi.Messages, err)
			}
		})
	}
}

func TestRemoteFallsBackWithoutBlocking(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A sidecar that is down: a port nobody listens on.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := lis.Addr().String()
	lis.Close()
	// A sidecar that hangs: accepts the call and never answers.
	hangLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	harbingerv1.RegisterPredictorServer(srv, hanging{})
	go func() { _ = srv.Serve(hangLis) }()
	t.Cleanup(srv.Stop)

	for name, addr := range map[string]string{"down": down, "hanging": hangLis.Addr().String()} {
		t.Run(name, func(t *testing.T) {
			r, err := rabbitmq.DialSidecarOptions(ctx, addr, rabbitmq.RemoteOptions{Timeout: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for i := range 3 {
				start := time.Now()
				pr, err := r.Predict(ctx, shortKey)
				took := time.Since(start)
				mid := rabbitmq.DefaultTiers / 2
				if err != nil || pr.Tier != mid || pr.AMQP != rabbitmq.PriorityFor(mid, rabbitmq.DefaultTiers, false, rabbitmq.DefaultMaxPriority) || !pr.Cold || pr.Long {
					t.Errorf("Predict = %+v, %v; want the middle priority", pr, err)
				}
				if took > 150*time.Millisecond {
					t.Errorf("call %d blocked %v, want at most about the 50 ms timeout", i, took)
				}
			}
			if r.Fallbacks() != 3 {
				t.Errorf("fallbacks = %d, want 3", r.Fallbacks())
			}
			start := time.Now()
			if err := r.Observe(ctx, shortKey, time.Millisecond); err == nil {
				t.Error("Observe to a dead sidecar succeeded")
			}
			if took := time.Since(start); took > 150*time.Millisecond {
				t.Errorf("Observe blocked %v", took)
			}
		})
	}
}

type hanging struct {
	harbingerv1.UnimplementedPredictorServer
}

func (hanging) Predict(ctx context.Context, _ *harbingerv1.PredictRequest) (*harbingerv1.PredictResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hanging) Observe(ctx context.Context, _ *harbingerv1.ObserveRequest) (*harbingerv1.ObserveResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A handler that returns an error wrapping ErrReject, or panics with one,
// rejects its message without requeue: RabbitMQ dead-letters it into the
// queue's dead-letter queue and never redelivers it, and the predictor
// learns nothing from it. The good message is acked and learned.
func TestConsumeRejects(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn := dial(t)
	ch := channel(t, conn)
	q, dlq := declareWithDLQ(t, conn, ch, "reject", 3)
	l, err := rabbitmq.NewLocal(rabbitmq.LocalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pub := rabbitmq.NewPublisher(ch, l, rabbitmq.PublisherOptions{MaxPriority: 3})
	body := func(s string) []byte { return append([]byte(s+":"), make([]byte, 4<<10)...) }
	for _, jt := range []string{"unreadable", "invalid-ünïcode", "good"} {
		k := rabbitmq.Key{Queue: q, Producer: "p", JobType: jt}
		if err := pub.Publish(ctx, "", q, k, amqp.Publishing{Body: body(jt)}); err != nil {
			t.Fatal(err)
		}
	}
	var calls atomic.Int32
	done := make(chan struct{})
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 1)
	go func() {
		errc <- rabbitmq.Consume(cctx, channel(t, conn), q, l, rabbitmq.ConsumerOptions{}, func(_ context.Context, d amqp.Delivery) error {
			calls.Add(1)
			if d.Redelivered {
				t.Errorf("%s redelivered after it was rejected", d.Headers[rabbitmq.HeaderJobType])
			}
			switch d.Headers[rabbitmq.HeaderJobType] {
			case "unreadable":
				return fmt.Errorf("%w: truncated body", rabbitmq.ErrReject)
			case "invalid-ünïcode":
				panic(fmt.Errorf("decode: %w", rabbitmq.ErrReject))
			}
			close(done)
			return nil
		})
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the good message was not handled")
	}
	var dead []string
	for len(dead) < 2 && ctx.Err() == nil {
		d, ok, err := ch.Get(dlq, true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			dead = append(dead, fmt.Sprint(d.Headers[rabbitmq.HeaderJobType]))
		}
	}
	stop()
	if err := <-errc; err != nil {
		t.Fatalf("Consume after cancel returned %v", err)
	}
	if len(dead) != 2 || dead[0] != "unreadable" || dead[1] != "invalid-ünïcode" {
		t.Fatalf("dead-lettered %v, want both rejected messages", dead)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("handler ran %d times, want 3 (no retry of a rejected message)", n)
	}
	if _, ok := l.Lookup(rabbitmq.Key{Queue: q, Producer: "p", JobType: "unreadable"}); ok {
		t.Error("a rejected message was learned")
	}
	if st, ok := l.Lookup(rabbitmq.Key{Queue: q, Producer: "p", JobType: "good"}); !ok || st.Count != 1 {
		t.Errorf("the good message learned %+v, want one observation", st)
	}
	qi, err := ch.QueueDeclarePassive(q, true, false, false, false, amqp.Table{
		"x-queue-type": "classic", "x-max-priority": int32(3),
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq,
	})
	if err != nil || qi.Messages != 0 {
		t.Errorf("queue holds %d messages (%v), want 0", qi.Messages, err)
	}
}

// TestConsumeMaxAttempts runs a message that always fails, one that fails
// twice and then succeeds, and good ones behind them, with a limit of three
// attempts: the first goes to the dead-letter queue after its third
// failure, each failure sends a message to the back of its queue rather
// than straight back to the consumer, the second is learned once, and the
// queue's backlog ends empty (a rejected message leaves it).
func TestConsumeMaxAttempts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn := dial(t)
	ch := channel(t, conn)
	q, dlq := declareWithDLQ(t, conn, ch, "attempts", rabbitmq.DefaultMaxPriority)
	l, err := rabbitmq.NewLocal(rabbitmq.LocalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// Another key's durations make the cold default, which the backlog
	// counts for every message here, more than nothing.
	for range 3 {
		if err := l.Observe(ctx, rabbitmq.Key{Queue: q, Producer: "p", JobType: "seen"}, 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	const maxAttempts, goods = 3, 5
	published := make(chan struct{})
	var (
		mu    sync.Mutex
		order []string
		seen  = map[string]int{}
	)
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 1)
	go func() {
		errc <- rabbitmq.Consume(cctx, channel(t, conn), q, l, rabbitmq.ConsumerOptions{MaxAttempts: maxAttempts}, func(_ context.Context, d amqp.Delivery) error {
			<-published // the backlog is in place before the first attempt settles
			jt := fmt.Sprint(d.Headers[rabbitmq.HeaderJobType])
			mu.Lock()
			order = append(order, jt)
			seen[jt]++
			n := seen[jt]
			mu.Unlock()
			want := n - 1
			if jt == "good" {
				want = 0 // five messages of one key
			}
			if got := rabbitmq.Failures(d); got != want {
				t.Errorf("%s attempt %d carries %d failures, want %d", jt, n, got, want)
			}
			switch {
			case jt == "poison-ünïcode":
				return errors.New("always fails")
			case jt == "flaky" && n < maxAttempts:
				return fmt.Errorf("fails on attempt %d", n)
			}
			return nil
		})
	}()
	// Consume attaches to the queue before the first message arrives: only
	// then does the predictor count the queue's backlog.
	eventually(t, 5*time.Second, "the consumer attached", func() bool { _, ok := l.Totals()[q]; return ok })
	pub := rabbitmq.NewPublisher(ch, l, rabbitmq.PublisherOptions{})
	body := append([]byte("\xff\xfe not UTF-8 "), make([]byte, 4<<10)...)
	for _, jt := range append([]string{"poison-ünïcode", "flaky"}, slices.Repeat([]string{"good"}, goods)...) {
		if err := pub.Publish(ctx, "", q, rabbitmq.Key{Queue: q, Producer: "p", JobType: jt}, amqp.Publishing{Body: body, Headers: amqp.Table{"trace": "t-1"}}); err != nil {
			t.Fatal(err)
		}
	}
	// Publish returns once a message is written, not queued: wait until
	// RabbitMQ holds them all (the one delivered to the waiting handler
	// aside), or a retry could land among goods still on their way.
	eventually(t, 5*time.Second, "every message queued", func() bool {
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return st.Messages >= 2+goods-rabbitmq.DefaultPrefetch
	})
	close(published)
	dead, err := getOne(ctx, ch, dlq)
	if err != nil {
		t.Fatal(err)
	}
	if jt := dead.Headers[rabbitmq.HeaderJobType]; jt != "poison-ünïcode" {
		t.Fatalf("dead-lettered %v, want the poison message", jt)
	}
	if got := rabbitmq.Failures(dead); got != maxAttempts-1 {
		t.Errorf("the dead letter counts %d failures before its last attempt, want %d", got, maxAttempts-1)
	}
	if !bytes.Equal(dead.Body, body) || dead.Headers["trace"] != "t-1" || dead.Priority != rabbitmq.DefaultMaxPriority {
		t.Errorf("the dead letter lost its body, headers or priority: %d bytes, trace %v, priority %d", len(dead.Body), dead.Headers["trace"], dead.Priority)
	}
	eventually(t, 5*time.Second, "every message settled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen["flaky"] == maxAttempts && seen["good"] == goods
	})
	eventually(t, 5*time.Second, "the backlog emptied", func() bool { return l.Totals()[q].Net == 0 })
	stop()
	if err := <-errc; err != nil {
		t.Fatalf("Consume after cancel returned %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen["poison-ünïcode"] != maxAttempts {
		t.Errorf("the poison message ran %d times, want %d", seen["poison-ünïcode"], maxAttempts)
	}
	// A failed message went to the back: its second attempt came after
	// every good message published behind it.
	second := -1
	for i, jt := range order {
		if jt == "poison-ünïcode" && second == -1 && i > 0 {
			second = i
		}
	}
	if lastGood := slices.Index(order, "good") + goods - 1; second < lastGood {
		t.Errorf("the poison message's second attempt was the %dth handled, before the good ones: %v", second+1, order)
	}
	if st, ok := l.Lookup(rabbitmq.Key{Queue: q, Producer: "p", JobType: "flaky"}); !ok || st.Count != 1 {
		t.Errorf("the flaky message learned %+v, want one observation (its success)", st)
	}
	if _, ok := l.Lookup(rabbitmq.Key{Queue: q, Producer: "p", JobType: "poison-ünïcode"}); ok {
		t.Error("a failing message was learned")
	}
}

// getOne waits for a message in queue and takes it.
func getOne(ctx context.Context, ch *amqp.Channel, queue string) (amqp.Delivery, error) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil || ok {
			return d, err
		}
		select {
		case <-ctx.Done():
			return amqp.Delivery{}, fmt.Errorf("nothing in %s: %w", queue, ctx.Err())
		case <-tick.C:
		}
	}
}

// TestConsumeTiersMaxAttempts: on quorum tier queues a failing message goes
// back to the back of its own tier's queue, counted, and is rejected at
// its last attempt while the messages behind it run.
func TestConsumeTiersMaxAttempts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn := dial(t)
	ch := channel(t, conn)
	tq := rabbitmq.TierQueues{Name: unique("attempts.tiers"), Quorum: true}
	deleteQueues(t, conn, tq.Queue(0), tq.Queue(1), tq.Queue(2))
	if err := tq.Declare(ch); err != nil {
		t.Fatal(err)
	}
	l, err := rabbitmq.NewLocal(rabbitmq.LocalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pub := rabbitmq.NewTierPublisher(ch, l, tq, rabbitmq.PublisherOptions{})
	for _, jt := range []string{"poison", "good", "good"} {
		if err := pub.Publish(ctx, rabbitmq.Key{Queue: tq.Name, Producer: "p", JobType: jt}, amqp.Publishing{Body: make([]byte, 2<<10)}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu     sync.Mutex
		order  []string
		routed []string
	)
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 1)
	go func() {
		errc <- rabbitmq.ConsumeTiers(cctx, channel(t, conn), tq, l, rabbitmq.TierConsumerOptions{MaxAttempts: 2}, func(_ context.Context, d amqp.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			jt := fmt.Sprint(d.Headers[rabbitmq.HeaderJobType])
			if order = append(order, jt); jt != "poison" {
				return nil
			}
			routed = append(routed, d.RoutingKey)
			if got := rabbitmq.Failures(d); got != len(routed)-1 {
				t.Errorf("poison attempt %d carries %d failures", len(routed), got)
			}
			return errors.New("always fails")
		})
	}()
	eventually(t, 10*time.Second, "four messages handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == 4
	})
	eventually(t, 5*time.Second, "the tier queues emptied", func() bool {
		for i := range 3 {
			st, err := ch.QueueDeclarePassive(tq.Queue(i), true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
			if err != nil || st.Messages != 0 {
				return false
			}
		}
		return true
	})
	stop()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"poison", "good", "good", "poison"}; !slices.Equal(order, want) {
		t.Errorf("handled %v, want %v", order, want)
	}
	// The retry went back to the queue of the message's tier.
	if len(routed) != 2 || routed[0] != routed[1] || !strings.HasPrefix(routed[0], tq.Name+".t") {
		t.Errorf("the poison message came from %v, want its tier's queue twice", routed)
	}
}

// TestConsumeStoppingDoesNotCount: a handler that fails because its
// consumer is stopping has not failed the message, even at its last
// attempt: the message is requeued uncounted, not rejected.
func TestConsumeStoppingDoesNotCount(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn := dial(t)
	ch := channel(t, conn)
	q := unique("stopping")
	deleteQueues(t, conn, q)
	if err := rabbitmq.DeclarePriorityQueue(ch, q, rabbitmq.DefaultMaxPriority); err != nil {
		t.Fatal(err)
	}
	l, err := rabbitmq.NewLocal(rabbitmq.LocalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rabbitmq.NewPublisher(ch, l, rabbitmq.PublisherOptions{}).Publish(ctx, "", q, rabbitmq.Key{Queue: q, JobType: "slow"}, amqp.Publishing{Body: []byte("job")}); err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	err = rabbitmq.Consume(cctx, channel(t, conn), q, l, rabbitmq.ConsumerOptions{MaxAttempts: 1}, func(hctx context.Context, _ amqp.Delivery) error {
		stop() // as an interrupt would
		return hctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	d, err := getOne(ctx, ch, q)
	if err != nil {
		t.Fatalf("the message is gone: %v", err)
	}
	if n := rabbitmq.Failures(d); n != 0 || string(d.Body) != "job" {
		t.Errorf("the requeued message counts %d failures, body %q", n, d.Body)
	}
}

// declareWithDLQ declares a classic priority queue named after prefix and
// a dead-letter queue its rejected messages go to, both deleted when the
// test ends.
func declareWithDLQ(t *testing.T, conn *amqp.Connection, ch *amqp.Channel, prefix string, maxPriority uint8) (q, dlq string) {
	t.Helper()
	q, dlq = unique(prefix), unique(prefix+"-dlq")
	deleteQueues(t, conn, q, dlq)
	if _, err := ch.QueueDeclare(dlq, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{
		"x-queue-type": "classic", "x-max-priority": int32(maxPriority),
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq,
	}); err != nil {
		t.Fatal(err)
	}
	return q, dlq
}

// stalled is a sidecar whose Report calls wait until release closes, then
// count the observations they carry.
type stalled struct {
	harbingerv1.UnimplementedPredictorServer
	release  chan struct{}
	observed atomic.Int64
}

func (s *stalled) Report(_ context.Context, req *harbingerv1.ReportRequest) (*harbingerv1.ReportResponse, error) {
	<-s.release
	s.observed.Add(int64(len(req.GetObservations())))
	return &harbingerv1.ReportResponse{Answers: make([]*harbingerv1.PredictResponse, len(req.GetPublishes()))}, nil
}

// A consumer never waits for its sidecar: with the sidecar taking no
// report at all, every message is still handled and acked (more than a
// batch's worth, and more than the 264 a consumer once held before its
// handlers waited), and once the sidecar answers, every completion
// reaches it, once.
func TestConsumeDoesNotWaitForSidecar(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := dial(t)
	ch := channel(t, conn)
	q, _ := declareWithDLQ(t, conn, ch, "stalled", rabbitmq.DefaultMaxPriority)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	side := &stalled{release: make(chan struct{})}
	srv := grpc.NewServer()
	harbingerv1.RegisterPredictorServer(srv, side)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	// The calls may wait as long as the test.
	r, err := rabbitmq.DialSidecarOptions(ctx, lis.Addr().String(), rabbitmq.RemoteOptions{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const n = 600
	body := bytes.Repeat([]byte("é"), 1024) // 2 KiB
	for i := range n {
		if err := ch.PublishWithContext(ctx, "", q, false, false, amqp.Publishing{Body: body, Headers: amqp.Table{
			rabbitmq.HeaderJobType: fmt.Sprintf("rendu-%d", i%7), rabbitmq.HeaderPredictedNS: int64(time.Millisecond), rabbitmq.HeaderTier: int32(1),
		}}); err != nil {
			t.Fatal(err)
		}
	}
	handled := make(chan struct{}, n)
	cctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		errc <- rabbitmq.Consume(cctx, channel(t, conn), q, r, rabbitmq.ConsumerOptions{}, func(context.Context, amqp.Delivery) error {
			handled <- struct{}{}
			return nil
		})
	}()
	for i := range n {
		select {
		case <-handled:
		case <-ctx.Done():
			t.Fatalf("handled %d of %d messages while the sidecar took no report", i, n)
		}
	}
	stop()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if got := side.observed.Load(); got != 0 {
		t.Fatalf("the stalled sidecar took %d reports", got)
	}
	close(side.release)
	if err := r.Close(); err != nil { // sends what waits, and waits for the answers
		t.Fatal(err)
	}
	if got := side.observed.Load(); got != n {
		t.Fatalf("the sidecar took %d reports of %d completions", got, n)
	}
	if st := r.Stats(); st.ObserveErrors != 0 {
		t.Fatalf("stats %+v, want no errors", st)
	}
}
