package fair

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// GroupInfo is one group as an inspector shows it.
type GroupInfo struct {
	Name    string
	Weight  int
	Running int
	Waiting int
	// Limit is the concurrency limit on the group's own key (a limit on
	// the grouping field, for every value or for this one), 0 when none.
	Limit int
	// WorkShare is the group's share of the worker time spent on jobs of
	// this queue that ended in the last minute.
	WorkShare float64
	// WorkSeconds is that worker time, in seconds.
	WorkSeconds float64
	// Throttled counts jobs of the group that, on arrival or while they
	// waited, found a key of theirs at its limit or out of tokens.
	Throttled uint64
}

// Groups describes every group the Fair knows of at now, by name, at most
// limit of them (0 is all): the busiest first when there are more.
func (f *Fair) Groups(now time.Time, limit int) []GroupInfo {
	t := now.UnixNano()
	out := make([]GroupInfo, 0, len(f.groups))
	total := 0.0
	for _, g := range f.groups {
		w := g.workSince(t)
		total += w
		out = append(out, GroupInfo{
			Name: g.name, Weight: int(g.weight), Running: g.running, Waiting: g.waiting,
			Limit: f.groupLimit(g.name), WorkSeconds: w, Throttled: g.throttle,
		})
	}
	for i := range out {
		if total > 0 {
			out[i].WorkShare = out[i].WorkSeconds / total
		}
	}
	if limit > 0 && len(out) > limit {
		slices.SortFunc(out, func(a, b GroupInfo) int {
			return cmp.Or(cmp.Compare(b.Running+b.Waiting, a.Running+a.Waiting), cmp.Compare(a.Name, b.Name))
		})
		out = out[:limit]
	}
	slices.SortFunc(out, func(a, b GroupInfo) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// groupLimit is the tightest concurrency limit on the grouping field that
// applies to the group named name.
func (f *Fair) groupLimit(name string) int {
	lim := 0
	if f.cfg.GroupBy == "" {
		return 0
	}
	for _, l := range f.cfg.Limits {
		if l.Field == f.cfg.GroupBy && (l.Value == "" || l.Value == name) && (lim == 0 || l.Max < lim) {
			lim = l.Max
		}
	}
	return lim
}

// Blocked counts the limit keys at their limit and the rate keys out of
// tokens.
func (f *Fair) Blocked() (limits, rates int) {
	for _, c := range f.counters {
		if c.blocked {
			if c.rate {
				rates++
			} else {
				limits++
			}
		}
	}
	return limits, rates
}

// GroupCount is how many groups the Fair knows of.
func (f *Fair) GroupCount() int { return len(f.groups) }

// LevelLen is the number of items waiting at level i across the lanes:
// O(lanes), for an inspector.
func (f *Fair) LevelLen(i int) int {
	n := 0
	for _, l := range f.lanes {
		if i < l.s.Config().Levels {
			n += l.s.LevelLen(i)
		}
	}
	return n
}

// Check verifies the Fair's bookkeeping against its own state, the slow
// way, and describes the first inconsistency: for tests.
func (f *Fair) Check() error {
	n, run := 0, 0
	for k, l := range f.lanes {
		if l.gone || l.key != k {
			return fmt.Errorf("fair: lane %q is let go or filed under %q", l.key, k)
		}
		blocked := 0
		for _, c := range l.counters {
			if c.blocked {
				blocked++
			}
			if _, ok := c.lanes[l]; !ok {
				return fmt.Errorf("fair: lane %q is not among its counter %+v's lanes", l.key, c.id)
			}
		}
		if blocked != l.blocked {
			return fmt.Errorf("fair: lane %q counts %d blocked keys, has %d", l.key, l.blocked, blocked)
		}
		if l.waiting != l.s.Len() {
			return fmt.Errorf("fair: lane %q counts %d waiting, holds %d", l.key, l.waiting, l.s.Len())
		}
		if eligible := l.blocked == 0 && l.waiting > 0; eligible != (l.idx >= 0) {
			return fmt.Errorf("fair: lane %q eligible %v but in its group's heap %v", l.key, eligible, l.idx >= 0)
		}
		if g, ok := f.groups[l.g.name]; !ok || g != l.g {
			return fmt.Errorf("fair: lane %q's group %q is not the Fair's", l.key, l.g.name)
		}
		n += l.waiting
		run += l.running
	}
	if n != f.n || run != f.nrun {
		return fmt.Errorf("fair: counts %d waiting and %d running, lanes hold %d and %d", f.n, f.nrun, n, run)
	}
	for _, g := range f.groups {
		if (len(g.ready.items) > 0) != (g.idx >= 0) {
			return fmt.Errorf("fair: group %q has %d eligible lanes but in the heap %v", g.name, len(g.ready.items), g.idx >= 0)
		}
	}
	for id, c := range f.counters {
		if !c.rate && c.blocked != (c.running >= c.max) {
			return fmt.Errorf("fair: limit %+v runs %d of %d, blocked %v", id, c.running, c.max, c.blocked)
		}
	}
	return nil
}
