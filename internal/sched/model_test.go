package sched

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// refItem is the reference model's view of one message.
type refItem struct {
	it       *Item // the real scheduler's item for the same message
	tier     int
	cost     time.Duration
	long     bool
	unsure   bool
	tailLong bool
	expires  time.Time
	queued   bool
	level    int
	levelAt  time.Time
	entry    uint64 // when it entered its current level, in model steps
	id       uint64 // the ID it was made with: 0 for Push to number it
	seq      uint64 // its ID once pushed: the order of equal ranks; kept across retries
	promoted bool
	due      float64
	hasDue   bool
	// The guard's view: when last pushed, the FIFO position then, and
	// once the work dispatched reaches it, the deadline.
	pushedAt time.Time
	fifoPos  float64
	deadline time.Time
	pastFIFO bool
	// With Bound.Measured: the FIFO position it was last dispatched from,
	// if that was before its FIFO moment and its ack has yet to come.
	ranFrom  float64
	jumpedAt bool
}

// refSched is a reference model of Scheduler written from its documentation
// with plain slices and linear scans: no heaps, no intrusive lists.
type refSched struct {
	cfg              Config
	items            []*refItem
	seq, entry       uint64
	enqWork, deqWork float64
	credit           []int
	skipped          []*refItem // expired items Pop took out, for the next Expire
	// With Bound.Tail: every FIFO latency the guard saw, the quantile of
	// the latest tailSize as of the last refresh, and how many came since.
	lats      []time.Duration
	tailQ     time.Duration
	tailSince int
	// With Bound.TailRisk: every latency a Pop realized (its wait until
	// then plus its cost), their quantile and how many came since, kept
	// as the FIFO latencies are.
	realized      []time.Duration
	realizedQ     time.Duration
	realizedSince int
	// With Bound.Measured: every ack of a message dispatched before its
	// FIFO moment, at the position it left from, with how much longer
	// than predicted it ran.
	marks []refMark
}

type refMark struct {
	pos   float64
	extra time.Duration
}

// measured is the extra work counted toward r's FIFO moment: that of the
// acks of messages dispatched before their moments from positions above
// r's, while r waits for its own.
func (m *refSched) measured(r *refItem) float64 {
	if r.pastFIFO {
		return 0
	}
	var sum time.Duration
	for _, k := range m.marks {
		if k.pos > r.fifoPos {
			sum += k.extra
		}
	}
	return float64(sum) / 1e9
}

// ran is the ack of r, which ran for took.
func (m *refSched) ran(r *refItem, took time.Duration) {
	if b := m.cfg.Bound; b == nil || !b.Measured || r.queued || !r.jumpedAt {
		return
	}
	r.jumpedAt = false
	m.marks = append(m.marks, refMark{r.ranFrom, max(took, 0) - r.cost})
}

func newRef(cfg Config) *refSched {
	return &refSched{cfg: cfg, credit: make([]int, cfg.Levels)}
}

func (m *refSched) waiting() []*refItem {
	var out []*refItem
	for _, r := range m.items {
		if r.queued {
			out = append(out, r)
		}
	}
	return out
}

func (m *refSched) push(r *refItem, now time.Time) {
	if r.seq == 0 {
		r.seq = r.id
		if r.seq == 0 {
			r.seq = m.seq + 1
		}
		m.seq = max(m.seq, r.seq)
	}
	r.tier = min(max(r.tier, 0), m.cfg.Levels-1)
	r.queued, r.promoted = true, false
	r.level, r.levelAt = r.tier, now
	m.entry++
	r.entry = m.entry
	r.hasDue = false
	r.pastFIFO = false
	if b := m.cfg.Bound; b != nil && b.Guard != nil {
		r.queued = false // the others first: this item's FIFO position is new
		m.promote(now)
		r.queued = true
		r.pushedAt, r.fifoPos = now, m.enqWork
		if m.enqWork-m.deqWork <= 0 {
			m.setDeadline(r, now)
		}
	}
	if b := m.cfg.Bound; b != nil && (r.long || b.Others != nil) {
		stretch := b.Stretch
		if !r.long {
			stretch = *b.Others
		}
		ahead := m.enqWork - m.deqWork
		r.due = m.enqWork + stretch*ahead + b.MinSlack.Seconds()
		r.hasDue = true
	}
	m.enqWork += r.cost.Seconds()
	if b := m.cfg.Bound; b != nil && b.Tail > 0 && len(m.lats) > 0 && (m.tailQ == 0 || m.tailSince >= tailRefresh) {
		// Refreshed at Push only, every tailRefresh latencies: the
		// quantile of the latest tailSize, by plain sorting.
		last := slices.Clone(m.lats[max(0, len(m.lats)-tailSize):])
		slices.Sort(last)
		m.tailQ = last[min(len(last)-1, int(b.Tail*float64(len(last))))]
		m.tailSince = 0
	}
	if b := m.cfg.Bound; b != nil && b.TailRisk > 0 && len(m.realized) > 0 && (m.realizedQ == 0 || m.realizedSince >= tailRefresh) {
		last := slices.Clone(m.realized[max(0, len(m.realized)-tailSize):])
		slices.Sort(last)
		m.realizedQ = last[min(len(last)-1, int(b.Tail*float64(len(last))))]
		m.realizedSince = 0
	}
}

// tailAtRisk: the tail cap applies always without TailRisk, and with it
// while the realized quantile is above TailRisk times the FIFO one, or
// unknown.
func (m *refSched) tailAtRisk() bool {
	r := m.cfg.Bound.TailRisk
	return r <= 0 || m.realizedQ == 0 || float64(m.realizedQ) > r*float64(m.tailQ)
}

// promote gives every waiting guarded item whose FIFO position the work
// dispatched has reached its deadline: now plus guard times (its wait so far
// plus its cost).
func (m *refSched) promote(now time.Time) {
	b := m.cfg.Bound
	if b == nil || b.Guard == nil {
		return
	}
	for _, r := range m.waiting() {
		if !r.pastFIFO && r.fifoPos <= m.deqWork+m.measured(r) {
			m.setDeadline(r, now)
		}
	}
}

func (m *refSched) setDeadline(r *refItem, now time.Time) {
	b := m.cfg.Bound
	lat := now.Sub(r.pushedAt) + r.cost
	slack := *b.Guard * float64(lat)
	if r.long && b.LongGuard != nil {
		// A long message's own guard, if tighter.
		slack = min(slack, *b.LongGuard*float64(lat))
	} else if b.TailLong && r.tailLong && b.LongGuard != nil {
		// With TailLong, a message of a key whose tail is long takes
		// TailLongGuard, or the long guard.
		g := *b.LongGuard
		if b.TailLongGuard != nil {
			g = *b.TailLongGuard
		}
		slack = min(slack, g*float64(lat))
	} else if b.Tail > 0 && m.tailQ > 0 && m.tailAtRisk() {
		// Up to the tail quantile, or GuardMin of its latency if more
		// (UnsureGuardMin for a message whose cost is a guess).
		gmin := b.GuardMin
		if r.unsure && b.UnsureGuardMin != nil {
			gmin = *b.UnsureGuardMin
		}
		slack = min(slack, max(gmin*float64(lat), float64(m.tailQ-lat)))
	}
	r.deadline = now.Add(time.Duration(slack))
	r.pastFIFO = true
	if b.Tail > 0 {
		m.lats = append(m.lats, lat)
		m.tailSince++
	}
}

func (m *refSched) remove(r *refItem) bool {
	if !r.queued {
		return false
	}
	r.queued = false
	m.deqWork += r.cost.Seconds()
	return true
}

func (m *refSched) expired(now time.Time) []*refItem {
	var out []*refItem
	for _, r := range m.waiting() {
		if !r.expires.IsZero() && !r.expires.After(now) {
			m.remove(r)
			out = append(out, r)
		}
	}
	return out
}

func (m *refSched) expire(now time.Time) []*refItem {
	out := append(m.skipped, m.expired(now)...)
	m.skipped = nil
	return out
}

func (m *refSched) age(now time.Time) {
	if m.cfg.Aging == AgingOff || m.cfg.Aging == "" {
		return
	}
	for i := 1; i < m.cfg.Levels; i++ {
		var at []*refItem
		for _, r := range m.waiting() {
			if r.level == i {
				at = append(at, r)
			}
		}
		slices.SortFunc(at, func(a, b *refItem) int { return cmp.Compare(a.entry, b.entry) })
		for _, r := range at {
			if now.Sub(r.levelAt) < m.cfg.AgeAfter[i] {
				continue // every item that waited long enough moves, wherever it sits
			}
			if m.cfg.Aging == AgingPausing && m.promotedAt(i-1) > 0 {
				break
			}
			r.level, r.levelAt, r.promoted = i-1, now, true
			m.entry++
			r.entry = m.entry
		}
	}
}

func (m *refSched) promotedAt(lv int) int {
	n := 0
	for _, r := range m.items {
		if r.queued && r.level == lv && r.promoted {
			n++
		}
	}
	return n
}

// before orders a level: by first enqueue, or by cost then first enqueue.
func (m *refSched) before(a, b *refItem) bool {
	if m.cfg.ShortestFirst && a.cost != b.cost {
		return a.cost < b.cost
	}
	return a.seq < b.seq
}

func (m *refSched) head(lv int) *refItem {
	var best *refItem
	for _, r := range m.items {
		if r.queued && r.level == lv && (best == nil || m.before(r, best)) {
			best = r
		}
	}
	return best
}

func (m *refSched) pop(now time.Time) *refItem {
	if len(m.waiting()) == 0 {
		return nil
	}
	m.skipped = append(m.skipped, m.expired(now)...)
	if len(m.waiting()) == 0 {
		return nil
	}
	m.age(now)
	var due *refItem
	for _, r := range m.waiting() {
		if r.hasDue && (due == nil || r.due < due.due || (r.due == due.due && r.seq < due.seq)) {
			due = r
		}
	}
	m.promote(now)
	// The guard: the item past its FIFO moment with the earliest deadline,
	// if that deadline has come.
	var late *refItem
	for _, r := range m.waiting() {
		if r.pastFIFO && (late == nil || r.deadline.Before(late.deadline) || (r.deadline.Equal(late.deadline) && r.seq < late.seq)) {
			late = r
		}
	}
	guardDue := late != nil && !late.deadline.After(now)
	// A due point is counted like the FIFO moment while its message waits
	// for that; with the default's shape a message past its moment is due.
	b := m.cfg.Bound
	dueShape := b != nil && b.Guard != nil && b.Stretch > -1 && b.Stretch <= 0 && b.MinSlack == 0 && (b.Others == nil || *b.Others == b.Stretch)
	var r *refItem
	if guardDue {
		r = late
	} else if due != nil && (dueShape && due.pastFIFO || due.due <= m.deqWork+m.measured(due)) {
		r = due
	} else if r = m.chooseLevel(); late != nil && r != late && m.cfg.Bound.Overtake > 0 && float64(r.cost) > m.cfg.Bound.Overtake*float64(late.cost) {
		// Past its FIFO moment, late may be overtaken only by much
		// shorter messages.
		r = late
	}
	if b != nil && b.TailRisk > 0 {
		m.realized = append(m.realized, now.Sub(r.pushedAt)+r.cost)
		m.realizedSince++
	}
	r.jumpedAt = b != nil && b.Measured && !r.pastFIFO
	r.ranFrom = r.fifoPos
	m.remove(r)
	m.promote(now)
	return r
}

// chooseLevel picks the head of a non-empty level by the discipline.
func (m *refSched) chooseLevel() *refItem {
	var r *refItem
	if m.cfg.Discipline == Weighted {
		total, best := 0, -1
		for i := range m.cfg.Levels {
			if m.head(i) == nil {
				continue
			}
			m.credit[i] += m.cfg.Weights[i]
			total += m.cfg.Weights[i]
			if best < 0 || m.credit[i] > m.credit[best] {
				best = i
			}
		}
		m.credit[best] -= total
		return m.head(best)
	}
	for i := range m.cfg.Levels {
		if r = m.head(i); r != nil {
			break
		}
	}
	return r
}

func randConfig(rng *rand.Rand) Config {
	cfg := Config{Levels: 1 + rng.IntN(4), Discipline: Strict, Aging: AgingOff}
	if rng.IntN(2) == 0 {
		cfg.Discipline = Weighted
		for range cfg.Levels {
			cfg.Weights = append(cfg.Weights, 1+rng.IntN(10))
		}
	}
	switch rng.IntN(3) {
	case 1:
		cfg.Aging = AgingStep
	case 2:
		cfg.Aging = AgingPausing
	}
	if cfg.Aging != AgingOff {
		cfg.AgeAfter = make([]time.Duration, cfg.Levels)
		for i := 1; i < cfg.Levels; i++ {
			cfg.AgeAfter[i] = time.Duration(1+rng.IntN(40)) * time.Millisecond
		}
	}
	if rng.IntN(2) == 0 {
		cfg.Bound = &Bound{Stretch: float64(rng.IntN(13)-4) / 4, MinSlack: time.Duration(rng.IntN(4)) * time.Second / 8}
		if rng.IntN(2) == 0 {
			cfg.Bound.Others = new(float64(rng.IntN(13)-4) / 4)
		}
		if rng.IntN(2) == 0 {
			cfg.Bound.Guard = new(float64(rng.IntN(9)) / 8)
			cfg.Bound.Overtake = float64(rng.IntN(5)) / 4
			if rng.IntN(2) == 0 {
				// The adaptive guard: a tail quantile, the slack past it
				// and, at times, a guard of long messages' own.
				cfg.Bound.Tail = []float64{0.5, 0.9, 0.99}[rng.IntN(3)]
				cfg.Bound.GuardMin = float64(rng.IntN(5)) / 8
				cfg.Bound.TailRisk = []float64{0, 0, 0.5, 1, 1.25}[rng.IntN(5)]
				if rng.IntN(2) == 0 {
					cfg.Bound.UnsureGuardMin = new(float64(rng.IntN(3)) / 8)
				}
				if rng.IntN(2) == 0 {
					cfg.Bound.LongGuard = new(float64(rng.IntN(3)) / 8)
					cfg.Bound.TailLong = rng.IntN(2) == 0
					if rng.IntN(2) == 0 {
						cfg.Bound.TailLongGuard = new(float64(rng.IntN(3)) / 8)
					}
				}
			}
			// Measured work toward the FIFO moments (Scheduler.Ran).
			cfg.Bound.Measured = rng.IntN(2) == 0
			if rng.IntN(2) == 0 {
				// The default's shape, where the due heap stands in for the
				// FIFO line (Scheduler.dueOrdered): one stretch from -0.75
				// to 0, no MinSlack.
				cfg.Bound.Stretch = -float64(rng.IntN(4)) / 4
				cfg.Bound.MinSlack = 0
				if cfg.Bound.Others != nil {
					*cfg.Bound.Others = cfg.Bound.Stretch
				}
			}
		}
	}
	cfg.ShortestFirst = rng.IntN(2) == 0
	return cfg
}

// TestSchedulerMatchesModel drives the scheduler and the reference model
// with thousands of random sequences of Push, Pop, Remove, Expire and
// retries, under random configurations, and requires the same item from
// every Pop, the same sets from Remove and Expire, and the same Len, level
// lengths, levels, backlog and next expiry after every step. At the end it
// drains both and checks that every delivery attempt ended exactly once.
func TestSchedulerMatchesModel(t *testing.T) {
	t.Parallel()
	seqs, ops := 3000, 250
	if testing.Short() {
		seqs = 300
	}
	const shards = 4
	for shard := range uint64(shards) {
		t.Run(fmt.Sprint("shard", shard), func(t *testing.T) {
			t.Parallel()
			for seed := shard; seed < uint64(seqs); seed += shards {
				checkAgainstModel(t, seed, ops)
			}
		})
	}
}

func checkAgainstModel(t *testing.T, seed uint64, ops int) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	cfg := randConfig(rng)
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("seed %d: New(%+v): %v", seed, cfg, err)
	}
	m := newRef(cfg)
	// The operations so far, formatted only if the sequence fails.
	type logged struct {
		format string
		args   []any
	}
	var log []logged
	logf := func(format string, args ...any) { log = append(log, logged{format, args}) }
	fail := func(format string, args ...any) {
		t.Helper()
		var ops []string
		for _, l := range log {
			ops = append(ops, fmt.Sprintf(l.format, l.args...))
		}
		t.Fatalf("seed %d, config %+v (bound %+v)\nops:\n  %s\n%s", seed, cfg, cfg.Bound,
			strings.Join(ops, "\n  "), fmt.Sprintf(format, args...))
	}
	byItem := map[*Item]*refItem{}
	pushes := map[*refItem]int{} // delivery attempts
	ends := map[*refItem]int{}   // popped, removed or expired
	var popped []*refItem        // dispatched and not acked: candidates for a retry
	now := time.Unix(1_000_000, 0)

	push := func(r *refItem) {
		if err := s.Push(r.it, now); err != nil {
			fail("Push(%d): %v", r.it.ID, err)
		}
		m.push(r, now)
		if r.it.ID != r.seq {
			fail("pushed with ID %d, the item has ID %d, model %d", r.id, r.it.ID, r.seq)
		}
		pushes[r]++
	}
	ended := func(r *refItem, how string) {
		ends[r]++
		if ends[r] > pushes[r] {
			fail("item %d %s %d times but pushed %d", r.it.ID, how, ends[r], pushes[r])
		}
	}
	sameSet := func(what string, got []*Item, want []*refItem) {
		ids := func(xs []uint64) []uint64 { slices.Sort(xs); return xs }
		var g, w []uint64
		for _, it := range got {
			g = append(g, it.ID)
		}
		for _, r := range want {
			w = append(w, r.it.ID)
		}
		if !slices.Equal(ids(g), ids(w)) {
			fail("%s returned %v, model %v", what, g, w)
		}
	}

	for op := range ops {
		now = now.Add(time.Duration(rng.IntN(8)) * time.Millisecond)
		switch k := rng.IntN(20); {
		case k < 8: // publish
			// Most items come numbered, in order but with gaps; some
			// leave the numbering to Push.
			id := m.seq + 1 + uint64(rng.IntN(3))
			if rng.IntN(4) == 0 {
				id = 0
			}
			r := &refItem{
				tier: rng.IntN(cfg.Levels+2) - 1, // out-of-range tiers are clamped
				// Multiples of 1/8 s add up exactly in any order, so the
				// model's work counts match the scheduler's bit for bit.
				cost:     time.Duration(1+rng.IntN(6)) * time.Second / 8,
				long:     rng.IntN(5) == 0,
				unsure:   rng.IntN(3) == 0,
				tailLong: rng.IntN(3) == 0,
				id:       id,
			}
			if rng.IntN(3) == 0 {
				r.expires = now.Add(time.Duration(rng.IntN(60)) * time.Millisecond)
			}
			r.it = &Item{ID: id, Tier: int8(r.tier), Cost: r.cost, Long: r.long}
			r.it.SetUnsure(r.unsure)
			r.it.SetTailLong(r.tailLong)
			r.it.SetExpires(r.expires)
			m.items = append(m.items, r)
			byItem[r.it] = r
			var ttl any = "never"
			if !r.expires.IsZero() {
				ttl = r.expires.Sub(now)
			}
			logf("%d: push %d tier %d cost %v long %v unsure %v tail-long %v expires in %s", op, id, r.tier, r.cost, r.long, r.unsure, r.tailLong, ttl)
			push(r)
		case k < 14:
			logf("%d: pop at +%v", op, now.Sub(time.Unix(1_000_000, 0)))
			got, want := s.Pop(now), m.pop(now)
			switch {
			case got == nil && want == nil:
			case got == nil || want == nil || byItem[got] != want:
				fail("Pop = %v, model %v", idOf(got), idOf(want.itemOrNil()))
			}
			if got != nil {
				if e := got.Expires(); !e.IsZero() && !e.After(now) {
					fail("Pop returned item %d, expired at %v, at %v", got.ID, got.Expires(), now)
				}
				if got.Queued() {
					fail("popped item %d still reports Queued", got.ID)
				}
				ended(want, "popped")
				popped = append(popped, want)
			}
		case k < 15 && len(popped) > 0: // ack: the run's measured duration
			i := rng.IntN(len(popped))
			r := popped[i]
			popped = slices.Delete(popped, i, i+1)
			// In eighths of a second, as costs are, so sums stay exact.
			took := time.Duration(rng.IntN(17)) * time.Second / 8
			logf("%d: ack %d took %v", op, r.it.ID, took)
			s.Ran(r.it, took)
			m.ran(r, took)
		case k < 16 && len(popped) > 0: // nack: redeliver a dispatched message
			i := rng.IntN(len(popped))
			r := popped[i]
			popped = slices.Delete(popped, i, i+1)
			if r.it.Queued() {
				break // already pushed again
			}
			logf("%d: retry %d", op, r.it.ID)
			push(r)
			if err := s.Push(r.it, now); err != ErrQueued {
				fail("second Push of %d = %v, want ErrQueued", r.it.ID, err)
			}
		case k < 18 && len(m.items) > 0:
			r := m.items[rng.IntN(len(m.items))]
			logf("%d: remove %d", op, r.it.ID)
			got, want := s.Remove(r.it), m.remove(r)
			if got != want {
				fail("Remove(%d) = %v, model %v", r.it.ID, got, want)
			}
			if got {
				ended(r, "removed")
			}
		default:
			logf("%d: expire at +%v", op, now.Sub(time.Unix(1_000_000, 0)))
			got, want := s.Expire(now, nil), m.expire(now)
			sameSet("Expire", got, want)
			for _, r := range want {
				ended(r, "expired")
			}
		}
		checkState(t, s, m, fail)
	}

	// Drain: whatever is waiting is popped or expires.
	for {
		got, want := s.Pop(now), m.pop(now)
		if (got == nil) != (want == nil) || (got != nil && byItem[got] != want) {
			fail("drain: Pop = %v, model %v", idOf(got), idOf(want.itemOrNil()))
		}
		if got == nil {
			break
		}
		ended(want, "popped")
	}
	got, want := s.Expire(now, nil), m.expire(now)
	sameSet("final Expire", got, want)
	for _, r := range want {
		ended(r, "expired")
	}
	if s.Len() != 0 {
		fail("Len = %d after draining", s.Len())
	}
	if at, ok := s.NextExpiry(); ok {
		fail("NextExpiry = %v after draining", at)
	}
	for _, r := range m.items {
		if pushes[r] != ends[r] {
			fail("item %d pushed %d times, ended %d times", r.it.ID, pushes[r], ends[r])
		}
	}
}

func (r *refItem) itemOrNil() *Item {
	if r == nil {
		return nil
	}
	return r.it
}

func idOf(it *Item) any {
	if it == nil {
		return "nil"
	}
	return it.ID
}

func checkState(t *testing.T, s *Scheduler, m *refSched, fail func(string, ...any)) {
	if s.tail.q != int64(m.tailQ) || s.tail.since != m.tailSince {
		fail("tail quantile %v after %d latencies, model %v after %d", time.Duration(s.tail.q), s.tail.since, m.tailQ, m.tailSince)
	}
	if s.realized.q != int64(m.realizedQ) || s.realized.since != m.realizedSince {
		fail("realized quantile %v after %d latencies, model %v after %d", time.Duration(s.realized.q), s.realized.since, m.realizedQ, m.realizedSince)
	}
	t.Helper()
	waiting := m.waiting()
	if s.Len() != len(waiting) {
		fail("Len = %d, model %d", s.Len(), len(waiting))
	}
	perLevel := make([]int, m.cfg.Levels)
	var next time.Time
	for _, r := range waiting {
		perLevel[r.level]++
		if !r.it.Queued() || r.it.Level() != r.level {
			fail("item %d: queued %v level %d, model level %d", r.it.ID, r.it.Queued(), r.it.Level(), r.level)
		}
		if !r.expires.IsZero() && (next.IsZero() || r.expires.Before(next)) {
			next = r.expires
		}
	}
	for _, r := range m.skipped {
		if next.IsZero() || r.expires.Before(next) {
			next = r.expires
		}
	}
	for i, n := range perLevel {
		if s.LevelLen(i) != n {
			fail("LevelLen(%d) = %d, model %d", i, s.LevelLen(i), n)
		}
	}
	if at, ok := s.NextExpiry(); ok != !next.IsZero() || !at.Equal(next) {
		fail("NextExpiry = %v, %v; model %v", at, ok, next)
	}
	if got, want := s.Backlog(), time.Duration((m.enqWork-m.deqWork)*float64(time.Second)); got != want {
		fail("Backlog = %v, model %v", got, want)
	}
	n := 0
	s.Each(func(it *Item) {
		n++
		if !it.Queued() {
			fail("Each visits item %d, which is not queued", it.ID)
		}
	})
	if n != len(waiting) {
		fail("Each visits %d items, model has %d waiting", n, len(waiting))
	}
}
