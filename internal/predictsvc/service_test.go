package predictsvc

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	harbingerv1 "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/rabbitmq"
)

type testBundle struct {
	ctx   context.Context
	local *rabbitmq.Local
	svc   *Service
}

func setup(t *testing.T, lc rabbitmq.LocalConfig, cfg Config) testBundle {
	t.Helper()
	local, err := rabbitmq.NewLocal(lc)
	if err != nil {
		t.Fatal(err)
	}
	return testBundle{ctx: context.Background(), local: local, svc: New(local, cfg)}
}

func (tb testBundle) observe(queue, jobType string, d time.Duration) error {
	_, err := tb.svc.Observe(tb.ctx, &harbingerv1.ObserveRequest{Queue: queue, JobType: jobType, Duration: durationpb.New(d)})
	return err
}

// Requests no client could mean are refused with InvalidArgument, whether
// or not the service holds, and leave the predictor as it was.
func TestServiceRejectsBadRequests(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("x", n) }
	pred := func(q, p, j string) func(*Service) error {
		return func(s *Service) error {
			_, err := s.Predict(context.Background(), &harbingerv1.PredictRequest{Queue: q, Producer: p, JobType: j})
			return err
		}
	}
	obs := func(req *harbingerv1.ObserveRequest) func(*Service) error {
		return func(s *Service) error { _, err := s.Observe(context.Background(), req); return err }
	}
	ms := durationpb.New(time.Millisecond)
	stamped := func(st *harbingerv1.Stamp) func(*Service) error {
		return obs(&harbingerv1.ObserveRequest{Queue: "q", Duration: ms, Stamp: st})
	}
	attach := func(q string, n int32) func(*Service) error {
		return func(s *Service) error {
			_, err := s.Attach(context.Background(), &harbingerv1.AttachRequest{Queue: q, Handlers: n})
			return err
		}
	}
	tests := []struct {
		name string
		call func(*Service) error
	}{
		{"predict without queue", pred("", "p", "j")},
		{"predict with invalid UTF-8 queue", pred("q\xff", "p", "j")},
		{"predict with invalid UTF-8 producer", pred("q", "\xff\xfe", "j")},
		{"predict with invalid UTF-8 job type", pred("q", "p", "\xc3")},
		{"predict with over-long queue", pred(long(MaxQueueName+1), "p", "j")},
		{"predict with over-long producer", pred("q", long(MaxKeyLen+1), "j")},
		{"predict with over-long job type", pred("q", "p", long(MaxKeyLen+1))},
		{"observe without queue", obs(&harbingerv1.ObserveRequest{Duration: ms})},
		{"observe with invalid UTF-8 producer", obs(&harbingerv1.ObserveRequest{Queue: "q", Producer: "\xff", Duration: ms})},
		{"observe with over-long job type", obs(&harbingerv1.ObserveRequest{Queue: "q", JobType: long(1 << 20), Duration: ms})},
		{"observe without duration", obs(&harbingerv1.ObserveRequest{Queue: "q"})},
		{"observe invalid duration", obs(&harbingerv1.ObserveRequest{Queue: "q", Duration: &durationpb.Duration{Seconds: 1, Nanos: -1}})},
		{"observe negative duration", obs(&harbingerv1.ObserveRequest{Queue: "q", Duration: durationpb.New(-time.Second)})},
		{"observe zero duration", obs(&harbingerv1.ObserveRequest{Queue: "q", Duration: durationpb.New(0)})},
		{"observe absurd duration", obs(&harbingerv1.ObserveRequest{Queue: "q", Duration: durationpb.New(1000 * time.Hour)})},
		{"stamp without predicted", stamped(&harbingerv1.Stamp{})},
		{"stamp with negative cost", stamped(&harbingerv1.Stamp{Predicted: durationpb.New(-time.Second)})},
		{"stamp with impossible tier", stamped(&harbingerv1.Stamp{Predicted: durationpb.New(time.Second), Tier: 1000})},
		{"dropped without stamp", obs(&harbingerv1.ObserveRequest{Queue: "q", Dropped: true})},
		{"dropped without queue", obs(&harbingerv1.ObserveRequest{Dropped: true, Stamp: &harbingerv1.Stamp{Predicted: ms}})},
		{"dropped from an invalid UTF-8 queue", obs(&harbingerv1.ObserveRequest{Queue: "q\xff", Dropped: true, Stamp: &harbingerv1.Stamp{Predicted: ms}})},
		{"dropped with negative stamp", obs(&harbingerv1.ObserveRequest{Queue: "q", Dropped: true, Stamp: &harbingerv1.Stamp{Predicted: durationpb.New(-time.Second)}})},
		{"attach without queue", attach("", 1)},
		{"attach with invalid UTF-8 queue", attach("\xff", 1)},
		{"attach with over-long queue", attach(long(MaxQueueName+1), 1)},
		{"attach too many", attach("q", 1<<30)},
		{"detach too many", attach("q", -1<<30)},
	}
	for _, hold := range []bool{false, true} {
		tb := setup(t, rabbitmq.LocalConfig{}, Config{Hold: hold})
		for _, tt := range tests {
			if code := status.Code(tt.call(tb.svc)); code != codes.InvalidArgument {
				t.Errorf("hold %v, %s: code %v, want InvalidArgument", hold, tt.name, code)
			}
		}
		if st := tb.local.Stats(); st.Observations != 0 || st.Keys != 0 || st.Queues != 0 || len(st.Backlog) != 0 {
			t.Errorf("hold %v: rejected requests changed the predictor: %+v", hold, st)
		}
	}
}

// The longest names allowed are accepted.
func TestServiceAcceptsLimits(t *testing.T) {
	t.Parallel()
	tb := setup(t, rabbitmq.LocalConfig{}, Config{Hold: true})
	q, k := strings.Repeat("é", MaxQueueName/2), strings.Repeat("k", MaxKeyLen)
	if _, err := tb.svc.Predict(tb.ctx, &harbingerv1.PredictRequest{Queue: q, Producer: k, JobType: k}); err != nil {
		t.Errorf("predict at the limits: %v", err)
	}
	if _, err := tb.svc.Observe(tb.ctx, &harbingerv1.ObserveRequest{Queue: q, Producer: k, JobType: k, Duration: durationpb.New(time.Second)}); err != nil {
		t.Errorf("observe at the limits: %v", err)
	}
	if _, err := tb.svc.Attach(tb.ctx, &harbingerv1.AttachRequest{Queue: q, Handlers: MaxAttach}); err != nil {
		t.Errorf("attach at the limits: %v", err)
	}
}

// A key nobody has observed is long, in the middle tier, at the top AMQP
// priority, as the proto's PredictResponse promises.
func TestServiceColdPredict(t *testing.T) {
	t.Parallel()
	tb := setup(t, rabbitmq.LocalConfig{}, Config{})
	resp, err := tb.svc.Predict(tb.ctx, &harbingerv1.PredictRequest{Queue: "q"})
	if err != nil || !resp.Cold || !resp.Long || resp.SpreadGated || resp.Tier != rabbitmq.DefaultTiers/2 || resp.AmqpPriority != rabbitmq.DefaultMaxPriority {
		t.Errorf("cold predict = %v, %v; want cold, long, middle tier, priority %d", resp, err, rabbitmq.DefaultMaxPriority)
	}
}

// A key too spread to tier says so, and is long at the top priority.
func TestServiceSpreadGated(t *testing.T) {
	t.Parallel()
	tb := setup(t, rabbitmq.LocalConfig{}, Config{})
	for i := range 40 {
		d := time.Millisecond
		if i%4 == 0 {
			d = time.Second
		}
		if err := tb.observe("q", "bimodal", d); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := tb.svc.Predict(tb.ctx, &harbingerv1.PredictRequest{Queue: "q", JobType: "bimodal"})
	if err != nil || !resp.SpreadGated || resp.Cold || !resp.Long || resp.AmqpPriority != rabbitmq.DefaultMaxPriority {
		t.Errorf("gated predict = %v, %v; want spread-gated, not cold, long, priority %d", resp, err, rabbitmq.DefaultMaxPriority)
	}
}

// Random queue names cannot grow the service's state past Local's caps:
// predictions of unseen keys add nothing, observations stay within
// MaxKeys, and attaching handlers to queue after queue is refused with
// ResourceExhausted once MaxQueues have them.
func TestServiceBoundsLocal(t *testing.T) {
	t.Parallel()
	const maxKeys, maxQueues = 16, 4
	tb := setup(t, rabbitmq.LocalConfig{MaxKeys: maxKeys, MaxQueues: maxQueues}, Config{Hold: true})
	refused := 0
	for i := range 500 {
		q := fmt.Sprintf("random-%d", i)
		keys := tb.local.Stats().Keys
		if _, err := tb.svc.Predict(tb.ctx, &harbingerv1.PredictRequest{Queue: q, Producer: "p"}); err != nil {
			t.Fatal(err)
		}
		if got := tb.local.Stats().Keys; got != keys {
			t.Fatalf("predicting for unseen queue %s took the keys from %d to %d", q, keys, got)
		}
		if err := tb.observe(q, "j", time.Millisecond); err != nil {
			t.Fatal(err)
		}
		_, err := tb.svc.Attach(tb.ctx, &harbingerv1.AttachRequest{Queue: q, Handlers: 1})
		switch code := status.Code(err); {
		case i < maxQueues && code != codes.OK:
			t.Fatalf("attach %d: %v, want OK", i, err)
		case i >= maxQueues && code != codes.ResourceExhausted:
			t.Fatalf("attach %d past the cap: %v, want ResourceExhausted", i, err)
		case code == codes.ResourceExhausted:
			refused++
		}
		if st := tb.local.Stats(); st.Keys > maxKeys || st.Queues > maxQueues || len(st.Backlog) > maxQueues {
			t.Fatalf("after %d queues: %d keys, %d queues, backlog %v; caps are %d and %d", i+1, st.Keys, st.Queues, st.Backlog, maxKeys, maxQueues)
		}
	}
	if refused != 500-maxQueues {
		t.Errorf("refused %d attaches, want %d", refused, 500-maxQueues)
	}
	// Detaching a queue makes room for another.
	if _, err := tb.svc.Attach(tb.ctx, &harbingerv1.AttachRequest{Queue: "random-0", Handlers: -1}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.svc.Attach(tb.ctx, &harbingerv1.AttachRequest{Queue: "newcomer", Handlers: 1}); err != nil {
		t.Errorf("attach after a detach: %v", err)
	}
}

type recordingSharer struct {
	mu   sync.Mutex
	seen []rabbitmq.Key
}

func (r *recordingSharer) Publish(_ context.Context, k rabbitmq.Key, _ time.Duration) error {
	r.mu.Lock()
	r.seen = append(r.seen, k)
	r.mu.Unlock()
	return fmt.Errorf("share failed")
}

// Accepted observations are shared (a failure to share is not the
// caller's), rejected ones are not, and clearing the sharer stops sharing.
func TestServiceShares(t *testing.T) {
	t.Parallel()
	tb := setup(t, rabbitmq.LocalConfig{}, Config{})
	sh := &recordingSharer{}
	tb.svc.SetSharer(sh)
	if err := tb.observe("q", "a", time.Millisecond); err != nil {
		t.Fatalf("observe with a failing sharer: %v", err)
	}
	if err := tb.observe("q", "b", -time.Millisecond); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad observe = %v", err)
	}
	tb.svc.SetSharer(nil)
	if err := tb.observe("q", "c", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if want := []rabbitmq.Key{{Queue: "q", JobType: "a"}}; fmt.Sprint(sh.seen) != fmt.Sprint(want) {
		t.Errorf("shared %v, want %v", sh.seen, want)
	}
}

// FuzzService feeds the service arbitrary keys and durations: it must
// never panic nor answer with a code that blames the server.
func FuzzService(f *testing.F) {
	f.Add("q", "p", "j", uint64(10), int64(1), int32(0), true, int32(1))
	f.Add("", "\xff", "", uint64(0), int64(-1), int32(0), true, int32(-1))
	f.Add("q\x00", strings.Repeat("p", 300), "\xc3\x28", uint64(1<<63), int64(1<<62), int32(999999999), false, int32(1<<30))
	local, err := rabbitmq.NewLocal(rabbitmq.LocalConfig{MaxKeys: 64, MaxQueues: 8})
	if err != nil {
		f.Fatal(err)
	}
	svc := New(local, Config{Hold: true})
	f.Fuzz(func(t *testing.T, queue, producer, jobType string, size uint64, sec int64, nanos int32, set bool, handlers int32) {
		ctx := context.Background()
		var d *durationpb.Duration
		if set {
			d = &durationpb.Duration{Seconds: sec, Nanos: nanos}
		}
		_, err := svc.Predict(ctx, &harbingerv1.PredictRequest{Queue: queue, Producer: producer, JobType: jobType, SizeHint: size})
		checkCode(t, err)
		_, err = svc.Observe(ctx, &harbingerv1.ObserveRequest{Queue: queue, Producer: producer, JobType: jobType, SizeHint: size, Duration: d})
		checkCode(t, err)
		_, err = svc.Observe(ctx, &harbingerv1.ObserveRequest{Queue: queue, Producer: producer, JobType: jobType, SizeHint: size, Duration: d,
			Stamp: &harbingerv1.Stamp{Predicted: d, Tier: uint32(handlers)}})
		checkCode(t, err)
		_, err = svc.Observe(ctx, &harbingerv1.ObserveRequest{Queue: queue, Dropped: true, Stamp: &harbingerv1.Stamp{Predicted: d}})
		checkCode(t, err)
		_, err = svc.Attach(ctx, &harbingerv1.AttachRequest{Queue: queue, Handlers: handlers})
		checkCode(t, err)
		// The same as one Report: it fails only item by item, and what it
		// returns goes on the wire.
		resp, err := svc.Report(ctx, &harbingerv1.ReportRequest{
			Observations: []*harbingerv1.ObserveRequest{
				{Queue: queue, Producer: producer, JobType: jobType, SizeHint: size, Duration: d},
				{Queue: queue, Dropped: true, Stamp: &harbingerv1.Stamp{Predicted: d}},
			},
			Publishes: []*harbingerv1.CountedPublish{{Job: &harbingerv1.PredictRequest{Queue: queue, Producer: producer, JobType: jobType, SizeHint: size}, Counted: d}},
		})
		if err != nil {
			t.Fatalf("Report failed whole: %v", err)
		}
		if len(resp.GetAnswers()) != 1 {
			t.Fatalf("%d answers to 1 publish", len(resp.GetAnswers()))
		}
		for _, e := range append(resp.GetObservationErrors(), resp.GetPublishErrors()...) {
			checkCode(t, status.Error(codes.Code(e.GetCode()), e.GetMessage()))
		}
		if _, err := proto.Marshal(resp); err != nil {
			t.Fatalf("Report's answer does not marshal: %v", err)
		}
		for q, w := range local.Stats().Backlog {
			if w < 0 {
				t.Fatalf("queue %q's backlog is %v", q, w)
			}
		}
		if st := local.Stats(); st.Keys > 64 || st.Queues > 8 {
			t.Fatalf("state past the caps: %d keys, %d queues", st.Keys, st.Queues)
		}
	})
}

func checkCode(t *testing.T, err error) {
	t.Helper()
	switch c := status.Code(err); c {
	case codes.OK, codes.InvalidArgument, codes.ResourceExhausted:
	default:
		t.Fatalf("unexpected code %v: %v", c, err)
	}
}

type predictionSharer struct {
	recordingSharer
	mu    sync.Mutex
	costs []time.Duration
}

func (p *predictionSharer) SharePrediction(_ rabbitmq.Key, cost time.Duration) {
	p.mu.Lock()
	p.costs = append(p.costs, cost)
	p.mu.Unlock()
}

// A caching client's call about a message it already published counts the
// duration stamped on that message in the backlog, not the fresh
// prediction, so that the consumer's stamp takes out what went in; warm
// predictions, and only those, are shared for the fleet's tier windows.
func TestServiceCountsStampedPublishes(t *testing.T) {
	t.Parallel()
	tb := setup(t, rabbitmq.LocalConfig{}, Config{Hold: true})
	sh := &predictionSharer{}
	tb.svc.SetSharer(sh)
	if _, err := tb.svc.Attach(tb.ctx, &harbingerv1.AttachRequest{Queue: "q", Handlers: 1}); err != nil {
		t.Fatal(err)
	}
	predict := func(ctx context.Context) (*harbingerv1.PredictResponse, error) {
		return tb.svc.Predict(ctx, &harbingerv1.PredictRequest{Queue: "q", JobType: "a"})
	}
	if _, err := predict(tb.ctx); err != nil { // cold: counted at the typical cost (none yet)
		t.Fatal(err)
	}
	for range 3 {
		if err := tb.observe("q", "a", 10*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := predict(tb.ctx)
	if err != nil || resp.GetCold() {
		t.Fatalf("warm predict = %+v, %v", resp, err)
	}
	fresh := time.Duration(resp.GetPredictedMs() * float64(time.Millisecond))
	before := tb.local.Stats().Backlog["q"]
	counted := metadata.NewIncomingContext(tb.ctx, metadata.Pairs(rabbitmq.CountedMetadata, "7000000"))
	if _, err := predict(counted); err != nil {
		t.Fatal(err)
	}
	if got := tb.local.Stats().Backlog["q"] - before; got != 7*time.Millisecond {
		t.Errorf("a counted publish added %v to the backlog, want the stamped 7ms (fresh prediction %v)", got, fresh)
	}
	sh.mu.Lock()
	shared := len(sh.costs)
	sh.mu.Unlock()
	if shared != 2 {
		t.Errorf("shared %d predictions, want the 2 warm ones", shared)
	}
	for _, bad := range []string{"-1", "soon"} {
		ctx := metadata.NewIncomingContext(tb.ctx, metadata.Pairs(rabbitmq.CountedMetadata, bad))
		if _, err := predict(ctx); status.Code(err) != codes.InvalidArgument {
			t.Errorf("counted %q: %v, want InvalidArgument", bad, err)
		}
	}
}

// A job that left its queue without completing (rejected, or its publish
// failed) leaves the backlog with its stamp, and nothing is learned from
// it: no observation, no key, nothing shared.
func TestServiceDropped(t *testing.T) {
	t.Parallel()
	tb := setup(t, rabbitmq.LocalConfig{}, Config{Hold: true})
	sh := &recordingSharer{}
	tb.svc.SetSharer(sh)
	if _, err := tb.svc.Attach(tb.ctx, &harbingerv1.AttachRequest{Queue: "qü", Handlers: 1}); err != nil {
		t.Fatal(err)
	}
	counted := metadata.NewIncomingContext(tb.ctx, metadata.Pairs(rabbitmq.CountedMetadata, "7000000"))
	for range 2 {
		if _, err := tb.svc.Predict(counted, &harbingerv1.PredictRequest{Queue: "qü", JobType: "poison"}); err != nil {
			t.Fatal(err)
		}
	}
	if got := tb.local.Stats().Backlog["qü"]; got != 14*time.Millisecond {
		t.Fatalf("backlog %v after two publishes, want 14ms", got)
	}
	req := &harbingerv1.ObserveRequest{Queue: "qü", Dropped: true, Stamp: &harbingerv1.Stamp{Predicted: durationpb.New(7 * time.Millisecond)}}
	if _, err := tb.svc.Observe(tb.ctx, req); err != nil {
		t.Fatal(err)
	}
	st := tb.local.Stats()
	if st.Backlog["qü"] != 7*time.Millisecond || st.Observations != 0 || st.Keys != 0 {
		t.Errorf("after a drop: backlog %v (want 7ms), %d observations and %d keys (want none)", st.Backlog["qü"], st.Observations, st.Keys)
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if len(sh.seen) != 0 {
		t.Errorf("a drop was shared as observations of %v", sh.seen)
	}
}

// zeroPeers is a fleet with no other member: with it Local keeps each
// queue's signed net work, as a holding sidecar of a fleet does.
type zeroPeers struct{}

func (zeroPeers) Backlog(string) (time.Duration, int) { return 0, 0 }

// A stamp or counted duration no predictor could have made is refused:
// x-harbinger-predicted-ns is a header anything publishing to RabbitMQ can
// set, and counted it would put the queue's net work out by centuries, for
// good, and every sidecar's holds for the queue with it.
func TestServiceRefusesImpossiblePredictions(t *testing.T) {
	t.Parallel()
	tb := setup(t, rabbitmq.LocalConfig{}, Config{Hold: true})
	tb.local.SetPeers(zeroPeers{})
	const queue = "qü-\u00e9"
	if _, err := tb.svc.Attach(tb.ctx, &harbingerv1.AttachRequest{Queue: queue, Handlers: 1}); err != nil {
		t.Fatal(err)
	}
	counted := metadata.NewIncomingContext(tb.ctx, metadata.Pairs(rabbitmq.CountedMetadata, "7000000"))
	for range 2 {
		if _, err := tb.svc.Predict(counted, &harbingerv1.PredictRequest{Queue: queue, JobType: "email"}); err != nil {
			t.Fatal(err)
		}
	}
	huge := durationpb.New(time.Duration(math.MaxInt64))
	calls := map[string]func() error{
		"completion stamped with 292 years": func() error {
			_, err := tb.svc.Observe(tb.ctx, &harbingerv1.ObserveRequest{Queue: queue, JobType: "email", Duration: durationpb.New(time.Millisecond), Stamp: &harbingerv1.Stamp{Predicted: huge}})
			return err
		},
		"drop stamped with 292 years": func() error {
			_, err := tb.svc.Observe(tb.ctx, &harbingerv1.ObserveRequest{Queue: queue, Dropped: true, Stamp: &harbingerv1.Stamp{Predicted: huge}})
			return err
		},
		"publish counted at 292 years": func() error {
			ctx := metadata.NewIncomingContext(tb.ctx, metadata.Pairs(rabbitmq.CountedMetadata, fmt.Sprint(int64(math.MaxInt64))))
			_, err := tb.svc.Predict(ctx, &harbingerv1.PredictRequest{Queue: queue, JobType: "email"})
			return err
		},
	}
	for name, call := range calls {
		for range 2 {
			if code := status.Code(call()); code != codes.InvalidArgument {
				t.Errorf("%s: code %v, want InvalidArgument", name, code)
			}
		}
	}
	if got := tb.local.Totals()[queue].Net; got != 14*time.Millisecond {
		t.Errorf("net work %v after the refused calls, want the two publishes' 14ms", got)
	}
	// The longest prediction a predictor makes is taken.
	ok := &harbingerv1.ObserveRequest{Queue: queue, Dropped: true, Stamp: &harbingerv1.Stamp{Predicted: durationpb.New(MaxPredicted)}}
	if _, err := tb.svc.Observe(tb.ctx, ok); err != nil {
		t.Errorf("drop stamped at MaxPredicted: %v", err)
	}
}

// A Report is its items' Observe and Predict calls: each failure is listed
// by its index with the code its own call would have returned, the
// others take effect (learned, counted in the backlog at the stamped
// duration, taken out by their stamps), and every publish gets an answer
// in order. Too many items are refused whole, before any takes effect.
func TestServiceReport(t *testing.T) {
	t.Parallel()
	tb := setup(t, rabbitmq.LocalConfig{}, Config{Hold: true})
	if _, err := tb.svc.Attach(tb.ctx, &harbingerv1.AttachRequest{Queue: "q", Handlers: 1}); err != nil {
		t.Fatal(err)
	}
	dur := durationpb.New
	obs := func(jobType string, d time.Duration, stamp time.Duration) *harbingerv1.ObserveRequest {
		return &harbingerv1.ObserveRequest{Queue: "q", JobType: jobType, Duration: dur(d), Stamp: &harbingerv1.Stamp{Predicted: dur(stamp)}}
	}
	pub := func(jobType string, counted *durationpb.Duration) *harbingerv1.CountedPublish {
		return &harbingerv1.CountedPublish{Job: &harbingerv1.PredictRequest{Queue: "q", JobType: jobType}, Counted: counted}
	}
	resp, err := tb.svc.Report(tb.ctx, &harbingerv1.ReportRequest{
		Publishes: []*harbingerv1.CountedPublish{
			pub("rendu-ü", dur(40*time.Millisecond)),
			pub("rendu-ü", dur(-time.Second)), // refused: negative
			pub("rendu-ü", nil),               // refused: no duration
			{Job: &harbingerv1.PredictRequest{JobType: "x"}, Counted: dur(time.Millisecond)}, // refused: no queue
			pub("rendu-ü", dur(60*time.Millisecond)),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := tb.local.Stats().Backlog["q"]; got != 100*time.Millisecond {
		t.Fatalf("backlog after 2 good counted publishes of 40 and 60 ms: %v", got)
	}
	if n := len(resp.GetAnswers()); n != 5 {
		t.Fatalf("%d answers, want one per publish", n)
	}
	if !resp.GetAnswers()[0].GetCold() || resp.GetAnswers()[1].GetTier() != 0 || resp.GetAnswers()[1].GetCold() {
		t.Fatalf("answers %v: want the cold default for a good publish, an empty answer for a refused one", resp.GetAnswers())
	}
	checkItems(t, "publish", resp.GetPublishErrors(), []uint32{1, 2, 3})

	resp, err = tb.svc.Report(tb.ctx, &harbingerv1.ReportRequest{
		Observations: []*harbingerv1.ObserveRequest{
			obs("rendu-ü", 30*time.Millisecond, 40*time.Millisecond),
			obs("rendu-\xff", 30*time.Millisecond, 0), // refused: not UTF-8
			obs("rendu-ü", -time.Millisecond, 0),      // refused: negative duration
			{Queue: "q", Dropped: true},               // refused: a drop needs its stamp
			obs("rendu-ü", 50*time.Millisecond, 60*time.Millisecond),
			obs("rendu-ü", 40*time.Millisecond, 0),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	checkItems(t, "observation", resp.GetObservationErrors(), []uint32{1, 2, 3})
	if st := tb.svc.Stats(); st.ReportCalls != 2 || st.ReportItems != 11 {
		t.Errorf("stats %+v, want 2 calls of 11 items", st)
	}
	if got := tb.local.Stats().Backlog["q"]; got != 0 {
		t.Errorf("backlog after both publishes completed: %v, want 0", got)
	}
	if r, err := tb.svc.Predict(tb.ctx, &harbingerv1.PredictRequest{Queue: "q", JobType: "rendu-ü"}); err != nil || r.GetCold() {
		t.Errorf("after 3 reported observations the key is %+v, %v; want it warm", r, err)
	}

	big := &harbingerv1.ReportRequest{}
	for range MaxReportItems {
		big.Observations = append(big.Observations, obs("gros", time.Millisecond, 0))
	}
	big.Publishes = []*harbingerv1.CountedPublish{pub("gros", dur(time.Millisecond))}
	before := tb.local.Stats().Backlog["q"] // the Predict above counted its answer
	if _, err := tb.svc.Report(tb.ctx, big); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "in parts") {
		t.Fatalf("report of %d items: %v, want InvalidArgument", MaxReportItems+1, err)
	}
	if got := tb.local.Stats().Backlog["q"]; got != before {
		t.Errorf("a refused report changed the backlog from %v to %v", before, got)
	}
}

// checkItems checks a Report's errors name exactly the items want, each
// with InvalidArgument and a message.
func checkItems(t *testing.T, what string, errs []*harbingerv1.ReportError, want []uint32) {
	t.Helper()
	var got []uint32
	for _, e := range errs {
		got = append(got, e.GetIndex())
		if codes.Code(e.GetCode()) != codes.InvalidArgument || e.GetMessage() == "" {
			t.Errorf("%s %d: code %v %q, want InvalidArgument with a message", what, e.GetIndex(), codes.Code(e.GetCode()), e.GetMessage())
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("failed %ss %v, want %v", what, got, want)
	}
}
