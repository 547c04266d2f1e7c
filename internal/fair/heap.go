package fair

// heap is an indexed binary min-heap: each element records its position
// (through idx), so removal and re-ordering are O(log n), as in
// container/heap's example.
type heap[T any] struct {
	items []T
	less  func(a, b T) bool
	idx   func(T) *int
}

func (h *heap[T]) push(x T) {
	*h.idx(x) = len(h.items)
	h.items = append(h.items, x)
	h.up(len(h.items) - 1)
}

func (h *heap[T]) remove(x T) {
	i := *h.idx(x)
	if i < 0 {
		return
	}
	last := len(h.items) - 1
	if i != last {
		h.swap(i, last)
	}
	var zero T
	h.items[last] = zero
	h.items = h.items[:last]
	*h.idx(x) = -1
	if i != last {
		h.fix(i)
	}
}

// fix restores the order after the element at i changed; i < 0 is ignored.
func (h *heap[T]) fix(i int) {
	if i < 0 {
		return
	}
	if !h.down(i) {
		h.up(i)
	}
}

func (h *heap[T]) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	*h.idx(h.items[i]) = i
	*h.idx(h.items[j]) = j
}

func (h *heap[T]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(h.items[j], h.items[i]) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h *heap[T]) down(i0 int) bool {
	i, n := i0, len(h.items)
	for {
		j := 2*i + 1
		if j >= n || j < 0 {
			break
		}
		if j2 := j + 1; j2 < n && h.less(h.items[j2], h.items[j]) {
			j = j2
		}
		if !h.less(h.items[j], h.items[i]) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

type (
	groupHeap   = heap[*group]
	laneHeap    = heap[*lane]
	counterHeap = heap[*counter]
)

func newGroupHeap() groupHeap {
	return groupHeap{less: func(a, b *group) bool { return groupCmp(a, b) < 0 }, idx: func(g *group) *int { return &g.idx }}
}

func newLaneHeap() laneHeap {
	return laneHeap{less: func(a, b *lane) bool { return laneCmp(a, b) < 0 }, idx: func(l *lane) *int { return &l.idx }}
}

func newExpiryHeap() laneHeap {
	return laneHeap{
		less: func(a, b *lane) bool { return a.exp < b.exp || a.exp == b.exp && a.seq < b.seq },
		idx:  func(l *lane) *int { return &l.expIdx },
	}
}

func newRefillHeap() counterHeap {
	return counterHeap{less: func(a, b *counter) bool { return a.due < b.due }, idx: func(c *counter) *int { return &c.idx }}
}
