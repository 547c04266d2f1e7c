package sched

// itemHeap is an indexed binary min-heap: each item records its position in
// the heap it belongs to (through idx), so removal and re-ordering are
// O(log n). One Item sits in up to four heaps at once (its level, the due
// heap, the TTL heap and the guard's late heap), each with its own index
// slot.
type itemHeap struct {
	items []*Item
	less  func(a, b *Item) bool
	idx   func(*Item) *int32
}

func (h *itemHeap) len() int { return len(h.items) }

func (h *itemHeap) min() *Item {
	if len(h.items) == 0 {
		return nil
	}
	return h.items[0]
}

func (h *itemHeap) push(it *Item) {
	*h.idx(it) = int32(len(h.items))
	h.items = append(h.items, it)
	h.up(len(h.items) - 1)
}

func (h *itemHeap) remove(it *Item) {
	i := int(*h.idx(it))
	if i < 0 || i >= len(h.items) || h.items[i] != it {
		return
	}
	last := len(h.items) - 1
	if i != last {
		h.swap(i, last)
	}
	h.items[last] = nil
	h.items = h.items[:last]
	*h.idx(it) = -1
	if c := cap(h.items); c > 1024 && last < c/4 {
		h.items = append(make([]*Item, 0, 2*last), h.items...)
	}
	if i != last {
		if !h.down(i) {
			h.up(i)
		}
	}
}

func (h *itemHeap) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	*h.idx(h.items[i]) = int32(i)
	*h.idx(h.items[j]) = int32(j)
}

func (h *itemHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(h.items[j], h.items[i]) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h *itemHeap) down(i0 int) bool {
	i, n := i0, len(h.items)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && h.less(h.items[r], h.items[l]) {
			j = r
		}
		if !h.less(h.items[j], h.items[i]) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
