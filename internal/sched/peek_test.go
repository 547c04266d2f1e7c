package sched

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// peekScenario builds a scheduler from seed: a random configuration, then
// random pushes, pops, acks and removals over a few virtual seconds. Two calls
// with the same seed build identical schedulers.
func peekScenario(t *testing.T, seed uint64) (*Scheduler, time.Time) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	levels := 1 + r.IntN(4)
	cfg := Config{Levels: levels, Discipline: Strict, ShortestFirst: r.IntN(2) == 0}
	if r.IntN(2) == 0 {
		cfg.Discipline = Weighted
		for range levels {
			cfg.Weights = append(cfg.Weights, 1+r.IntN(8))
		}
	}
	if levels > 1 && r.IntN(3) > 0 {
		cfg.Aging = []string{AgingStep, AgingPausing}[r.IntN(2)]
		cfg.AgeAfter = make([]time.Duration, levels)
		for i := 1; i < levels; i++ {
			cfg.AgeAfter[i] = time.Duration(1+r.IntN(2000)) * time.Millisecond
		}
	}
	if r.IntN(2) == 0 {
		cfg.Bound = &Bound{Stretch: r.Float64() - 0.5, MinSlack: time.Duration(r.IntN(500)) * time.Millisecond}
		if r.IntN(2) == 0 {
			o := r.Float64()
			cfg.Bound.Others = &o
		}
		if r.IntN(2) == 0 {
			g := r.Float64() / 2
			cfg.Bound.Guard = &g
			cfg.Bound.Overtake = float64(r.IntN(3)) / 4
			cfg.Bound.VirtualFIFO = r.IntN(2) == 0
			cfg.Bound.DispatchClock = cfg.Bound.VirtualFIFO && r.IntN(2) == 0
			cfg.Bound.Measured = !cfg.Bound.VirtualFIFO && r.IntN(2) == 0
			if !cfg.Bound.VirtualFIFO && r.IntN(2) == 0 {
				// The default's shape (Scheduler.dueOrdered).
				cfg.Bound.Stretch, cfg.Bound.MinSlack = -r.Float64()*0.9, 0
				if cfg.Bound.Others != nil {
					*cfg.Bound.Others = cfg.Bound.Stretch
				}
			}
		}
	}
	s := mustNew(t, cfg)
	s.SetWorkers(1+r.IntN(4), t0)
	now := t0
	var out []*Item
	var id uint64
	for range 20 + r.IntN(200) {
		now = now.Add(time.Duration(r.IntN(50)) * time.Millisecond)
		switch k := r.IntN(10); {
		case k < 6 || len(out) == 0:
			id++
			it := &Item{ID: id, Tier: int8(r.IntN(levels)), Cost: time.Duration(1+r.IntN(5)) * 100 * time.Millisecond, Long: r.IntN(8) == 0}
			if r.IntN(4) == 0 {
				it.SetExpires(now.Add(time.Duration(r.IntN(3000)) * time.Millisecond))
			}
			mustPush(t, s, now, it)
			out = append(out, it)
		case k < 8:
			// Some dispatches are acked, with what they really took.
			if it := s.Pop(now); it != nil && r.IntN(2) == 0 {
				s.Ran(it, time.Duration(r.IntN(1500))*time.Millisecond)
			}
		case k < 9:
			s.Remove(out[r.IntN(len(out))])
		default: // a retry: popped, then pushed back keeping its place
			if it := s.Pop(now); it != nil {
				mustPush(t, s, now, it)
			}
		}
	}
	return s, now.Add(time.Duration(r.IntN(3000)) * time.Millisecond)
}

func ids(items []*Item) []uint64 {
	out := make([]uint64, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}

// Peek foretells exactly what Pop will hand out at the same now, under
// every discipline, aging mode and bound, and leaves the scheduler as it
// was: a twin that was never peeked pops the same items.
func TestPeekMatchesPop(t *testing.T) {
	t.Parallel()
	for seed := range uint64(2000) {
		s, now := peekScenario(t, seed)
		twin, _ := peekScenario(t, seed)
		n := 1 + int(seed%40)
		peeked := ids(s.Peek(now, n, nil))
		if again := ids(s.Peek(now, n, nil)); !slices.Equal(peeked, again) {
			t.Fatalf("seed %d: a second Peek gave %v, the first %v", seed, again, peeked)
		}
		var popped, twins []uint64
		for range n {
			if it := s.Pop(now); it != nil {
				popped = append(popped, it.ID)
			}
			if it := twin.Pop(now); it != nil {
				twins = append(twins, it.ID)
			}
		}
		if !slices.Equal(peeked, popped) {
			t.Fatalf("seed %d (%+v): Peek %v, Pop %v", seed, s.Config(), peeked, popped)
		}
		if !slices.Equal(popped, twins) {
			t.Fatalf("seed %d: Peek changed the scheduler: Pop %v after it, %v without", seed, popped, twins)
		}
	}
}

func TestPeekEmptyAndZero(t *testing.T) {
	t.Parallel()
	s := mustNew(t, Config{Levels: 2, Discipline: Strict})
	if got := s.Peek(t0, 5, nil); len(got) != 0 {
		t.Errorf("Peek of an empty scheduler = %v", ids(got))
	}
	mustPush(t, s, t0, &Item{ID: 1}, &Item{ID: 2, Tier: 1})
	if got := s.Peek(t0, 0, nil); len(got) != 0 {
		t.Errorf("Peek(0) = %v", ids(got))
	}
	if got := ids(s.Peek(t0, 10, nil)); !slices.Equal(got, []uint64{1, 2}) {
		t.Errorf("Peek(10) = %v, want [1 2]", got)
	}
}

// Peek reads only what it yields: on a long queue it costs about the same
// as on a short one.
func BenchmarkPeek100Of1M(b *testing.B) {
	s := mustNew(b, Config{Levels: 3, Discipline: Strict, ShortestFirst: true})
	for i := range 1_000_000 {
		mustPush(b, s, t0, &Item{ID: uint64(i + 1), Tier: int8(i % 3), Cost: time.Duration(i%977) * time.Millisecond})
	}
	b.ReportAllocs()
	var buf []*Item
	for b.Loop() {
		buf = s.Peek(t0, 100, buf[:0])
	}
}
