package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/rabbitmq"
)

// batchBundle is a Share without RabbitMQ: what it would publish goes to
// sent, and time is a fake clock.
type batchBundle struct {
	clk   *clock.Fake
	share *Share
	local *rabbitmq.Local
	sent  chan []byte
	fail  error // returned by every send when set
}

func setupBatch(t *testing.T, cfg ShareConfig) *batchBundle {
	t.Helper()
	tb := &batchBundle{clk: clock.NewFake(time.Unix(1000, 0)), sent: make(chan []byte, 16)}
	cfg.Clock = tb.clk
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	local, err := rabbitmq.NewLocal(rabbitmq.LocalConfig{RecomputeEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	tb.local = local
	tb.share = newShare(cfg, local)
	tb.share.send = func(_ context.Context, exchange string, body []byte) error {
		if exchange != cfg.Exchange {
			t.Errorf("batch sent to %q, want the observation exchange %q", exchange, cfg.Exchange)
		}
		if tb.fail != nil {
			return tb.fail
		}
		tb.sent <- body
		return nil
	}
	return tb
}

// next returns the next batch sent. A full batch is sent from a goroutine
// of its own, so this waits for it (the deadline only fails a broken test).
func (tb *batchBundle) next(t *testing.T) batch {
	t.Helper()
	select {
	case body := <-tb.sent:
		var b batch
		if err := json.Unmarshal(body, &b); err != nil {
			t.Fatal(err)
		}
		return b
	case <-time.After(5 * time.Second):
		t.Fatal("no batch sent")
		return batch{}
	}
}

func (tb *batchBundle) none(t *testing.T) {
	t.Helper()
	select {
	case body := <-tb.sent:
		t.Fatalf("sent %s, want nothing yet", body)
	default:
	}
}

// Observations and predictions wait for the batch interval, then go out
// together in one message; nothing waits after it.
func TestBatchWaitsForTheInterval(t *testing.T) {
	t.Parallel()
	tb := setupBatch(t, ShareConfig{BatchMax: 100})
	ctx := context.Background()
	for i := range 3 {
		if err := tb.share.Publish(ctx, shortKey, time.Duration(i+1)*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	tb.share.SharePrediction(longKey, 500*time.Millisecond)
	tb.share.SharePrediction(shortKey, 2*time.Millisecond)
	tb.share.SharePrediction(shortKey, 0) // never a warm prediction: not shared
	if n := tb.clk.Pending(); n != 1 {
		t.Fatalf("%d timers armed, want the one batch timer", n)
	}
	tb.clk.Advance(DefaultBatchEvery - time.Nanosecond)
	tb.none(t)
	tb.clk.Advance(time.Nanosecond)
	b := tb.next(t)
	if len(b.Observations) != 3 || len(b.Predictions) != 2 {
		t.Fatalf("batch %+v, want 3 observations and 2 predictions", b)
	}
	if p := b.Predictions[0]; p.JobType != longKey.JobType || p.NS != int64(500*time.Millisecond) {
		t.Errorf("first prediction %+v, want %s at 500ms", p, longKey.JobType)
	}
	if n := tb.clk.Pending(); n != 0 {
		t.Errorf("%d timers armed after the batch went, want none", n)
	}
	tb.clk.Advance(time.Hour)
	tb.none(t)
	st := tb.share.Stats()
	if st.Sent != 3 || st.PredictionsSent != 2 || st.Batches != 1 || st.SendErrors != 0 {
		t.Errorf("stats %+v, want 3 observations and 2 predictions in 1 batch", st)
	}
}

// A full batch goes at once, and its timer with it; a batch RabbitMQ
// refuses counts its observations as send errors.
func TestBatchFullGoesAtOnce(t *testing.T) {
	t.Parallel()
	tb := setupBatch(t, ShareConfig{BatchMax: 4})
	ctx := context.Background()
	for range 3 {
		_ = tb.share.Publish(ctx, shortKey, time.Millisecond)
	}
	tb.none(t)
	tb.share.SharePrediction(shortKey, time.Millisecond)
	if b := tb.next(t); len(b.Observations) != 3 || len(b.Predictions) != 1 {
		t.Fatalf("batch %+v, want 3 observations and 1 prediction", b)
	}
	tb.share.sending.Wait() // counted once its send returned
	if n := tb.clk.Pending(); n != 0 {
		t.Fatalf("%d timers armed after a full batch went, want none", n)
	}

	tb.fail = errors.New("channel closed")
	_ = tb.share.Publish(ctx, shortKey, time.Millisecond)
	_ = tb.share.Publish(ctx, shortKey, time.Millisecond)
	tb.clk.Advance(DefaultBatchEvery)
	if st := tb.share.Stats(); st.SendErrors != 2 || st.Sent != 3 {
		t.Errorf("stats %+v, want 2 send errors and 3 sent", st)
	}
}

// warm teaches l every key of costs, so that its predictions are routed.
func warm(t *testing.T, l *rabbitmq.Local, costs map[rabbitmq.Key]time.Duration) {
	t.Helper()
	for k, d := range costs {
		for range 5 {
			if err := l.Observe(context.Background(), k, d); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Two sidecars whose clients publish different kinds of work draw the
// same tier boundaries once each records the other's predictions: the
// boundaries a single predictor draws that made every prediction itself.
// Observations that come in a batch teach durations but stay out of the
// window (the sender shared its predictions); a single observation from a
// sidecar that does not batch counts in it, as before batches.
func TestSharedPredictionsGiveOneWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	emails := rabbitmq.Key{Queue: "jobs", Producer: "notify", JobType: "email"}
	costs := map[rabbitmq.Key]time.Duration{
		emails:   4 * time.Millisecond,
		shortKey: 40 * time.Millisecond,
		longKey:  900 * time.Millisecond,
		{Queue: "jobs", Producer: "billing", JobType: "invoice"}: 300 * time.Millisecond,
	}
	a, b := setupBatch(t, ShareConfig{BatchMax: 1000}), setupBatch(t, ShareConfig{BatchMax: 1000})
	one, err := rabbitmq.NewLocal(rabbitmq.LocalConfig{RecomputeEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []*rabbitmq.Local{a.local, b.local, one} {
		warm(t, l, costs)
	}
	// a's publishers send emails and thumbnails, b's reports and invoices.
	mine := map[*batchBundle][]rabbitmq.Key{a: {emails, emails, emails, shortKey}, b: {longKey, costs2key(costs, "invoice")}}
	for range 50 {
		for _, tb := range []*batchBundle{a, b} {
			for _, k := range mine[tb] {
				pr, _ := tb.local.Predict(ctx, k)
				if pr.Cold {
					t.Fatalf("cold prediction for %+v", k)
				}
				tb.share.SharePrediction(k, pr.Predicted)
				_, _ = one.Predict(ctx, k)
			}
		}
	}
	for _, from := range []*batchBundle{a, b} {
		from.clk.Advance(DefaultBatchEvery)
	}
	ba, bb := a.next(t), b.next(t)
	fold := func(to *batchBundle, bt batch) {
		body, _ := json.Marshal(bt)
		to.share.foldShared(ctx, body)
	}
	fold(b, ba)
	fold(a, bb)
	want := one.Stats().Boundaries
	for name, tb := range map[string]*batchBundle{"a": a, "b": b} {
		if got := tb.local.Stats().Boundaries; !slices.Equal(got, want) {
			t.Errorf("sidecar %s boundaries %v, want the single predictor's %v", name, got, want)
		}
	}
	if st := a.share.Stats(); st.PredictionsRead != uint64(len(bb.Predictions)) {
		t.Errorf("a recorded %d predictions, want %d", st.PredictionsRead, len(bb.Predictions))
	}
	// Each tiers a report below a thumbnail, whoever's clients send them.
	for name, tb := range map[string]*batchBundle{"a": a, "b": b} {
		ps, _ := tb.local.Predict(ctx, shortKey)
		pl, _ := tb.local.Predict(ctx, longKey)
		if ps.Tier >= pl.Tier && !pl.Long {
			t.Errorf("sidecar %s: thumbnail %+v, report %+v: want the report below or long", name, ps, pl)
		}
	}

	// Observations in a batch: learned, not in the window.
	before := a.local.Stats()
	fold(a, batch{Observations: []observation{{Queue: longKey.Queue, Producer: longKey.Producer, JobType: longKey.JobType, NS: int64(time.Second)}}})
	after := a.local.Stats()
	if after.Observations != before.Observations+1 {
		t.Errorf("observations %d, want %d", after.Observations, before.Observations+1)
	}
	// A fresh predictor shows the window directly: its boundaries come
	// from nothing but the window.
	fresh := setupBatch(t, ShareConfig{})
	fold(fresh, batch{Observations: []observation{{Queue: "q", JobType: "x", NS: int64(time.Millisecond)}}})
	if bs := fresh.local.Stats().Boundaries; len(bs) != 0 {
		t.Errorf("boundaries %v after a batched observation, want none: it is not in the window", bs)
	}
	legacy, _ := json.Marshal(observation{Queue: "q", JobType: "x", NS: int64(time.Millisecond)})
	for range 3 {
		fresh.share.foldShared(ctx, legacy)
	}
	if bs := fresh.local.Stats().Boundaries; len(bs) == 0 {
		t.Error("no boundaries after single observations of a warm key: a sidecar that does not batch has its completions in the window")
	}
	if st := fresh.share.Stats(); st.Received != 4 {
		t.Errorf("received %d observations, want 4", st.Received)
	}
}

func costs2key(costs map[rabbitmq.Key]time.Duration, jobType string) rabbitmq.Key {
	for k := range costs {
		if k.JobType == jobType {
			return k
		}
	}
	panic("no key " + jobType)
}

// A peer's message is anything publishing to the exchange can send, and
// the predictor keeps a key's queue name whole: keys whose queue no
// client could name (over 255 bytes) are not learned from a batch, a
// single observation or a snapshot, while the rest of the message is.
func TestShareIgnoresImpossibleQueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tb := setupBatch(t, ShareConfig{})
	tb.share.send = func(context.Context, string, []byte) error { return nil } // the answer to a new peer's snapshot
	long := []string{strings.Repeat("ü", 128), strings.Repeat("x", 1<<16)}     // 256 bytes, 64 KiB
	ok := observation{Queue: strings.Repeat("é", 127), Producer: "\xff\xfe", JobType: "email", NS: int64(time.Millisecond)}
	var bt batch
	for i := range 20 {
		bad := observation{Queue: long[i%2] + fmt.Sprint(i), JobType: "email", NS: int64(time.Millisecond)}
		bt.Observations = append(bt.Observations, bad)
		bt.Predictions = append(bt.Predictions, bad)
	}
	bt.Observations = append(bt.Observations, ok)
	body, _ := json.Marshal(bt)
	tb.share.foldShared(ctx, body)
	single, _ := json.Marshal(observation{Queue: long[1], JobType: "email", NS: int64(time.Millisecond)})
	tb.share.foldShared(ctx, single)
	var snap snapshot
	for i := range 20 {
		snap.Keys = append(snap.Keys, snapshotKey{observation: observation{Queue: long[i%2] + fmt.Sprint(i), NS: int64(time.Second)}, Count: 100})
	}
	body, _ = json.Marshal(snap)
	tb.share.foldSnapshot(ctx, "peer-ü", body)
	if st := tb.local.Stats(); st.Keys != 1 || st.Observations != 1 {
		t.Errorf("%d keys and %d observations kept, want the one key a client could name", st.Keys, st.Observations)
	}
	if st := tb.share.Stats(); st.Received != 1 || st.PredictionsRead != 0 || st.CaughtUp != 0 {
		t.Errorf("share stats %+v, want 1 observation received and nothing else", st)
	}
}

// A key caught up from one peer's snapshot is not replayed again from
// another's while fewer than two generations of other keys (80,000) have
// been caught up since; the memory of it stays bounded all the same.
// Before, the set of keys caught up was cleared at 40,000, and the next
// snapshot naming a key from before replayed its EWMA into it again.
// A snapshot that knows a key less well than this sidecar does leaves it
// for a better-informed peer's, whose snapshot then catches it up.
func TestSnapshotCatchUpWaitsForBetterPeer(t *testing.T) {
	t.Parallel()
	local, err := rabbitmq.NewLocal(rabbitmq.LocalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	s := newShare(ShareConfig{Clock: clock.NewFake(time.Unix(1000, 0))}.WithDefaults(), local)
	s.send = func(context.Context, string, []byte) error { return nil }
	ctx := context.Background()
	k := rabbitmq.Key{Queue: "jobs", Producer: "wéb", JobType: "résumé"}
	for range 5 {
		if err := local.Observe(ctx, k, 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	snapshotWith := func(count uint64, d time.Duration) []byte {
		body, err := json.Marshal(snapshot{Keys: []snapshotKey{{
			observation: observation{Queue: k.Queue, Producer: k.Producer, JobType: k.JobType, NS: int64(d)}, Count: count}}})
		if err != nil {
			t.Fatal(err)
		}
		return body
	}
	s.foldSnapshot(ctx, "peer-that-saw-two", snapshotWith(2, time.Second))
	if st, _ := local.Lookup(k); st.Count != 5 {
		t.Fatalf("a snapshot that saw the key twice replayed it into a sidecar that saw it 5 times: %d observations", st.Count)
	}
	s.foldSnapshot(ctx, "peer-that-saw-1000", snapshotWith(1000, time.Second))
	if st, _ := local.Lookup(k); st.Count != 5+uint64(DefaultCatchUpObservations) {
		t.Fatalf("after a better-informed peer's snapshot: %d observations, want %d", st.Count, 5+DefaultCatchUpObservations)
	}
}

func TestSnapshotCatchUpOncePerKey(t *testing.T) {
	t.Parallel()
	local, err := rabbitmq.NewLocal(rabbitmq.LocalConfig{MaxKeys: 200_000})
	if err != nil {
		t.Fatal(err)
	}
	s := newShare(ShareConfig{Clock: clock.NewFake(time.Unix(1000, 0))}.WithDefaults(), local)
	s.send = func(context.Context, string, []byte) error { return nil } // the snapshots it answers with
	snapshotOf := func(g int) []byte {
		snap := snapshot{}
		for i := range DefaultSnapshotKeys {
			snap.Keys = append(snap.Keys, snapshotKey{
				observation: observation{Queue: "jobs", Producer: "wéb", JobType: fmt.Sprintf("kind-%d-%d", g, i), NS: int64(300 * time.Millisecond)},
				Count:       1000,
			})
		}
		body, err := json.Marshal(snap)
		if err != nil {
			t.Fatal(err)
		}
		return body
	}
	first := rabbitmq.Key{Queue: "jobs", Producer: "wéb", JobType: "kind-0-0"}
	ctx := context.Background()
	for g := range 6 {
		s.foldSnapshot(ctx, fmt.Sprint("peer-", g), snapshotOf(g))
	}
	s.foldSnapshot(ctx, "late-peer", snapshotOf(0))
	if st, _ := local.Lookup(first); st.Count != DefaultCatchUpObservations {
		t.Fatalf("a key caught up from two snapshots has %d observations, want %d (replayed once)", st.Count, DefaultCatchUpObservations)
	}
	for g := 6; g < 12; g++ {
		s.foldSnapshot(ctx, fmt.Sprint("peer-", g), snapshotOf(g))
	}
	s.mu.Lock()
	n := len(s.caughtUp) + len(s.caughtUpOld)
	s.mu.Unlock()
	if n > 2*caughtUpKeys {
		t.Fatalf("%d keys remembered, want at most %d", n, 2*caughtUpKeys)
	}
}
