package broker

import (
	"math"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"

	"github.com/harbinger-mq/harbinger/internal/predict"
)

// QuantileAccuracy is the relative error of every run-time quantile the
// broker reports (a queue's and a key's p50 and p99): each is within 1% of
// the run time of a job at that rank. They come from DDSketches (Masson,
// Rim and Lee, VLDB 2019), which keep counts in logarithmic buckets of
// that width; the predictor's own histogram, coarser, is for predicting.
const QuantileAccuracy = 0.01

// Quantiles are the median and 99th percentile of run times; zero, with
// Count 0, before any was observed.
type Quantiles struct {
	Count    uint64
	P50, P99 time.Duration
}

// runTimes keeps the run times of a queue's acked jobs since the broker
// started, over the queue and per predictor key.
type runTimes struct {
	all  *ddsketch.DDSketch
	keys map[predict.Key]*ddsketch.DDSketch
}

var runMapping = func() mapping.IndexMapping {
	m, err := mapping.NewLogarithmicMapping(QuantileAccuracy)
	if err != nil {
		panic(err) // a constant accuracy in range
	}
	return m
}()

func newSketch() *ddsketch.DDSketch {
	// Paginated stores take memory only for the buckets in use: a key whose
	// jobs take about the same time holds a few.
	return ddsketch.NewDDSketchFromStoreProvider(runMapping, store.BufferedPaginatedStoreConstructor)
}

// observe adds a run time of key k. maxKeys bounds the keys kept: past
// twice it, those live does not report (the predictor evicted them) go.
func (r *runTimes) observe(k predict.Key, d time.Duration, maxKeys int, live func() map[predict.Key]bool) {
	s := d.Seconds()
	if s <= 0 || math.IsNaN(s) {
		return
	}
	if r.all == nil {
		r.all = newSketch()
		r.keys = map[predict.Key]*ddsketch.DDSketch{}
	}
	_ = r.all.Add(s)
	ks := r.keys[k]
	if ks == nil {
		if len(r.keys) >= 2*max(maxKeys, 1) {
			keep := live()
			for old := range r.keys {
				if !keep[old] {
					delete(r.keys, old)
				}
			}
		}
		ks = newSketch()
		r.keys[k] = ks
	}
	_ = ks.Add(s)
}

// quantiles reads s's median and 99th percentile.
func quantiles(s *ddsketch.DDSketch) Quantiles {
	if s == nil || s.IsEmpty() {
		return Quantiles{}
	}
	v, err := s.GetValuesAtQuantiles([]float64{0.5, 0.99})
	if err != nil {
		return Quantiles{}
	}
	sec := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
	return Quantiles{Count: uint64(s.GetCount()), P50: sec(v[0]), P99: sec(v[1])}
}

// key reads a key's quantiles.
func (r *runTimes) key(k predict.Key) Quantiles { return quantiles(r.keys[k]) }
