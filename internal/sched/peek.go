package sched

import "time"

// Peek appends to buf the next n waiting items in the order Pop would
// return them if it were called n times at now with nothing pushed or
// removed in between, and returns buf. It changes nothing: not the items,
// the levels, the weighted round robin's credits nor the counters, so an
// inspector can show the line as it stands.
//
// Its cost grows with n, the items that would expire or age at now, and the
// logarithm of the queue's length, not with the length itself: each heap is
// walked from its root only as far as the items it yields.
func (s *Scheduler) Peek(now time.Time, n int, buf []*Item) []*Item {
	if n <= 0 || s.n == 0 {
		return buf
	}
	p := peeker{
		s:        s,
		now:      now,
		gone:     map[*Item]bool{},
		moved:    map[*Item]int{},
		deq:      s.deqWork,
		credit:   make([]int, len(s.levels)),
		prom:     make([]int, len(s.levels)),
		walks:    make([]heapWalk, len(s.levels)),
		in:       make([][]*Item, len(s.levels)),
		ages:     make([]ageWalk, len(s.levels)),
		due:      heapWalk{h: &s.due},
		late:     heapWalk{h: &s.late},
		fifoWait: fifoWalk{l: &s.fifoWait},
		pastDue:  fifoWalk{l: &s.pastDue},
	}
	for i := range s.levels {
		l := &s.levels[i]
		p.credit[i] = l.credit
		p.prom[i] = l.promoted
		p.walks[i] = heapWalk{h: &l.heap}
		p.ages[i] = ageWalk{l: &l.age}
	}
	if v := s.vf; v != nil {
		p.vdone = v.started
		p.vfree, p.vretire = append([]int64(nil), v.free...), v.retire
		p.vclock = v.peekTick(now.UnixNano(), s.n)
		p.advanceFIFO()
	}
	// Pop expires first: every item past its TTL leaves, its work counted
	// as done.
	ttl := heapWalk{h: &s.ttl}
	for it := ttl.peek(); it != nil && it.expiredAt(now); it = ttl.peek() {
		ttl.next()
		p.take(it)
		if _, started := p.deadline[it]; s.vf != nil && it.guard() == guardFIFO && !started {
			p.vdone += it.Cost.Seconds() // Remove: FIFO skips it
		}
	}
	p.vexpired = true
	for range n {
		it := p.pop()
		if it == nil {
			break
		}
		buf = append(buf, it)
	}
	return buf
}

// peeker replays Pop against a virtual copy of the scheduler's state: items
// taken are marked gone, items aged up are recorded in moved and join the
// level above through in, and the level heaps are walked in order instead of
// popped.
type peeker struct {
	s     *Scheduler
	now   time.Time
	gone  map[*Item]bool // taken out: popped or expired
	moved map[*Item]int  // aged: the level it sits at now
	deq   float64        // deqWork as it would be
	// With a virtual FIFO: the work it has started, its workers' free
	// times, its clock and the next entry of its line, as they would be,
	// and whether the expired messages are out.
	vdone    float64
	vfree    []int64
	vretire  int
	vclock   int64
	vnext    int
	vexpired bool
	credit   []int      // each level's round-robin credit as it would be
	prom     []int      // each level's promoted count as it would be
	walks    []heapWalk // each level's own items, in its order
	in       [][]*Item  // items aged into each level, in its order
	ages     []ageWalk  // each level's age line, as far as aging has read it
	due      heapWalk
	// deadline holds the deadlines this Peek gave.
	deadline map[*Item]int64
	// The guard: items past their FIFO moment as they stand, and those
	// this Peek has moved there, in deadline order, and the items still
	// waiting for it.
	late     heapWalk
	pastFIFO []*Item
	fifoWait fifoWalk
	// With dueOrdered: the items in pastDue as they stand, then those this
	// Peek has moved there from the due heap, in order.
	pastDue  fifoWalk
	movedDue []*Item
}

func (p *peeker) level(it *Item) int {
	if lv, ok := p.moved[it]; ok {
		return lv
	}
	return int(it.level)
}

func (p *peeker) promoted(it *Item) bool {
	if _, ok := p.moved[it]; ok {
		return true
	}
	return it.isPromoted()
}

func (p *peeker) take(it *Item) {
	p.gone[it] = true
	if p.promoted(it) {
		p.prom[p.level(it)]--
	}
	p.deq += it.Cost.Seconds()
}

// head is the item level i would hand out next, or nil.
func (p *peeker) head(i int) *Item {
	w := &p.walks[i]
	for it := w.peek(); it != nil && (p.gone[it] || p.level(it) != i); it = w.peek() {
		w.next()
	}
	in := p.in[i]
	for len(in) > 0 && p.gone[in[0]] {
		in = in[1:]
	}
	p.in[i] = in
	own := w.peek()
	switch {
	case len(in) == 0:
		return own
	case own == nil || p.s.levels[i].heap.less(in[0], own):
		return in[0]
	default:
		return own
	}
}

// age mirrors Scheduler.age.
func (p *peeker) age() {
	s := p.s
	if s.cfg.Aging == AgingOff {
		return
	}
	for i := 1; i < len(s.levels); i++ {
		for {
			w := &p.ages[i]
			e, ok := w.peek()
			for ok && (p.gone[e.it] || p.level(e.it) != i) {
				w.next()
				e, ok = w.peek()
			}
			if !ok || p.now.UnixNano()-e.at < int64(s.cfg.AgeAfter[i]) {
				break
			}
			it := e.it
			if s.cfg.Aging == AgingPausing && p.prom[i-1] > 0 {
				break
			}
			if p.promoted(it) {
				p.prom[i]--
			}
			p.moved[it] = i - 1
			p.prom[i-1]++
			p.insert(i-1, it)
			// An item aged now entered its new level now: it is not old
			// enough there to move again at this now, so it never needs
			// to be on that level's age line.
		}
	}
}

func (p *peeker) insert(lv int, it *Item) {
	less := p.s.levels[lv].heap.less
	in := p.in[lv]
	j := len(in)
	for j > 0 && less(it, in[j-1]) {
		j--
	}
	in = append(in, nil)
	copy(in[j+1:], in[j:])
	in[j] = it
	p.in[lv] = in
}

// pop mirrors Scheduler.Pop after the expiry Peek has already done.
func (p *peeker) pop() *Item {
	it := p.next()
	if it != nil {
		p.take(it)
		p.dispatched(it)
	}
	return it
}

// next is the item pop hands out, not yet taken.
func (p *peeker) next() *Item {
	p.age()
	p.promoteGuard()
	for it := p.due.peek(); it != nil && p.gone[it]; it = p.due.peek() {
		p.due.next()
	}
	l := p.lateHead()
	if l != nil && p.guardAt(l) <= p.now.UnixNano() {
		return l
	}
	if it := p.pastDueHead(); it != nil {
		return it
	}
	done := p.deq
	if p.s.vf != nil {
		done = p.vdone
	}
	if d := p.due.peek(); d != nil && d.due <= done+p.ranBeyond(d) {
		return d
	}
	it := p.choose()
	if it != nil && l != nil && !p.s.mayOvertake(it, l) {
		it = l
	}
	return it
}

// ranBeyond mirrors Scheduler.ranBeyond: nothing for an item this Peek has
// moved past its FIFO moment.
func (p *peeker) ranBeyond(it *Item) float64 {
	if _, passed := p.deadline[it]; passed {
		return 0
	}
	return p.s.ranBeyond(it)
}

// dispatched mirrors what a dispatch does to the virtual run's clock.
func (p *peeker) dispatched(it *Item) {
	v := p.s.vf
	if v == nil || !v.dispatch {
		return
	}
	if w := len(p.vfree) - p.vretire; w > 0 {
		p.vclock += int64(it.Cost) / int64(w)
	}
	p.advanceFIFO()
}

// promoteGuard mirrors Scheduler.promote: items whose FIFO moment has come get
// their deadline at now.
func (p *peeker) promoteGuard() {
	if !p.s.guarded() {
		return
	}
	for it := p.fifoWait.peek(); it != nil && (p.gone[it] || it.pos() <= p.deq+p.s.ranBeyond(it)); it = p.fifoWait.peek() {
		p.fifoWait.next()
		if p.gone[it] {
			continue
		}
		p.passFIFO(it, p.s.guardDeadline(it, p.now))
	}
	if !p.s.dueOrdered {
		return
	}
	for it := p.due.peek(); it != nil && (p.gone[it] || it.pos() <= p.deq+p.s.ranBeyond(it)); it = p.due.peek() {
		p.due.next()
		if p.gone[it] {
			continue
		}
		at := p.s.guardDeadline(it, p.now)
		p.passFIFO(it, at)
		if at > p.now.UnixNano() { // see Scheduler.passDue
			p.movedDue = append(p.movedDue, it)
		}
	}
}

// pastDueHead is the first item of pastDue as it would be, or nil.
func (p *peeker) pastDueHead() *Item {
	for it := p.pastDue.peek(); it != nil; it = p.pastDue.peek() {
		if !p.gone[it] {
			return it
		}
		p.pastDue.next()
	}
	for len(p.movedDue) > 0 && p.gone[p.movedDue[0]] {
		p.movedDue = p.movedDue[1:]
	}
	if len(p.movedDue) > 0 {
		return p.movedDue[0]
	}
	return nil
}

// passFIFO notes that it has reached its FIFO moment, with deadline at:
// it joins pastFIFO in deadline order.
func (p *peeker) passFIFO(it *Item, at int64) {
	if p.deadline == nil {
		p.deadline = map[*Item]int64{}
	}
	p.deadline[it] = at
	j := len(p.pastFIFO)
	for j > 0 && p.lateLess(it, p.pastFIFO[j-1]) {
		j--
	}
	p.pastFIFO = append(p.pastFIFO, nil)
	copy(p.pastFIFO[j+1:], p.pastFIFO[j:])
	p.pastFIFO[j] = it
}

// advanceFIFO mirrors Scheduler.advanceFIFO on a copy of the virtual run,
// from where it last stopped: the messages it would start by now get their
// deadlines. Peek calls it before anything is taken, as Pop advances the
// run before it expires messages, and again after each message it pops,
// which moves a dispatch clock on.
func (p *peeker) advanceFIFO() {
	v := p.s.vf
	for ; p.vnext < v.line.n; p.vnext++ {
		e := v.line.nth(p.vnext)
		if e.skip || (p.vexpired && e.it != nil && e.it.expiredAt(p.now)) {
			continue
		}
		for p.vretire > 0 && len(p.vfree) > 0 && p.vfree[0] <= p.vclock {
			p.vfree = heapPop(p.vfree)
			p.vretire--
		}
		if len(p.vfree) == 0 || p.vfree[0] > p.vclock {
			return
		}
		at := max(p.vfree[0], e.arrived)
		p.vfree[0] = at + int64(e.cost)
		heapDown(p.vfree, 0)
		p.vdone += e.cost.Seconds()
		if it := e.it; it != nil && !p.gone[it] {
			p.passFIFO(it, p.s.guardDeadline(it, time.Unix(0, v.wallAt(at, p.now.UnixNano()))))
		}
	}
}

// guardAt is the deadline of it as it would be.
func (p *peeker) guardAt(it *Item) int64 {
	if at, ok := p.deadline[it]; ok {
		return at
	}
	return it.guardAt
}

func (p *peeker) lateLess(a, b *Item) bool {
	if at, bt := p.guardAt(a), p.guardAt(b); at != bt {
		return at < bt
	}
	return a.ID < b.ID
}

// lateHead is the item with the earliest deadline, or nil.
func (p *peeker) lateHead() *Item {
	for it := p.late.peek(); it != nil && p.gone[it]; it = p.late.peek() {
		p.late.next()
	}
	for len(p.pastFIFO) > 0 && p.gone[p.pastFIFO[0]] {
		p.pastFIFO = p.pastFIFO[1:]
	}
	own := p.late.peek()
	switch {
	case len(p.pastFIFO) == 0:
		return own
	case own == nil || p.lateLess(p.pastFIFO[0], own):
		return p.pastFIFO[0]
	default:
		return own
	}
}

// choose mirrors Scheduler.choose.
func (p *peeker) choose() *Item {
	s := p.s
	if s.cfg.Discipline == Weighted {
		total, best := 0, -1
		var bestIt *Item
		for i := range s.levels {
			it := p.head(i)
			if it == nil {
				continue
			}
			p.credit[i] += s.cfg.Weights[i]
			total += s.cfg.Weights[i]
			if best < 0 || p.credit[i] > p.credit[best] {
				best, bestIt = i, it
			}
		}
		if best < 0 {
			return nil
		}
		p.credit[best] -= total
		return bestIt
	}
	for i := range s.levels {
		if it := p.head(i); it != nil {
			return it
		}
	}
	return nil
}

// heapWalk yields a heap's items in order without changing the heap: a
// small heap of candidate positions starts at the root, and each position
// taken adds its two children. Yielding k items costs O(k log k).
type heapWalk struct {
	h    *itemHeap
	cand []int
	init bool
}

func (w *heapWalk) less(a, b int) bool { return w.h.less(w.h.items[a], w.h.items[b]) }

func (w *heapWalk) peek() *Item {
	if !w.init {
		w.init = true
		if len(w.h.items) > 0 {
			w.cand = append(w.cand, 0)
		}
	}
	if len(w.cand) == 0 {
		return nil
	}
	return w.h.items[w.cand[0]]
}

// next drops the item peek returned.
func (w *heapWalk) next() {
	if w.peek() == nil {
		return
	}
	i := w.cand[0]
	last := len(w.cand) - 1
	w.cand[0] = w.cand[last]
	w.cand = w.cand[:last]
	w.down(0)
	for _, c := range [2]int{2*i + 1, 2*i + 2} {
		if c < len(w.h.items) {
			w.cand = append(w.cand, c)
			w.up(len(w.cand) - 1)
		}
	}
}

func (w *heapWalk) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !w.less(w.cand[j], w.cand[i]) {
			break
		}
		w.cand[i], w.cand[j] = w.cand[j], w.cand[i]
		j = i
	}
}

func (w *heapWalk) down(i int) {
	n := len(w.cand)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && w.less(w.cand[r], w.cand[l]) {
			j = r
		}
		if !w.less(w.cand[j], w.cand[i]) {
			return
		}
		w.cand[i], w.cand[j] = w.cand[j], w.cand[i]
		i = j
	}
}
