package delivery

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/fair"
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
