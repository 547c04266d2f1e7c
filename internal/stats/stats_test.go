package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestQuantile(t *testing.T) {
	t.Parallel()
	xs := []float64{5, 1, 4, 2, 3}
	for _, tt := range []struct{ q, want float64 }{{0, 1}, {0.5, 3}, {1, 5}, {0.25, 2}, {0.1, 1.4}} {
		if got := Quantile(xs, tt.q); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if xs[0] != 5 {
		t.Fatal("Quantile sorted its input")
	}
	if !math.IsNaN(Median(nil)) || !math.IsNaN(Mean(nil)) {
		t.Fatal("empty input must give NaN")
	}
}

// With every value equal the interval collapses onto it; with a known
// distribution the interval of the median must cover the true median at about
// the stated rate.
func TestBootstrapKnownAnswer(t *testing.T) {
	t.Parallel()
	lo, hi := BootstrapMedianCI([]float64{2, 2, 2, 2, 2}, 1000, 0.95, 1)
	if lo != 2 || hi != 2 {
		t.Fatalf("constant sample: [%v, %v]", lo, hi)
	}
	// Five values: the bootstrap median can only be one of the five, and the
	// extremes need three or more draws of the smallest (or largest) value:
	// P = sum_{k>=3} C(5,k) (1/5)^k (4/5)^(5-k) = 0.05792.
	xs := []float64{1, 2, 3, 4, 5}
	lo, hi = BootstrapMedianCI(xs, BootstrapResamples, 0.95, BootstrapSeed)
	if lo != 1 || hi != 5 {
		t.Fatalf("1..5: got [%v, %v], want [1, 5] since P(median=1) = 5.8%% > 2.5%%", lo, hi)
	}
	lo, hi = BootstrapMedianCI(xs, BootstrapResamples, 0.80, BootstrapSeed)
	if lo != 2 || hi != 4 {
		t.Fatalf("1..5 at 80%%: got [%v, %v], want [2, 4] since P(median<=1) = 5.8%% < 10%%", lo, hi)
	}
	// Coverage: for N(0,1) samples of 41 the 95% interval covers 0 in most trials.
	rng := rand.New(rand.NewPCG(7, 7))
	covered := 0
	const trials = 200
	for i := 0; i < trials; i++ {
		s := make([]float64, 41)
		for j := range s {
			s[j] = rng.NormFloat64()
		}
		lo, hi := BootstrapMedianCI(s, 500, 0.95, uint64(i))
		if lo <= 0 && 0 <= hi {
			covered++
		}
	}
	if covered < trials*88/100 {
		t.Fatalf("95%% interval covered the true median in %d of %d trials", covered, trials)
	}
	a1, b1 := BootstrapMedianCI(xs, 100, 0.95, 3)
	a2, b2 := BootstrapMedianCI(xs, 100, 0.95, 3)
	if a1 != a2 || b1 != b2 {
		t.Fatal("same seed, different interval")
	}
}
