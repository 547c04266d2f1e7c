// Package fair owns a queue's per-key limits and fair shares: concurrency
// limits and token-bucket rate limits on a key (a producer, a job type or
// the tenant a producer names), and the sharing of free workers between
// groups of jobs in proportion to their predicted work.
//
// A Fair holds one sched.Scheduler per lane: the jobs of one group that
// share the same limit keys. Within a lane the queue's own policy (and its
// per-job guard relative to FIFO) orders the jobs; a lane is eligible while
// none of its keys is at its limit or out of tokens. Groups are served by
// start-time fair queueing on predicted work (see Pop); within a group the
// eligible lanes are ordered by the item each would start next under the
// policy. Eligible groups sit in a heap by their start tag and eligible
// lanes in a heap per group, so choosing the next job costs
// O(log groups + log lanes) plus the lane's own Pop, never a scan. A key
// that reaches its limit takes its lanes out of the heaps and puts them
// back when it falls below it (or its bucket refills): O(lanes of the key
// × log), one lane per key when the limits are on the group's own field.
//
// Like sched it is pure: time is passed in, it starts no goroutines, holds
// no locks and does no I/O. The caller tells it of every start (Pop) and
// every end (Done) of a job; what runs is not persisted, since a broker
// that restarts has nothing running, and Run counts a job that a caller
// re-attaches (after a redeclare).
package fair

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/harbinger-mq/harbinger/internal/sched"
)

// Keys are the fields of a job a Fair may group or limit it by.
type Keys struct {
	Producer, JobType, Tenant string
}

func (k Keys) get(field string) string {
	switch field {
	case Producer:
		return k.Producer
	case JobType:
		return k.JobType
	case Tenant:
		return k.Tenant
	}
	return ""
}

// minCost is the least predicted work a start is charged: a job the
// predictor thinks free must still move its group's tag.
const minCost = time.Microsecond

// workWindow is the span the share of worker time is measured over, in
// workSlots slots.
const (
	workWindow = time.Minute
	workSlots  = 6
)

// Fair is one queue's limits and fair shares. Not safe for concurrent use.
type Fair struct {
	cfg    Config
	sc     sched.Config
	keysOf func(*sched.Item) Keys
	// fields[f] says whether a rule names field f: a lane's key keeps
	// only those fields (and the group's).
	used [3]bool

	lanes    map[Keys]*lane
	groups   map[string]*group
	counters map[ruleKey]*counter
	where    map[*sched.Item]*lane     // waiting: its lane
	running  map[*sched.Item]*runEntry // started and not yet done

	ready   groupHeap   // groups with an eligible lane, by start tag
	expiry  laneHeap    // lanes with a TTL to watch, by their next expiry
	refills counterHeap // rate counters out of tokens, by when they have one
	vtime   float64     // the start tag of the last group served
	laneSeq uint64

	n, nrun     int
	workers     int
	activeW     float64  // sum of the weights of groups with waiting or running jobs
	activeN     int      // and how many there are
	busyGroups  int      // groups with waiting jobs
	idle        idleList // groups gone idle within the reservation window, the latest first
	idleW       float64  // the sum of their weights
	retired     idleList // groups gone from idle that did work in the last minute, for the inspector
	lastNow     int64    // the latest time a call was given
	costSum     float64  // the average predicted costs of the groups in the window, summed
	held        bool     // the last Pop held a job back for the reservation
	heldUntil   int64    // when that reservation may lapse
	reserveSkip []*group

	// Counters for metrics.
	Stats Stats
}

// Stats counts what a Fair has done.
type Stats struct {
	Starts    uint64 // jobs started
	Throttled uint64 // jobs that found their key at its limit or out of tokens (see GroupInfo.Throttled)
	Reserved  uint64 // times Pop left a worker free for the reservation
}

type ruleKey struct {
	rate  bool
	rule  int // index into Config.Limits or Config.Rates
	value string
}

// counter is one limit key: the jobs of it running, or its token bucket.
type counter struct {
	id      ruleKey
	max     int // limit: running at most
	running int
	// rate: tokens at time at (Unix nanoseconds), refilled at perNano up
	// to burst.
	rate          bool
	perNano       float64
	burst, tokens float64
	at            int64
	blocked       bool
	lanes         map[*lane]struct{}
	idx           int   // in Fair.refills; -1 when not
	due           int64 // when it next has a token, while in refills
}

type lane struct {
	key      Keys
	g        *group
	s        *sched.Scheduler
	counters []*counter
	blocked  int // counters of it that are blocked
	running  int
	// Its next item as the lane's policy would start it now, for the
	// order among its group's lanes: by level, then predicted cost under
	// a shortest-first policy, then arrival.
	level int
	cost  time.Duration
	head  uint64
	// headCost is that item's predicted cost, for the reservation.
	headCost time.Duration
	seen     time.Time     // when it was ranked
	peek     []*sched.Item // Peek's buffer
	seq      uint64
	gone     bool  // let go: a new lane takes its key
	idx      int   // in g.ready; -1 when not
	expIdx   int   // in Fair.expiry; -1 when not
	exp      int64 // its next expiry while in Fair.expiry
	waiting  int   // s.Len() as last seen
}

type group struct {
	name       string
	weight     float64
	tag        float64 // start tag of its next job
	idx        int     // in Fair.ready; -1 when not
	ready      laneHeap
	lanes      int
	waiting    int
	running    int
	throttle   uint64
	use        float64 // decayed running time, worker-seconds (see useAt)
	useAt      int64
	costAvg    float64 // moving average of its jobs' predicted costs, seconds
	starts     uint64
	idleAt     int64 // when it last went idle, while in Fair.idle
	inIdle     bool
	inRetired  bool
	lastWork   int64              // when a job of it last ended
	prev, next *group             // in Fair.idle
	work       [workSlots]float64 // seconds of worker time ended per slot
	workAt     [workSlots]int64   // each slot's number (time / slot width)
}

type runEntry struct {
	l       *lane
	started int64
}

// New returns an empty Fair for cfg (which must validate), whose lanes
// schedule with sc (the queue's policy's scheduler config). keysOf tells
// it a waiting item's keys; it is called when an item is pushed.
func New(cfg Config, sc sched.Config, keysOf func(*sched.Item) Keys) (*Fair, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if _, err := sched.New(sc); err != nil {
		return nil, err
	}
	f := &Fair{
		cfg: cfg.WithDefaults(), sc: sc, keysOf: keysOf,
		lanes: map[Keys]*lane{}, groups: map[string]*group{}, counters: map[ruleKey]*counter{},
		where: map[*sched.Item]*lane{}, running: map[*sched.Item]*runEntry{},
		ready: newGroupHeap(), expiry: newExpiryHeap(), refills: newRefillHeap(),
		retired: idleList{retired: true},
	}
	mark := func(field string) {
		f.used[slices.Index(Fields, field)] = true
	}
	if cfg.GroupBy != "" {
		mark(cfg.GroupBy)
	}
	for _, l := range cfg.Limits {
		mark(l.Field)
	}
	for _, r := range cfg.Rates {
		mark(r.Field)
	}
	return f, nil
}

// Config returns the declaration in force, defaults filled in.
func (f *Fair) Config() Config { return f.cfg }

// Len is the number of waiting items.
func (f *Fair) Len() int { return f.n }

// Running is the number of items started and not done.
func (f *Fair) Running() int { return f.nrun }

// SetWorkers says how many workers take this queue's jobs, for the shares
// and the reservation; 0 (the start) turns the reservation off.
func (f *Fair) SetWorkers(n int, now time.Time) {
	n = max(n, 0)
	if n == f.workers {
		return
	}
	f.workers = n
	if b := f.sc.Bound; b != nil && b.VirtualFIFO {
		for _, l := range f.lanes { // only a virtual FIFO run needs it
			l.s.SetWorkers(n, now)
		}
	}
}

// laneKeyOf keeps of k the fields the declaration uses.
func (f *Fair) laneKeyOf(k Keys) Keys {
	if !f.used[0] {
		k.Producer = ""
	}
	if !f.used[1] {
		k.JobType = ""
	}
	if !f.used[2] {
		k.Tenant = ""
	}
	return k
}

// laneOf finds or makes the lane of keys k.
func (f *Fair) laneOf(k Keys, now time.Time) *lane {
	lk := f.laneKeyOf(k)
	if l, ok := f.lanes[lk]; ok {
		return l
	}
	s, _ := sched.New(f.sc) // validated in New
	if f.workers > 0 {
		s.SetWorkers(f.workers, now)
	}
	f.laneSeq++
	l := &lane{key: lk, s: s, idx: -1, expIdx: -1, seq: f.laneSeq}
	gname := ""
	if f.cfg.GroupBy != "" {
		gname = lk.get(f.cfg.GroupBy)
	}
	g, ok := f.groups[gname]
	if !ok {
		g = &group{name: gname, weight: 1, idx: -1, tag: f.vtime - f.credit(), ready: newLaneHeap()}
		if w, ok := f.cfg.Weights[gname]; ok {
			g.weight = float64(w)
		}
		f.groups[gname] = g
	}
	l.g = g
	g.lanes++
	for i, r := range f.cfg.Limits {
		if v := lk.get(r.Field); r.Value == "" || r.Value == v {
			f.attach(l, ruleKey{rule: i, value: v}, now)
		}
	}
	for i, r := range f.cfg.Rates {
		if v := lk.get(r.Field); r.Value == "" || r.Value == v {
			f.attach(l, ruleKey{rate: true, rule: i, value: v}, now)
		}
	}
	f.lanes[lk] = l
	return l
}

// attach makes l subject to the counter id, making the counter if need be.
func (f *Fair) attach(l *lane, id ruleKey, now time.Time) {
	c, ok := f.counters[id]
	if !ok {
		c = &counter{id: id, lanes: map[*lane]struct{}{}, idx: -1}
		if id.rate {
			r := f.cfg.Rates[id.rule]
			c.rate, c.perNano, c.burst = true, r.PerSecond/1e9, float64(r.Burst)
			c.tokens, c.at = c.burst, now.UnixNano()
		} else {
			c.max = f.cfg.Limits[id.rule].Max
		}
		f.counters[id] = c
	}
	c.lanes[l] = struct{}{}
	l.counters = append(l.counters, c)
	if c.blocked {
		l.blocked++
	}
}

// Push enqueues it, a classified item (its Cost and Tier set), in its
// lane.
func (f *Fair) Push(it *sched.Item, now time.Time) error {
	f.saw(now)
	if _, ok := f.where[it]; ok {
		return sched.ErrQueued
	}
	l := f.laneOf(f.keysOf(it), now)
	if err := l.s.Push(it, now); err != nil {
		f.tidy(l, now)
		return err
	}
	f.where[it] = l
	f.rerank(l, now)
	if l.blocked > 0 {
		l.g.throttle++
		f.Stats.Throttled++
	}
	f.fix(l, now)
	return nil
}

// Remove takes a waiting item out, and reports whether it was waiting. It
// counts as done at the time of the Fair's latest call.
func (f *Fair) Remove(it *sched.Item) bool {
	l, ok := f.where[it]
	if !ok {
		return false
	}
	delete(f.where, it)
	ok = l.s.Remove(it)
	f.rerank(l, l.seen)
	f.fix(l, time.Time{})
	return ok
}

// Pop returns the next item to start, or nil when none may. It counts the
// start against the item's limits and rates; the caller must call Done
// when the job ends (ack, nack, lease expiry, return, cancel).
//
// The choice is fair queueing over groups on predicted work. Each group
// has a start tag, and its finish tag is that plus its next job's
// predicted cost over its weight; Pop serves the eligible group with the
// smallest finish tag (ties by name), charges it the item's predicted cost
// divided by its weight, and the virtual time becomes the served start tag
// (it never falls back). Ordering by finish rather than start lets a
// group of short jobs go ahead of one whose next job is long when their
// start tags are close, as weighted fair queueing does for packets. A
// group that becomes eligible (new work, a key below its limit again)
// starts at max(its tag, virtual time - Config.Credit): it cannot bank
// more than the credit while it had nothing to run. Proof sketch of the
// share: while two groups i and j both stay eligible, each serves its next
// job only when its finish tag is the smallest, so their start tags never
// differ by more than the larger of one job's cost over weight, plus the
// credit one of them rejoined with; the predicted work each started, over
// its weight, therefore differs by at most c_i/w_i + c_j/w_j + credit, for
// c the largest predicted cost of a job of that group. Within a group Pop
// takes the lane whose next item (as the lane's policy would start it,
// noted when the lane last changed) ranks first by level, then predicted
// cost under a shortest-first policy, then arrival; so a group of one lane
// (no limits, or limits on the grouping field) is exactly the queue's
// policy, guard included, and across lanes the guard holds only as far as
// that ranking carries it.
//
// The reservation (Config.Reserve) is the one exception to "no worker idles
// while an eligible job waits": while at most Reserve workers are free, a
// group past its share (pastShare) whose next job is long (long) is passed
// over while another group has work or had within ReserveWindow. Pop then
// returns an item of another group, or nil, and NextWake says when to ask
// again if nothing else changes. Only groups with running jobs can be past
// their share, so this costs at most (running jobs) heap operations.
func (f *Fair) Pop(now time.Time) *sched.Item {
	f.saw(now)
	f.expireIdle(f.lastNow)
	f.wake(now)
	f.held = false
	for {
		g := f.choose(now)
		if g == nil {
			return nil
		}
		l := g.ready.items[0]
		it := l.s.Pop(now)
		f.rerank(l, now)
		if it == nil { // its items had expired
			f.fix(l, now)
			continue
		}
		delete(f.where, it)
		c := float64(max(it.Cost, minCost)) / 1e9
		f.vtime = max(f.vtime, g.tag)
		g.tag += c / g.weight
		f.ready.fix(g.idx)
		f.start(l, it, now.UnixNano())
		f.fix(l, now)
		return it
	}
}

// choose is the group Pop serves: the smallest start tag, passing over
// groups the reservation holds back.
func (f *Fair) choose(now time.Time) *group {
	if len(f.ready.items) == 0 {
		return nil
	}
	if f.cfg.NoReserve || f.cfg.GroupBy == "" || f.workers == 0 || f.workers-f.nrun > f.cfg.Reserve {
		return f.ready.items[0]
	}
	defer func() {
		for _, g := range f.reserveSkip {
			f.ready.push(g)
		}
		clear(f.reserveSkip)
		f.reserveSkip = f.reserveSkip[:0]
	}()
	for len(f.ready.items) > 0 {
		g := f.ready.items[0]
		if !f.pastShare(g, now) || !f.long(g) {
			return g
		}
		if until, ok := f.othersActive(now); ok {
			f.held = true
			f.heldUntil = max(f.heldUntil, until)
			f.Stats.Reserved++
			f.reserveSkip = append(f.reserveSkip, g)
			f.ready.remove(g)
			continue
		}
		return g
	}
	return nil
}

// pastShare reports whether g has run at least its share of the workers
// over the recent past (and runs a job now). Its use is the number of its
// jobs running, averaged with an exponential decay of time constant
// ReserveWindow, so a light group's brief burst does not count against it
// and a flooding group's backlog does. Its share is the workers times its
// weight over the weights of the groups active now or within the window.
func (f *Fair) pastShare(g *group, now time.Time) bool {
	if g.running == 0 {
		return false
	}
	use := f.useAt(g, now.UnixNano()) / f.cfg.ReserveWindow.Seconds()
	share := float64(f.workers) * g.weight / max(f.activeW+f.idleW, g.weight)
	return use >= share
}

// long reports whether g's next job is long enough for the reservation
// to hold it back: predicted at least ReserveAbove times the mean of the
// other groups' average predicted costs (groups active or within the
// window). A job no longer than what the others run would, if started,
// hold its worker no longer than theirs do.
func (f *Fair) long(g *group) bool {
	n := f.activeN + f.idle.n - 1 // g is active
	if n <= 0 {
		return true
	}
	mean := (f.costSum - g.costAvg) / float64(n)
	c := g.ready.items[0].headCost.Seconds()
	return c >= f.cfg.ReserveAbove*mean
}

// costAlpha is the weight of a start in a group's moving average cost.
const costAlpha = 0.1

// noteCost folds a started job's predicted cost into g's average.
func (f *Fair) noteCost(g *group, c float64) {
	old := g.costAvg
	if g.starts == 0 {
		g.costAvg = c
	} else {
		g.costAvg += costAlpha * (c - g.costAvg)
	}
	g.starts++
	if g.waiting+g.running > 0 || g.inIdle {
		f.costSum += g.costAvg - old
	}
}

// useAt is g's decayed running time at now, in worker-seconds: its
// integral of running jobs, each moment weighted by e^(-age/ReserveWindow).
func (f *Fair) useAt(g *group, now int64) float64 {
	if now <= g.useAt {
		return g.use
	}
	tau := f.cfg.ReserveWindow.Seconds()
	d := math.Exp(-float64(now-g.useAt) / 1e9 / tau)
	return g.use*d + float64(g.running)*tau*(1-d)
}

// othersActive reports whether a group other than g, which is active,
// has waiting or running jobs or had within the reservation window, and
// when to look again if nothing else changes.
func (f *Fair) othersActive(now time.Time) (int64, bool) {
	t := now.UnixNano()
	switch {
	case f.activeN > 1:
		return t + int64(f.cfg.ReserveWindow), true
	case f.idle.front != nil:
		return f.idle.front.idleAt + int64(f.cfg.ReserveWindow) + 1, true
	}
	return 0, false
}

// expireIdle lets go of the groups that went idle more than the window
// before now.
func (f *Fair) expireIdle(now int64) {
	for g := f.idle.back; g != nil && now-g.idleAt > int64(f.cfg.ReserveWindow); g = f.idle.back {
		f.idle.remove(g)
		f.idleW -= g.weight
		f.costSum -= g.costAvg
		if g.lastWork > now-int64(workWindow) {
			// Kept for the inspector's last minute, out of the shares.
			g.idleAt = g.lastWork
			f.retired.pushFront(g)
			continue
		}
		f.forget(g)
	}
	for g := f.retired.back; g != nil && now-g.idleAt > int64(workWindow); g = f.retired.back {
		f.retired.remove(g)
		f.forget(g)
	}
}

// saw notes the time of a call: what Remove, which is not told the time,
// takes as its own.
func (f *Fair) saw(now time.Time) { f.lastNow = max(f.lastNow, now.UnixNano()) }

// credit is how far behind the virtual time a group that had nothing to
// run may start: Config.Credit in seconds of predicted work.
func (f *Fair) credit() float64 { return f.cfg.Credit.Seconds() }

// start counts it, just popped from l, as running.
func (f *Fair) start(l *lane, it *sched.Item, now int64) {
	f.noteCost(l.g, float64(max(it.Cost, minCost))/1e9)
	f.running[it] = &runEntry{l: l, started: now}
	l.running++
	f.nrun++
	f.Stats.Starts++
	f.setRunning(l.g, l.g.running+1, now)
	for _, c := range l.counters {
		if c.rate {
			c.refill(now)
			c.tokens--
			if c.tokens < 1 {
				c.due = c.at + int64(math.Ceil((1-c.tokens)/c.perNano))
				f.refills.push(c)
				f.block(c)
			}
			continue
		}
		c.running++
		if c.running >= c.max {
			f.block(c)
		}
	}
}

// Run counts it, a job already running, as started at now in the lane of
// keys k: for a caller that rebuilds a Fair (a redeclare) while jobs run.
// It may take a key past its limit; the key then starts nothing until it
// is below.
func (f *Fair) Run(it *sched.Item, k Keys, now time.Time) {
	if _, ok := f.running[it]; ok {
		return
	}
	f.saw(now)
	l := f.laneOf(k, now)
	f.running[it] = &runEntry{l: l, started: now.UnixNano()}
	l.running++
	f.nrun++
	f.setRunning(l.g, l.g.running+1, now.UnixNano())
	for _, c := range l.counters {
		if !c.rate {
			c.running++
			if c.running >= c.max {
				f.block(c)
			}
		}
	}
	f.fix(l, now)
}

// Done ends a started item at now, and returns how many more jobs may start
// because of it (a key fell below its limit): as many waiting workers may
// be woken. An item not running is ignored.
func (f *Fair) Done(it *sched.Item, now time.Time) int {
	r, ok := f.running[it]
	if !ok {
		return 0
	}
	f.saw(now)
	delete(f.running, it)
	l := r.l
	l.running--
	f.nrun--
	l.g.addWork(now.UnixNano(), float64(now.UnixNano()-r.started)/1e9)
	f.setRunning(l.g, l.g.running-1, now.UnixNano())
	freed := 0
	for _, c := range l.counters {
		if c.rate {
			continue
		}
		c.running--
		if c.blocked && c.running < c.max && !c.outOfTokens() {
			f.unblock(c)
			freed = 1
		}
	}
	f.fix(l, now)
	if freed == 0 && f.held && f.workers > 0 {
		freed = 1 // a worker came free: the reservation may let a job go
	}
	return freed
}

// wake refills the buckets due by now.
func (f *Fair) wake(now time.Time) int {
	t := now.UnixNano()
	n := 0
	for len(f.refills.items) > 0 && f.refills.items[0].due <= t {
		c := f.refills.items[0]
		f.refills.remove(c)
		c.refill(t)
		n += max(1, int(c.tokens)) // due: it has a token, give or take rounding
		f.unblock(c)
	}
	return n
}

// Wake does what has come due by now (buckets refilled, a reservation
// lapsed) and returns how many jobs may start because of it.
func (f *Fair) Wake(now time.Time) int {
	f.saw(now)
	f.expireIdle(f.lastNow)
	n := f.wake(now)
	if f.held && now.UnixNano() >= f.heldUntil {
		f.held = false
		n++
	}
	return min(n, f.n)
}

// NextWake is when Wake next has something to do: a bucket refilled, or
// a reservation that held a worker back lapsing. The caller sets a timer
// for it instead of polling.
func (f *Fair) NextWake() (time.Time, bool) {
	var at int64
	if len(f.refills.items) > 0 {
		at = f.refills.items[0].due
	}
	if f.held && (at == 0 || f.heldUntil < at) {
		at = f.heldUntil
	}
	if at == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, at).UTC(), true
}

func (c *counter) refill(now int64) {
	if now > c.at {
		c.tokens = min(c.burst, c.tokens+float64(now-c.at)*c.perNano)
		c.at = now
	}
}

func (c *counter) outOfTokens() bool { return c.rate && c.idx >= 0 }

// block takes c's lanes out of the running.
func (f *Fair) block(c *counter) {
	if c.blocked {
		return
	}
	c.blocked = true
	for l := range c.lanes {
		l.blocked++
		if l.blocked == 1 && l.waiting > 0 {
			l.g.throttle += uint64(l.waiting)
			f.Stats.Throttled += uint64(l.waiting)
		}
		f.fix(l, time.Time{})
	}
}

// unblock puts c's lanes back in the running.
func (f *Fair) unblock(c *counter) {
	if !c.blocked {
		return
	}
	c.blocked = false
	for l := range c.lanes {
		l.blocked--
		f.fix(l, time.Time{})
	}
}

// setRunning changes g's running count at now, keeping activeW and its
// recent use.
func (f *Fair) setRunning(g *group, n int, now int64) {
	was := g.waiting+g.running > 0
	g.use, g.useAt = f.useAt(g, now), max(now, g.useAt)
	g.running = n
	f.activity(g, was)
}

func (f *Fair) activity(g *group, was bool) {
	is := g.waiting+g.running > 0
	switch {
	case is && !was:
		f.activeW += g.weight
		f.activeN++
		if g.inIdle {
			f.idle.remove(g)
			f.idleW -= g.weight
		} else {
			f.costSum += g.costAvg // back in the window
			if g.inRetired {
				f.retired.remove(g)
			}
		}
	case was && !is:
		f.activeW -= g.weight
		f.activeN--
		g.idleAt = f.lastNow
		f.idle.pushFront(g)
		f.idleW += g.weight
	}
}

// idleList is a doubly linked list of groups, the latest gone idle at the
// front.
type idleList struct {
	front, back *group
	n           int
	retired     bool // the retired list: marks inRetired
}

func (l *idleList) pushFront(g *group) {
	l.n++
	g.prev, g.next = nil, l.front
	l.mark(g, true)
	if l.front != nil {
		l.front.prev = g
	} else {
		l.back = g
	}
	l.front = g
}

func (l *idleList) remove(g *group) {
	l.n--
	if g.prev != nil {
		g.prev.next = g.next
	} else {
		l.front = g.next
	}
	if g.next != nil {
		g.next.prev = g.prev
	} else {
		l.back = g.prev
	}
	g.prev, g.next = nil, nil
	l.mark(g, false)
}

func (l *idleList) mark(g *group, in bool) {
	if l.retired {
		g.inRetired = in
	} else {
		g.inIdle = in
	}
}

// fix brings l's place in the heaps and the counts up to date after its
// scheduler changed, and lets it go if it is empty (now, when known, tells
// whether its buckets have refilled).
func (f *Fair) fix(l *lane, now time.Time) {
	g := l.g
	if n := l.s.Len(); n != l.waiting {
		was := g.waiting+g.running > 0
		f.n += n - l.waiting
		gw := g.waiting
		g.waiting += n - l.waiting
		l.waiting = n
		switch {
		case gw == 0 && g.waiting > 0:
			f.busyGroups++
		case gw > 0 && g.waiting == 0:
			f.busyGroups--
		}
		f.activity(g, was)
	}
	eligible := l.blocked == 0 && l.waiting > 0
	switch {
	case eligible && l.idx < 0:
		g.ready.push(l)
	case !eligible && l.idx >= 0:
		g.ready.remove(l)
	case eligible:
		g.ready.fix(l.idx) // its next item may have changed
	}
	geligible := len(g.ready.items) > 0
	switch {
	case geligible && g.idx < 0:
		g.tag = max(g.tag, f.vtime-f.credit())
		f.ready.push(g)
	case !geligible && g.idx >= 0:
		f.ready.remove(g)
	case geligible:
		f.ready.fix(g.idx)
	}
	// The lane's next expiry.
	exp := int64(0)
	if t, ok := l.s.NextExpiry(); ok {
		exp = t.UnixNano()
	}
	switch {
	case exp != 0 && l.expIdx < 0:
		l.exp = exp
		f.expiry.push(l)
	case exp != 0 && exp != l.exp:
		l.exp = exp
		f.expiry.fix(l.expIdx)
	case exp == 0 && l.expIdx >= 0:
		f.expiry.remove(l)
	}
	f.tidy(l, now)
}

// tidy lets l go once it has nothing waiting, running or to expire, and
// its group and counters with it when they hold nothing more. A group
// whose tag is past the virtual time is kept: it owes that work.
func (f *Fair) tidy(l *lane, now time.Time) {
	if l.gone || l.waiting > 0 || l.running > 0 || l.expIdx >= 0 || l.s.Len() > 0 {
		return
	}
	l.gone = true
	delete(f.lanes, l.key)
	for _, c := range l.counters {
		delete(c.lanes, l)
		if len(c.lanes) == 0 && c.running == 0 && c.idx < 0 {
			if c.rate {
				c.refill(now.UnixNano())
				if c.tokens < c.burst {
					continue // keep what it spent
				}
			}
			delete(f.counters, c.id)
		}
	}
	l.g.lanes--
	f.forget(l.g)
}

// forget lets g go once nothing of it is left and forgetting loses
// nothing: no lanes, nothing running, not in the reservation's window,
// and owed no service (a group made afresh starts at the virtual time
// less the credit, as an idle one rejoins). Its share of the last
// minute's work goes with it.
func (f *Fair) forget(g *group) {
	if g.lanes == 0 && g.running == 0 && !g.inIdle && !g.inRetired && g.tag <= f.vtime-f.credit() {
		delete(f.groups, g.name)
	}
}

// Expire removes every item whose TTL has passed at now, appending them
// to buf.
func (f *Fair) Expire(now time.Time, buf []*sched.Item) []*sched.Item {
	f.saw(now)
	t := now.UnixNano()
	for len(f.expiry.items) > 0 && f.expiry.items[0].exp <= t {
		l := f.expiry.items[0]
		k := len(buf)
		buf = l.s.Expire(now, buf)
		for _, it := range buf[k:] {
			delete(f.where, it)
		}
		f.rerank(l, now)
		f.fix(l, now)
		if l.expIdx >= 0 && l.exp <= t {
			panic(fmt.Sprintf("fair: lane %v did not expire what was due", l.key)) // a bug here
		}
	}
	return buf
}

// NextExpiry is the earliest TTL among waiting items (and expired ones
// Expire has yet to report).
func (f *Fair) NextExpiry() (time.Time, bool) {
	if len(f.expiry.items) == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, f.expiry.items[0].exp).UTC(), true
}

// Each calls fn for every waiting item, in no promised order.
func (f *Fair) Each(fn func(*sched.Item)) {
	for _, l := range f.lanes {
		l.s.Each(fn)
	}
}

// Peek appends to buf up to n waiting items, roughly in the order Pop
// would start them: the eligible groups by tag, each lane's next items
// by its own Peek, then the held-back lanes. It changes nothing; it is
// for an inspector, and costs O(groups log groups + n).
func (f *Fair) Peek(now time.Time, n int, buf []*sched.Item) []*sched.Item {
	if n <= 0 {
		return buf
	}
	gs := slices.Clone(f.ready.items)
	slices.SortFunc(gs, func(a, b *group) int { return groupCmp(a, b) })
	for _, g := range gs {
		ls := slices.Clone(g.ready.items)
		slices.SortFunc(ls, func(a, b *lane) int { return laneCmp(a, b) })
		for _, l := range ls {
			if n <= 0 {
				return buf
			}
			k := len(buf)
			buf = l.s.Peek(now, min(n, 1), buf)
			n -= len(buf) - k
		}
	}
	rest := make([]*lane, 0)
	for _, l := range f.lanes {
		if l.idx < 0 && l.waiting > 0 {
			rest = append(rest, l)
		}
	}
	slices.SortFunc(rest, laneCmp)
	for _, l := range rest {
		if n <= 0 {
			break
		}
		k := len(buf)
		buf = l.s.Peek(now, n, buf)
		n -= len(buf) - k
	}
	return buf
}

// KeysOf returns the keys a running or waiting item was placed by, as the
// lane keeps them (fields no rule names are empty).
func (f *Fair) KeysOf(it *sched.Item) (Keys, bool) {
	if l, ok := f.where[it]; ok {
		return l.key, true
	}
	if r, ok := f.running[it]; ok {
		return r.l.key, true
	}
	return Keys{}, false
}

func (g *group) addWork(now int64, secs float64) {
	g.lastWork = now
	slot := now / int64(workWindow/workSlots)
	i := slot % workSlots
	if g.workAt[i] != slot {
		g.workAt[i], g.work[i] = slot, 0
	}
	g.work[i] += secs
}

func (g *group) workSince(now int64) float64 {
	slot := now / int64(workWindow/workSlots)
	s := 0.0
	for i := range workSlots {
		if g.workAt[i] > slot-workSlots {
			s += g.work[i]
		}
	}
	return s
}

func groupCmp(a, b *group) int {
	if c := cmp.Compare(a.finish(), b.finish()); c != 0 {
		return c
	}
	return cmp.Compare(a.name, b.name)
}

// finish is g's virtual finish tag: its start tag plus its next job's
// predicted cost over its weight.
func (g *group) finish() float64 {
	if len(g.ready.items) == 0 {
		return g.tag
	}
	return g.tag + float64(max(g.ready.items[0].headCost, minCost))/1e9/g.weight
}

func laneCmp(a, b *lane) int {
	return cmp.Or(cmp.Compare(a.level, b.level), cmp.Compare(a.cost, b.cost), cmp.Compare(a.head, b.head), keysCmp(a.key, b.key))
}

// rerank notes l's next item at now, after its content changed: its
// place among its group's lanes. O(log of the lane's length).
func (f *Fair) rerank(l *lane, now time.Time) {
	l.seen = now
	l.peek = l.s.Peek(now, 1, l.peek[:0])
	if len(l.peek) == 0 {
		l.level, l.cost, l.head, l.headCost = 0, 0, 0, 0
		l.g.ready.fix(l.idx)
		f.ready.fix(l.g.idx)
		return
	}
	it := l.peek[0]
	l.peek[0] = nil
	l.level, l.head, l.cost, l.headCost = it.Level(), it.ID, 0, it.Cost
	if f.sc.ShortestFirst {
		l.cost = it.Cost
	}
	l.g.ready.fix(l.idx) // before anything else moves in the heap
	f.ready.fix(l.g.idx)
}

func keysCmp(a, b Keys) int {
	if c := cmp.Compare(a.Producer, b.Producer); c != 0 {
		return c
	}
	if c := cmp.Compare(a.JobType, b.JobType); c != 0 {
		return c
	}
	return cmp.Compare(a.Tenant, b.Tenant)
}

// Bucket is the state of one rate limit's token bucket: the key's Rule
// (an index into Config.Rates) and Value, and its Tokens at At (Unix
// nanoseconds). A bucket not listed is full.
type Bucket struct {
	Rule   int     `json:"rule"`
	Value  string  `json:"value,omitempty"`
	Tokens float64 `json:"tokens"`
	At     int64   `json:"at,omitempty"`
}

// Buckets appends to buf the rate buckets that are not full at now, so
// that a restart can restore them (RestoreBucket) instead of starting
// every key full. O(keys with a rate).
func (f *Fair) Buckets(now time.Time, buf []Bucket) []Bucket {
	t := now.UnixNano()
	for _, c := range f.counters {
		if !c.rate {
			continue
		}
		c.refill(t)
		if c.tokens < c.burst {
			buf = append(buf, Bucket{Rule: c.id.rule, Value: c.id.value, Tokens: c.tokens, At: c.at})
		}
	}
	slices.SortFunc(buf, func(a, b Bucket) int { return cmp.Or(cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Value, b.Value)) })
	return buf
}

// RestoreBucket sets a rate bucket to b, as Buckets listed it before a
// restart, under the same declaration. A bucket of a rule the
// declaration does not have is ignored.
func (f *Fair) RestoreBucket(b Bucket) {
	if b.Rule < 0 || b.Rule >= len(f.cfg.Rates) || math.IsNaN(b.Tokens) {
		return
	}
	c := f.bucket(ruleKey{rate: true, rule: b.Rule, value: b.Value}, b.At)
	c.tokens, c.at = min(b.Tokens, c.burst), b.At
	f.drained(c)
}

// Started takes a token at now from every rate bucket a job of keys k
// draws on: a start the log recorded, replayed after a restart (in the
// order they happened, after RestoreBucket), so the buckets are as they
// were when the broker stopped. Limits are not touched: what runs is
// counted by Run.
func (f *Fair) Started(k Keys, now time.Time) {
	t := now.UnixNano()
	for i, r := range f.cfg.Rates {
		v := k.get(r.Field)
		if r.Value != "" && r.Value != v {
			continue
		}
		c := f.bucket(ruleKey{rate: true, rule: i, value: v}, t)
		c.refill(t)
		c.tokens--
		f.drained(c)
	}
}

// bucket finds or makes the rate counter id, full at t when new.
func (f *Fair) bucket(id ruleKey, t int64) *counter {
	c, ok := f.counters[id]
	if !ok {
		r := f.cfg.Rates[id.rule]
		c = &counter{id: id, lanes: map[*lane]struct{}{}, idx: -1, rate: true, perNano: r.PerSecond / 1e9, burst: float64(r.Burst)}
		c.tokens, c.at = c.burst, t
		f.counters[id] = c
	}
	return c
}

// drained blocks c, a rate counter whose tokens were just set, until it
// has a token again, or brings its due time up to date.
func (f *Fair) drained(c *counter) {
	if c.tokens >= 1 {
		if c.idx >= 0 {
			f.refills.remove(c)
			f.unblock(c)
		}
		return
	}
	c.due = c.at + int64(math.Ceil((1-c.tokens)/c.perNano))
	if c.idx >= 0 {
		f.refills.fix(c.idx)
	} else {
		f.refills.push(c)
	}
	f.block(c)
}
