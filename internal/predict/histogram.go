package predict

import (
	"math"
	"time"
)

// Histogram buckets are powers of two of a millisecond: bucket b holds
// durations in [2^(b-histOffset), 2^(b-histOffset+1)) ms, so bucket 10 is
// 1-2 ms, 11 is 2-4 ms, and the ends catch everything below 1 µs or above
// about 12 days.
const (
	histBuckets = 41
	histOffset  = 10
)

// histogram is a log2 histogram of durations whose old observations decay
// geometrically, so its quantiles follow a key whose cost changes. Decay is
// lazy: each new observation weighs 1/decay times the previous one, and the
// weights are rescaled before they overflow, so Observe is O(1).
type histogram struct {
	w      [histBuckets]float32
	total  float64
	weight float64 // weight of the next observation
}

func bucketOf(d time.Duration) int {
	ms := float64(d) / float64(time.Millisecond)
	if ms <= 0 {
		return 0
	}
	_, exp := math.Frexp(ms) // ms = frac * 2^exp, frac in [0.5, 1)
	b := exp - 1 + histOffset
	return min(max(b, 0), histBuckets-1)
}

// bucketLowMS is the lower edge of bucket b in milliseconds.
func bucketLowMS(b int) float64 { return math.Ldexp(1, b-histOffset) }

func (h *histogram) observe(d time.Duration, decay float64) {
	if h.weight == 0 {
		h.weight = 1
	}
	h.w[bucketOf(d)] += float32(h.weight)
	h.total += h.weight
	h.weight /= decay
	if h.weight > 1e30 {
		s := 1 / h.weight
		for i := range h.w {
			h.w[i] *= float32(s)
		}
		h.total *= s
		h.weight = 1
	}
}

// quantileMS returns the q-quantile in milliseconds, interpolating
// geometrically inside the bucket it falls in. It returns 0 when empty.
func (h *histogram) quantileMS(q float64) float64 {
	if h.total <= 0 {
		return 0
	}
	target := q * h.total
	cum := 0.0
	for b, w := range h.w {
		if w <= 0 {
			continue
		}
		if cum+float64(w) >= target {
			frac := (target - cum) / float64(w)
			return bucketLowMS(b) * math.Exp2(frac)
		}
		cum += float64(w)
	}
	return bucketLowMS(histBuckets)
}
