package sched

import (
	"testing"
	"time"
)

// TestMeasuredWorkMovesTheFIFOMoment works Bound.Measured out by hand. A
// and B (2 s each) come first, X (4 s) behind them at FIFO position 4, then
// J (250 ms) at position 8. A is dispatched, then J jumps B and X (it is
// under a quarter of B's cost). Counted in predicted work, FIFO has done
// 2.25 s of the 4 ahead of X. J's ack says it ran 2 s: it held a worker
// for 1.75 s more than predicted, which counts toward X's moment (X was
// ahead of J in FIFO order), so X reaches it: 2.25 + 1.75 = 4. Without
// Measured, X waits for B to be dispatched.
func TestMeasuredWorkMovesTheFIFOMoment(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	for _, measured := range []bool{false, true} {
		guard := 0.5
		s := mustNew(t, Config{Levels: 1, Discipline: Strict, ShortestFirst: true,
			Bound: &Bound{Stretch: -0.1, Guard: &guard, Overtake: 0.25, Measured: measured}})
		a := &Item{Cost: 2 * time.Second}
		b := &Item{Cost: 2 * time.Second}
		x := &Item{Cost: 4 * time.Second}
		j := &Item{Cost: 250 * time.Millisecond}
		for _, it := range []*Item{a, b} {
			if err := s.Push(it, t0); err != nil {
				t.Fatal(err)
			}
		}
		if got := s.Pop(t0); got != a {
			t.Fatalf("measured %v: first Pop %v, want A", measured, idOf(got))
		}
		for _, it := range []*Item{x, j} {
			if err := s.Push(it, t0); err != nil {
				t.Fatal(err)
			}
		}
		if got := s.Pop(t0); got != j {
			t.Fatalf("measured %v: second Pop %v, want J", measured, idOf(got))
		}
		if x.guard() != guardFIFO {
			t.Fatalf("measured %v: X at its FIFO moment after 2.25 s of predicted work", measured)
		}
		s.Ran(a, 5*time.Second) // dispatched at its FIFO moment: jumped nobody
		s.Ran(j, 2*time.Second)
		s.Ran(j, 2*time.Second) // a second report of the same run counts once
		// The next Push or Pop notices: here a Push at t1.
		t1 := t0.Add(100 * time.Millisecond)
		if err := s.Push(&Item{Cost: time.Second}, t1); err != nil {
			t.Fatal(err)
		}
		if past := x.guard() == guardLate; past != measured {
			t.Fatalf("measured %v: X past its FIFO moment %v", measured, past)
		}
		if !measured {
			continue
		}
		// L is 100 ms of wait plus 4 s; half of it is X's slack.
		if want := t1.Add(2050 * time.Millisecond).UnixNano(); x.guardAt != want {
			t.Fatalf("X's deadline %v after t1, want 2.05s", time.Unix(0, x.guardAt).Sub(t1))
		}
		// B's deadline (t0 + 1 s) comes first, then X's.
		if peek := s.Peek(t0.Add(3*time.Second), 2, nil); len(peek) != 2 || peek[0] != b || peek[1] != x {
			t.Fatalf("Peek %v, want B then X", peek)
		}
	}
}

// TestMeasuredWorkOnlyForTheJumped checks which waiting messages a mark
// counts for: those whose FIFO position is below the ran message's, not
// those pushed after it, and that a message that ran shorter than
// predicted holds them back.
func TestMeasuredWorkOnlyForTheJumped(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	guard := 0.5
	s := mustNew(t, Config{Levels: 1, Discipline: Strict, ShortestFirst: true,
		Bound: &Bound{Stretch: -0.1, Guard: &guard, Overtake: 0, Measured: true}})
	a := &Item{Cost: 10 * time.Second} // position 0: at its moment at once
	x := &Item{Cost: 4 * time.Second}  // position 10
	j := &Item{Cost: time.Second}      // position 14
	for _, it := range []*Item{a, x, j} {
		if err := s.Push(it, t0); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Pop(t0); got != j { // any shorter message overtakes
		t.Fatalf("Pop %v, want J", idOf(got))
	}
	y := &Item{Cost: 3 * time.Second} // position 18: behind J
	if err := s.Push(y, t0); err != nil {
		t.Fatal(err)
	}
	s.Ran(j, 4*time.Second) // 3 s more than predicted
	if got, want := s.ranBeyond(x), 3.0; got != want {
		t.Fatalf("X's measured extra %v, want %v", got, want)
	}
	if got := s.ranBeyond(y); got != 0 {
		t.Fatalf("Y's measured extra %v, want 0: J was not ahead of it", got)
	}
	if got := s.Pop(t0); got != y {
		t.Fatalf("Pop %v, want Y", idOf(got))
	}
	s.Ran(y, time.Second) // 2 s less than predicted
	if got, want := s.ranBeyond(x), 1.0; got != want {
		t.Fatalf("X's measured extra %v after Y, want %v", got, want)
	}
	// Once nothing below a mark waits, it is dropped.
	s.Remove(x)
	s.Pop(t0)
	if s.ran.n() != 0 || s.ran.total != 0 {
		t.Fatalf("%d marks, %v extra left with nobody waiting", s.ran.n(), s.ran.total)
	}
}
