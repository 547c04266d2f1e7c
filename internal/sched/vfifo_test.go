package sched

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// refPush is one push as the reference FIFO run sees it, in the run's
// clock (the wall clock, or the dispatch clock).
type refPush struct {
	it        *Item
	at        time.Time
	cost      time.Duration
	removedAt time.Time // when Remove took it out while it waited; zero if never
	op        int       // the operation that pushed it
}

// refFIFO replays every push through FIFO on workers workers from scratch,
// with plain slices: the reference for the virtual run. A push removed at a
// time before the run would have started it is skipped, as FIFO skips it;
// Remove takes effect at the time of the operation before it, the latest
// time the scheduler was given. It returns, for each push, when the run
// starts it by now (ok false when not yet or never), and the work started
// plus the work skipped ahead of the first push still waiting.
func refFIFO(pushes []refPush, workers int, from, now time.Time) (starts []time.Time, ok []bool, done float64) {
	free := make([]time.Time, workers)
	for i := range free {
		free[i] = from
	}
	starts, ok = make([]time.Time, len(pushes)), make([]bool, len(pushes))
	blocked := false
	for i, p := range pushes {
		w := 0
		for j := range free {
			if free[j].Before(free[w]) {
				w = j
			}
		}
		start := free[w]
		if start.Before(p.at) {
			start = p.at
		}
		if !p.removedAt.IsZero() && p.removedAt.Before(start) {
			done += p.cost.Seconds() // Remove counts it as done at once
			continue
		}
		if start.After(now) {
			blocked = true
			continue
		}
		if blocked {
			panic("FIFO starts out of order")
		}
		free[w] = start.Add(p.cost)
		starts[i], ok[i] = start, true
		done += p.cost.Seconds()
	}
	return starts, ok, done
}

// TestVirtualFIFOMatchesModel drives a guarded scheduler with a virtual
// FIFO run through random pushes, pops, retries, removals and expiries at
// random times, and after every operation checks each message's FIFO moment
// and the run's progress against refFIFO, on the wall clock and on the
// dispatch clock.
func TestVirtualFIFOMatchesModel(t *testing.T) {
	t.Parallel()
	seeds := 1000
	if testing.Short() {
		seeds = 200
	}
	for _, dispatch := range []bool{false, true} {
		for seed := range uint64(seeds) {
			checkVirtualFIFO(t, seed, dispatch)
		}
	}
}

func checkVirtualFIFO(t *testing.T, seed uint64, dispatch bool) {
	r := rand.New(rand.NewPCG(seed, 0xf1f0))
	g := r.Float64()
	cfg := Config{Levels: 1 + r.IntN(3), Discipline: Strict, ShortestFirst: r.IntN(2) == 0,
		Bound: &Bound{Stretch: -0.05, Guard: &g, Overtake: 0.25, VirtualFIFO: true, DispatchClock: dispatch}}
	s := mustNew(t, cfg)
	workers := 1 + r.IntN(5)
	now := t0
	s.SetWorkers(workers, now)
	seen := now // the latest time the scheduler was given: Remove has none
	// The run's clock as the documentation defines it, and after each
	// operation the wall time and that clock.
	clock := now
	type tick struct{ wall, clock time.Time }
	var ticks []tick
	moveClock := func() {
		if !dispatch {
			clock = now
		} else if s.Len() == 0 && now.After(seen) {
			clock = clock.Add(now.Sub(seen))
		}
	}
	// momentAt is the wall time at which the scheduler sees a start at the
	// run's time at, of a message pushed by operation op.
	momentAt := func(at time.Time, op int) time.Time {
		if !dispatch {
			return at
		}
		for _, k := range ticks[op:] {
			if !k.clock.Before(at) {
				return k.wall
			}
		}
		panic("a start after the clock")
	}
	var pushes []refPush
	last := map[*Item]int{} // each item's latest push
	var items []*Item
	var log []string
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d (%d workers, dispatch clock %v), after:\n  %s\n%s", seed, workers, dispatch, join(log), fmt.Sprintf(format, args...))
	}
	queued := map[*Item]bool{}
	for op := range 300 {
		var popped *Item
		removedAt := clock // a Pop expires messages before its dispatch moves the clock
		if r.IntN(3) > 0 {
			now = now.Add(time.Duration(r.IntN(400)) * time.Millisecond)
		}
		k := r.IntN(12)
		if k < 8 || k >= 10 || len(items) == 0 {
			moveClock() // every operation but Remove gives the scheduler now
			removedAt = clock
		}
		switch {
		case k < 5 || len(items) == 0:
			it := &Item{ID: uint64(op), Tier: int8(r.IntN(cfg.Levels)), Cost: time.Duration(r.IntN(1200)) * time.Millisecond, Long: r.IntN(10) == 0}
			if r.IntN(6) == 0 {
				it.SetExpires(now.Add(time.Duration(r.IntN(2000)) * time.Millisecond))
			}
			mustPush(t, s, now, it)
			seen = now
			last[it] = len(pushes)
			pushes = append(pushes, refPush{it: it, at: clock, cost: it.Cost, op: len(ticks)})
			items = append(items, it)
			log = append(log, fmt.Sprintf("%v push %d cost %v", now.Sub(t0), it.ID, it.Cost))
		case k < 8:
			it := s.Pop(now)
			popped, seen = it, now
			if it != nil && dispatch {
				clock = clock.Add(it.Cost / time.Duration(workers))
			}
			log = append(log, fmt.Sprintf("%v pop -> %v", now.Sub(t0), idOf(it)))
			if it != nil && r.IntN(4) == 0 { // a retry
				mustPush(t, s, now, it)
				last[it] = len(pushes)
				pushes = append(pushes, refPush{it: it, at: clock, cost: it.Cost, op: len(ticks)})
				log = append(log, fmt.Sprintf("%v retry %d", now.Sub(t0), it.ID))
			}
		case k < 10:
			// Remove takes effect at the latest time the scheduler was
			// given, which may be before now.
			it := items[r.IntN(len(items))]
			s.Remove(it)
			log = append(log, fmt.Sprintf("%v remove %d", now.Sub(t0), it.ID))
		default:
			gone := s.Expire(now, nil)
			seen = now
			log = append(log, fmt.Sprintf("%v expire -> %d", now.Sub(t0), len(gone)))
		}
		// Whatever left the line but the popped item was removed (by
		// Remove, or as expired by Pop or Expire) at the latest time given.
		for it, i := range last {
			if queued[it] && !it.Queued() && it != popped {
				if _, ok, _ := refFIFO(pushes[:i+1], workers, t0, removedAt); !ok[i] {
					pushes[i].removedAt = removedAt
				}
			}
			queued[it] = it.Queued()
		}
		ticks = append(ticks, tick{seen, clock})
		if dispatch && s.vf.clock != clock.UnixNano() {
			fail("clock %v, want %v", time.Unix(0, s.vf.clock).Sub(t0), clock.Sub(t0))
		}
		starts, ok, done := refFIFO(pushes, workers, t0, clock)
		if math.Abs(s.vf.started-done) > 1e-6 {
			fail("virtual run has started %.3f s of work, the reference %.3f s", s.vf.started, done)
		}
		for it, i := range last {
			if !it.Queued() {
				continue
			}
			switch {
			case ok[i] && it.guard() != guardLate:
				fail("item %d: FIFO started it at %v, but it has no deadline", it.ID, starts[i].Sub(t0))
			case ok[i] && it.guardAt != refDeadline(it, momentAt(starts[i], pushes[i].op), g):
				at := momentAt(starts[i], pushes[i].op)
				fail("item %d: deadline %v, want %v (FIFO moment %v)", it.ID,
					time.Unix(0, it.guardAt).Sub(t0), time.Unix(0, refDeadline(it, at, g)).Sub(t0), at.Sub(t0))
			case !ok[i] && it.guard() != guardFIFO:
				fail("item %d: FIFO has not started it yet, but it is past its FIFO moment", it.ID)
			}
		}
	}
}

func join(lines []string) string {
	return fmt.Sprint(slices.Concat(lines[max(0, len(lines)-40):]))
}

// TestVirtualFIFOMoment: with one worker busy on a long message, a short
// message pushed behind it reaches its FIFO moment when the long one would
// have finished under FIFO, though the scheduler dispatched both at once.
func TestVirtualFIFOMoment(t *testing.T) {
	t.Parallel()
	g := 0.5
	s := mustNew(t, Config{Levels: 1, Discipline: Strict, ShortestFirst: true,
		Bound: &Bound{Stretch: -0.05, Guard: &g, Overtake: 0.25, VirtualFIFO: true}})
	s.SetWorkers(1, t0)
	long := &Item{ID: 1, Cost: 10 * time.Second}
	short := &Item{ID: 2, Cost: time.Second}
	third := &Item{ID: 3, Cost: time.Second}
	mustPush(t, s, t0, long, short, third)
	if long.guard() != guardLate || long.guardAt != t0.Add(5*time.Second).UnixNano() {
		t.Fatalf("the first message starts at once under FIFO: deadline %v", time.Unix(0, long.guardAt).Sub(t0))
	}
	if short.guard() != guardFIFO {
		t.Fatal("the second message reached its FIFO moment before FIFO would start it")
	}
	// The real scheduler runs the short ones first; FIFO would not have.
	if got := popIDs(s, t0, 2); !slices.Equal(got, []uint64{2, 3}) {
		t.Fatalf("popped %v, want the short messages first", got)
	}
	s.Pop(t0.Add(9 * time.Second))
	if s.vf.line.n != 2 {
		t.Fatalf("the virtual line holds %d messages at 9 s, want the two dispatched ones", s.vf.line.n)
	}
	// Pushed at 10.5 s: FIFO would start it at 12 s, after 10 s + 1 s + 1 s.
	late := &Item{ID: 4, Cost: time.Second}
	mustPush(t, s, t0.Add(10500*time.Millisecond), late)
	if s.Expire(t0.Add(11999*time.Millisecond), nil); late.guard() != guardFIFO {
		t.Fatal("FIFO moment came before 12 s")
	}
	s.Expire(t0.Add(12*time.Second), nil)
	want := refDeadline(late, t0.Add(12*time.Second), g)
	if late.guard() != guardLate || late.guardAt != want {
		t.Fatalf("at 12 s: in %d, deadline %v, want %v", late.guard(), time.Unix(0, late.guardAt).Sub(t0), time.Unix(0, want).Sub(t0))
	}
}

// TestVirtualFIFOWorkers: more workers start more messages at once, and
// the run starts nothing without workers.
func TestVirtualFIFOWorkers(t *testing.T) {
	t.Parallel()
	g := 0.5
	cfg := Config{Levels: 1, Discipline: Strict, Bound: &Bound{Guard: &g, VirtualFIFO: true}}
	s := mustNew(t, cfg)
	its := []*Item{{ID: 1, Cost: time.Second}, {ID: 2, Cost: time.Second}, {ID: 3, Cost: time.Second}}
	mustPush(t, s, t0, its...)
	for _, it := range its {
		if it.guard() != guardFIFO {
			t.Fatalf("item %d has a FIFO moment with no workers", it.ID)
		}
	}
	s.SetWorkers(2, t0.Add(time.Second))
	if its[0].guard() != guardLate || its[1].guard() != guardLate || its[2].guard() != guardFIFO {
		t.Fatal("two workers should start the first two messages")
	}
	if want := s.guardDeadline(its[0], t0.Add(time.Second)); its[0].guardAt != want {
		t.Fatalf("deadline %v, want %v", time.Unix(0, its[0].guardAt).Sub(t0), time.Unix(0, want).Sub(t0))
	}
	// Down to one worker while both are busy: one leaves when it comes
	// free, so the third message starts at 2 s, on the other.
	s.SetWorkers(1, t0.Add(1500*time.Millisecond))
	s.Expire(t0.Add(2*time.Second), nil)
	if its[2].guard() != guardLate {
		t.Fatal("the third message should start at 2 s")
	}
	if len(s.vf.free) != 1 || s.vf.retire != 0 {
		t.Fatalf("%d workers, %d retiring; want 1 and 0", len(s.vf.free), s.vf.retire)
	}
}

// refDeadline is the guard's deadline worked out by hand: guard times the
// FIFO latency (the wait to the FIFO moment at, plus the predicted cost)
// after at.
func refDeadline(it *Item, at time.Time, guard float64) int64 {
	fifoLatency := at.UnixNano() - it.pushedAt + int64(it.Cost)
	return at.UnixNano() + int64(guard*float64(fifoLatency))
}
