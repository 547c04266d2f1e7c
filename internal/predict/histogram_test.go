package predict

import (
	"math"
	"testing"
	"time"
)

func TestBucketOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    time.Duration
		want int
	}{
		{0, 0},
		{-time.Second, 0},
		{time.Nanosecond, 0},             // below 1 µs
		{time.Microsecond, 0},            // 2^-10 ms is 0.977 µs
		{999 * time.Microsecond, 9},      // [0.5, 1) ms
		{time.Millisecond, 10},           // [1, 2) ms
		{2*time.Millisecond - 1, 10},     //
		{2 * time.Millisecond, 11},       // [2, 4) ms
		{time.Second, 19},                // [512, 1024) ms
		{24 * time.Hour, 36},             // 86.4e6 ms is in [2^26, 2^27)
		{math.MaxInt64, histBuckets - 1}, // caught by the top bucket
		{time.Duration(1 << 62), histBuckets - 1},
	}
	for _, tt := range tests {
		if got := bucketOf(tt.d); got != tt.want {
			t.Errorf("bucketOf(%v) = %d, want %d", tt.d, got, tt.want)
		}
		if tt.d > 0 && tt.want > 0 && tt.want < histBuckets-1 {
			ms := float64(tt.d) / float64(time.Millisecond)
			if lo, hi := bucketLowMS(tt.want), bucketLowMS(tt.want+1); ms < lo || ms >= hi {
				t.Errorf("%v ms outside bucket %d [%v, %v)", ms, tt.want, lo, hi)
			}
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	t.Parallel()
	var h histogram
	if got := h.quantileMS(0.5); got != 0 {
		t.Errorf("empty quantile = %v, want 0", got)
	}
	// 50 observations in [1, 2) ms and 50 in [4, 8) ms, no decay.
	for range 50 {
		h.observe(1500*time.Microsecond, 1)
		h.observe(5*time.Millisecond, 1)
	}
	tests := []struct{ q, want float64 }{
		{0, 1},                      // the low edge of the first bucket
		{0.25, math.Sqrt2},          // half way through [1, 2), geometrically
		{0.5, 2},                    // the top of [1, 2)
		{0.75, 4 * math.Sqrt2},      // half way through [4, 8)
		{0.99, 4 * math.Exp2(0.98)}, // 49 of the bucket's 50
		{1, 8},
	}
	for _, tt := range tests {
		if got := h.quantileMS(tt.q); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("quantile %v = %v ms, want %v", tt.q, got, tt.want)
		}
	}
}

// Decay weighs recent observations more, and the rescaling that keeps the
// weights finite does not move the quantiles.
func TestHistogramDecay(t *testing.T) {
	t.Parallel()
	var h histogram
	// With decay 0.5 each observation weighs as much as all before it.
	h.observe(time.Millisecond, 0.5)
	h.observe(time.Millisecond, 0.5)
	h.observe(100*time.Millisecond, 0.5) // weight 4 of a total 7
	if got := h.quantileMS(0.5); got < 64 || got >= 128 {
		t.Errorf("median %v ms, want the last observation's bucket [64, 128)", got)
	}
	// Thousands of observations at decay 0.5 rescale many times over.
	var g histogram
	for i := range 5000 {
		d := time.Millisecond
		if i%2 == 1 {
			d = 100 * time.Millisecond
		}
		g.observe(d, 0.5)
	}
	if math.IsInf(g.total, 0) || math.IsNaN(g.total) || g.weight > 1e30 {
		t.Fatalf("total %v, weight %v", g.total, g.weight)
	}
	// The last (100 ms) observation weighs 2/3 of the total.
	if got := g.quantileMS(0.5); got < 64 || got >= 128 {
		t.Errorf("median %v ms after rescaling, want [64, 128)", got)
	}
	if got := g.quantileMS(0.2); got < 1 || got >= 2 {
		t.Errorf("quantile 0.2 = %v ms after rescaling, want [1, 2)", got)
	}
}
