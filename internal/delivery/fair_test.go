package delivery

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/fair"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// publishTenant publishes one job of the tenant (its header) with a
// kilobyte payload.
func publishTenant(t *testing.T, l *Line, id, tenant string, now time.Time) *Job {
	t.Helper()
	j := newJob(id, []byte(strings.Repeat("ж", 512)))
	j.SetOptions(map[string]string{fair.TenantHeader: tenant}, 0, 0, 0)
	if _, err := l.Admit(j, Names{"producer", "report"}, time.Time{}, now); err != nil {
		t.Fatal(err)
	}
	l.Commit(j, now)
	return j
}

// A key at its limit is skipped; every way a delivery ends (ack, nack,
// lease expiry, return, a consumer gone) frees its place and asks for a
// consumer to be woken; a lowered limit applies at the next start and
// strands nothing.
func TestLineLimitsLifecycle(t *testing.T) {
	t.Parallel()
	cfg := modelConfig()
	cfg.MaxDepth = 10000
	cfg.Fair = fair.Config{Limits: []fair.Limit{{Field: fair.Tenant, Max: 2}}}
	l := newLine(t, cfg)
	now := time.Unix(1_800_000_000, 0)
	h := l.Attach()
	tenants := []string{"акме", "\xff\xferaw", "globex"}
	for i := range 30 {
		publishTenant(t, l, fmt.Sprintf("j%02d", i), tenants[i%3], now)
	}
	l.Fx.Clear()
	running := map[string]int{}
	var held []*Job
	for {
		j := l.Deliver(h, now)
		if j == nil {
			break
		}
		running[keysOf(j).Tenant]++
		held = append(held, j)
	}
	for _, tn := range tenants {
		if running[tn] != 2 {
			t.Fatalf("tenant %q runs %d, want its limit 2 (%v)", tn, running[tn], running)
		}
	}
	if l.Len() != 24 {
		t.Fatalf("%d waiting, want 24", l.Len())
	}
	end := []func(j *Job){
		func(j *Job) { mustOK(t, l.Nack(h, j.ID(), Requeue, 0, "", false, now)) },
		func(j *Job) { l.Return(h, j.ID(), now) },
		func(j *Job) { _, err := l.Ack(h, j.ID(), time.Millisecond, now); mustOK(t, err) },
	}
	for i, j := range held[:3] {
		l.Fx.Clear()
		end[i](j)
		if l.Fx.Ready < 1 {
			t.Fatalf("ending %s (way %d) asked no consumer to wake", j.ID(), i)
		}
		n := l.Deliver(h, now)
		if n == nil || keysOf(n).Tenant != keysOf(j).Tenant {
			t.Fatalf("after %s of tenant %q ended, delivered %v", j.ID(), keysOf(j).Tenant, n)
		}
		held[i] = n
	}
	// Lower the limit to 1 while two of each run: nothing starts until a
	// tenant is below it.
	cfg.Fair.Limits[0].Max = 1
	l.Reconfigure(cfg, newQueue(t, "fifo"), now)
	if j := l.Deliver(h, now); j != nil {
		t.Fatalf("delivered %s over the lowered limit", j.ID())
	}
	// The leases end: every job runs again in turn, never two of a tenant.
	for l.Len() > 0 || l.InFlight() > 0 {
		now = now.Add(cfg.Lease)
		l.Tick(now)
		seen := map[string]bool{}
		var run []*Job
		for {
			j := l.Deliver(h, now)
			if j == nil {
				break
			}
			tn := keysOf(j).Tenant
			if seen[tn] {
				t.Fatalf("two of tenant %q running under a limit of 1", tn)
			}
			seen[tn] = true
			run = append(run, j)
		}
		for _, j := range run {
			_, err := l.Ack(h, j.ID(), time.Millisecond, now)
			mustOK(t, err)
		}
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A rate limit's refill is a deadline of the Line's: Tick at it wakes a
// consumer, and the starts keep to the rate.
func TestLineRateDeadline(t *testing.T) {
	t.Parallel()
	cfg := modelConfig()
	cfg.MaxDepth = 10000
	cfg.Fair = fair.Config{Rates: []fair.Rate{{Field: fair.Producer, PerSecond: 5, Burst: 2}}}
	l := newLine(t, cfg)
	now := time.Unix(1_800_000_000, 0)
	h := l.Attach()
	r := rand.New(rand.NewPCG(4, 5))
	for i := range 400 {
		publishTenant(t, l, fmt.Sprintf("r%03d-%d", i, r.IntN(1000)), "t", now)
	}
	start := now
	starts := 0
	for l.Len() > 0 {
		for {
			j := l.Deliver(h, now)
			if j == nil {
				break
			}
			starts++
			_, err := l.Ack(h, j.ID(), time.Millisecond, now)
			mustOK(t, err)
		}
		at, ok := l.NextDeadline()
		if !ok || !at.After(now) {
			t.Fatalf("jobs wait under a rate with no deadline ahead (%v, %v)", at, ok)
		}
		now = at
		l.Fx.Clear()
		l.Tick(now)
		if l.Fx.Ready == 0 && l.Len() > 0 {
			t.Fatalf("a refill woke nobody at %v (%d starts, %d waiting)", now.Sub(start), starts, l.Len())
		}
	}
	rate := float64(starts-2) / now.Sub(start).Seconds()
	if rate < 4.75 || rate > 5.25 {
		t.Fatalf("%d starts in %v: %.2f a second, declared 5", starts, now.Sub(start), rate)
	}
}

// A Line restarted from its log, at random moments and sometimes from a
// checkpoint (the jobs' state, then RatesRecord), keeps every tenant to
// its token bucket: the log's start times take the tokens again, so no
// restart hands out a fresh burst. Without them (a log of deliveries
// without start times, as before) the same run breaks the rate.
func TestLineRatesSurviveRestart(t *testing.T) {
	t.Parallel()
	const rate, burst = 5.0, 3
	cfg := modelConfig()
	cfg.MaxDepth = 10000
	cfg.Fair = fair.Config{Rates: []fair.Rate{{Field: fair.Tenant, PerSecond: rate, Burst: burst}}}
	tenants := []string{"акме", "\U0001F600"}
	run := func(withTimes bool) (map[string][]time.Time, int) {
		rng := rand.New(rand.NewPCG(3, 4))
		l := newLine(t, cfg)
		log := store.NewMemory()
		now := t0
		write := func(recs []*store.Record) {
			for _, r := range recs {
				if !withTimes && r.Kind == store.KindDeliver {
					r.At = time.Time{}
				}
			}
			if len(recs) > 0 {
				if _, err := log.Append(recs...); err != nil {
					t.Fatal(err)
				}
			}
			l.Fx.Clear()
		}
		for i := range 1000 {
			publishTenant(t, l, fmt.Sprintf("j%04d", i), tenants[i%2], now)
		}
		write(l.Fx.Records)
		h := l.Attach()
		starts := map[string][]time.Time{}
		restarts := 0
		for end := t0.Add(time.Minute); now.Before(end); now = now.Add(time.Duration(1+rng.IntN(40)) * time.Millisecond) {
			l.Tick(now)
			for {
				j := l.Deliver(h, now)
				if j == nil {
					break
				}
				starts[keysOf(j).Tenant] = append(starts[keysOf(j).Tenant], now)
				if _, err := l.Ack(h, j.ID(), time.Millisecond, now); err != nil {
					t.Fatal(err)
				}
			}
			write(l.Fx.Records)
			if rng.IntN(40) == 0 { // a checkpoint: the log is the state now
				log = store.NewMemory()
				var recs []*store.Record
				l.StateRecords(func(r *store.Record) { recs = append(recs, r) })
				write(append(recs, l.RatesRecord(now)))
			}
			if rng.IntN(30) == 0 { // a crash, and a restart from the log
				restarts++
				p := NewReplay()
				if err := log.Replay(func(r *store.Record) error { p.Apply(r); return nil }); err != nil {
					t.Fatal(err)
				}
				l = New("q", l.Config(), newQueue(t, "fifo"))
				l.RestoreRates(p)
				for _, rj := range p.Jobs() {
					l.Restore(rj.Job, rj.Reset, now)
				}
				h = l.Attach()
			}
		}
		return starts, restarts
	}
	// over is the most starts of one tenant in a window of w beyond what
	// its bucket allows (burst + rate x w).
	over := func(starts map[string][]time.Time, w time.Duration) float64 {
		worst := math.Inf(-1)
		for _, ss := range starts {
			for i, s := range ss {
				n := 0
				for _, u := range ss[i:] {
					if u.Sub(s) <= w {
						n++
					}
				}
				worst = max(worst, float64(n)-burst-rate*w.Seconds())
			}
		}
		return worst
	}
	starts, restarts := run(true)
	for _, w := range []time.Duration{0, time.Second, 10 * time.Second, time.Minute} {
		if o := over(starts, w); o > 1e-9 {
			t.Fatalf("a tenant started %.0f more jobs in %v than its bucket allows, over %d restarts", o, w, restarts)
		}
	}
	for tn, ss := range starts {
		if lo := 0.95 * rate * 60; float64(len(ss)) < lo {
			t.Fatalf("tenant %q started %d jobs in a minute, want at least %.0f", tn, len(ss), lo)
		}
	}
	if before, _ := run(false); over(before, 10*time.Second) <= 0 {
		t.Fatal("restarts with full buckets kept to the rate: the check has no teeth")
	}
	t.Logf("%d and %d starts over %d restarts, each tenant within its bucket", len(starts[tenants[0]]), len(starts[tenants[1]]), restarts)
}
