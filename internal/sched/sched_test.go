package sched

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func mustNew(t testing.TB, cfg Config) *Scheduler {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustPush(t testing.TB, s *Scheduler, now time.Time, items ...*Item) {
	t.Helper()
	for _, it := range items {
		if err := s.Push(it, now); err != nil {
			t.Fatalf("Push(%d): %v", it.ID, err)
		}
	}
}

// popIDs pops n items at now and returns their IDs (0 for nil).
func popIDs(s *Scheduler, now time.Time, n int) []uint64 {
	var ids []uint64
	for range n {
		if it := s.Pop(now); it != nil {
			ids = append(ids, it.ID)
		} else {
			ids = append(ids, 0)
		}
	}
	return ids
}

func TestStrictPriorityAndFIFO(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		shortestFirst bool
		want          []uint64
	}{
		// Level 0 first, then 1, then 2; within a level by first enqueue.
		{"fifo", false, []uint64{3, 6, 1, 4, 7, 2, 5}},
		// Within a level by cost, ties by first enqueue.
		{"shortest first", true, []uint64{6, 3, 4, 7, 1, 5, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := mustNew(t, Config{Levels: 3, Discipline: Strict, ShortestFirst: tt.shortestFirst})
			mustPush(t, s, t0,
				&Item{ID: 1, Tier: 1, Cost: 5 * time.Second},
				&Item{ID: 2, Tier: 2, Cost: 2 * time.Second},
				&Item{ID: 3, Tier: 0, Cost: 9 * time.Second},
				&Item{ID: 4, Tier: 1, Cost: 3 * time.Second},
				&Item{ID: 5, Tier: 2, Cost: 1 * time.Second},
				&Item{ID: 6, Tier: 0, Cost: 1 * time.Second},
				&Item{ID: 7, Tier: 1, Cost: 3 * time.Second},
			)
			if got := popIDs(s, t0, 8); !slices.Equal(got, append(tt.want, 0)) {
				t.Errorf("order %v, want %v then nil", got, tt.want)
			}
		})
	}
}

// With every level non-empty the weighted discipline serves the levels in
// exactly the ratio of their weights, in every window of sum(weights) pops.
func TestWeightedShares(t *testing.T) {
	t.Parallel()
	pol, err := NewPolicy(WeightedP, PolicyOptions{AgingOff: true})
	if err != nil {
		t.Fatal(err)
	}
	s := mustNew(t, pol.Sched)
	const perLevel = 20_000
	for i := range 3 * perLevel {
		mustPush(t, s, t0, &Item{ID: uint64(i), Tier: int8(i % 3)})
	}
	const window = 8 + 3 + 1
	const pops = 1000 * window
	total := [3]int{}
	for w := range pops / window {
		got := [3]int{}
		for range window {
			got[s.Pop(t0).Level()]++
		}
		if got != [3]int{8, 3, 1} {
			t.Fatalf("window %d served %v per level, want [8 3 1]", w, got)
		}
		for i := range got {
			total[i] += got[i]
		}
	}
	if total != [3]int{8000, 3000, 1000} {
		t.Errorf("served %v, want [8000 3000 1000]", total)
	}
	// An empty level's share goes to the others in their own ratio.
	s = mustNew(t, pol.Sched)
	for i := range 2000 {
		mustPush(t, s, t0, &Item{ID: uint64(i), Tier: int8(1 + i%2)})
	}
	got := [3]int{}
	for range 1000 {
		got[s.Pop(t0).Level()]++
	}
	if got != [3]int{0, 750, 250} {
		t.Errorf("levels 1 and 2 alone served %v, want 3:1", got)
	}
}

// levels returns the current level of each item.
func levels(items ...*Item) []int {
	var out []int
	for _, it := range items {
		out = append(out, it.Level())
	}
	return out
}

// fillers pushes n items at level 0, IDs 1 to n, that Pop serves before
// anything promoted later (they were enqueued first: the items pushed
// after them take IDs from 1001).
func fillers(t *testing.T, s *Scheduler, n int) {
	t.Helper()
	for i := range n {
		mustPush(t, s, t0, &Item{ID: 1 + uint64(i)})
	}
}

func TestStepAging(t *testing.T) {
	t.Parallel()
	s := mustNew(t, Config{Levels: 3, Discipline: Strict, Aging: AgingStep,
		AgeAfter: []time.Duration{0, 10 * time.Second, 10 * time.Second}})
	fillers(t, s, 10)
	a, b, c := &Item{ID: 1001, Tier: 2}, &Item{ID: 1002, Tier: 2}, &Item{ID: 1003, Tier: 1}
	mustPush(t, s, t0, a, c)
	mustPush(t, s, t0.Add(5*time.Second), b)

	steps := []struct {
		at         time.Duration
		want       []int // levels of a, b, c
		promotions uint64
	}{
		{10*time.Second - 1, []int{2, 2, 1}, 0},
		{10 * time.Second, []int{1, 2, 0}, 2}, // a and c waited exactly the threshold
		{15*time.Second - 1, []int{1, 2, 0}, 2},
		{15 * time.Second, []int{1, 1, 0}, 3}, // b, and not a: its wait at level 1 began at 10 s
		{20 * time.Second, []int{0, 1, 0}, 4},
		{25 * time.Second, []int{0, 0, 0}, 5},
	}
	for _, st := range steps {
		if it := s.Pop(t0.Add(st.at)); it == nil || it.ID > 1000 {
			t.Fatalf("at %v Pop = %v, want a filler", st.at, it)
		}
		if got := levels(a, b, c); !slices.Equal(got, st.want) || s.Promotions != st.promotions {
			t.Errorf("at %v levels %v, %d promotions; want %v, %d", st.at, got, s.Promotions, st.want, st.promotions)
		}
	}
}

func TestPausingAging(t *testing.T) {
	t.Parallel()
	ageAfter := []time.Duration{0, 10 * time.Second, 10 * time.Second}
	for _, mode := range []string{AgingStep, AgingPausing} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			s := mustNew(t, Config{Levels: 3, Discipline: Strict, Aging: mode, AgeAfter: ageAfter})
			fillers(t, s, 10)
			x1, x2, y := &Item{ID: 1001, Tier: 1}, &Item{ID: 1002, Tier: 1}, &Item{ID: 1003, Tier: 2}
			z := &Item{ID: 1004, Tier: 2}
			mustPush(t, s, t0, x1, x2, y)
			mustPush(t, s, t0.Add(10*time.Second), z)

			// At 10 s x1, x2 (level 1) and y (level 2) have waited the
			// threshold. Step moves all three. Pausing moves x1, then holds
			// x2 because level 0 now holds a promoted item; y still moves, as
			// level 1 holds no promoted item.
			s.Pop(t0.Add(10 * time.Second))
			want := []int{0, 0, 1, 2}
			if mode == AgingPausing {
				want = []int{0, 1, 1, 2}
			}
			if got := levels(x1, x2, y, z); !slices.Equal(got, want) {
				t.Fatalf("at 10 s levels %v, want %v", got, want)
			}
			// At 20 s everything below level 0 has waited 10 s at its level.
			// Step moves y and z; pausing holds x2 and y behind promoted x1,
			// and z behind promoted y.
			s.Pop(t0.Add(20 * time.Second))
			want = []int{0, 0, 0, 1}
			if mode == AgingPausing {
				want = []int{0, 1, 1, 2}
			}
			if got := levels(x1, x2, y, z); !slices.Equal(got, want) {
				t.Fatalf("at 20 s levels %v, want %v", got, want)
			}
			if mode == AgingStep {
				return
			}
			// When x1 leaves, x2 (first in line at level 1) moves up, and
			// then holds y in turn.
			s.Remove(x1)
			s.Pop(t0.Add(20 * time.Second))
			if got := levels(x2, y, z); !slices.Equal(got, []int{0, 1, 2}) {
				t.Fatalf("after x1 left, levels %v, want [0 1 2]", got)
			}
			// When x2 leaves, y moves up, which frees z in the same pass.
			s.Remove(x2)
			s.Pop(t0.Add(20 * time.Second))
			if got := levels(y, z); !slices.Equal(got, []int{0, 1}) {
				t.Fatalf("after x2 left, levels %v, want [0 1]", got)
			}
			if s.Promotions != 5 { // x1 and y at 10 s, then x2, y, z
				t.Errorf("Promotions = %d, want 5", s.Promotions)
			}
		})
	}
}

func TestExpiredNeverPopped(t *testing.T) {
	t.Parallel()
	s := mustNew(t, Config{Levels: 2, Discipline: Strict})
	soon := &Item{ID: 1, Tier: 0}
	soon.SetExpires(t0.Add(time.Second))
	later := &Item{ID: 2, Tier: 0}
	later.SetExpires(t0.Add(time.Minute))
	never := &Item{ID: 3, Tier: 1}
	mustPush(t, s, t0, soon, later, never)
	if at, ok := s.NextExpiry(); !ok || !at.Equal(soon.Expires()) {
		t.Fatalf("NextExpiry = %v, %v", at, ok)
	}

	// Pop without Expire first: the expired item is skipped, not returned.
	now := t0.Add(2 * time.Second)
	if it := s.Pop(now); it != later {
		t.Fatalf("Pop = %v, want item 2", it)
	}
	if s.Len() != 1 || soon.Queued() || s.Remove(soon) {
		t.Errorf("skipped item: Len %d, Queued %v", s.Len(), soon.Queued())
	}
	// It is still reported, once, by the next Expire.
	if at, ok := s.NextExpiry(); !ok || !at.Equal(soon.Expires()) {
		t.Errorf("NextExpiry = %v, %v; want the skipped item's %v", at, ok, soon.Expires())
	}
	if got := s.Expire(now, nil); len(got) != 1 || got[0] != soon {
		t.Errorf("Expire = %v, want [item 1]", got)
	}
	if got := s.Expire(now, nil); len(got) != 0 {
		t.Errorf("second Expire = %v, want nothing", got)
	}
	if _, ok := s.NextExpiry(); ok {
		t.Error("NextExpiry reports a TTL with none waiting")
	}
	if it := s.Pop(now); it != never {
		t.Errorf("Pop = %v, want item 3", it)
	}
	// Expiry at exactly the TTL.
	edge := &Item{ID: 4}
	edge.SetExpires(now)
	mustPush(t, s, now, edge)
	if it := s.Pop(now); it != nil {
		t.Errorf("Pop returned item %d at its expiry instant", it.ID)
	}
	if got := s.Expire(now, nil); len(got) != 1 || got[0] != edge {
		t.Errorf("Expire = %v, want [item 4]", got)
	}
}

func TestRetryKeepsTierAndPlace(t *testing.T) {
	t.Parallel()
	s := mustNew(t, Config{Levels: 3, Discipline: Strict, Aging: AgingStep,
		AgeAfter: []time.Duration{0, time.Second, time.Second}})
	a := &Item{ID: 1, Tier: 2}
	mustPush(t, s, t0, a)
	// a ages to level 1 and is dispatched; the handler fails.
	if it := s.Pop(t0.Add(time.Second)); it != a || a.Level() != 1 {
		t.Fatalf("Pop = %v at level %d, want a at level 1", it, a.Level())
	}
	mustPush(t, s, t0.Add(time.Second), a)
	if err := s.Push(a, t0.Add(time.Second)); !errors.Is(err, ErrQueued) {
		t.Errorf("second Push = %v, want ErrQueued", err)
	}
	// Back at its tier, not the level it had aged to.
	if a.Tier != 2 || a.Level() != 2 || s.LevelLen(2) != 1 {
		t.Errorf("retried item tier %d level %d, want 2 and 2", a.Tier, a.Level())
	}

	// Within its level it keeps its first-enqueue place.
	for _, sf := range []bool{false, true} {
		s := mustNew(t, Config{Levels: 2, Discipline: Strict, ShortestFirst: sf})
		a, b := &Item{ID: 1, Tier: 1, Cost: time.Second}, &Item{ID: 2, Tier: 1, Cost: time.Second}
		mustPush(t, s, t0, a, b)
		if it := s.Pop(t0); it != a {
			t.Fatalf("Pop = %v, want a", it)
		}
		mustPush(t, s, t0, &Item{ID: 3, Tier: 1, Cost: time.Second})
		mustPush(t, s, t0.Add(time.Minute), a)
		if got := popIDs(s, t0.Add(time.Minute), 3); !slices.Equal(got, []uint64{1, 2, 3}) {
			t.Errorf("shortest first %v: order %v, want [1 2 3]", sf, got)
		}
	}
}

func TestTierClamped(t *testing.T) {
	t.Parallel()
	s := mustNew(t, Config{Levels: 2, Discipline: Strict})
	lo, hi := &Item{ID: 1, Tier: -3}, &Item{ID: 2, Tier: 9}
	mustPush(t, s, t0, hi, lo)
	if lo.Tier != 0 || hi.Tier != 1 || s.LevelLen(0) != 1 || s.LevelLen(1) != 1 {
		t.Errorf("tiers %d %d, level lengths %d %d", lo.Tier, hi.Tier, s.LevelLen(0), s.LevelLen(1))
	}
}

// A Long item is held to its FIFO start: once the predicted work
// dispatched passes its deadline it goes next, ahead of shorter items.
// behindShorts pushes five one-second items at level 0, then it at level 1
// (so only the bound can put it ahead of level 0), then ten more
// one-second items, and pops everything: the order it was served in.
func behindShorts(t *testing.T, b *Bound, it *Item) (*Scheduler, []uint64) {
	t.Helper()
	s := mustNew(t, Config{Levels: 2, Discipline: Strict, ShortestFirst: true, Bound: b})
	for i := range 5 {
		mustPush(t, s, t0, &Item{ID: uint64(i + 1), Cost: time.Second})
	}
	mustPush(t, s, t0, it)
	for i := range 10 {
		mustPush(t, s, t0, &Item{ID: uint64(i + 6), Cost: time.Second})
	}
	return s, popIDs(s, t0, 17)
}

func TestBound(t *testing.T) {
	t.Parallel()
	sec := time.Second
	tests := []struct {
		name     string
		bound    *Bound
		long     bool
		position int // shorts served before the long item
	}{
		{"at FIFO start", &Bound{}, true, 5},
		{"min slack", &Bound{MinSlack: 2 * sec}, true, 7},
		{"negative stretch", &Bound{Stretch: -0.5}, true, 3},              // due 5 - 0.5*5 = 2.5
		{"positive stretch", &Bound{Stretch: 1, MinSlack: sec}, true, 11}, // due 5 + 5 + 1
		{"not long", &Bound{}, false, 15},
		{"no bound", nil, true, 15},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, got := behindShorts(t, tt.bound, &Item{ID: 100, Tier: 1, Cost: 20 * sec, Long: tt.long})
			if i := slices.Index(got, 100); i != tt.position {
				t.Errorf("long item served at %d in %v, want %d", i, got, tt.position)
			}
			wantOverdue := uint64(0)
			if tt.position < 15 {
				wantOverdue = 1
			}
			if s.Overdue != wantOverdue {
				t.Errorf("Overdue = %d, want %d", s.Overdue, wantOverdue)
			}
		})
	}
}

// With Others set, a message that is not long is bounded too: it starts
// once the work dispatched passes its position plus Others times the work
// that was ahead of it. Without Others, shortest-first keeps it waiting for
// as long as shorter work arrives.
func TestBoundOthers(t *testing.T) {
	t.Parallel()
	sec := time.Second
	half := 0.5
	for _, tt := range []struct {
		name     string
		others   *float64
		position int
	}{
		{"bounded at 1.5x its FIFO position", &half, 8}, // due 5 + 0.5*5 = 7.5
		{"unbounded", nil, 15},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, got := behindShorts(t, &Bound{Stretch: -1, Others: tt.others}, &Item{ID: 100, Tier: 1, Cost: 2 * sec})
			if i := slices.Index(got, 100); i != tt.position {
				t.Errorf("middle item served at %d in %v, want %d", i, got, tt.position)
			}
			if s.Len() != 0 {
				t.Errorf("%d items left", s.Len())
			}
		})
	}
}

// Removed work counts as dispatched, so purging the work ahead of a long
// item brings its deadline closer.
func TestBoundCountsRemovedWork(t *testing.T) {
	t.Parallel()
	s := mustNew(t, Config{Levels: 1, Discipline: Strict, ShortestFirst: true, Bound: &Bound{}})
	var shorts []*Item
	for i := range 4 {
		shorts = append(shorts, &Item{ID: uint64(i + 1), Cost: time.Second})
	}
	mustPush(t, s, t0, shorts...)
	long := &Item{ID: 100, Cost: time.Minute, Long: true}
	mustPush(t, s, t0, long, &Item{ID: 5, Cost: time.Second})
	for _, it := range shorts[:3] {
		s.Remove(it)
	}
	if got := popIDs(s, t0, 3); !slices.Equal(got, []uint64{4, 100, 5}) {
		t.Errorf("order %v, want [4 100 5]", got)
	}
	if s.Backlog() != 0 {
		t.Errorf("Backlog = %v after everything left", s.Backlog())
	}
}

// The guard: once the work dispatched reaches a message's FIFO position,
// only much shorter messages may still go ahead of it, and only until its
// deadline, its FIFO moment plus Guard times (its FIFO wait plus its cost).
func TestGuard(t *testing.T) {
	t.Parallel()
	sec := time.Second
	half := 0.5
	setup := func(t *testing.T) (*Scheduler, *Item) {
		s := mustNew(t, Config{Levels: 1, Discipline: Strict, ShortestFirst: true,
			Bound: &Bound{Guard: &half, Overtake: 0.25}})
		ahead := &Item{ID: 1, Cost: 2 * sec}
		mid := &Item{ID: 2, Cost: 4 * sec}
		mustPush(t, s, t0, ahead, mid)
		// 3 s later a worker takes the first message: the work dispatched
		// reaches mid's FIFO position, so FIFO would start mid next. Its
		// FIFO wait is 3 s, its latency 3 + 4 s, its deadline 3.5 s on.
		if it := s.Pop(t0.Add(3 * sec)); it != ahead {
			t.Fatalf("first Pop = %v", idOf(it))
		}
		return s, mid
	}
	t.Run("much shorter messages overtake until the deadline", func(t *testing.T) {
		t.Parallel()
		s, mid := setup(t)
		for i := range 8 { // one short message every half second
			now := t0.Add(3*sec + time.Duration(i)*sec/2)
			mustPush(t, s, now, &Item{ID: uint64(10 + i), Cost: sec})
			got := s.Pop(now)
			if wantMid := i == 7; (got == mid) != wantMid {
				t.Fatalf("Pop at +%v = %v, want mid only at the deadline (+6.5s)", now.Sub(t0), idOf(got))
			}
		}
		// The first message was past its own deadline (FIFO would have
		// started it at once) when a worker took it.
		if s.Guarded != 2 {
			t.Errorf("Guarded = %d, want 2", s.Guarded)
		}
	})
	t.Run("comparable messages do not", func(t *testing.T) {
		t.Parallel()
		s, mid := setup(t)
		now := t0.Add(3 * sec)
		mustPush(t, s, now, &Item{ID: 10, Cost: 2 * sec}) // half mid's cost: above the ratio
		if got := s.Pop(now); got != mid {
			t.Errorf("Pop = %v, want mid ahead of a message half its size", idOf(got))
		}
	})
	t.Run("the head of the line is overtaken by much shorter work only", func(t *testing.T) {
		t.Parallel()
		s := mustNew(t, Config{Levels: 1, Discipline: Strict, ShortestFirst: true,
			Bound: &Bound{Guard: &half, Overtake: 0.25}})
		mustPush(t, s, t0, &Item{ID: 1, Cost: 8 * sec}, &Item{ID: 2, Cost: 4 * sec}, &Item{ID: 3, Cost: sec})
		// Nothing is ahead of 1, so FIFO would start it now: 3, an eighth
		// of its cost, may go first; 2, half of it, may not.
		if got := popIDs(s, t0, 3); !slices.Equal(got, []uint64{3, 1, 2}) {
			t.Errorf("order %v, want [3 1 2]", got)
		}
	})
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no levels", Config{Discipline: Strict}, "levels must be 1 to 64, got 0"},
		{"too many levels", Config{Levels: 65, Discipline: Strict}, "levels must be 1 to 64, got 65"},
		{"unknown discipline", Config{Levels: 1, Discipline: "lottery"}, `unknown discipline "lottery"`},
		{"weights count", Config{Levels: 2, Discipline: Weighted, Weights: []int{1}}, "one weight per level (2), got 1"},
		{"zero weight", Config{Levels: 2, Discipline: Weighted, Weights: []int{1, 0}}, "weights must be 1 to 1000000, got 0"},
		{"unknown aging", Config{Levels: 1, Discipline: Strict, Aging: "sometimes"}, `unknown aging mode "sometimes"`},
		{"aging thresholds", Config{Levels: 2, Discipline: Strict, Aging: AgingStep}, "one threshold per level (2), got 0"},
		{"zero threshold", Config{Levels: 2, Discipline: Strict, Aging: AgingPausing, AgeAfter: []time.Duration{0, 0}}, "threshold of level 1 must be positive"},
		{"NaN stretch", Config{Levels: 1, Discipline: Strict, Bound: &Bound{Stretch: math.NaN()}}, "stretch must be -1 to 1000, got NaN"},
		{"negative slack", Config{Levels: 1, Discipline: Strict, Bound: &Bound{MinSlack: -1}}, "min slack must not be negative"},
		{"others stretch", Config{Levels: 1, Discipline: Strict, Bound: &Bound{Others: new(float64(-2))}}, "stretch of other messages must be -1 to 1000, got -2"},
		{"negative guard", Config{Levels: 1, Discipline: Strict, Bound: &Bound{Guard: new(float64(-1))}}, "guard must be 0 to 1000, got -1"},
		{"NaN overtake", Config{Levels: 1, Discipline: Strict, Bound: &Bound{Overtake: math.NaN()}}, "overtake ratio must be at most 1000, got NaN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tt.cfg)
			if err == nil || !strings.HasPrefix(err.Error(), "sched: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New error = %v, want %q", err, tt.want)
			}
		})
	}
}

// Under the default policy a waiting item takes two places besides
// itself: its level, and one of the FIFO line, the due heap, pastDue and
// the late heap. A long item waits in the due heap until its FIFO moment,
// then in pastDue and the late heap (three) until it goes; an item
// overdue from its FIFO moment on needs no place in pastDue.
func TestWaitingItemsTakeTwoPlaces(t *testing.T) {
	t.Parallel()
	// A long item held past its FIFO moment, as the default's LongGuard of
	// 0 does not hold it, takes pastDue's place.
	pol, err := NewPolicy("", PolicyOptions{LongGuard: new(0.5)})
	if err != nil {
		t.Fatal(err)
	}
	places := func(s *Scheduler) int {
		n := s.fifoWait.n - s.fifoWait.stale + s.due.len() + s.pastDue.n - s.pastDue.stale + s.late.len()
		for i := range s.levels {
			n += s.levels[i].heap.len()
		}
		return n
	}
	for _, c := range []struct {
		name string
		cost time.Duration
		long bool
	}{{"long", time.Second, true}, {"not long", time.Second, false}, {"long, no predicted cost", 0, true}, {"no predicted cost", 0, false}} {
		s := mustNew(t, pol.Sched)
		if !s.dueOrdered {
			t.Fatalf("the default policy's due heap is not in FIFO order: %+v", *pol.Sched.Bound)
		}
		const n = 1000
		for i := range n {
			mustPush(t, s, t0, &Item{ID: uint64(i + 1), Tier: 1, Cost: c.cost, Long: c.long})
		}
		want := 2 * n
		if c.long && c.cost > 0 {
			// The first is at its FIFO moment at once, and not overdue.
			want++
			if s.due.len() != n-1 || s.pastDue.n != 1 {
				t.Errorf("%s: %d in the due heap and %d in pastDue, want %d and 1", c.name, s.due.len(), s.pastDue.n, n-1)
			}
		}
		if got := places(s); got != want {
			t.Errorf("%s: %d items take %d places, want %d", c.name, n, got, want)
		}
		// Past the first items' FIFO moments, the long ones still waiting
		// are in pastDue and the late heap too, and go first, in order.
		for range n / 2 {
			s.Pop(t0.Add(time.Millisecond))
		}
		want = n / 2 * 2
		if c.long && c.cost > 0 {
			want += s.pastDue.n - s.pastDue.stale
			if s.pastDue.n-s.pastDue.stale == 0 {
				t.Errorf("%s: nothing in pastDue after half the items went", c.name)
			}
		}
		if got := places(s); got != want {
			t.Errorf("%s: after %d pops %d places, want %d", c.name, n/2, got, want)
		}
		if it := s.Pop(t0.Add(time.Millisecond)); it == nil || it.ID != n/2+1 {
			t.Errorf("%s: after %d pops got %+v, want item %d", c.name, n/2, it, n/2+1)
		}
	}
}
