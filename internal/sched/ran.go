package sched

// ranMarks holds, for Bound.Measured, one mark per message that was
// dispatched before its FIFO moment and has since run: the FIFO position
// it was dispatched from and how much longer than predicted it ran (in
// nanoseconds, negative if shorter). A mark counts toward the FIFO moment
// of every waiting message whose position is below the mark's. Marks are
// kept in a min-heap by position, so the ones no waiting message can use
// (at or below the lowest waiting position) leave from the root; sums are
// integers, so Peek, which prunes nothing, reads the figure Pop reads.
type ranMarks struct {
	h     []ranMark
	total int64 // the extra work of every mark held
}

type ranMark struct {
	pos   float64
	extra int64
}

func (r *ranMarks) n() int { return len(r.h) }

func (r *ranMarks) add(pos float64, extra int64) {
	r.h = append(r.h, ranMark{pos, extra})
	r.total += extra
	for j := len(r.h) - 1; j > 0; {
		i := (j - 1) / 2
		if r.h[i].pos <= r.h[j].pos {
			break
		}
		r.h[i], r.h[j] = r.h[j], r.h[i]
		j = i
	}
}

// prune drops every mark at or below pos.
func (r *ranMarks) prune(pos float64) {
	for len(r.h) > 0 && r.h[0].pos <= pos {
		r.total -= r.h[0].extra
		last := len(r.h) - 1
		r.h[0] = r.h[last]
		r.h = r.h[:last]
		for i := 0; ; {
			l, j := 2*i+1, i
			if l < len(r.h) && r.h[l].pos < r.h[j].pos {
				j = l
			}
			if l+1 < len(r.h) && r.h[l+1].pos < r.h[j].pos {
				j = l + 1
			}
			if j == i {
				break
			}
			r.h[i], r.h[j] = r.h[j], r.h[i]
			i = j
		}
	}
	if len(r.h) == 0 {
		r.h = r.h[:0]
	}
}

// beyond is the extra work of the marks above pos: the total less the
// marks at or below it, which the heap yields from its root without
// visiting the others.
func (r *ranMarks) beyond(pos float64) int64 {
	sum := r.total
	var walk func(i int)
	walk = func(i int) {
		if i >= len(r.h) || r.h[i].pos > pos {
			return
		}
		sum -= r.h[i].extra
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
	return sum
}
