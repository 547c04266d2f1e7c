package sched

import "time"

// virtualFIFO replays the messages a scheduler was given through FIFO on a
// number of virtual workers, in predicted costs, as time passes: the run the
// guard compares with. A message's FIFO moment is when this run starts it,
// which counts what FIFO holds in service, not only what it has dispatched.
//
// Messages join the line at Push in push order. A message the scheduler
// dispatches before the virtual run reaches it stays in the line without
// its item (FIFO would still have run it); a message removed (purged,
// expired) before then is skipped, as FIFO would skip it. Each message
// enters and leaves the line once, and each start costs O(log workers).
//
// The line is FIFO's backlog in predicted time, so it holds as many entries
// as FIFO would keep waiting: when the predictions overstate the real
// durations the run falls behind the real workers, and the line grows with
// it however short the real queue is.
type virtualFIFO struct {
	// free holds each virtual worker's next free time (Unix nanoseconds),
	// a min-heap: the root is the worker that takes the next message.
	free []int64
	// retire is how many workers leave as they come free (SetWorkers
	// shrank the count while they were busy).
	retire int
	line   vline
	// started is the predicted work (seconds) the run has started, plus
	// the work of messages removed before it reached them: FIFO's progress
	// in the units of a Bound's positions.
	started float64
	// With Bound.DispatchClock the run keeps its own clock (clock, in
	// nanoseconds, and the wall time it last saw); otherwise its clock is
	// the wall clock and these stay zero.
	dispatch    bool
	clock, seen int64
}

// tick moves the run's clock to wall, with waiting messages waiting since
// the last call, and returns it: on the dispatch clock, time passes only
// while nothing waits (then the workers may idle, as FIFO's would).
func (v *virtualFIFO) tick(wall int64, waiting int) int64 {
	if !v.dispatch {
		return wall
	}
	v.clock = v.peekTick(wall, waiting)
	v.seen = max(v.seen, wall)
	return v.clock
}

// peekTick is the clock tick would return, changing nothing.
func (v *virtualFIFO) peekTick(wall int64, waiting int) int64 {
	switch {
	case !v.dispatch:
		return wall
	case v.seen == 0:
		return wall // the first call starts the clock at the wall's time
	case waiting == 0 && wall > v.seen:
		return v.clock + wall - v.seen
	}
	return v.clock
}

// dispatched moves the dispatch clock on by a dispatched message's cost
// shared among the workers.
func (v *virtualFIFO) dispatched(c time.Duration) {
	if w := len(v.free) - v.retire; v.dispatch && w > 0 {
		v.clock += int64(c) / int64(w)
	}
}

// wallAt is the wall time of a start at the run's time at, found at wall:
// on the dispatch clock the call that moved the clock past it.
func (v *virtualFIFO) wallAt(at, wall int64) int64 {
	if v.dispatch {
		return wall
	}
	return at
}

// vline is a ring buffer of the messages waiting in the virtual run, in
// push order. Tickets number its entries from the first ever pushed, so an
// item can find its entry while the ring wraps and grows.
type vline struct {
	buf  []ventry // len is a power of two, or zero
	head int
	n    int
	base uint64 // the ticket of buf[head]
}

type ventry struct {
	it      *Item // nil once the scheduler dispatched it
	cost    time.Duration
	skip    bool  // removed before the run reached it: takes no worker
	arrived int64 // when it joined, on the run's clock
}

func (l *vline) push(e ventry) uint64 {
	if l.n == len(l.buf) {
		nb := make([]ventry, max(16, 2*len(l.buf)))
		for i := range l.n {
			nb[i] = l.buf[(l.head+i)&(len(l.buf)-1)]
		}
		l.buf, l.head = nb, 0
	}
	l.buf[(l.head+l.n)&(len(l.buf)-1)] = e
	l.n++
	return l.base + uint64(l.n-1)
}

// at returns the entry of ticket t, or nil once it has left the line.
func (l *vline) at(t uint64) *ventry {
	if t < l.base || t >= l.base+uint64(l.n) {
		return nil
	}
	return &l.buf[(l.head+int(t-l.base))&(len(l.buf)-1)]
}

// nth is the i-th entry from the front.
func (l *vline) nth(i int) *ventry { return &l.buf[(l.head+i)&(len(l.buf)-1)] }

func (l *vline) popFront() {
	l.buf[l.head] = ventry{}
	l.head = (l.head + 1) & (len(l.buf) - 1)
	l.n--
	l.base++
}

// setWorkers changes the number of virtual workers at now: new workers are
// free at once; when the count shrinks, idle workers leave first and busy
// ones as they come free.
func (v *virtualFIFO) setWorkers(n int, now int64) {
	have := len(v.free) - v.retire
	for ; have < n && v.retire > 0; have++ {
		v.retire--
	}
	for ; have < n; have++ {
		v.free = append(v.free, now)
		heapUp(v.free, len(v.free)-1)
	}
	for ; have > n; have-- {
		if len(v.free) > 0 && v.free[0] <= now {
			v.free = heapPop(v.free)
		} else {
			v.retire++
		}
	}
}

func heapUp(h []int64, j int) {
	for j > 0 {
		i := (j - 1) / 2
		if h[i] <= h[j] {
			return
		}
		h[i], h[j] = h[j], h[i]
		j = i
	}
}

func heapDown(h []int64, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		j := l
		if r := l + 1; r < len(h) && h[r] < h[l] {
			j = r
		}
		if h[i] <= h[j] {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

func heapPop(h []int64) []int64 {
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	heapDown(h, 0)
	return h
}
