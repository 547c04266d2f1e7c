// Package sched owns the scheduling core: a multi-level queue of waiting
// messages and the policy that picks the next one when a worker asks. It is
// pure: time is passed in, it starts no goroutines, holds no locks and does no
// I/O, so the broker and the simulator run exactly the same code.
//
// Dispatch is non-preemptive and late-bound: nothing is ordered until a
// worker is free, and then Pop decides. Within a level, messages leave in
// the order they were first enqueued (a retry keeps its place and its tier).
package sched

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Disciplines: how Pop chooses among non-empty levels.
const (
	Strict   = "strict"   // the lowest-numbered non-empty level always goes first
	Weighted = "weighted" // smooth weighted round robin over non-empty levels
)

// Aging modes: how a message that waited too long at its level moves up.
const (
	AgingOff     = "off"
	AgingStep    = "step"    // past its level's threshold a message moves up one level
	AgingPausing = "pausing" // as step, but paused while the level above still holds promoted messages
)

// Errors.
var (
	// ErrQueued: the item is already in a scheduler.
	ErrQueued = errors.New("sched: item is already queued")
)

// Config describes a scheduler. Policy names map onto it (see Policy).
type Config struct {
	Levels     int
	Discipline string
	Weights    []int // Weighted: one per level
	Aging      string
	// AgeAfter[i] is how long a message may wait at level i before it moves
	// up to level i-1; AgeAfter[0] is unused.
	AgeAfter []time.Duration
	// Bound, when set, caps each message's wait relative to FIFO: see Bound.
	Bound *Bound
	// ShortestFirst orders each level by predicted cost instead of arrival.
	ShortestFirst bool
}

// maxLevels is the most levels a scheduler may have.
const maxLevels = 64

// Bound keeps shortest-first scheduling honest toward FIFO: toward the
// longest work, which it would otherwise starve, and (with Guard) toward
// every message.
//
// Long messages. Each message gets a position: the predicted work enqueued
// before it, which is where FIFO would have started it. The scheduler counts
// the predicted work it dispatches; once that count passes a bounded
// message's position plus its slack, the message is overdue and goes next,
// earliest deadline first, ahead of any level. Items marked Long (the
// predictor marks the most expensive recent work and the messages it cannot
// predict) get a slack of Stretch times the predicted work waiting ahead of
// them when they arrived, plus MinSlack: Stretch -0.05 starts a long message
// once 95% of the work ahead of it has been dispatched, 0 at about FIFO's
// start. Other items get such a deadline only when Others is set, with that
// stretch instead.
//
// Every message (Guard). A message's FIFO moment is when the predicted work
// dispatched reaches its position: from then on FIFO would have started it
// at the next free worker, and the wait FIFO would have given it is known,
// the time from its push to that moment. From its FIFO moment on, a message
// may be overtaken only by messages predicted at most Overtake times its own
// cost, and only until its deadline: its FIFO moment plus Guard times (that
// wait plus its predicted cost). Past the deadline it goes next, earliest
// deadline first, ahead even of an overdue long message. So no message
// should finish much later than (1 + Guard) times the latency FIFO would
// have given it, and once FIFO would have started a message, only much
// shorter work may still go ahead of it. The promise holds in the
// scheduler's own accounting (predicted work, its own FIFO moments); in
// real time prediction errors and non-preemptive dispatch loosen it
// (docs/policy.md measures by how much). Overtake <= 0 lets any message
// overtake until the deadline; nil Guard leaves the guard off.
//
// The guard adapts (Tail, GuardMin, LongGuard). A fixed Guard is too loose
// for a busy queue and too tight for a quiet one: holding a message up to
// half its FIFO latency costs nothing at the all-message P99 while its
// latency stays below the latencies that make the P99, and a great deal
// once the queue's messages all wait about as long as each other, as they
// do under overload. So, with Tail, the scheduler keeps the FIFO latencies
// of the latest messages to reach their FIFO moment (tailSize of them)
// and their Tail quantile Q, refreshed at Push; a message whose FIFO
// latency is L is then held at most min(Guard L, max(GuardMin L, Q - L))
// past its FIFO moment: up to Q, where the quantile lies, and never more
// than GuardMin L beyond it. A Long message is held at most LongGuard L.
//
// The cap only where the tail is at risk (TailRisk). Holding the messages
// near Q costs the all-message P99 only where the queue's own dispatches
// already reach past FIFO's tail; elsewhere (a queue whose P99 is made by
// its longest jobs, which the long bound holds to their FIFO start) it
// costs the mean for nothing. With TailRisk above 0 the scheduler also
// keeps the latencies its dispatches realize, in the same terms (the wait
// until dispatch plus the predicted cost), over the latest tailSize, and
// applies the cap only while their Tail quantile is above TailRisk times
// Q, or before it knows either; otherwise a message gets the full Guard L.
//
// FIFO's progress (VirtualFIFO). By default "the predicted work dispatched"
// above is the scheduler's own count, which is not FIFO's: FIFO keeps more
// long work in service at once, and the count does not see workers at all.
// With VirtualFIFO the scheduler instead replays its messages, in predicted
// costs, through FIFO on as many virtual workers as Scheduler.SetWorkers
// last said, advancing with now: a message's FIFO moment is when that run
// starts it, and a long message's due point is counted in the work that run
// has started. Until SetWorkers is called the run has no workers and starts
// nothing, so a caller that turns it on must say how many workers there
// are. It needs Guard. It is off by default: with the guard's settings it
// does worse than the count (docs/policy.md has the figures).
//
// The virtual run's clock is now, unless DispatchClock is set: then, while
// messages wait (so every real worker is busy), it advances by the predicted
// work the scheduler dispatches shared among the workers, and by now only
// while none wait. A run in predicted costs on the wall clock drifts from
// the real one by the sum of the prediction errors; this clock keeps it at
// the real workers' pace.
//
// Measured work (Measured). The count above is in predicted work, and a
// message that jumps ahead of others while they wait for their FIFO moment
// takes a worker for as long as it really runs, not for its prediction.
// With Measured, when such a message's ack says how long it ran
// (Scheduler.Ran), the difference from its prediction is added to FIFO's
// progress as seen by every message still waiting for its FIFO moment whose
// FIFO position is below the ran message's: the messages it jumped. The
// work of messages ahead in FIFO order needs no correction: it is on both
// sides of the count. A long message's due point is counted the same way
// while the message waits for its FIFO moment.
type Bound struct {
	Stretch       float64
	MinSlack      time.Duration
	Others        *float64
	Guard         *float64
	Overtake      float64
	VirtualFIFO   bool
	DispatchClock bool
	// Tail, when above 0, adapts the guard to the queue (see Bound):
	// the quantile of recent FIFO latencies past which no message is
	// held for more than GuardMin times its own.
	Tail     float64
	GuardMin float64
	// TailRisk, when above 0, applies the Tail cap only while the tail is
	// at risk (see Bound).
	TailRisk float64
	// UnsureGuardMin, when set, is GuardMin for an Unsure item: a message
	// whose cost the predictor could only guess is held past the tail
	// quantile by this share of its FIFO latency instead.
	UnsureGuardMin *float64
	// LongGuard, when set, is the guard of Long messages in place of
	// Guard (the smaller of the two applies): 0 sends a long message as
	// soon as its FIFO moment comes.
	LongGuard *float64
	// Measured counts FIFO's progress in the measured durations of the
	// messages that jumped the line (see Bound and Scheduler.Ran).
	Measured bool
	// TailLong gives a TailLong item (Item.SetTailLong: a key whose tail
	// reaches the long cut though its cost does not) the LongGuard of long
	// messages past its FIFO moment, while it keeps its own cost and level
	// in the order: it may go earlier than FIFO would send it, not later.
	TailLong bool
	// TailLongGuard, when set, is the guard of TailLong items in place of
	// LongGuard (the smaller of it and Guard applies).
	TailLongGuard *float64
}

// Validate reports the first setting that makes no sense.
func (c Config) Validate() error {
	if c.Levels < 1 || c.Levels > maxLevels {
		return fmt.Errorf("sched: levels must be 1 to %d, got %d", maxLevels, c.Levels)
	}
	switch c.Discipline {
	case Strict:
	case Weighted:
		if len(c.Weights) != c.Levels {
			return fmt.Errorf("sched: weighted needs one weight per level (%d), got %d", c.Levels, len(c.Weights))
		}
		for _, w := range c.Weights {
			if w < 1 || w > 1_000_000 {
				return fmt.Errorf("sched: weights must be 1 to 1000000, got %d", w)
			}
		}
	default:
		return fmt.Errorf("sched: unknown discipline %q (want %q or %q)", c.Discipline, Strict, Weighted)
	}
	switch c.Aging {
	case AgingOff, "":
	case AgingStep, AgingPausing:
		if len(c.AgeAfter) != c.Levels {
			return fmt.Errorf("sched: aging needs one threshold per level (%d), got %d", c.Levels, len(c.AgeAfter))
		}
		for i, d := range c.AgeAfter[1:] {
			if d <= 0 {
				return fmt.Errorf("sched: aging threshold of level %d must be positive, got %v", i+1, d)
			}
		}
	default:
		return fmt.Errorf("sched: unknown aging mode %q (want off, step or pausing)", c.Aging)
	}
	if b := c.Bound; b != nil {
		if math.IsNaN(b.Stretch) || b.Stretch < -1 || b.Stretch > 1000 {
			return fmt.Errorf("sched: bound stretch must be -1 to 1000, got %v", b.Stretch)
		}
		if o := b.Others; o != nil && (math.IsNaN(*o) || *o < -1 || *o > 1000) {
			return fmt.Errorf("sched: bound stretch of other messages must be -1 to 1000, got %v", *o)
		}
		if g := b.Guard; g != nil && (math.IsNaN(*g) || *g < 0 || *g > 1000) {
			return fmt.Errorf("sched: bound guard must be 0 to 1000, got %v", *g)
		}
		if math.IsNaN(b.Overtake) || b.Overtake > 1000 {
			return fmt.Errorf("sched: bound overtake ratio must be at most 1000, got %v", b.Overtake)
		}
		if math.IsNaN(b.Tail) || b.Tail < 0 || b.Tail >= 1 {
			return fmt.Errorf("sched: bound tail quantile must be 0 (off) or between 0 and 1, got %v", b.Tail)
		}
		if math.IsNaN(b.TailRisk) || b.TailRisk < 0 || b.TailRisk > 1000 || b.TailRisk > 0 && b.Tail == 0 {
			return fmt.Errorf("sched: bound tail risk must be 0 (off) or positive with a tail quantile, got %v", b.TailRisk)
		}
		if g := b.UnsureGuardMin; g != nil && (math.IsNaN(*g) || *g < 0 || *g > 1000) {
			return fmt.Errorf("sched: bound guard minimum of unsure messages must be 0 to 1000, got %v", *g)
		}
		if math.IsNaN(b.GuardMin) || b.GuardMin < 0 || b.GuardMin > 1000 {
			return fmt.Errorf("sched: bound guard minimum must be 0 to 1000, got %v", b.GuardMin)
		}
		if g := b.TailLongGuard; g != nil && (math.IsNaN(*g) || *g < 0 || *g > 1000) {
			return fmt.Errorf("sched: bound guard of tail-long messages must be 0 to 1000, got %v", *g)
		}
		if g := b.LongGuard; g != nil && (math.IsNaN(*g) || *g < 0 || *g > 1000) {
			return fmt.Errorf("sched: bound long guard must be 0 to 1000, got %v", *g)
		}
		if b.MinSlack < 0 {
			return fmt.Errorf("sched: bound min slack must not be negative, got %v", b.MinSlack)
		}
		if b.VirtualFIFO && b.Guard == nil {
			return fmt.Errorf("sched: the virtual FIFO run serves the guard: set a guard or leave it off")
		}
		if b.DispatchClock && !b.VirtualFIFO {
			return fmt.Errorf("sched: the dispatch clock is the virtual FIFO run's: turn the run on or leave it off")
		}
		if b.TailLong && (b.Guard == nil || b.LongGuard == nil) {
			return fmt.Errorf("sched: tail-long messages take the long guard: set a guard and a long guard, or leave it off")
		}
		if b.Measured && (b.Guard == nil || b.VirtualFIFO) {
			return fmt.Errorf("sched: measured work corrects the guard's own count: set a guard, without the virtual FIFO run")
		}
	}
	return nil
}

// Item is one waiting message as the scheduler sees it. The caller fills the
// exported fields before the first Push and keeps the Item across retries.
// It carries no reference to the caller's message: a caller that holds
// messages by the million keeps the Item inside its message and finds the
// message from the Item's address (delivery.Job does).
type Item struct {
	// ID orders items of equal rank: they leave in ID order, so a caller
	// that sets IDs numbers items in the order they first join the line
	// (a retry keeps its ID and so its place). Push gives an item with
	// ID 0 the next number past any it has seen.
	ID   uint64
	Cost time.Duration // predicted duration, used by Bound and ShortestFirst; Push makes a negative one 0
	Long bool          // predicted far longer than typical: Bound applies
	Tier int8          // the level it was assigned (Push clamps it to the levels there are); kept across retries

	// The small fields next, in one word with Long and Tier.
	level  int8      // Config.Levels is at most 64
	state  itemState // its guard heap, and whether it is queued and promoted
	ageIdx int32     // its entry's number in its level's age line, when the scheduler ages
	// Its index in each heap it is in (-1 when not). guardIdx is its entry
	// number in fifoWait while it waits for its FIFO moment, and dueIdx
	// its entry number in pastDue once there (statePastDue).
	levelIdx int32
	dueIdx   int32
	ttlIdx   int32
	guardIdx int32

	// due is its due point while in the due heap; once dispatched, with
	// Bound.Measured, the FIFO position it was dispatched from before its
	// FIFO moment (for Scheduler.Ran), or -1.
	due float64
	// The guard's view: when it was pushed, and one word that is its FIFO
	// position while it waits for its FIFO moment (guardFIFO: the
	// predicted work pushed before it or, with Bound.VirtualFIFO, its
	// ticket in the virtual run's line; see pos) and its deadline once past
	// it (guardLate, Unix nanoseconds). An item is never both, and a
	// million waiting items save 8 MB by sharing the word.
	pushedAt int64
	guardAt  int64
	expires  int64 // its TTL's end (Unix nanoseconds); 0 is never
}

// itemState is an item's guard heap (guardNone, guardFIFO or guardLate) in
// its low bits and its yes-or-no states above them.
type itemState uint8

const (
	stateGuard    itemState = 3  // the guard heap's bits
	stateQueued   itemState = 4  // waiting in a scheduler
	statePromoted itemState = 8  // moved up a level by aging
	statePastDue  itemState = 16 // left the due heap for pastDue at its FIFO moment
	stateUnsure   itemState = 32 // its cost is a guess (Item.SetUnsure); kept across Push
	stateTailLong itemState = 64 // its key's tail is long (Item.SetTailLong); kept across Push
)

func (it *Item) guard() int8 { return int8(it.state & stateGuard) }

func (it *Item) setGuard(g int8) { it.state = it.state&^stateGuard | itemState(g)&stateGuard }

func (it *Item) setQueued(on bool) { it.setState(stateQueued, on) }

func (it *Item) isPromoted() bool { return it.state&statePromoted != 0 }

func (it *Item) setPromoted(on bool) { it.setState(statePromoted, on) }

func (it *Item) setState(f itemState, on bool) {
	if on {
		it.state |= f
	} else {
		it.state &^= f
	}
}

// pos is the item's FIFO position, valid while its guard is guardFIFO.
func (it *Item) pos() float64 { return math.Float64frombits(uint64(it.guardAt)) }

// setPos sets the item's FIFO position, in the word its deadline takes
// later.
func (it *Item) setPos(p float64) { it.guardAt = int64(math.Float64bits(p)) }

// Parked is a word the item's owner may keep in it while the item is not
// queued (a job in flight, delayed or dead keeps a time there): the
// scheduler uses the same word for its guard only while the item waits,
// reads it from no item that is not queued, and overwrites it at Push.
// Read while the item is queued, it is the scheduler's and means nothing
// to the owner.
func (it *Item) Parked() int64 { return it.guardAt }

// SetParked sets the owner's word: see Parked. It panics on a queued item,
// whose word is the scheduler's.
func (it *Item) SetParked(v int64) {
	if it.Queued() {
		panic("sched: SetParked on a queued item")
	}
	it.guardAt = v
}

// ParkedIndex is an index the item's owner may keep in it while the item
// is not queued, such as its place in a heap of the owner's. It is the
// word that holds the item's place in its level while it waits: Push
// overwrites it, and Pop and Remove leave it -1.
func (it *Item) ParkedIndex() *int32 { return &it.levelIdx }

// SetUnsure marks the item's predicted cost as a guess the predictor could
// not size a single job by (a cold or spread-gated key), or clears the
// mark. Set it before Push; Bound.UnsureGuardMin reads it.
func (it *Item) SetUnsure(on bool) { it.setState(stateUnsure, on) }

// Unsure reports whether the item's predicted cost is a guess (SetUnsure).
func (it *Item) Unsure() bool { return it.state&stateUnsure != 0 }

// SetTailLong marks the item as one of a key whose tail reaches the long
// cut though its predicted cost does not (predict.Prediction.TailLong), or
// clears the mark. Set it before Push; Bound.TailLong reads it.
func (it *Item) SetTailLong(on bool) { it.setState(stateTailLong, on) }

// TailLong reports whether the item's key has a long tail (SetTailLong).
func (it *Item) TailLong() bool { return it.state&stateTailLong != 0 }

// SetTier sets the item's Tier, clamped to the levels a scheduler may have.
func (it *Item) SetTier(t int) { it.Tier = int8(min(max(t, 0), maxLevels-1)) }

// SetExpires sets when the item's TTL runs out (the zero time is never).
// Set it before Push.
func (it *Item) SetExpires(t time.Time) {
	it.expires = 0
	if !t.IsZero() {
		it.expires = t.UnixNano()
	}
}

// Expires is when the item's TTL runs out; the zero time is never.
func (it *Item) Expires() time.Time {
	if it.expires == 0 {
		return time.Time{}
	}
	return time.Unix(0, it.expires).UTC()
}

// expiredAt reports whether the item's TTL has run out at now.
func (it *Item) expiredAt(now time.Time) bool {
	return it.expires != 0 && it.expires <= now.UnixNano()
}

// Which guard heap an item is in.
const (
	guardNone int8 = iota
	guardFIFO      // waiting for its FIFO moment (in fifoWait, or the virtual run's line)
	guardLate      // past it, holding a deadline
)

// Level is the level the item sits at now (after any aging).
func (it *Item) Level() int { return int(it.level) }

// Queued reports whether the item is waiting in a scheduler.
func (it *Item) Queued() bool { return it.state&stateQueued != 0 }

type level struct {
	heap     itemHeap
	age      ageLine // with aging on: the items in the order they entered the level
	promoted int     // items that aged into this level and are still here
	credit   int     // smooth weighted round robin
}

// Scheduler is a multi-level queue with a policy. Not safe for concurrent use.
type Scheduler struct {
	cfg    Config
	levels []level
	due    itemHeap
	ttl    itemHeap
	n      int
	maxID  uint64 // the largest item ID pushed
	// expired holds items Pop found past their TTL and took out, in
	// expiry order, until the next Expire reports them.
	expired []*Item

	enqWork float64 // predicted seconds of work ever enqueued
	deqWork float64 // predicted seconds of work dispatched or removed

	// With Bound.Guard: items waiting for their FIFO moment, in push
	// (and so FIFO position) order, and items past it, by deadline.
	fifoWait fifoLine
	late     itemHeap
	// dueOrdered is set when every due point comes before its item's FIFO
	// moment and due points grow in push order, as FIFO positions do (the
	// Bound's one stretch between -1 and 0, no MinSlack, the scheduler's
	// own count). Then an item in the due heap needs no place in fifoWait:
	// the due heap's first item is also the next to reach its FIFO moment,
	// when it moves to pastDue (in due order) and gets its deadline. A long
	// message then waits in two places, its level and one of these, not
	// three: a million of them save about 9 MB.
	dueOrdered bool
	pastDue    fifoLine
	// With Bound.VirtualFIFO, the FIFO run the guard compares with; the
	// items waiting for their FIFO moment are in its line, not fifoWait.
	vf *virtualFIFO
	// With Bound.Tail: the FIFO latencies of the latest messages to reach
	// their FIFO moment, and their Tail quantile as of the last refresh.
	tail tailWindow
	// With Bound.TailRisk: the latencies the scheduler's own dispatches
	// realized, and their Tail quantile, refreshed as tail is.
	realized tailWindow
	// With Bound.Measured: the measured work beyond prediction of the
	// messages that ran after jumping others (see Ran).
	ran ranMarks

	Promotions uint64 // messages moved up by aging, for metrics
	Overdue    uint64 // messages dispatched because Bound said so
	// Guarded counts the messages Bound.Guard dispatched: past their
	// deadline, or past their FIFO moment with nothing much shorter
	// waiting. They are not counted in Overdue.
	Guarded uint64
}

// New returns an empty scheduler.
func New(cfg Config) (*Scheduler, error) {
	if cfg.Aging == "" {
		cfg.Aging = AgingOff
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Scheduler{cfg: cfg, levels: make([]level, cfg.Levels)}
	for i := range s.levels {
		less := func(a, b *Item) bool { return a.ID < b.ID }
		if cfg.ShortestFirst {
			less = func(a, b *Item) bool {
				if a.Cost != b.Cost {
					return a.Cost < b.Cost
				}
				return a.ID < b.ID
			}
		}
		s.levels[i].heap = itemHeap{less: less, idx: func(it *Item) *int32 { return &it.levelIdx }}
		s.levels[i].age.level = int8(i)
	}
	s.due = itemHeap{
		less: func(a, b *Item) bool {
			if a.due != b.due {
				return a.due < b.due
			}
			return a.ID < b.ID
		},
		idx: func(it *Item) *int32 { return &it.dueIdx },
	}
	s.late = itemHeap{
		less: func(a, b *Item) bool {
			if a.guardAt != b.guardAt {
				return a.guardAt < b.guardAt
			}
			return a.ID < b.ID
		},
		idx: func(it *Item) *int32 { return &it.guardIdx },
	}
	s.ttl = itemHeap{
		less: func(a, b *Item) bool { return a.expires < b.expires },
		idx:  func(it *Item) *int32 { return &it.ttlIdx },
	}
	if b := cfg.Bound; b != nil && b.VirtualFIFO {
		s.vf = &virtualFIFO{dispatch: b.DispatchClock}
	} else if b != nil && b.Guard != nil {
		s.dueOrdered = b.Stretch > -1 && b.Stretch <= 0 && b.MinSlack == 0 && (b.Others == nil || *b.Others == b.Stretch)
	}
	s.pastDue.pastDue = true
	return s, nil
}

// SetWorkers tells a scheduler with Bound.VirtualFIFO how many workers take
// its messages from now on (the simulator's workers, the consumers of a
// broker's queue), so that its virtual FIFO run has as many. Workers added
// are free at once; when the count falls, idle virtual workers leave first
// and busy ones when they come free. Without VirtualFIFO it does nothing.
func (s *Scheduler) SetWorkers(n int, now time.Time) {
	if s.vf == nil {
		return
	}
	s.promote(now)
	s.vf.setWorkers(max(n, 0), s.vf.tick(now.UnixNano(), s.n))
	s.promote(now)
}

// fifoDone is FIFO's progress in predicted work: the work the virtual FIFO
// run has started, or without one the work this scheduler dispatched (both
// count removed work as done).
func (s *Scheduler) fifoDone() float64 {
	if s.vf != nil {
		return s.vf.started
	}
	return s.deqWork
}

// Config returns the configuration in force.
func (s *Scheduler) Config() Config { return s.cfg }

// Len is the number of waiting items.
func (s *Scheduler) Len() int { return s.n }

// LevelLen is the number of items waiting at level i.
func (s *Scheduler) LevelLen(i int) int { return s.levels[i].heap.len() }

// Push enqueues it at its Tier (clamped to the levels there are). An item
// pushed again after Pop (a retry) keeps its place in line and its tier.
func (s *Scheduler) Push(it *Item, now time.Time) error {
	if it.Queued() {
		return ErrQueued
	}
	if it.Cost < 0 {
		it.Cost = 0 // no work is less than none; FIFO positions only grow
	}
	if it.ID == 0 {
		it.ID = s.maxID + 1
	}
	s.maxID = max(s.maxID, it.ID)
	it.setQueued(true)
	it.Tier = min(max(it.Tier, 0), int8(s.cfg.Levels-1))
	it.setPromoted(false)
	it.setState(statePastDue, false)
	s.place(it, int(it.Tier), now)
	if it.expires != 0 {
		s.ttl.push(it)
	} else {
		it.ttlIdx = -1
	}
	it.dueIdx = -1
	s.promote(now)
	ahead := s.enqWork - s.fifoDone()
	if b := s.cfg.Bound; b != nil && (it.Long || b.Others != nil) {
		stretch := b.Stretch
		if !it.Long {
			stretch = *b.Others
		}
		it.due = s.enqWork + stretch*ahead + b.MinSlack.Seconds()
		s.due.push(it)
	}
	it.setGuard(guardNone)
	if s.vf != nil {
		// A retry joins the virtual line again, as the bound above counts
		// from its latest push.
		it.pushedAt = now.UnixNano()
		it.setPos(float64(s.vf.line.push(ventry{it: it, cost: it.Cost, arrived: s.vf.tick(now.UnixNano(), s.n)})))
		it.setGuard(guardFIFO)
		s.enqWork += it.Cost.Seconds()
		s.n++
		s.promote(now) // it starts now if a virtual worker is free
		s.refreshTail()
		return nil
	}
	if s.guarded() {
		// A retry counts from its latest push, as the bound above does.
		it.pushedAt = now.UnixNano()
		it.setPos(s.enqWork)
		switch {
		case s.dueOrdered && it.dueIdx >= 0:
			if ahead <= 0 { // at its FIFO moment already
				s.passDue(it, now)
			}
		case ahead <= 0:
			s.setDeadline(it, now)
		default:
			it.setGuard(guardFIFO)
			s.fifoWait.push(it)
		}
	}
	s.enqWork += it.Cost.Seconds()
	s.n++
	s.refreshTail()
	return nil
}

// refreshTail brings the guard's tail quantile up to date, at Push only, so
// that Peek and the Pops after it read the same figure.
func (s *Scheduler) refreshTail() {
	if b := s.cfg.Bound; b != nil && b.Tail > 0 {
		s.tail.refresh(b.Tail)
		if b.TailRisk > 0 {
			s.realized.refresh(b.Tail)
		}
	}
}

func (s *Scheduler) place(it *Item, lv int, now time.Time) {
	it.level = int8(lv)
	l := &s.levels[lv]
	l.heap.push(it)
	if s.cfg.Aging != AgingOff {
		l.age.push(it, now.UnixNano())
	}
	if it.isPromoted() {
		l.promoted++
	}
}

func (s *Scheduler) unplace(it *Item) {
	l := &s.levels[it.level]
	l.heap.remove(it)
	if s.cfg.Aging != AgingOff {
		l.age.left()
	}
	if it.isPromoted() {
		l.promoted--
	}
}

// Remove takes a waiting item out (purge, expiry handled by the caller). It
// reports whether the item was waiting here.
func (s *Scheduler) Remove(it *Item) bool {
	if !it.Queued() {
		return false
	}
	if it.guard() == guardFIFO && s.vf != nil {
		// FIFO would skip it too; its work counts as done at once.
		if e := s.vf.line.at(uint64(it.pos())); e != nil && e.it == it {
			e.it, e.skip = nil, true
			s.vf.started += it.Cost.Seconds()
		}
		it.setGuard(guardNone)
	}
	s.detach(it)
	it.due = -1 // it never ran: nothing for Ran to count
	// Work that will never run counts as done, so it delays nobody's bound.
	s.deqWork += it.Cost.Seconds()
	return true
}

func (s *Scheduler) detach(it *Item) {
	s.unplace(it)
	switch {
	case it.state&statePastDue != 0:
		it.setState(statePastDue, false) // its entry is stale from now on
		s.pastDue.left()
	case it.dueIdx >= 0:
		s.due.remove(it)
	}
	if it.ttlIdx >= 0 {
		s.ttl.remove(it)
	}
	switch it.guard() {
	case guardFIFO:
		if s.vf == nil {
			it.setGuard(guardNone) // its entry is stale from now on
			s.fifoWait.left()
		} else if e := s.vf.line.at(uint64(it.pos())); e != nil && e.it == it {
			e.it = nil // dispatched: the virtual run still runs its work
		}
	case guardLate:
		s.late.remove(it)
	}
	it.setGuard(guardNone)
	it.setQueued(false)
	s.n--
}

// Pop returns the next item to dispatch, or nil when none waits. Expired
// items are never returned: call Expire first, or they are skipped here and
// reported by the next Expire (meanwhile they are no longer waiting: Len
// leaves them out and Remove reports false).
func (s *Scheduler) Pop(now time.Time) *Item {
	if s.vf != nil {
		// The virtual run reaches now before anything expires: a message
		// it started before expiring took its worker.
		s.promote(now)
	}
	if s.n == 0 {
		return nil
	}
	s.expired = s.expire(now, s.expired)
	if s.n == 0 {
		return nil
	}
	s.age(now)
	s.promote(now)
	var it *Item
	// A message past its guard deadline goes first, even ahead of an
	// overdue long one: the guard is the promise made to every message,
	// the long bound an extra one for the longest.
	l := s.late.min()
	if l != nil && l.guardAt <= now.UnixNano() {
		it = l
		s.Guarded++
	} else if p := s.pastDue.front(); p != nil {
		// The due heap's order: these left it first, and are due.
		it = p
		s.Overdue++
	} else if d := s.due.min(); d != nil && d.due <= s.fifoDone()+s.ranBeyond(d) {
		it = d
		s.Overdue++
	} else {
		it = s.choose()
		if l != nil && !s.mayOvertake(it, l) {
			it = l
			s.Guarded++
		}
	}
	if b := s.cfg.Bound; b != nil && b.TailRisk > 0 {
		s.realized.add(now.UnixNano() - it.pushedAt + int64(it.Cost))
	}
	jumped := s.measured() && (it.guard() == guardFIFO || s.dueOrdered && it.dueIdx >= 0 && it.guard() == guardNone)
	pos := it.pos()
	s.detach(it)
	it.due = -1
	if jumped {
		// Dispatched before its FIFO moment: the work it really takes
		// counts toward the moments of the messages it jumped (Ran).
		it.due = pos
	}
	s.deqWork += it.Cost.Seconds()
	if s.vf != nil {
		s.vf.dispatched(it.Cost)
	}
	s.promote(now)
	return it
}

func (s *Scheduler) measured() bool { return s.cfg.Bound != nil && s.cfg.Bound.Measured }

// Ran tells the scheduler that it, which Pop returned, ran for took (what
// its ack measured). With Bound.Measured, if it was dispatched before its
// FIFO moment, the difference from its predicted cost counts toward the
// FIFO moments (and, with the default's shape, the due points) of the
// messages still waiting for theirs whose FIFO position is below its own:
// FIFO would have run them before it, and it took a worker for as long as
// it ran. Otherwise, and for an item not dispatched by this scheduler or
// already reported, it does nothing.
func (s *Scheduler) Ran(it *Item, took time.Duration) {
	if !s.measured() || it.Queued() || it.due < 0 {
		return
	}
	pos := it.due
	it.due = -1
	if extra := int64(max(took, 0) - it.Cost); extra != 0 && pos > s.minWaitingPos() {
		s.ran.add(pos, extra)
	}
}

// minWaitingPos is the lowest FIFO position of a message waiting for its
// FIFO moment, or +Inf; marks at or below it apply to nobody, now or
// later (messages pushed later have higher positions). Pop and Push call
// it through promote.
func (s *Scheduler) minWaitingPos() float64 {
	m := math.Inf(1)
	if it := s.fifoWait.front(); it != nil {
		m = it.pos()
	}
	if s.dueOrdered {
		if d := s.due.min(); d != nil && d.pos() < m {
			m = d.pos()
		}
	}
	return m
}

// ranBeyond is the extra measured work that counts toward it's FIFO
// moment: that of the messages dispatched before their own moments from
// FIFO positions above its own, in seconds. It is 0 unless it waits for
// its FIFO moment (with the default's shape, also in the due heap).
func (s *Scheduler) ranBeyond(it *Item) float64 {
	if s.ran.n() == 0 || it.guard() != guardFIFO && !(s.dueOrdered && it.dueIdx >= 0 && it.guard() == guardNone) {
		return 0
	}
	return float64(s.ran.beyond(it.pos())) / 1e9
}

func (s *Scheduler) guarded() bool { return s.cfg.Bound != nil && s.cfg.Bound.Guard != nil }

// mayOvertake reports whether it may go ahead of l, a message past its FIFO
// moment and not yet overdue: only if it is predicted much shorter.
func (s *Scheduler) mayOvertake(it, l *Item) bool {
	r := s.cfg.Bound.Overtake
	return it == l || r <= 0 || float64(it.Cost) <= r*float64(l.Cost)
}

// promote gives a deadline to every item whose FIFO moment has come: the
// predicted work dispatched (or removed) has reached its FIFO position. Work
// removed between calls is noticed at the next Push or Pop.
func (s *Scheduler) promote(now time.Time) {
	if !s.guarded() {
		return
	}
	if s.vf != nil {
		s.advanceFIFO(now.UnixNano())
		return
	}
	if s.ran.n() > 0 {
		s.ran.prune(s.minWaitingPos())
	}
	for it := s.fifoWait.front(); it != nil && it.pos() <= s.deqWork+s.ranBeyond(it); it = s.fifoWait.front() {
		s.fifoWait.popFront()
		s.setDeadline(it, now)
	}
	if s.dueOrdered {
		for d := s.due.min(); d != nil && d.pos() <= s.deqWork+s.ranBeyond(d); d = s.due.min() {
			s.passDue(d, now)
		}
	}
}

// passDue moves it, at its FIFO moment now, from the due heap to pastDue
// and gives it its deadline. An item whose deadline has come already (no
// predicted cost and no wait, or no guard slack) skips pastDue: while it
// waits the late heap's first item is overdue, so Pop never reads pastDue.
func (s *Scheduler) passDue(it *Item, now time.Time) {
	if it.dueIdx >= 0 {
		s.due.remove(it)
	}
	s.setDeadline(it, now)
	if it.guardAt > now.UnixNano() {
		it.setState(statePastDue, true)
		s.pastDue.push(it)
	}
}

// advanceFIFO runs the virtual FIFO up to now: every message it starts
// reaches its FIFO moment then and gets its deadline (on the wall clock
// possibly before now; on the dispatch clock at now, the call that moved
// the clock past it).
func (s *Scheduler) advanceFIFO(wall int64) {
	v := s.vf
	now := v.tick(wall, s.n)
	for v.line.n > 0 {
		e := v.line.nth(0)
		if e.skip {
			v.line.popFront()
			continue
		}
		for v.retire > 0 && len(v.free) > 0 && v.free[0] <= now {
			v.free = heapPop(v.free)
			v.retire--
		}
		if len(v.free) == 0 || v.free[0] > now {
			return
		}
		at := max(v.free[0], e.arrived)
		it := e.it
		v.free[0] = at + int64(e.cost)
		heapDown(v.free, 0)
		v.started += e.cost.Seconds()
		v.line.popFront()
		if it != nil {
			s.setDeadline(it, time.Unix(0, v.wallAt(at, wall)))
		}
	}
}

// setDeadline starts the slack of it, whose FIFO moment is now.
func (s *Scheduler) setDeadline(it *Item, now time.Time) {
	it.guardAt = s.guardDeadline(it, now)
	if s.cfg.Bound.Tail > 0 {
		s.tail.add(now.UnixNano() - it.pushedAt + int64(it.Cost))
	}
	it.setGuard(guardLate)
	s.late.push(it)
}

// guardDeadline is the deadline of an item whose FIFO moment is at: guard
// times the latency FIFO would have given it (its wait until at, plus its
// predicted cost) after at, in Unix nanoseconds. With Bound.Tail the slack
// stops where that latency reaches the tail quantile, but is never below
// GuardMin times it.
func (s *Scheduler) guardDeadline(it *Item, at time.Time) int64 {
	b := s.cfg.Bound
	fifoLatency := float64(at.UnixNano() - it.pushedAt + int64(it.Cost))
	slack := *b.Guard * fifoLatency
	switch {
	case it.Long && b.LongGuard != nil:
		slack = min(slack, *b.LongGuard*fifoLatency)
	case b.TailLong && it.TailLong() && b.LongGuard != nil:
		g := *b.LongGuard
		if b.TailLongGuard != nil {
			g = *b.TailLongGuard
		}
		slack = min(slack, g*fifoLatency)
	case b.Tail > 0 && s.tail.q > 0 && s.tailAtRisk():
		gmin := b.GuardMin
		if b.UnsureGuardMin != nil && it.Unsure() {
			gmin = *b.UnsureGuardMin
		}
		slack = min(slack, max(gmin*fifoLatency, float64(s.tail.q)-fifoLatency))
	}
	return at.UnixNano() + int64(slack)
}

// tailAtRisk reports whether the Tail cap applies: always without
// Bound.TailRisk; with it, while the realized tail is above TailRisk times
// FIFO's, or not known yet.
func (s *Scheduler) tailAtRisk() bool {
	r := s.cfg.Bound.TailRisk
	return r <= 0 || s.realized.q == 0 || float64(s.realized.q) > r*float64(s.tail.q)
}

// choose picks the head of a non-empty level by the discipline.
func (s *Scheduler) choose() *Item {
	if s.cfg.Discipline == Weighted {
		total, best := 0, -1
		for i := range s.levels {
			l := &s.levels[i]
			if l.heap.len() == 0 {
				continue
			}
			l.credit += s.cfg.Weights[i]
			total += s.cfg.Weights[i]
			if best < 0 || l.credit > s.levels[best].credit {
				best = i
			}
		}
		s.levels[best].credit -= total
		return s.levels[best].heap.min()
	}
	for i := range s.levels {
		if it := s.levels[i].heap.min(); it != nil {
			return it
		}
	}
	return nil
}

// age moves up every item that has waited past its level's threshold.
func (s *Scheduler) age(now time.Time) {
	if s.cfg.Aging == AgingOff {
		return
	}
	for i := 1; i < len(s.levels); i++ {
		l := &s.levels[i]
		for {
			e, ok := l.age.front()
			if !ok || now.UnixNano()-e.at < int64(s.cfg.AgeAfter[i]) {
				break
			}
			it := e.it
			if s.cfg.Aging == AgingPausing && s.levels[i-1].promoted > 0 {
				break
			}
			s.unplace(it)
			it.setPromoted(true)
			s.place(it, i-1, now)
			s.Promotions++
		}
	}
}

// Expire removes every item whose TTL has passed at now, appending them to
// buf, and returns it. Items Pop skipped because they had expired come first.
func (s *Scheduler) Expire(now time.Time, buf []*Item) []*Item {
	for _, it := range s.expired {
		if !it.Queued() { // unless the caller pushed it again meanwhile
			buf = append(buf, it)
		}
	}
	clear(s.expired)
	s.expired = s.expired[:0]
	if s.vf != nil {
		s.promote(now) // as Pop does: the run reaches now first
	}
	return s.expire(now, buf)
}

func (s *Scheduler) expire(now time.Time, buf []*Item) []*Item {
	for {
		it := s.ttl.min()
		if it == nil || !it.expiredAt(now) {
			return buf
		}
		s.Remove(it)
		buf = append(buf, it)
	}
}

// NextExpiry is the earliest TTL among waiting items and expired items
// that Pop skipped and Expire has yet to report.
func (s *Scheduler) NextExpiry() (time.Time, bool) {
	var at int64
	for _, it := range s.expired {
		if at == 0 || it.expires < at {
			at = it.expires
		}
	}
	if it := s.ttl.min(); it != nil && (at == 0 || it.expires < at) {
		at = it.expires
	}
	if at == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, at).UTC(), true
}

// Backlog is the predicted work waiting, in the units of Item.Cost.
func (s *Scheduler) Backlog() time.Duration {
	return time.Duration((s.enqWork - s.deqWork) * float64(time.Second))
}

// Each calls f for every waiting item, level by level, in no promised order
// within a level. f must not modify the scheduler.
func (s *Scheduler) Each(f func(*Item)) {
	for i := range s.levels {
		for _, it := range s.levels[i].heap.items {
			f(it)
		}
	}
}
