package sched

import (
	"testing"
	"time"
)

func TestTailWindowQuantile(t *testing.T) {
	t.Parallel()
	var w tailWindow
	w.refresh(0.99) // nothing seen: nothing to know
	if w.q != 0 {
		t.Fatalf("empty window: q %v", w.q)
	}
	for i := 1; i <= 100; i++ {
		w.add(int64(i) * int64(time.Millisecond))
	}
	w.refresh(0.99)
	if want := int64(100 * time.Millisecond); w.q != want { // index 99 of 100 sorted
		t.Fatalf("q %v, want %v", time.Duration(w.q), time.Duration(want))
	}
	// Fewer than tailRefresh new latencies leave the figure alone, however
	// large they are.
	for range tailRefresh - 1 {
		w.add(int64(time.Hour))
	}
	w.refresh(0.99)
	if w.q != int64(100*time.Millisecond) {
		t.Fatalf("refreshed early: q %v", time.Duration(w.q))
	}
	w.add(int64(time.Hour))
	w.refresh(0.5)
	// 164 latencies: 1..100 ms and 64 hours; the median is the 82nd.
	if want := int64(83 * time.Millisecond); w.q != want {
		t.Fatalf("median %v, want %v", time.Duration(w.q), time.Duration(want))
	}
	// Past tailSize the oldest leave: after tailSize hours, only hours.
	for range tailSize {
		w.add(int64(time.Hour))
	}
	w.refresh(0.01)
	if len(w.ring) != tailSize || w.q != int64(time.Hour) {
		t.Fatalf("window of %d, q %v; want %d and 1h", len(w.ring), time.Duration(w.q), tailSize)
	}
}

// TestAdaptiveGuardDeadline works the adaptive guard's deadlines out by
// hand: min(Guard L, max(GuardMin L, Q - L)) past the FIFO moment, and
// LongGuard L for a long message.
func TestAdaptiveGuardDeadline(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	guard, longGuard := 0.5, 0.0
	s := mustNew(t, Config{Levels: 1, Discipline: Strict, ShortestFirst: true,
		Bound: &Bound{Stretch: -0.1, Guard: &guard, Overtake: 0.25, Tail: 0.99, GuardMin: 0.25, LongGuard: &longGuard}})
	s.tail.q = int64(time.Second)
	moment := t0.Add(300 * time.Millisecond)
	for _, c := range []struct {
		name  string
		cost  time.Duration
		long  bool
		slack time.Duration
	}{
		// L = 400 ms: half of it, 200 ms, ends well below Q.
		{"far below the tail", 100 * time.Millisecond, false, 200 * time.Millisecond},
		// L = 900 ms: half would end at 1.35 s, past Q; Q - L is 100 ms,
		// less than a quarter of L, which it still gets.
		{"near the tail", 600 * time.Millisecond, false, 225 * time.Millisecond},
		// L = 800 ms: Q - L = 200 ms, between a quarter and a half.
		{"up to the tail", 500 * time.Millisecond, false, 200 * time.Millisecond},
		// L = 2 s: past Q already, a quarter of L.
		{"past the tail", 1700 * time.Millisecond, false, 500 * time.Millisecond},
		// A long message goes at its FIFO moment.
		{"long", 100 * time.Millisecond, true, 0},
	} {
		it := &Item{Cost: c.cost, Long: c.long, pushedAt: t0.UnixNano()}
		if got := time.Duration(s.guardDeadline(it, moment) - moment.UnixNano()); got != c.slack {
			t.Errorf("%s: slack %v, want %v", c.name, got, c.slack)
		}
	}
	// A message whose cost is a guess gets UnsureGuardMin past the tail:
	// L = 2 s, a tenth of it.
	s.cfg.Bound.UnsureGuardMin = new(0.1)
	unsure := &Item{Cost: 1700 * time.Millisecond, pushedAt: t0.UnixNano()}
	unsure.SetUnsure(true)
	if got := time.Duration(s.guardDeadline(unsure, moment) - moment.UnixNano()); got != 200*time.Millisecond {
		t.Errorf("unsure, past the tail: slack %v, want 200ms", got)
	}
	// Below the tail the quantile still gives it up to Q: L = 400 ms.
	unsure.Cost = 100 * time.Millisecond
	if got := time.Duration(s.guardDeadline(unsure, moment) - moment.UnixNano()); got != 200*time.Millisecond {
		t.Errorf("unsure, below the tail: slack %v, want 200ms", got)
	}
	s.cfg.Bound.UnsureGuardMin = nil
	// A message of a key whose tail is long keeps its own cost but, with
	// Bound.TailLong, takes the long guard: L = 2 s, sent at its FIFO
	// moment. Without TailLong the mark is ignored (a quarter of L).
	tailLong := &Item{Cost: 1700 * time.Millisecond, pushedAt: t0.UnixNano()}
	tailLong.SetTailLong(true)
	if got := time.Duration(s.guardDeadline(tailLong, moment) - moment.UnixNano()); got != 500*time.Millisecond {
		t.Errorf("tail-long, bound off: slack %v, want 500ms", got)
	}
	s.cfg.Bound.TailLong = true
	if got := time.Duration(s.guardDeadline(tailLong, moment) - moment.UnixNano()); got != 0 {
		t.Errorf("tail-long: slack %v, want 0", got)
	}
	// An unmarked message is as before: far below the tail, half of L.
	if got := time.Duration(s.guardDeadline(&Item{Cost: 100 * time.Millisecond, pushedAt: t0.UnixNano()}, moment) - moment.UnixNano()); got != 200*time.Millisecond {
		t.Errorf("unmarked, with TailLong: slack %v, want 200ms", got)
	}
	// TailLongGuard in place of the long guard: a fifth of L, 400 ms.
	s.cfg.Bound.TailLongGuard = new(0.2)
	if got := time.Duration(s.guardDeadline(tailLong, moment) - moment.UnixNano()); got != 400*time.Millisecond {
		t.Errorf("tail-long, own guard 0.2: slack %v, want 400ms", got)
	}
	s.cfg.Bound.TailLong, s.cfg.Bound.TailLongGuard = false, nil
	// With no tail known yet, the fixed guard.
	s.tail.q = 0
	it := &Item{Cost: 600 * time.Millisecond, pushedAt: t0.UnixNano()}
	if got := time.Duration(s.guardDeadline(it, moment) - moment.UnixNano()); got != 450*time.Millisecond {
		t.Errorf("no tail yet: slack %v, want 450ms", got)
	}
}

// TestTailRiskDeadline works Bound.TailRisk out by hand: the tail cap of
// TestAdaptiveGuardDeadline applies only while the latencies the
// scheduler's dispatches realized have a quantile above TailRisk times
// Q's, or before it knows one.
func TestTailRiskDeadline(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	guard := 0.5
	s := mustNew(t, Config{Levels: 1, Discipline: Strict, ShortestFirst: true,
		Bound: &Bound{Stretch: -0.1, Guard: &guard, Overtake: 0.25, Tail: 0.99, GuardMin: 0.25, TailRisk: 1}})
	s.tail.q = int64(time.Second)
	moment := t0.Add(300 * time.Millisecond)
	// L = 900 ms: half would end at 1.35 s, past Q.
	it := &Item{Cost: 600 * time.Millisecond, pushedAt: t0.UnixNano()}
	for _, c := range []struct {
		name     string
		realized time.Duration
		slack    time.Duration
	}{
		{"nothing realized yet: capped", 0, 225 * time.Millisecond},
		{"realized tail below Q: the full half", 800 * time.Millisecond, 450 * time.Millisecond},
		{"realized tail at Q: not above it", time.Second, 450 * time.Millisecond},
		{"realized tail past Q: capped", 1100 * time.Millisecond, 225 * time.Millisecond},
	} {
		s.realized.q = int64(c.realized)
		if got := time.Duration(s.guardDeadline(it, moment) - moment.UnixNano()); got != c.slack {
			t.Errorf("%s: slack %v, want %v", c.name, got, c.slack)
		}
	}
	// What a Pop realizes: its wait until then plus its predicted cost.
	s.realized = tailWindow{}
	x := &Item{Cost: 200 * time.Millisecond}
	if err := s.Push(x, t0); err != nil {
		t.Fatal(err)
	}
	s.Pop(t0.Add(700 * time.Millisecond))
	if len(s.realized.ring) != 1 || s.realized.ring[0] != int64(900*time.Millisecond) {
		t.Fatalf("realized %v, want [900ms]", s.realized.ring)
	}
}
