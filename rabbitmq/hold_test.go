package rabbitmq

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"
	"time"
)

func TestLocalHoldsLongMessages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := NewLocal(LocalConfig{MaxHold: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// One observation makes the typical duration 100 ms; the cold key's
	// messages are then Long and predicted at 100 ms each.
	if err := l.Observe(ctx, Key{Queue: "other", JobType: "warm"}, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	cold := Key{Queue: "q", JobType: "new"}
	holdOf := func() time.Duration {
		t.Helper()
		pr, _ := l.Predict(ctx, cold)
		if !pr.Long || pr.Predicted != 100*time.Millisecond {
			t.Fatalf("cold prediction %+v, want long at 100ms", pr)
		}
		return pr.Hold
	}
	if h := holdOf(); h != 0 {
		t.Errorf("hold with no consumer in this process = %v, want 0 (the backlog cannot be known)", h)
	}
	if b := l.Stats().Backlog; len(b) != 0 {
		t.Errorf("backlog tracked for a queue nobody here consumes: %v", b)
	}
	l.Attach(ctx, "q", 2)
	if h := holdOf(); h != 0 {
		t.Errorf("first hold = %v, want 0 (nothing ahead)", h)
	}
	// Backlog 100ms over 2 consumers is a 50 ms FIFO wait; held 90% of it
	// (DefaultHold), then 90% of 100 ms, then the 100 ms cap.
	for i, want := range []time.Duration{45 * time.Millisecond, 90 * time.Millisecond, 100 * time.Millisecond} {
		if h := holdOf(); h != want {
			t.Errorf("hold %d = %v, want %v", i, h, want)
		}
	}
	// Four published, 400 ms of work; three done leaves 100 ms.
	for range 3 {
		l.Forget(ctx, "q", 100*time.Millisecond)
	}
	if h := holdOf(); h != 45*time.Millisecond {
		t.Errorf("hold after completions = %v, want 45ms", h)
	}
	// Completions beyond the backlog (a message this process never
	// predicted) floor it at zero.
	for range 5 {
		l.Forget(ctx, "q", 100*time.Millisecond)
	}
	if h := holdOf(); h != 0 {
		t.Errorf("hold on a drained queue = %v, want 0", h)
	}
	l.Attach(ctx, "q", -2)
	if st := l.Stats(); st.Held != 4 || len(st.Backlog) != 0 {
		t.Errorf("Held = %d, backlog %v; want 4 and no queue tracked after the consumers left", st.Held, st.Backlog)
	}

	off, err := NewLocal(LocalConfig{Hold: -1})
	if err != nil {
		t.Fatal(err)
	}
	_ = off.Observe(ctx, Key{Queue: "other"}, time.Second)
	off.Attach(ctx, "q", 1)
	for range 3 {
		if pr, _ := off.Predict(ctx, cold); pr.Hold != 0 {
			t.Fatalf("hold with holding disabled = %v", pr.Hold)
		}
	}
}

// TestLocalScoresStampedCompletions checks that a completion reported with
// its publisher's stamp leaves the backlog and counts towards MAE and tier
// accuracy, and that a cold stamp is not scored at all (the predictor
// scores routed predictions only).
func TestLocalScoresStampedCompletions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := NewLocal(LocalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	k := Key{Queue: "q", JobType: "a"}
	for range 5 {
		_ = l.Observe(ctx, k, 10*time.Millisecond)
	}
	l.Attach(ctx, "q", 1)
	pr, _ := l.Predict(ctx, k)
	if pr.Cold || pr.Predicted != 10*time.Millisecond {
		t.Fatalf("warm prediction %+v, want 10ms", pr)
	}
	if err := l.ObserveStamped(ctx, k, Stamp{Predicted: pr.Predicted, Tier: pr.Tier}, 14*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := l.ObserveStamped(ctx, k, Stamp{Predicted: 3 * time.Millisecond, Tier: 0, Cold: true}, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	st := l.Stats()
	if st.MAESamples != 1 || st.MAE != 4*time.Millisecond || st.TierSamples != 1 {
		t.Errorf("MAE %v over %d, tier samples %d; want 4ms over 1 and 1 tier sample (the cold stamp is not scored)", st.MAE, st.MAESamples, st.TierSamples)
	}
	if w := st.Backlog["q"]; w != 0 {
		t.Errorf("backlog %v after its one message completed, want 0", w)
	}
	if err := l.ObserveStamped(ctx, k, Stamp{Predicted: pr.Predicted}, -time.Second); err == nil {
		t.Error("negative duration accepted")
	}
	// A stamp no predictor could have made (a header any publisher can
	// set) moves neither the backlog nor the scores: counted, one such
	// completion sank the queue's backlog by centuries, for good.
	if _, err := l.Predict(ctx, k); err != nil {
		t.Fatal(err)
	}
	before := l.Stats()
	if err := l.ObserveStamped(ctx, k, Stamp{Predicted: math.MaxInt64, Tier: 1}, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	l.Forget(ctx, "q", 25*time.Hour)
	after := l.Stats()
	if after.Backlog["q"] != before.Backlog["q"] || after.Backlog["q"] <= 0 || after.MAESamples != before.MAESamples {
		t.Errorf("after impossible stamps: backlog %v (want %v), MAE samples %d (want %d)", after.Backlog["q"], before.Backlog["q"], after.MAESamples, before.MAESamples)
	}
}

func TestLocalRejectsBadHold(t *testing.T) {
	t.Parallel()
	for _, c := range []LocalConfig{{Hold: math.NaN()}, {Hold: 1.5}, {MaxHold: -time.Second}} {
		if _, err := NewLocal(c); err == nil {
			t.Errorf("NewLocal(%+v) accepted", c)
		}
	}
}

// Local tracks the backlogs of at most MaxQueues queues: TryAttach refuses
// a new queue past the cap, Attach leaves it untracked, and detaching makes
// room. Predicting for queues never seen tracks nothing.
func TestLocalCapsTrackedQueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := NewLocal(LocalConfig{MaxQueues: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := l.Predict(ctx, Key{Queue: "never-seen-" + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if st := l.Stats(); st.Keys != 0 || st.Queues != 0 || len(st.Backlog) != 0 {
		t.Fatalf("predictions for unseen queues left state behind: %+v", st)
	}
	for _, q := range []string{"a", "b"} {
		if err := l.TryAttach(ctx, q, 1); err != nil {
			t.Fatalf("attach %s: %v", q, err)
		}
	}
	if err := l.TryAttach(ctx, "a", 1); err != nil {
		t.Errorf("more handlers on a tracked queue: %v", err)
	}
	if err := l.TryAttach(ctx, "c", 1); !errors.Is(err, ErrTooManyQueues) {
		t.Errorf("attach past the cap = %v, want ErrTooManyQueues", err)
	}
	l.Attach(ctx, "c", 1)
	if err := l.TryAttach(ctx, "c", -1); err != nil {
		t.Errorf("detach from an untracked queue: %v", err)
	}
	if st := l.Stats(); st.Queues != 2 {
		t.Errorf("tracking %d queues, want 2", st.Queues)
	}
	l.Attach(ctx, "b", -1)
	if err := l.TryAttach(ctx, "c", 1); err != nil {
		t.Errorf("attach after a detach made room: %v", err)
	}
	if _, err := NewLocal(LocalConfig{MaxQueues: -1}); err == nil {
		t.Error("a negative MaxQueues was accepted")
	}
}
