package sched

import "slices"

// tailWindow keeps the FIFO latencies of the latest messages to reach their
// FIFO moment and a quantile of them, refreshed at most every
// tailRefresh additions so that the figure the guard reads changes only at
// Push: Peek, which pushes nothing, sees the same one Pop does.
type tailWindow struct {
	ring  []int64
	pos   int
	since int
	q     int64 // the quantile as of the last refresh; 0 until then
}

const (
	tailSize    = 1024
	tailRefresh = 64
)

func (w *tailWindow) add(lat int64) {
	if len(w.ring) < tailSize {
		w.ring = append(w.ring, lat)
	} else {
		w.ring[w.pos] = lat
		w.pos = (w.pos + 1) % tailSize
	}
	w.since++
}

// refresh recomputes the quantile q of the window once enough latencies
// have come in since the last time.
func (w *tailWindow) refresh(q float64) {
	if w.since < tailRefresh && w.q > 0 || len(w.ring) == 0 {
		return
	}
	w.since = 0
	s := slices.Clone(w.ring)
	slices.Sort(s)
	w.q = s[min(len(s)-1, int(q*float64(len(s))))]
}
