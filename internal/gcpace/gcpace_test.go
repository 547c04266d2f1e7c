package gcpace

import (
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		cfg  Config
		live uint64
		want int
	}{
		{Config{}, 0, maxPercent},
		{Config{}, 1 << 10, maxPercent}, // 32 MiB over 1 KiB: clamped
		{Config{}, 8 * mib, 400},        // a quiet broker: 32 MiB of headroom
		{Config{}, 32 * mib, 100},       // 32 MiB of headroom is 100%
		{Config{}, 256 * mib, 13},       // where the two rules meet: 12.5%, rounded up
		{Config{}, 300 * mib, 13},       // an eighth
		{Config{}, 4 << 30, 13},         // an eighth of 4 GiB
		{Config{MinHeadroom: 64 * mib}, 64 * mib, 100},
		{Config{Fraction: 0.5}, 1 << 30, 50},
		{Config{Fraction: 0.01}, 1 << 40, minPercent},
	} {
		if got := tc.cfg.Percent(tc.live); got != tc.want {
			t.Errorf("%+v.Percent(%d) = %d, want %d", tc.cfg, tc.live, got, tc.want)
		}
	}
}

// TestPercentHeadroom checks the headroom a Percent gives against its
// definition, for random heaps and settings: never less than asked,
// and no more than rounding to a whole percent adds, unless clamped.
func TestPercentHeadroom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		c := Config{MinHeadroom: r.Uint64N(1 << 30), Fraction: r.Float64()}
		live := r.Uint64N(1<<36) + 1
		p := c.Percent(live)
		c = c.withDefaults()
		want := max(float64(c.MinHeadroom), c.Fraction*float64(live))
		got := float64(p) / 100 * float64(live)
		switch {
		case p < minPercent || p > maxPercent:
			t.Fatalf("%+v.Percent(%d) = %d, outside [%d, %d]", c, live, p, minPercent, maxPercent)
		case p == maxPercent && got < want, p == minPercent && got > want:
			// clamped
		case got < want*(1-1e-9):
			t.Fatalf("%+v.Percent(%d) = %d gives %.0f bytes of headroom, want at least %.0f", c, live, p, got, want)
		case got > want+float64(live)/100+1:
			t.Fatalf("%+v.Percent(%d) = %d gives %.0f bytes of headroom, want at most a percent over %.0f", c, live, p, got, want)
		}
	}
}

func TestOverridden(t *testing.T) {
	env := map[string]string{}
	get := func(k string) string { return env[k] }
	if Overridden(get) {
		t.Error("an empty environment overrides")
	}
	for _, k := range []string{"GOGC", "GOMEMLIMIT"} {
		env = map[string]string{k: "off"}
		if !Overridden(get) {
			t.Errorf("%s set does not override", k)
		}
	}
}

// TestPacerFollowsTheLiveHeap runs the pacer in this process: after a
// collection with a small live heap it sets the GOGC a quiet broker gets,
// after one with a live heap several times MinHeadroom it lowers it, and
// Stop puts back what was there.
func TestPacerFollowsTheLiveHeap(t *testing.T) {
	const mib = 1 << 20
	before := debug.SetGCPercent(100)
	debug.SetGCPercent(before)
	set := make(chan int, 64)
	cfg := Config{MinHeadroom: 4 * mib, Fraction: 0.25}
	p := start(cfg, func(pct int) { set <- pct })
	if start(cfg, nil) != nil {
		t.Fatal("a second pacer started beside the first")
	}
	defer func() {
		p.Stop()
		if got := debug.SetGCPercent(before); got != before {
			t.Errorf("after Stop GOGC is %d, want %d", got, before)
		}
		q := start(cfg, nil)
		if q == nil {
			t.Error("no pacer starts after the first stopped")
		}
		q.Stop()
	}()

	// waitFor collects until the pacer sets a percent that ok accepts.
	waitFor := func(what string, ok func(int) bool) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			runtime.GC()
			select {
			case pct := <-set:
				if ok(pct) {
					return
				}
			case <-deadline:
				t.Fatalf("the pacer never set a GOGC %s", what)
			case <-time.After(10 * time.Millisecond):
				// the cleanup has not run yet: collect again
			}
		}
	}
	// A test binary's live heap is a few MiB: 4 MiB is more than a
	// quarter of it.
	waitFor("above 25 for a small heap", func(p int) bool { return p > 25 })

	big := make([][]byte, 64)
	for i := range big {
		big[i] = make([]byte, mib) // 64 MiB live: a quarter is 16 MiB
	}
	waitFor("of about 25 for 64 MiB live", func(p int) bool { return p >= 25 && p <= 28 })
	p.mu.Lock()
	got := debug.SetGCPercent(p.last)
	p.mu.Unlock()
	if got < 25 || got > 28 {
		t.Errorf("GOGC is %d with 64 MiB live, want 25-28", got)
	}
	runtime.KeepAlive(big)
}
