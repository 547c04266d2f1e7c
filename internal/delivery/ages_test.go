package delivery

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestAgesAgainstModel checks ages after every step of random sequences
// against a plain sorted slice of the waiting jobs' entry milliseconds:
// jobs entering mostly in time order (now moves forward, often within one
// millisecond), sometimes far back (a restore), leaving in any order.
func TestAgesAgainstModel(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 99))
		var a ages
		var live []int64 // nanos of the jobs counted
		now := int64(1_700_000_000_000_000_000) + rng.Int64N(1e9)
		if seed%5 == 0 {
			now = -5e9 // before 1970: msOf must floor
		}
		steps := 3000
		for step := range steps {
			switch r := rng.IntN(10); {
			case r < 5 || len(live) == 0:
				t0 := now
				if rng.IntN(20) == 0 {
					t0 -= rng.Int64N(10e9) // older than the others
				}
				now += rng.Int64N(3e5) // a few jobs per millisecond
				a.add(t0)
				live = append(live, t0)
			default:
				// Leave: shortest-first pops from anywhere, FIFO from the front.
				i := rng.IntN(len(live))
				if rng.IntN(3) == 0 {
					i = slices.Index(live, slices.Min(live))
				}
				if !a.remove(live[i]) {
					t.Fatalf("seed %d step %d: remove of a counted job refused", seed, step)
				}
				live = slices.Delete(live, i, i+1)
			}
			checkAges(t, seed, step, &a, live)
		}
		// A time never added is refused and changes nothing.
		if a.remove(now + 7e9) {
			t.Fatalf("seed %d: remove of a job never counted was taken", seed)
		}
		checkAges(t, seed, steps, &a, live)
		for len(live) > 0 {
			a.remove(live[0])
			live = live[1:]
		}
		checkAges(t, seed, steps+1, &a, live)
		if len(a.count) != 0 || len(a.keys) > 64 {
			t.Fatalf("seed %d: %d counts and %d heap keys left with no job", seed, len(a.count), len(a.keys))
		}
	}
}

func checkAges(t *testing.T, seed uint64, step int, a *ages, live []int64) {
	t.Helper()
	// Milliseconds by the time package's rounding (down, before 1970 too),
	// not by msOf, which is under test.
	ms := make([]int64, len(live))
	for i, n := range live {
		ms[i] = time.Unix(0, n).Truncate(time.Millisecond).UnixMilli()
	}
	slices.Sort(ms)
	if a.jobs != len(ms) {
		t.Fatalf("seed %d step %d: %d jobs counted, model %d", seed, step, a.jobs, len(ms))
	}
	got, ok := a.oldest()
	if ok != (len(ms) > 0) || ok && got != time.UnixMilli(ms[0]) {
		t.Fatalf("seed %d step %d: oldest %v %v, model %v", seed, step, got, ok, ms[:min(1, len(ms))])
	}
	qs := []float64{0, 0.01, 0.5, 0.99, 1}
	for i, g := range WaitQuantiles(a.appendCounts(nil), qs...) {
		var want time.Time
		if len(ms) > 0 {
			want = time.UnixMilli(ms[int(qs[i]*float64(len(ms)-1))])
		}
		if !g.Equal(want) {
			t.Fatalf("seed %d step %d: quantile %v is %v, model %v", seed, step, qs[i], g, want)
		}
	}
	// Space stays within a constant factor of the distinct milliseconds.
	distinct := len(slices.Compact(ms))
	if len(a.count) != distinct || len(a.keys) > 2*distinct+64 {
		t.Fatalf("seed %d step %d: %d counts and %d heap keys for %d distinct milliseconds", seed, step, len(a.count), len(a.keys), distinct)
	}
}

// While one job waits for hours, as a long job does under shortest-first,
// the many that enter and leave after it leave no trail behind.
func TestAgesBoundedBehindAnOldJob(t *testing.T) {
	var a ages
	t0 := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC).UnixNano()
	a.add(t0)
	var waiting []int64
	for i := range 100_000 {
		at := t0 + int64(i+1)*int64(time.Millisecond)
		a.add(at)
		waiting = append(waiting, at)
		if len(waiting) > 10 {
			a.remove(waiting[0])
			waiting = waiting[1:]
		}
	}
	if len(a.count) != 11 || len(a.keys) > 2*11+64 {
		t.Fatalf("%d counts and %d heap keys for 11 waiting jobs", len(a.count), len(a.keys))
	}
	if got, _ := a.oldest(); got.UnixNano() != t0 {
		t.Fatalf("oldest %v, want %v", got, time.Unix(0, t0))
	}
}
