package web

import (
	"sync"
	"time"

	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/clock"
)

// sample is what the sampler keeps of one queue at one moment: counters, so
// rates come from the difference between two samples, and gauges.
type sample struct {
	gen              uint64 // broker.QueueInfo.Generation
	published, acked uint64
	durCount         uint64
	durSum           float64 // seconds
	ready, inFlight  int
	delayed          int
	oldest           time.Duration
}

type tick struct {
	at     time.Time
	queues map[string]sample
}

// series is a ring of the last samples of every queue: enough for the live
// charts of the last minutes; longer history belongs in Prometheus.
type series struct {
	b     *broker.Broker
	clk   clock.Clock
	every time.Duration

	mu    sync.Mutex
	ring  []tick // oldest first once full; next is where the next goes
	next  int
	full  bool
	timer clock.Timer
	stop  bool
}

func newSeries(b *broker.Broker, clk clock.Clock, every, history time.Duration) *series {
	n := max(2, int(history/every))
	return &series{b: b, clk: clk, every: every, ring: make([]tick, n)}
}

// start takes a sample now and then every s.every until close.
func (s *series) start() {
	s.sample()
	s.arm()
}

func (s *series) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop {
		return
	}
	s.timer = s.clk.AfterFunc(s.every, func() {
		s.sample()
		s.arm()
	})
}

func (s *series) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop = true
	if s.timer != nil {
		s.timer.Stop()
	}
}

func (s *series) sample() {
	qs := s.b.Queues()
	t := tick{at: s.clk.Now(), queues: make(map[string]sample, len(qs))}
	for _, in := range qs {
		w, _ := s.b.Waits(in.Name)
		t.queues[in.Name] = sample{
			gen: in.Generation, published: in.Published, acked: in.Acked,
			durCount: in.Durations.Count, durSum: in.Durations.ActualSum,
			ready: in.Ready, inFlight: in.InFlight, delayed: in.Delayed, oldest: w.Oldest,
		}
	}
	s.mu.Lock()
	s.ring[s.next] = t
	s.next = (s.next + 1) % len(s.ring)
	if s.next == 0 {
		s.full = true
	}
	s.mu.Unlock()
}

// ticks returns the samples, oldest first.
func (s *series) ticks() []tick {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.full {
		return append([]tick(nil), s.ring[:s.next]...)
	}
	return append(append([]tick(nil), s.ring[s.next:]...), s.ring[:s.next]...)
}

// rates are a queue's publish and ack rates over the last interval, nil
// before two samples exist.
type rates struct{ publish, ack *float64 }

func (s *series) rates(queue string) rates {
	ts := s.ticks()
	if len(ts) < 2 {
		return rates{}
	}
	a, b := ts[len(ts)-2], ts[len(ts)-1]
	p, ok1 := a.queues[queue]
	q, ok2 := b.queues[queue]
	dt := b.at.Sub(a.at).Seconds()
	if !ok1 || !ok2 || p.gen != q.gen || dt <= 0 {
		return rates{}
	}
	pub := delta(p.published, q.published) / dt
	ack := delta(p.acked, q.acked) / dt
	return rates{publish: &pub, ack: &ack}
}

// Point is one interval of a queue's live chart.
type Point struct {
	At          time.Time `json:"t"`
	PublishPerS float64   `json:"publish_per_s"`
	AckPerS     float64   `json:"ack_per_s"`
	// MeanRunMS is the mean run time of the jobs acked in the interval;
	// null when none was.
	MeanRunMS    *float64 `json:"mean_run_ms"`
	OldestWaitMS float64  `json:"oldest_wait_ms"`
	Ready        int      `json:"ready"`
	InFlight     int      `json:"in_flight"`
	Delayed      int      `json:"delayed"`
}

// SeriesView is a queue's live chart: one point per sampling interval over
// the last minutes.
type SeriesView struct {
	Queue  string  `json:"queue"`
	EveryS float64 `json:"every_s"`
	Points []Point `json:"points"`
}

func (s *series) view(queue string) SeriesView {
	ts := s.ticks()
	v := SeriesView{Queue: queue, EveryS: s.every.Seconds(), Points: []Point{}}
	for i := 1; i < len(ts); i++ {
		a, b := ts[i-1], ts[i]
		p, ok1 := a.queues[queue]
		q, ok2 := b.queues[queue]
		dt := b.at.Sub(a.at).Seconds()
		if !ok2 || dt <= 0 {
			continue
		}
		if !ok1 || p.gen != q.gen { // the queue appeared in this interval
			if ok1 {
				// Deleted and made again: the points before are the
				// old queue's, not this one's.
				v.Points = v.Points[:0]
			}
			p = sample{}
		}
		pt := Point{
			At: b.at, PublishPerS: delta(p.published, q.published) / dt, AckPerS: delta(p.acked, q.acked) / dt,
			OldestWaitMS: ms(q.oldest), Ready: q.ready, InFlight: q.inFlight, Delayed: q.delayed,
		}
		if n := delta(p.durCount, q.durCount); n > 0 {
			pt.MeanRunMS = optional(1000 * (q.durSum - p.durSum) / n)
		}
		v.Points = append(v.Points, pt)
	}
	return v
}

// total is the live chart of every queue in allowed together: rates and
// depths summed, the oldest wait the largest, the mean run time over all
// the jobs acked in each interval.
func (s *series) total(allowed func(string) bool) SeriesView {
	ts := s.ticks()
	v := SeriesView{Queue: "", EveryS: s.every.Seconds(), Points: []Point{}}
	for i := 1; i < len(ts); i++ {
		a, b := ts[i-1], ts[i]
		dt := b.at.Sub(a.at).Seconds()
		if dt <= 0 {
			continue
		}
		pt := Point{At: b.at}
		var runs, runSum float64
		for name, q := range b.queues {
			if !allowed(name) {
				continue
			}
			p, ok := a.queues[name]
			if !ok || p.gen != q.gen {
				p = sample{}
			}
			pt.PublishPerS += delta(p.published, q.published) / dt
			pt.AckPerS += delta(p.acked, q.acked) / dt
			pt.Ready += q.ready
			pt.InFlight += q.inFlight
			pt.Delayed += q.delayed
			pt.OldestWaitMS = max(pt.OldestWaitMS, ms(q.oldest))
			if n := delta(p.durCount, q.durCount); n > 0 {
				runs += n
				runSum += q.durSum - p.durSum
			}
		}
		if runs > 0 {
			pt.MeanRunMS = optional(1000 * runSum / runs)
		}
		v.Points = append(v.Points, pt)
	}
	return v
}

// delta is how much a counter grew from a to b, zero if it fell.
func delta(a, b uint64) float64 {
	if b < a {
		return 0
	}
	return float64(b - a)
}
