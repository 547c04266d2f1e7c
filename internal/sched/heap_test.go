package sched

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestItemHeapShrinks drains a heap that grew large in random order and
// checks that it still pops in order and gives its space back.
func TestItemHeapShrinks(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	h := &itemHeap{
		less: func(a, b *Item) bool { return a.ID < b.ID },
		idx:  func(it *Item) *int32 { return &it.levelIdx },
	}
	items := make([]*Item, 50_000)
	for i := range items {
		items[i] = &Item{ID: r.Uint64()}
		h.push(items[i])
	}
	grown := cap(h.items)
	// Remove all but 100 in random order, checking the survivors' indexes.
	r.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	for _, it := range items[100:] {
		h.remove(it)
		if it.levelIdx != -1 {
			t.Fatalf("a removed item keeps index %d", it.levelIdx)
		}
	}
	if c := cap(h.items); c > 1024 {
		t.Errorf("100 items left hold %d slots (%d at the most)", c, grown)
	}
	for i, it := range h.items {
		if int(it.levelIdx) != i {
			t.Fatalf("item at %d says it is at %d", i, it.levelIdx)
		}
	}
	want := make([]uint64, 0, 100)
	for _, it := range items[:100] {
		want = append(want, it.ID)
	}
	slices.Sort(want)
	for i, w := range want {
		it := h.min()
		if it == nil || it.ID != w {
			t.Fatalf("pop %d: got %v, want ID %d", i, it, w)
		}
		h.remove(it)
	}
	if h.len() != 0 {
		t.Errorf("%d items left", h.len())
	}
}
