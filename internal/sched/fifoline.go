package sched

// fifoLine holds the items waiting for their FIFO moment in push order,
// which is the order of their FIFO positions: an item's position is the
// predicted work pushed before it, and that only grows. So the item whose
// moment comes next is always at the front, and the guard pays O(1) per
// push and per promotion where a heap by position paid O(log n) for both.
//
// An item that leaves before its moment (dispatched early, removed or
// expired) is not looked for: its entry stays, stale, until it reaches the
// front, and the line is compacted once stale entries outnumber live ones,
// so it never holds more than about twice the items waiting. An item
// knows its entry by the entry's place in the order of every push
// (guardIdx, which the late heap uses only once the item is past its
// moment), so a retry's older entry is stale.
type fifoLine struct {
	buf   []*Item // a ring; n entries in use from head
	head  int
	n     int
	base  uint64 // the push number of the entry at head
	stale int    // entries whose item has left
}

// live reports whether the i-th entry from the front is its item's.
func (l *fifoLine) live(i int) bool {
	it := l.at(i)
	return it.guardIn == guardFIFO && it.guardIdx == int32(l.base+uint64(i))
}

func (l *fifoLine) at(i int) *Item { return l.buf[(l.head+i)%len(l.buf)] }

func (l *fifoLine) push(it *Item) {
	if l.n == len(l.buf) {
		l.resize(max(16, len(l.buf)+len(l.buf)/4, min(2*len(l.buf), 1024)))
	}
	it.guardIdx = int32(l.base + uint64(l.n))
	l.buf[(l.head+l.n)%len(l.buf)] = it
	l.n++
}

// left notes that an item in the line left it before its moment.
func (l *fifoLine) left() {
	l.stale++
	if l.stale > 64 && l.stale > l.n/2 {
		l.compact()
	}
}

// front is the first item still waiting, or nil; stale entries before it
// are dropped.
func (l *fifoLine) front() *Item {
	for l.n > 0 {
		if l.live(0) {
			return l.buf[l.head]
		}
		l.popFront()
		l.stale = max(l.stale-1, 0)
	}
	return nil
}

// popFront drops the entry at the front.
func (l *fifoLine) popFront() {
	l.buf[l.head] = nil
	l.head = (l.head + 1) % len(l.buf)
	l.n--
	l.base++
}

// resize moves the entries to a ring of size c (at least n), front first.
func (l *fifoLine) resize(c int) {
	buf := make([]*Item, c)
	for i := range l.n {
		buf[i] = l.at(i)
	}
	l.buf, l.head = buf, 0
}

// compact drops every stale entry, keeping the order of the others and
// renumbering them, and gives back space a burst left behind.
func (l *fifoLine) compact() {
	keep := 0
	for i := range l.n {
		if l.live(i) {
			it := l.at(i)
			it.guardIdx = int32(l.base + uint64(keep))
			l.buf[(l.head+keep)%len(l.buf)] = it
			keep++
		}
	}
	for i := keep; i < l.n; i++ {
		l.buf[(l.head+i)%len(l.buf)] = nil
	}
	l.n, l.stale = keep, 0
	if len(l.buf) > 64 && l.n < len(l.buf)/4 {
		l.resize(max(16, 2*l.n))
	}
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
