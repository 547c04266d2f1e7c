package sched

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// The FIFO line against a plain slice of the items waiting in push order:
// pushes (of new items and of items that left, as retries are), departures
// from anywhere before an item's moment, and promotions from the front.
// After every step the line's front, its walk and the slice agree, and the
// line holds at most about twice the items waiting. In half the seeds
// promotions are rare, so that stale entries pile up and the line compacts.
func TestFIFOLineAgainstModel(t *testing.T) {
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var l fifoLine
		var want []*Item // waiting, in push order
		var out []*Item  // not in the line: may be pushed again
		for range 300 {
			out = append(out, &Item{})
		}
		promote := 3
		if seed%2 == 0 {
			promote = 1
		}
		pos, compactions := 0.0, 0
		for step := range 6000 {
			switch op := rng.IntN(10); {
			case op < 5 && len(out) > 0: // push
				i := rng.IntN(len(out))
				it := out[i]
				out = slices.Delete(out, i, i+1)
				it.setGuard(guardFIFO)
				it.setPos(pos)
				pos += float64(rng.IntN(3)) // equal positions too
				l.push(it)
				want = append(want, it)
			case op < 10-promote && len(want) > 0: // leaves before its moment
				i := rng.IntN(len(want))
				it := want[i]
				want = slices.Delete(want, i, i+1)
				it.setGuard(guardNone)
				before := l.stale
				l.left()
				if l.stale <= before {
					compactions++
				}
				out = append(out, it)
			default: // the front's moment comes
				it := l.front()
				if len(want) == 0 {
					if it != nil {
						t.Fatalf("seed %d step %d: front %p of an empty line", seed, step, it)
					}
					continue
				}
				if it != want[0] {
					t.Fatalf("seed %d step %d: front %p, want %p", seed, step, it, want[0])
				}
				l.popFront()
				want = want[1:]
				it.setGuard(guardNone) // past its moment and on: free to come back
				out = append(out, it)
			}
			w := fifoWalk{l: &l}
			var got []*Item
			for it := w.peek(); it != nil; it = w.peek() {
				got = append(got, it)
				w.next()
			}
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d step %d: the line walks %d items, want %d in push order", seed, step, len(got), len(want))
			}
			if l.n > 2*len(want)+65 {
				t.Fatalf("seed %d step %d: %d entries for %d waiting", seed, step, l.n, len(want))
			}
		}
		if promote == 1 && compactions == 0 {
			t.Fatalf("seed %d: the line never compacted", seed)
		}
	}
}

// The age lines of two levels against plain slices of each level's items
// in the order they entered it: items enter a level, leave it from
// anywhere (popped or removed), move to the other level (aged up, or a
// retry placed at another tier, so that the same entry number may be live
// in one line and stale in the other) and are taken from the front. After
// every step each line's front, its walk and its slice agree, entries
// carry the time their item entered, and a line holds at most about twice
// its items. In half the seeds items rarely reach the front, so that
// stale entries pile up and the lines compact.
func TestAgeLineAgainstModel(t *testing.T) {
	type entered struct {
		it *Item
		at int64
	}
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 11))
		lines := [2]*ageLine{{level: 0}, {level: 1}}
		var want [2][]entered
		var out []*Item // in no level
		for range 300 {
			out = append(out, &Item{})
		}
		front := 3
		if seed%2 == 0 {
			front = 1
		}
		remove := func(lv, i int) *Item {
			it := want[lv][i].it
			want[lv] = slices.Delete(want[lv], i, i+1)
			it.setQueued(false)
			lines[lv].left()
			return it
		}
		enter := func(it *Item, lv int, at int64) {
			it.setQueued(true)
			it.level = int8(lv)
			lines[lv].push(it, at)
			want[lv] = append(want[lv], entered{it, at})
		}
		var now int64
		for step := range 6000 {
			now += int64(rng.IntN(3))
			lv := rng.IntN(2)
			switch op := rng.IntN(10); {
			case op < 4 && len(out) > 0: // enters a level
				i := rng.IntN(len(out))
				it := out[i]
				out = slices.Delete(out, i, i+1)
				enter(it, lv, now)
			case op < 6 && len(want[lv]) > 0: // moves to the other level
				it := remove(lv, rng.IntN(len(want[lv])))
				enter(it, 1-lv, now)
			case op < 10-front && len(want[lv]) > 0: // leaves from anywhere
				out = append(out, remove(lv, rng.IntN(len(want[lv]))))
			default: // the front leaves
				e, ok := lines[lv].front()
				if len(want[lv]) == 0 {
					if ok {
						t.Fatalf("seed %d step %d: level %d: front %p of an empty line", seed, step, lv, e.it)
					}
					continue
				}
				if !ok || e != ageEntry(want[lv][0]) {
					t.Fatalf("seed %d step %d: level %d: front %+v, want %+v", seed, step, lv, e, want[lv][0])
				}
				out = append(out, remove(lv, 0))
			}
			for lv, l := range lines {
				w := ageWalk{l: l}
				var got []entered
				for e, ok := w.peek(); ok; e, ok = w.peek() {
					got = append(got, entered(e))
					w.next()
				}
				if !slices.Equal(got, want[lv]) {
					t.Fatalf("seed %d step %d: level %d walks %d entries, want %d in entry order", seed, step, lv, len(got), len(want[lv]))
				}
				if l.n > 2*len(want[lv])+65 {
					t.Fatalf("seed %d step %d: level %d: %d entries for %d items", seed, step, lv, l.n, len(want[lv]))
				}
			}
		}
	}
}
