package sched

// line is a ring of entries in push order, each numbered by its push: the
// shape of the guard's FIFO line and of each level's age line, which both
// need the oldest of their items at the front and O(1) to push and to take
// from the front.
//
// An item that leaves from the middle is not looked for: its entry stays,
// stale, until it reaches the front, and the line is compacted once stale
// entries outnumber live ones, so it never holds more than about twice the
// items it keeps. An item knows its entry by the entry's number (the
// caller keeps it in the item), so the older entry of an item that left
// and came back is stale.
type line[E any] struct {
	buf   []E // a ring; n entries in use from head
	head  int
	n     int
	base  uint64 // the push number of the entry at head
	stale int    // entries whose item has left
}

func (l *line[E]) at(i int) E { return l.buf[(l.head+i)%len(l.buf)] }

// push appends e and returns its number.
func (l *line[E]) push(e E) uint64 {
	if l.n == len(l.buf) {
		l.resize(max(16, len(l.buf)+len(l.buf)/4, min(2*len(l.buf), 1024)))
	}
	l.buf[(l.head+l.n)%len(l.buf)] = e
	l.n++
	return l.base + uint64(l.n-1)
}

// popFront drops the entry at the front.
func (l *line[E]) popFront() {
	var zero E
	l.buf[l.head] = zero
	l.head = (l.head + 1) % len(l.buf)
	l.n--
	l.base++
}

// resize moves the entries to a ring of size c (at least n), front first.
func (l *line[E]) resize(c int) {
	buf := make([]E, c)
	for i := range l.n {
		buf[i] = l.at(i)
	}
	l.buf, l.head = buf, 0
}

// left notes that an item left its entry behind, and compacts the line
// once stale entries outnumber live ones: live reports whether the i-th
// entry from the front is still its item's, renumber tells an item its
// entry's new number.
func (l *line[E]) left(live func(i int) bool, renumber func(E, uint64)) {
	l.stale++
	if l.stale > 64 && l.stale > l.n/2 {
		l.compact(live, renumber)
	}
}

// compact drops every stale entry, keeping the order of the others and
// renumbering them, and gives back space a burst left behind.
func (l *line[E]) compact(live func(i int) bool, renumber func(E, uint64)) {
	keep := 0
	for i := range l.n {
		if live(i) {
			e := l.at(i)
			renumber(e, l.base+uint64(keep))
			l.buf[(l.head+keep)%len(l.buf)] = e
			keep++
		}
	}
	var zero E
	for i := keep; i < l.n; i++ {
		l.buf[(l.head+i)%len(l.buf)] = zero
	}
	l.n, l.stale = keep, 0
	if len(l.buf) > 64 && l.n < len(l.buf)/4 {
		l.resize(max(16, 2*l.n))
	}
}

// dropStale drops the stale entries at the front and reports whether a
// live one is left there.
func (l *line[E]) dropStale(live func(i int) bool) bool {
	for l.n > 0 {
		if live(0) {
			return true
		}
		l.popFront()
		l.stale = max(l.stale-1, 0)
	}
	return false
}

// fifoLine is a line of items in push order. The guard keeps two: the
// items waiting for their FIFO moment, and (see Scheduler.pastDue) the
// long items that left the due heap at their FIFO moment.
//
// The first is in the order of the items' FIFO positions (an item's
// position is the predicted work pushed before it, and that only grows),
// so the item whose moment comes next is always at the front, and the
// guard pays O(1) per push and per promotion where a heap by position paid
// O(log n) for both. An item that leaves before its moment (dispatched
// early, removed or expired) leaves a stale entry (see line). An item's
// entry number is its guardIdx, which the late heap uses only once it is
// past its moment. In the second an item's entry number is its dueIdx,
// which the due heap no longer uses once the item has left it.
type fifoLine struct {
	line[*Item]
	pastDue bool // the second line: statePastDue and dueIdx
}

// idx is where an item keeps its entry's number.
func (l *fifoLine) idx(it *Item) *int32 {
	if l.pastDue {
		return &it.dueIdx
	}
	return &it.guardIdx
}

// live reports whether the i-th entry from the front is its item's.
func (l *fifoLine) live(i int) bool {
	it := l.at(i)
	in := it.guard() == guardFIFO
	if l.pastDue {
		in = it.state&statePastDue != 0
	}
	return in && *l.idx(it) == int32(l.base+uint64(i))
}

func (l *fifoLine) push(it *Item) { *l.idx(it) = int32(l.line.push(it)) }

// left notes that an item in the line left it.
func (l *fifoLine) left() {
	l.line.left(l.live, func(it *Item, n uint64) { *l.idx(it) = int32(n) })
}

// front is the first item still in the line, or nil; stale entries before
// it are dropped.
func (l *fifoLine) front() *Item {
	if l.dropStale(l.live) {
		return l.buf[l.head]
	}
	return nil
}

// fifoWalk reads a fifoLine front to back without changing it, skipping
// stale entries, for Peek.
type fifoWalk struct {
	l *fifoLine
	i int
}

func (w *fifoWalk) peek() *Item {
	for ; w.i < w.l.n; w.i++ {
		if w.l.live(w.i) {
			return w.l.at(w.i)
		}
	}
	return nil
}

// next moves past the item peek returned.
func (w *fifoWalk) next() {
	if w.peek() != nil {
		w.i++
	}
}

// ageLine is one level's items in the order they entered it, with when,
// so that the item that has waited longest at the level is at the front:
// what aging reads. Only a scheduler that ages keeps them. An item that
// leaves the level (popped, removed, aged up) leaves a stale entry (see
// line); an item's entry number is its ageIdx.
type ageLine struct {
	line[ageEntry]
	level int8
}

type ageEntry struct {
	it *Item
	at int64 // when it entered the level (Unix nanoseconds)
}

// live reports whether the i-th entry from the front is its item's.
func (l *ageLine) live(i int) bool {
	e := l.at(i)
	return e.it.Queued() && e.it.level == l.level && e.it.ageIdx == int32(l.base+uint64(i))
}

func (l *ageLine) push(it *Item, at int64) {
	it.ageIdx = int32(l.line.push(ageEntry{it: it, at: at}))
}

// left notes that an item left the level.
func (l *ageLine) left() {
	l.line.left(l.live, func(e ageEntry, n uint64) { e.it.ageIdx = int32(n) })
}

// front is the entry of the item that entered the level first and is
// still there; ok is false when none is.
func (l *ageLine) front() (e ageEntry, ok bool) {
	if l.dropStale(l.live) {
		return l.buf[l.head], true
	}
	return ageEntry{}, false
}

// ageWalk reads an ageLine front to back without changing it, skipping
// stale entries, for Peek.
type ageWalk struct {
	l *ageLine
	i int
}

func (w *ageWalk) peek() (ageEntry, bool) {
	for ; w.i < w.l.n; w.i++ {
		if w.l.live(w.i) {
			return w.l.at(w.i), true
		}
	}
	return ageEntry{}, false
}

// next moves past the entry peek returned.
func (w *ageWalk) next() {
	if _, ok := w.peek(); ok {
		w.i++
	}
}
