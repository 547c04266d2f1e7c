package sched

import (
	"container/heap"
	"math"
	"slices"
	"time"

	"github.com/harbinger-mq/harbinger/internal/predict"
)

// The guard's two settings, Guard and GuardMin, trade the mean against the
// tail, and no fixed pair suits every queue: loose settings serve a queue
// whose tail is made by its longest jobs (which the long bound holds to
// FIFO's start), tight ones a queue whose tail is made by middling jobs
// that the slack would push past it. A tuner chooses the pair from the
// queue's own traffic. It keeps the queue's history up to its oldest
// unfinished message (when each message was pushed, what the predictor
// said of it, its key and how long it ran) and, now and then, replays it
// on the queue's workers through FIFO and through the queue's rule at each
// rung of Ladder. The rung to keep is the loosest whose replay kept the
// promise against the replayed FIFO: the all-message P99 within TuneP99 of
// FIFO's, and of the messages of the costliest keys at most TuneLongShare
// later than TuneLongRatio of their FIFO latency and none later than
// TuneLongCap; the tightest if none did. A tuner starts at the tightest
// rung, drops to a tighter one at once and climbs one rung a replay: the
// tail a loose rung costs early cannot be won back later.

// Rung is one setting of the guard a tuner may choose.
type Rung struct{ Guard, GuardMin float64 }

// Ladder is the tuner's rungs, tight to loose.
var Ladder = []Rung{{0.1, 0.05}, {0.25, 0.1}, {0.5, 0.1}, {0.5, 0.2}, {0.5, 0.35}, {0.5, 0.5}, {1, 0.5}, {1, 1}}

const (
	// TuneHistory is how many finished messages a tuner replays at most.
	TuneHistory = 1 << 16
	// TuneMin is how many it needs before it replays at all.
	TuneMin = 512
	// TuneEvery and TuneInterval space the replays: at least this many
	// messages joined the history and this much time passed since the
	// last.
	TuneEvery    = 256
	TuneInterval = time.Second

	// The promise a rung's replay must keep against FIFO's.
	TuneP99       = 1.10
	TuneLongShare = 0.05
	TuneLongRatio = 1.10
	TuneLongCap   = 1.5
	// TuneLongKeys is the share of the history's keys, costliest by mean
	// measured duration, whose messages the long-jobs promise covers.
	TuneLongKeys = 0.05
)

// tuneSample is one finished message as a tuner replays it.
type tuneSample struct {
	pushed int64
	took   int64
	cost   time.Duration
	tier   int8
	long   bool
	unsure bool
	tail   bool
	key    predict.Key
}

// tuner is a queue's record of its finished messages in the order they
// were pushed, and the rung it last chose. A message joins the record once
// every message pushed before it has finished, so the record never misses
// the messages still held back: it is the queue's history up to its oldest
// unfinished message.
type tuner struct {
	arrivals []uint64 // IDs in push order, from low on
	low      int
	done     map[uint64]tuneSample
	hist     []tuneSample
	replayed int   // len(hist) at the last replay
	last     int64 // when it last replayed, Unix nanoseconds
	rung     int
	workers  int
	replays  int
}

func newTuner() *tuner { return &tuner{done: map[uint64]tuneSample{}} }

// arrive records that the message numbered id was pushed.
func (t *tuner) arrive(id uint64) { t.arrivals = append(t.arrivals, id) }

// add records that the message numbered id finished, as s, and moves every
// message whose predecessors have all finished into the history.
func (t *tuner) add(id uint64, s tuneSample) {
	t.done[id] = s
	for t.low < len(t.arrivals) {
		d, ok := t.done[t.arrivals[t.low]]
		if !ok {
			break
		}
		delete(t.done, t.arrivals[t.low])
		t.hist = append(t.hist, d)
		t.low++
	}
	if t.low > 4096 && t.low*2 > len(t.arrivals) {
		t.arrivals = append(t.arrivals[:0], t.arrivals[t.low:]...)
		t.low = 0
	}
	if len(t.hist) > 2*TuneHistory {
		cut := len(t.hist) - TuneHistory
		t.hist = append(t.hist[:0], t.hist[cut:]...)
		t.replayed = max(0, t.replayed-cut)
	}
}

// due reports whether a replay is due at now.
func (t *tuner) due(now int64) bool {
	n := len(t.hist)
	return t.workers > 0 && n >= TuneMin && n-t.replayed >= TuneEvery && now-t.last >= int64(TuneInterval)
}

// retune replays the history and moves to the rung it kept: down at once,
// up by one rung at most.
func (t *tuner) retune(cfg Config, now int64) {
	t.rung = min(t.choose(cfg, now), t.rung+1)
}

// choose replays the history with cfg's rule at each rung, loosest first,
// and returns the first rung that kept the promise, or 0.
func (t *tuner) choose(cfg Config, now int64) int {
	t.last = now
	t.replays++
	ss := t.hist[max(0, len(t.hist)-TuneHistory):]
	t.replayed = len(t.hist)
	fifo := replayFIFO(ss, t.workers)
	long := longSamples(ss)
	for r := len(Ladder) - 1; r > 0; r-- {
		if keeps(fifo, replayRung(cfg, Ladder[r], ss, t.workers), long) {
			return r
		}
	}
	return 0
}

// keeps reports whether lat keeps the promise against fifo.
func keeps(fifo, lat []int64, long []int) bool {
	if float64(quantile(lat, 0.99)) > TuneP99*float64(quantile(fifo, 0.99)) {
		return false
	}
	over := 0
	for _, i := range long {
		f := float64(fifo[i])
		if float64(lat[i]) > TuneLongCap*f {
			return false
		}
		if float64(lat[i]) > TuneLongRatio*f {
			over++
		}
	}
	return float64(over) <= TuneLongShare*float64(len(long))
}

func quantile(v []int64, q float64) int64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// longSamples is the indexes of the samples of the costliest TuneLongKeys
// of the keys by mean measured duration, at least one key.
func longSamples(ss []tuneSample) []int {
	type agg struct {
		sum float64
		n   int
	}
	keys := map[predict.Key]*agg{}
	for _, s := range ss {
		a := keys[s.key]
		if a == nil {
			a = &agg{}
			keys[s.key] = a
		}
		a.sum += float64(s.took)
		a.n++
	}
	type km struct {
		k    predict.Key
		mean float64
	}
	var ks []km
	for k, a := range keys {
		ks = append(ks, km{k, a.sum / float64(a.n)})
	}
	slices.SortFunc(ks, func(a, b km) int {
		switch {
		case a.mean > b.mean:
			return -1
		case a.mean < b.mean:
			return 1
		}
		return 0
	})
	n := max(1, int(math.Ceil(TuneLongKeys*float64(len(ks)))))
	top := map[predict.Key]bool{}
	for _, k := range ks[:min(n, len(ks))] {
		top[k.k] = true
	}
	var out []int
	for i, s := range ss {
		if top[s.key] {
			out = append(out, i)
		}
	}
	return out
}

// replayFIFO is each sample's latency under FIFO on workers.
func replayFIFO(ss []tuneSample, workers int) []int64 {
	free := make(int64s, workers)
	lat := make([]int64, len(ss))
	for i, s := range ss {
		start := max(s.pushed, free[0])
		free[0] = start + s.took
		heap.Fix(&free, 0)
		lat[i] = start + s.took - s.pushed
	}
	return lat
}

// replayRung is each sample's latency under cfg's rule with the guard at r,
// on workers.
func replayRung(cfg Config, r Rung, ss []tuneSample, workers int) []int64 {
	cfg.Bound = withRung(cfg.Bound, r)
	s, err := New(cfg)
	if err != nil {
		panic("sched: tuner's config: " + err.Error())
	}
	items := make([]Item, len(ss))
	lat := make([]int64, len(ss))
	var busy doneHeap
	free, next := workers, 0
	for next < len(ss) || busy.Len() > 0 {
		var now int64
		if busy.Len() > 0 && (next >= len(ss) || busy[0].at <= ss[next].pushed) {
			now = busy[0].at
			for busy.Len() > 0 && busy[0].at == now {
				d := heap.Pop(&busy).(doneAt)
				lat[d.i] = now - ss[d.i].pushed
				free++
			}
		} else {
			now = ss[next].pushed
			for next < len(ss) && ss[next].pushed == now {
				sm, it := &ss[next], &items[next]
				it.ID, it.Cost, it.Long, it.Tier = uint64(next)+1, sm.cost, sm.long, sm.tier
				it.SetUnsure(sm.unsure)
				it.SetTailLong(sm.tail)
				if err := s.Push(it, time.Unix(0, now)); err != nil {
					panic("sched: tuner's replay: " + err.Error())
				}
				next++
			}
		}
		for free > 0 && s.Len() > 0 {
			it := s.Pop(time.Unix(0, now))
			if it == nil {
				break
			}
			i := int(it.ID) - 1
			heap.Push(&busy, doneAt{now + ss[i].took, i})
			free--
		}
	}
	return lat
}

// withRung is a copy of b with the guard at r.
func withRung(b *Bound, r Rung) *Bound {
	nb := *b
	nb.Guard, nb.GuardMin = new(r.Guard), r.GuardMin
	return &nb
}

type int64s []int64

func (h int64s) Len() int           { return len(h) }
func (h int64s) Less(i, j int) bool { return h[i] < h[j] }
func (h int64s) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *int64s) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *int64s) Pop() any          { o := *h; x := o[len(o)-1]; *h = o[:len(o)-1]; return x }

type doneAt struct {
	at int64
	i  int
}

type doneHeap []doneAt

func (h doneHeap) Len() int { return len(h) }
func (h doneHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].i < h[j].i
}
func (h doneHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *doneHeap) Push(x any)   { *h = append(*h, x.(doneAt)) }
func (h *doneHeap) Pop() any     { o := *h; x := o[len(o)-1]; *h = o[:len(o)-1]; return x }

// SetGuard sets the guard's two settings for the deadlines set from now
// on; deadlines already set stay. It does nothing without an adaptive
// guard (Bound.Tail).
func (s *Scheduler) SetGuard(r Rung) {
	if s.cfg.Bound == nil || s.cfg.Bound.Guard == nil || s.cfg.Bound.Tail <= 0 {
		return
	}
	s.cfg.Bound = withRung(s.cfg.Bound, r)
}
