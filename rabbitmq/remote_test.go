package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	harbingerv1 "github.com/harbinger-mq/harbinger/api/harbinger/v1"
)

// fakeSidecar answers Predict with a predicted duration of 10 ms times the
// number of answers so far, so that a test sees which call an answer came
// from, and records the duration each said was stamped (-1: none) and
// the observations it took. With report it serves Report too, each
// publish as a Predict call that counts its duration, each observation
// refused when its job type is "bad"; without, it is a sidecar from
// before Report.
type fakeSidecar struct {
	harbingerv1.UnimplementedPredictorServer
	report bool

	mu       sync.Mutex
	calls    int
	counted  []time.Duration
	observed []string // job types, in the order taken
	batches  []int    // items per Report call
	fail     bool
	block    chan struct{} // when set, Report waits for it to close
}

func (f *fakeSidecar) Predict(ctx context.Context, _ *harbingerv1.PredictRequest) (*harbingerv1.PredictResponse, error) {
	c := time.Duration(-1)
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(CountedMetadata); len(v) > 0 {
			d, err := time.ParseDuration(v[0] + "ns")
			if err != nil {
				return nil, status.Error(codes.InvalidArgument, err.Error())
			}
			c = d
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.answer(c)
}

// answer is Predict's answer; f.mu is held.
func (f *fakeSidecar) answer(counted time.Duration) (*harbingerv1.PredictResponse, error) {
	f.counted = append(f.counted, counted)
	if f.fail {
		return nil, status.Error(codes.Unavailable, "down")
	}
	f.calls++
	return &harbingerv1.PredictResponse{Tier: 1, AmqpPriority: 3, PredictedMs: float64(10 * f.calls)}, nil
}

func (f *fakeSidecar) Observe(_ context.Context, req *harbingerv1.ObserveRequest) (*harbingerv1.ObserveResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.take(req); err != nil {
		return nil, err
	}
	return &harbingerv1.ObserveResponse{}, nil
}

// take records an observation; f.mu is held.
func (f *fakeSidecar) take(req *harbingerv1.ObserveRequest) error {
	if f.fail {
		return status.Error(codes.Unavailable, "down")
	}
	if strings.HasPrefix(req.GetJobType(), "bad") {
		return status.Error(codes.InvalidArgument, "bad job type")
	}
	f.observed = append(f.observed, req.GetJobType())
	return nil
}

func (f *fakeSidecar) Report(_ context.Context, req *harbingerv1.ReportRequest) (*harbingerv1.ReportResponse, error) {
	if !f.report {
		return nil, status.Error(codes.Unimplemented, "no Report")
	}
	f.mu.Lock()
	block := f.block
	f.mu.Unlock()
	if block != nil {
		<-block
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches = append(f.batches, len(req.GetObservations())+len(req.GetPublishes()))
	if f.fail {
		return nil, status.Error(codes.Unavailable, "down")
	}
	resp := &harbingerv1.ReportResponse{}
	for i, o := range req.GetObservations() {
		if err := f.take(o); err != nil {
			resp.ObservationErrors = append(resp.ObservationErrors, &harbingerv1.ReportError{Index: uint32(i), Code: uint32(status.Code(err)), Message: err.Error()})
		}
	}
	for _, p := range req.GetPublishes() {
		a, _ := f.answer(p.GetCounted().AsDuration())
		resp.Answers = append(resp.Answers, a)
	}
	return resp, nil
}

func (f *fakeSidecar) reported() (observed []string, batches []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.observed), slices.Clone(f.batches)
}

func (f *fakeSidecar) seen() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.counted...)
}

func (f *fakeSidecar) setFail(v bool) {
	f.mu.Lock()
	f.fail = v
	f.mu.Unlock()
}

type remoteBundle struct {
	clk    *fakeClock
	server *fakeSidecar
	remote *Remote
}

func setupRemote(t *testing.T, cacheFor time.Duration) remoteBundle {
	t.Helper()
	return setupRemoteOptions(t, true, RemoteOptions{CacheFor: cacheFor})
}

// setupRemoteOptions starts a fake sidecar, with Report or without, and
// a Remote of it with opts, a 5 s timeout and a fake clock.
func setupRemoteOptions(t *testing.T, report bool, opts RemoteOptions) remoteBundle {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	fake := &fakeSidecar{report: report}
	harbingerv1.RegisterPredictorServer(srv, fake)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	clk := &fakeClock{now: time.Unix(1000, 0)}
	opts.Timeout, opts.Now = 5*time.Second, clk.Now
	r, err := DialSidecarOptions(context.Background(), lis.Addr().String(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return remoteBundle{clk: clk, server: fake, remote: r}
}

func (tb remoteBundle) predict(t *testing.T) Priority {
	t.Helper()
	pr, err := tb.remote.Predict(context.Background(), Key{Queue: "q", JobType: "a"})
	if err != nil {
		t.Fatal(err)
	}
	return pr
}

const ms = time.Millisecond

// A cached answer is given at once; the sidecar still hears of the
// message, with the duration stamped on it, and its answer becomes the
// next message's. An answer whose request went out CacheFor ago or more is
// not used; a fallback is never cached.
func TestRemoteCache(t *testing.T) {
	t.Parallel()
	for _, report := range []bool{true, false} {
		t.Run(map[bool]string{true: "Report", false: "sidecar without Report"}[report], func(t *testing.T) {
			t.Parallel()
			testRemoteCache(t, setupRemoteOptions(t, report, RemoteOptions{CacheFor: 600 * ms}))
		})
	}
}

func testRemoteCache(t *testing.T, tb remoteBundle) {
	if pr := tb.predict(t); pr.Predicted != 10*ms {
		t.Fatalf("first answer %v, want the sidecar's first, 10ms", pr.Predicted)
	}
	if pr := tb.predict(t); pr.Predicted != 10*ms {
		t.Fatalf("second answer %v, want the cached 10ms", pr.Predicted)
	}
	tb.remote.reports.close() // the report that told the sidecar of it
	if got, want := tb.server.seen(), []time.Duration{-1, 10 * ms}; !slices.Equal(got, want) {
		t.Fatalf("sidecar heard %v, want %v: an ask, then the cached message's stamp", got, want)
	}
	tb.clk.Advance(599 * ms)
	if pr := tb.predict(t); pr.Predicted != 20*ms {
		t.Fatalf("third answer %v, want 20ms, the answer to the second message's call", pr.Predicted)
	}
	tb.remote.reports.close()
	// The newest answer's request went out at 599 ms; at 1,199 ms it is
	// too old, and Predict asks and waits again.
	tb.clk.Advance(600 * ms)
	if pr := tb.predict(t); pr.Predicted != 40*ms {
		t.Fatalf("answer after the cache time %v, want a fresh 40ms", pr.Predicted)
	}
	if got, want := tb.server.seen(), []time.Duration{-1, 10 * ms, 20 * ms, -1}; !slices.Equal(got, want) {
		t.Fatalf("sidecar heard %v, want %v", got, want)
	}
	if s := tb.remote.Stats(); s.CacheHits != 2 || s.Fallbacks != 0 || s.CountErrors != 0 {
		t.Fatalf("stats %+v, want 2 hits", s)
	}

	// Down: the cached answer serves until it is too old, the failed
	// count is counted, then the fallback, which is not cached.
	tb.server.setFail(true)
	if pr := tb.predict(t); pr.Predicted != 40*ms {
		t.Fatalf("answer while the sidecar fails %v, want the cached 40ms", pr.Predicted)
	}
	tb.remote.reports.close()
	tb.clk.Advance(600 * ms)
	if pr := tb.predict(t); !pr.Cold || pr.Tier != DefaultTiers/2 {
		t.Fatalf("answer from a failing sidecar %+v, want the middle-tier fallback", pr)
	}
	tb.server.setFail(false)
	if pr := tb.predict(t); pr.Predicted != 50*ms {
		t.Fatalf("answer after the sidecar is back %v, want a fresh 50ms", pr.Predicted)
	}
	if s := tb.remote.Stats(); s.Fallbacks != 1 || s.CountErrors != 1 || s.LastError == nil {
		t.Fatalf("stats %+v, want 1 fallback and 1 count error", s)
	}
}

// Without CacheFor every message waits for its own answer.
func TestRemoteWithoutCache(t *testing.T) {
	t.Parallel()
	tb := setupRemote(t, 0)
	for i := range 3 {
		if pr := tb.predict(t); pr.Predicted != time.Duration(i+1)*10*ms {
			t.Fatalf("answer %d: %v, want %v", i, pr.Predicted, time.Duration(i+1)*10*ms)
		}
	}
	if got := tb.server.seen(); !slices.Equal(got, []time.Duration{-1, -1, -1}) {
		t.Fatalf("sidecar heard %v, want three plain asks", got)
	}
	if s := tb.remote.Stats(); s.CacheHits != 0 {
		t.Fatalf("stats %+v, want no hits", s)
	}
}

func TestRemoteOptionsRejectNegativeCache(t *testing.T) {
	t.Parallel()
	_, err := DialSidecarOptions(context.Background(), "127.0.0.1:1", RemoteOptions{CacheFor: -time.Second})
	if err == nil || errors.Is(err, context.Canceled) {
		t.Fatalf("negative cache time: %v, want an error", err)
	}
}

// manualTimer replaces a Remote's report timer: fire runs what it armed.
type manualTimer struct {
	mu    sync.Mutex
	armed int
	f     func()
}

func (m *manualTimer) after(d time.Duration, f func()) func() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.armed++
	m.f = f
	return func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		stopped := m.f != nil
		m.f = nil
		return stopped
	}
}

// fire runs what is armed, if anything: a stopped timer does not fire.
func (m *manualTimer) fire() {
	m.mu.Lock()
	f := m.f
	m.f = nil
	m.mu.Unlock()
	if f != nil {
		f()
	}
}

// A busy consumer's reports share calls: a batch goes as soon as it holds
// reportBatch of them, the rest when the timer armed by its first fires.
// An observation the sidecar refuses, or one whose key is not UTF-8 (which
// gRPC cannot send), reaches its own onErr, and the rest of its batch is
// taken. Against a sidecar without Report the same
// reports go one call each, with the same outcome.
func TestRemoteReportsInBatches(t *testing.T) {
	t.Parallel()
	for _, report := range []bool{true, false} {
		t.Run(map[bool]string{true: "Report", false: "sidecar without Report"}[report], func(t *testing.T) {
			t.Parallel()
			tb := setupRemoteOptions(t, report, RemoteOptions{})
			timer := &manualTimer{}
			tb.remote.reports.after = timer.after
			var mu sync.Mutex
			var refused, wantRefused []int
			var want []string
			n := reportBatch + 46 // 2 refused by the client: a full batch, and 44 more
			for i := range n {
				jt := fmt.Sprintf("tâche-%d", i)
				switch i {
				case 7, reportBatch + 3:
					jt = "bad" // the sidecar refuses it
					wantRefused = append(wantRefused, i)
				case 9, reportBatch + 5:
					jt += "\xff" // the client refuses it
					wantRefused = append(wantRefused, i)
				default:
					want = append(want, jt)
				}
				tb.remote.report(Key{Queue: "q", JobType: jt}, &Stamp{Predicted: ms, Tier: 1}, 2*ms, func(err error) {
					if !strings.Contains(err.Error(), "bad job type") && !strings.Contains(err.Error(), "not valid UTF-8") {
						t.Errorf("report %d: %v, want the sidecar's or the client's refusal", i, err)
					}
					mu.Lock()
					refused = append(refused, i)
					mu.Unlock()
				})
			}
			tb.remote.reports.sending.Wait() // the full batch
			observed, batches := tb.server.reported()
			if report && !slices.Equal(batches, []int{reportBatch}) {
				t.Fatalf("calls before the timer: %v, want one of %d", batches, reportBatch)
			}
			if len(observed) != reportBatch-1 {
				t.Fatalf("sidecar took %d reports before the timer, want %d", len(observed), reportBatch-1)
			}
			timer.fire()
			tb.remote.reports.sending.Wait()
			observed, batches = tb.server.reported()
			if report && !slices.Equal(batches, []int{reportBatch, n - 2 - reportBatch}) {
				t.Fatalf("calls: %v, want %d then %d", batches, reportBatch, n-2-reportBatch)
			}
			if !report && batches != nil {
				t.Fatalf("Report calls to a sidecar without it: %v", batches)
			}
			if !slices.Equal(observed, want) {
				t.Fatalf("sidecar took %d reports, want the %d good ones in order", len(observed), len(want))
			}
			mu.Lock()
			slices.Sort(refused)
			if !slices.Equal(refused, wantRefused) {
				t.Fatalf("refused reports %v, want %v", refused, wantRefused)
			}
			mu.Unlock()
			if timer.armed != 2 {
				t.Fatalf("timer armed %d times, want 2: by the first report and by the first after the full batch", timer.armed)
			}
			if s := tb.remote.Stats(); s.ObserveErrors != 4 {
				t.Fatalf("stats %+v, want 4 observe errors", s)
			}
		})
	}
}

// While the sidecar does not answer, a Remote holds at most maxUnsent
// reports: the next fails at once, and every one it held reaches the
// sidecar once it answers.
func TestRemoteReportsBounded(t *testing.T) {
	t.Parallel()
	tb := setupRemoteOptions(t, true, RemoteOptions{})
	tb.remote.reports.after = (&manualTimer{}).after
	block := make(chan struct{})
	tb.server.mu.Lock()
	tb.server.block = block
	tb.server.mu.Unlock()
	for i := range maxUnsent {
		tb.remote.report(Key{Queue: "q", JobType: "j"}, nil, ms, func(err error) { t.Errorf("report %d: %v", i, err) })
	}
	var late error
	tb.remote.report(Key{Queue: "q", JobType: "j"}, nil, ms, func(err error) { late = err })
	if !errors.Is(late, errReportsBacklogged) {
		t.Fatalf("report past the bound: %v, want %v", late, errReportsBacklogged)
	}
	close(block)
	tb.remote.reports.close()
	observed, batches := tb.server.reported()
	if len(observed) != maxUnsent || len(batches) != maxUnsent/reportBatch {
		t.Fatalf("sidecar took %d reports in %d calls, want %d in %d", len(observed), len(batches), maxUnsent, maxUnsent/reportBatch)
	}
	if s := tb.remote.Stats(); s.ObserveErrors != 1 {
		t.Fatalf("stats %+v, want the one refused report counted", s)
	}
}

// A property test of the report batcher against a reference model: random
// runs of reports (good, refused by the sidecar, not UTF-8), timer fires,
// a sidecar that goes down and comes back, and reports sent one at a time
// or in batches. The model says when each batch goes (full, or when the
// timer fires) and so each report's fate; the Remote must give every
// report exactly that fate, once: taken by the sidecar, or failed to its
// onErr, with the counts to match, in calls of the sizes the model sends.
func TestRemoteReportsMatchModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 7))
			every := DefaultReportEvery
			if seed%4 == 3 {
				every = -1 // each report alone
			}
			tb := setupRemoteOptions(t, true, RemoteOptions{ReportEvery: every})
			timer := &manualTimer{}
			tb.remote.reports.after = timer.after

			var mu sync.Mutex
			failed := map[string]int{}
			var wantTaken []string
			wantFailed := map[string]int{}
			var pending []string // the model's batch: job types waiting
			var wantBatches []int
			down := false
			settle := func() { // the model sends the batch; the Remote has too
				tb.remote.reports.sending.Wait()
				if len(pending) > 0 {
					wantBatches = append(wantBatches, len(pending))
				}
				for _, jt := range pending {
					if down || strings.HasPrefix(jt, "bad") {
						wantFailed[jt]++
					} else {
						wantTaken = append(wantTaken, jt)
					}
				}
				pending = nil
			}
			odds := 20 // one op in odds fires the timer, one toggles the sidecar
			if seed%2 == 1 {
				odds = 1000 // batches fill
			}
			for i := range 1200 {
				switch r := rng.IntN(odds); {
				case r == 0:
					timer.fire()
					settle()
				case r == 1:
					down = !down
					tb.server.setFail(down)
				default:
					jt := fmt.Sprintf("tâche-%d", i)
					switch rng.IntN(10) {
					case 0:
						jt = fmt.Sprintf("bad-%d", i)
					case 1:
						jt = fmt.Sprintf("\xff-%d", i)
					}
					tb.remote.report(Key{Queue: "q", JobType: jt}, &Stamp{Predicted: ms}, ms, func(error) {
						mu.Lock()
						failed[jt]++
						mu.Unlock()
					})
					if !utf8.ValidString(jt) {
						wantFailed[jt]++ // at once, never queued
						break
					}
					pending = append(pending, jt)
					if every < 0 || len(pending) == reportBatch {
						settle()
					}
				}
			}
			timer.fire()
			settle()
			taken, batches := tb.server.reported()
			if !slices.Equal(batches, wantBatches) {
				t.Fatalf("Report calls of %v items, the model's %v", batches, wantBatches)
			}
			if !slices.Equal(taken, wantTaken) {
				t.Fatalf("sidecar took %d reports, the model %d", len(taken), len(wantTaken))
			}
			mu.Lock()
			defer mu.Unlock()
			if !maps.Equal(failed, wantFailed) {
				t.Fatalf("%d reports failed, the model says %d", len(failed), len(wantFailed))
			}
			if s := tb.remote.Stats(); s.ObserveErrors != uint64(len(wantFailed)) {
				t.Fatalf("ObserveErrors %d, want %d", s.ObserveErrors, len(wantFailed))
			}
		})
	}
}

// fakeClock is the clock of the Remote's cache in these tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
