package rabbitmq

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	harbingerv1 "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/clock"
)

// fakeSidecar answers Predict with a predicted duration of 10 ms times the
// number of calls so far, so that a test sees which call an answer came
// from, and records the duration each call said was stamped (-1: none).
type fakeSidecar struct {
	harbingerv1.UnimplementedPredictorServer
	mu      sync.Mutex
	calls   int
	counted []time.Duration
	fail    bool
}

func (f *fakeSidecar) Predict(ctx context.Context, _ *harbingerv1.PredictRequest) (*harbingerv1.PredictResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
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
	f.counted = append(f.counted, c)
	if f.fail {
		return nil, status.Error(codes.Unavailable, "down")
	}
	f.calls++
	return &harbingerv1.PredictResponse{Tier: 1, AmqpPriority: 3, PredictedMs: float64(10 * f.calls)}, nil
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
	clk    *clock.Fake
	server *fakeSidecar
	remote *Remote
}

func setupRemote(t *testing.T, cacheFor time.Duration) remoteBundle {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	fake := &fakeSidecar{}
	harbingerv1.RegisterPredictorServer(srv, fake)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	clk := clock.NewFake(time.Unix(1000, 0))
	r, err := DialSidecarOptions(context.Background(), lis.Addr().String(), RemoteOptions{Timeout: 5 * time.Second, CacheFor: cacheFor, Now: clk.Now})
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
	tb := setupRemote(t, 600*ms)
	if pr := tb.predict(t); pr.Predicted != 10*ms {
		t.Fatalf("first answer %v, want the sidecar's first, 10ms", pr.Predicted)
	}
	if pr := tb.predict(t); pr.Predicted != 10*ms {
		t.Fatalf("second answer %v, want the cached 10ms", pr.Predicted)
	}
	tb.remote.counting.Wait() // the call that told the sidecar of it
	if got, want := tb.server.seen(), []time.Duration{-1, 10 * ms}; !slices.Equal(got, want) {
		t.Fatalf("sidecar heard %v, want %v: an ask, then the cached message's stamp", got, want)
	}
	tb.clk.Advance(599 * ms)
	if pr := tb.predict(t); pr.Predicted != 20*ms {
		t.Fatalf("third answer %v, want 20ms, the answer to the second message's call", pr.Predicted)
	}
	tb.remote.counting.Wait()
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
	tb.remote.counting.Wait()
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
