// Package gcpace sizes the Go collector's headroom for a broker.
//
// The runtime's default (GOGC=100) lets the heap grow by as much as the
// live heap before it collects. For a broker that is the wrong shape at
// both ends: a quiet broker with a few megabytes live collects every few
// megabytes of garbage, which is CPU spent on every message, while a
// broker holding a million waiting jobs may grow to twice what they take
// before it collects, and the operating system sees that doubled figure
// as the broker's memory. Pacer sets the headroom in bytes instead: at
// least MinHeadroom, and beyond that a fixed fraction of the live heap,
// re-computed after every collection.
package gcpace

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// Config is how much the heap may grow past what is live before the
// collector runs.
type Config struct {
	// MinHeadroom is the least headroom in bytes, whatever the live heap;
	// default DefaultMinHeadroom.
	MinHeadroom uint64
	// Fraction of the live heap allowed as headroom once that is more
	// than MinHeadroom; default DefaultFraction.
	Fraction float64
}

const (
	// DefaultMinHeadroom keeps a quiet broker from collecting every few
	// megabytes of garbage.
	DefaultMinHeadroom = 32 << 20
	// DefaultFraction bounds a deep queue's resident memory to about
	// 1.125 times what its jobs take.
	DefaultFraction = 0.125
	// maxPercent is the highest GOGC Percent returns: past it a heap of a
	// few hundred kilobytes would ask for absurd multiples.
	maxPercent = 10_000
	// minPercent is the lowest: below it the collector would run almost
	// continuously on a heap that has just been filled.
	minPercent = 5
)

func (c Config) withDefaults() Config {
	if c.MinHeadroom == 0 {
		c.MinHeadroom = DefaultMinHeadroom
	}
	if c.Fraction <= 0 || math.IsNaN(c.Fraction) {
		c.Fraction = DefaultFraction
	}
	return c
}

// Percent is the GOGC value that gives a live heap of live bytes the
// headroom c allows: max(MinHeadroom, Fraction × live), as a percentage
// of live, rounded up and clamped to [5, 10000].
func (c Config) Percent(live uint64) int {
	c = c.withDefaults()
	if live == 0 {
		return maxPercent
	}
	head := max(float64(c.MinHeadroom), c.Fraction*float64(live))
	p := math.Ceil(100 * head / float64(live))
	return int(min(max(p, minPercent), maxPercent))
}

// Overridden reports whether the operator chose the collector's settings
// through the environment (GOGC or GOMEMLIMIT), which Start then leaves
// alone.
func Overridden(getenv func(string) string) bool {
	return getenv("GOGC") != "" || getenv("GOMEMLIMIT") != ""
}

// Pacer re-sets GOGC after every collection; see Start.
type Pacer struct {
	cfg     Config
	mu      sync.Mutex
	stopped bool
	last    int
	prev    int // GOGC before Start, restored by Stop
	sample  []metrics.Sample
	// onSet, if not nil, hears the percent after every collection (tests).
	onSet func(percent int)
}

// Start paces the process's collector with c until Stop, unless the
// environment sets GOGC or GOMEMLIMIT or a Pacer already runs, in which
// case it returns nil and changes nothing. It takes effect from the first
// collection after it.
func Start(c Config) *Pacer {
	if Overridden(os.Getenv) {
		return nil
	}
	return start(c, nil)
}

// running is whether a Pacer paces the process: the collector is the
// process's, so one at a time.
var running atomic.Bool

func start(c Config, onSet func(int)) *Pacer {
	if !running.CompareAndSwap(false, true) {
		return nil
	}
	p := &Pacer{cfg: c.withDefaults(), onSet: onSet,
		sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	p.prev = debug.SetGCPercent(100)
	debug.SetGCPercent(p.prev)
	p.last = p.prev
	p.arm()
	return p
}

// arm asks to hear about the next collection: a cleanup runs once the
// object it is attached to has been found unreachable, that is, after the
// next collection.
func (p *Pacer) arm() {
	runtime.AddCleanup(new(sentinel), func(p *Pacer) { p.afterGC() }, p)
}

// sentinel holds a pointer so that it is not placed by the tiny
// allocator beside other objects that could keep it alive.
type sentinel struct{ _ *int }

func (p *Pacer) afterGC() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	metrics.Read(p.sample)
	if p.sample[0].Value.Kind() == metrics.KindUint64 {
		if pct := p.cfg.Percent(p.sample[0].Value.Uint64()); pct != p.last {
			debug.SetGCPercent(pct)
			p.last = pct
		}
		if p.onSet != nil {
			p.onSet(p.last)
		}
	}
	p.arm()
}

// Stop ends the pacing and restores the GOGC the process had before
// Start. A nil Pacer's Stop does nothing.
func (p *Pacer) Stop() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stopped {
		p.stopped = true
		debug.SetGCPercent(p.prev)
		running.Store(false)
	}
}
