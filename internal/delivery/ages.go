package delivery

import (
	"cmp"
	"slices"
	"time"
)

// ages counts a Line's waiting jobs by the millisecond they took their
// place in line (Job.Enqueued), so that the oldest one's wait is known in
// O(1) and percentiles of the waits from the distinct milliseconds rather
// than from every job. The scheduler orders jobs by predicted cost, not by
// age, so it cannot say.
//
// Jobs enter out of time order too (a retry keeps the place it had, a
// redeclared queue takes its jobs back in their order), so the
// milliseconds are a map of counts with a min-heap of its keys. An
// emptied millisecond leaves the map at once and the heap lazily: the
// heap is rebuilt from the map once its stale keys outnumber the live
// ones, so it stays within a constant factor of the map. It is not safe
// for concurrent use.
type ages struct {
	count map[int64]int32 // jobs per millisecond, only those with some
	keys  msHeap          // every key of count, and some stale ones
	jobs  int
}

// msOf is the millisecond (since 1970, rounded down) of a Unix nanosecond.
func msOf(nanos int64) int64 {
	ms := nanos / 1e6
	if nanos < 0 && nanos%1e6 != 0 {
		ms-- // floor, for times before 1970
	}
	return ms
}

// add counts a job that entered the line at nanos.
func (a *ages) add(nanos int64) {
	k := msOf(nanos)
	if a.count == nil {
		a.count = make(map[int64]int32)
	}
	n := a.count[k]
	if n == 0 {
		a.keys.push(k)
	}
	a.count[k] = n + 1
	a.jobs++
}

// remove uncounts a job that entered at nanos and has left the line. It
// reports false, changing nothing, when no such job is counted (a bug of
// the caller's, which the caller reports).
func (a *ages) remove(nanos int64) bool {
	k := msOf(nanos)
	n, ok := a.count[k]
	if !ok {
		return false
	}
	a.jobs--
	if n > 1 {
		a.count[k] = n - 1
		return true
	}
	delete(a.count, k)
	a.tidy()
	return true
}

// tidy drops stale keys from the top of the heap, and rebuilds it when
// stale keys outnumber live ones.
func (a *ages) tidy() {
	for len(a.keys) > 0 && a.count[a.keys[0]] == 0 {
		a.keys.pop()
	}
	if len(a.keys) > 2*len(a.count)+64 {
		a.keys = a.keys[:0]
		for k := range a.count {
			a.keys = append(a.keys, k)
		}
		slices.Sort(a.keys) // a sorted slice is a heap
	}
}

// oldest is the millisecond the longest-waiting job entered the line.
func (a *ages) oldest() (time.Time, bool) {
	if a.jobs == 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(a.keys[0]), true
}

// WaitCount is how many waiting jobs entered the line in one millisecond.
type WaitCount struct {
	Milli int64 // the millisecond, since 1970 (time.UnixMilli)
	N     int
}

// appendCounts appends the count of each millisecond, in no order.
func (a *ages) appendCounts(dst []WaitCount) []WaitCount {
	for k, n := range a.count {
		dst = append(dst, WaitCount{Milli: k, N: int(n)})
	}
	return dst
}

// WaitQuantiles returns, for each of qs (ascending fractions of the jobs
// counted, 0 the one that has waited longest), the millisecond the job at
// that rank entered the line: the job at index floor(q*(n-1)) of the n
// counted, in entry order. It sorts counts.
func WaitQuantiles(counts []WaitCount, qs ...float64) []time.Time {
	out := make([]time.Time, len(qs))
	jobs := 0
	for _, c := range counts {
		jobs += c.N
	}
	if jobs == 0 {
		return out
	}
	slices.SortFunc(counts, func(a, b WaitCount) int { return cmp.Compare(a.Milli, b.Milli) })
	q, seen := 0, 0
	for _, c := range counts {
		seen += c.N
		for q < len(qs) && int(qs[q]*float64(jobs-1)) < seen {
			out[q] = time.UnixMilli(c.Milli)
			q++
		}
	}
	return out
}

// msHeap is a min-heap of milliseconds (written out rather than through
// container/heap, whose interface boxes every int64 it is given).
type msHeap []int64

func (h *msHeap) push(k int64) {
	*h = append(*h, k)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p] <= s[i] {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *msHeap) pop() {
	s := *h
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && s[c+1] < s[c] {
			c++
		}
		if s[i] <= s[c] {
			break
		}
		s[i], s[c] = s[c], s[i]
		i = c
	}
	*h = s
}
