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
			out = append(out, &Item{guardIn: guardNone})
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
				it.guardIn, it.fifoPos = guardFIFO, pos
				pos += float64(rng.IntN(3)) // equal positions too
				l.push(it)
				want = append(want, it)
			case op < 10-promote && len(want) > 0: // leaves before its moment
				i := rng.IntN(len(want))
				it := want[i]
				want = slices.Delete(want, i, i+1)
				it.guardIn = guardNone
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
				it.guardIn = guardNone // past its moment and on: free to come back
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
