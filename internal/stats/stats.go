// Package stats holds the small numerical tools Harbinger's reports share:
// quantiles, medians and the paired bootstrap the pre-registration asks for.
package stats

import (
	"math"
	"math/rand/v2"
	"slices"
)

// Quantile returns the q-quantile of xs by linear interpolation between
// order statistics (type 7, as R and NumPy default). xs need not be sorted
// and is not modified. It returns NaN for an empty slice.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return QuantileSorted(s, q)
}

// QuantileSorted is Quantile for an already sorted slice.
func QuantileSorted(s []float64, q float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	h := q * float64(len(s)-1)
	lo := int(math.Floor(h))
	if lo >= len(s)-1 {
		return s[len(s)-1]
	}
	if lo < 0 {
		return s[0]
	}
	return s[lo] + (h-float64(lo))*(s[lo+1]-s[lo])
}

// Median is Quantile(xs, 0.5).
func Median(xs []float64) float64 { return Quantile(xs, 0.5) }

// Mean is the arithmetic mean; NaN when empty.
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// BootstrapResamples and BootstrapSeed are the pre-registered settings.
const (
	BootstrapResamples = 10_000
	BootstrapSeed      = 20261129
)

// BootstrapMedianCI returns a percentile bootstrap interval at the given
// confidence for the median of xs: xs is resampled with replacement n times
// with a fixed seed, so the same input always gives the same interval.
func BootstrapMedianCI(xs []float64, n int, confidence float64, seed uint64) (lo, hi float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	rng := rand.New(rand.NewPCG(seed, 0x6861726269))
	meds := make([]float64, n)
	buf := make([]float64, len(xs))
	for i := range meds {
		for j := range buf {
			buf[j] = xs[rng.IntN(len(xs))]
		}
		slices.Sort(buf)
		meds[i] = QuantileSorted(buf, 0.5)
	}
	slices.Sort(meds)
	alpha := (1 - confidence) / 2
	return QuantileSorted(meds, alpha), QuantileSorted(meds, 1-alpha)
}
