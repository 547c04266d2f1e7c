package fair

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/sched"
)

type testBundle struct {
	f   *Fair
	now time.Time
	id  uint64
}

func setup(t testing.TB, cfg Config, sc sched.Config) *testBundle {
	t.Helper()
	f, err := New(cfg, sc, itemKeys)
	if err != nil {
		t.Fatal(err)
	}
	return &testBundle{f: f, now: epoch}
}

func (b *testBundle) push(t testing.TB, k Keys, cost time.Duration) *keysItem {
	t.Helper()
	b.id++
	ki := &keysItem{keys: k}
	ki.it.ID, ki.it.Cost = b.id, cost
	if err := b.f.Push(&ki.it, b.now); err != nil {
		t.Fatal(err)
	}
	return ki
}

func TestConfigRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string
	}{
		{"unknown group field", Config{GroupBy: "colour"}, "group_by"},
		{"weights without groups", Config{Weights: map[string]int{"a": 2}}, "weights"},
		{"zero weight", Config{GroupBy: Tenant, Weights: map[string]int{"a": 0}}, `weights["a"]`},
		{"absurd weight", Config{GroupBy: Tenant, Weights: map[string]int{"a": 1e9}}, `weights["a"]`},
		{"zero limit", Config{Limits: []Limit{{Field: Producer, Max: 0}}}, "limits[0].max"},
		{"negative limit", Config{Limits: []Limit{{Field: Producer, Max: -3}}}, "limits[0].max"},
		{"absurd limit", Config{Limits: []Limit{{Field: Producer, Max: 1 << 40}}}, "limits[0].max"},
		{"unknown limit field", Config{Limits: []Limit{{Field: "queue", Max: 1}}}, "limits[0].field"},
		{"invalid UTF-8 value", Config{Limits: []Limit{{Field: Tenant, Value: "\xff", Max: 1}}}, "limits[0].value"},
		{"overlong value", Config{Limits: []Limit{{Field: Tenant, Value: strings.Repeat("ß", 200), Max: 1}}}, "limits[0].value"},
		{"conflicting limits", Config{Limits: []Limit{{Field: JobType, Value: "export", Max: 2}, {Field: JobType, Value: "export", Max: 3}}}, "limits[1]"},
		{"zero rate", Config{Rates: []Rate{{Field: Producer, PerSecond: 0, Burst: 1}}}, "rates[0].per_second"},
		{"negative rate", Config{Rates: []Rate{{Field: Producer, PerSecond: -1, Burst: 1}}}, "rates[0].per_second"},
		{"absurd rate", Config{Rates: []Rate{{Field: Producer, PerSecond: 1e12, Burst: 1}}}, "rates[0].per_second"},
		{"zero burst", Config{Rates: []Rate{{Field: Producer, PerSecond: 5, Burst: 0}}}, "rates[0].burst"},
		{"conflicting rates", Config{Rates: []Rate{{Field: Tenant, PerSecond: 5, Burst: 1}, {Field: Tenant, PerSecond: 6, Burst: 1}}}, "rates[1]"},
		{"negative reserve", Config{GroupBy: Tenant, Reserve: -1}, "reserve"},
		{"reserve and no reserve", Config{GroupBy: Tenant, Reserve: 2, NoReserve: true}, "reserve"},
		{"reserve without groups", Config{Reserve: 2, Limits: []Limit{{Field: Tenant, Max: 1}}}, "reserve"},
		{"negative window", Config{GroupBy: Tenant, ReserveWindow: -time.Second}, "reserve_window"},
		{"absurd window", Config{GroupBy: Tenant, ReserveWindow: MaxReserveWindow + 1}, "reserve_window"},
		{"window without groups", Config{ReserveWindow: time.Second, Limits: []Limit{{Field: Tenant, Max: 1}}}, "reserve_window"},
		{"no reserve without groups", Config{NoReserve: true, Limits: []Limit{{Field: Tenant, Max: 1}}}, "no_reserve"},
		{"negative reserve above", Config{GroupBy: Tenant, ReserveAbove: -1}, "reserve_above"},
		{"NaN reserve above", Config{GroupBy: Tenant, ReserveAbove: math.NaN()}, "reserve_above"},
		{"absurd reserve above", Config{GroupBy: Tenant, ReserveAbove: MaxReserveAbove * 2}, "reserve_above"},
		{"reserve above without groups", Config{ReserveAbove: 2, Limits: []Limit{{Field: Tenant, Max: 1}}}, "reserve_above"},
		{"negative credit", Config{GroupBy: Tenant, Credit: -time.Millisecond}, "credit"},
		{"absurd credit", Config{GroupBy: Tenant, Credit: MaxCredit + 1}, "credit"},
		{"credit and no credit", Config{GroupBy: Tenant, Credit: time.Second, NoCredit: true}, "credit"},
		{"credit without groups", Config{Credit: time.Second, Limits: []Limit{{Field: Tenant, Max: 1}}}, "credit"},
		{"no credit without groups", Config{NoCredit: true, Limits: []Limit{{Field: Tenant, Max: 1}}}, "no_credit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.Validate()
			var ce *ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, ErrConfig) {
				t.Fatalf("Validate = %v, want a *ConfigError", err)
			}
			if ce.Field != tc.field {
				t.Fatalf("error names %q, want %q (%v)", ce.Field, tc.field, err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("message %q does not name %q", err, tc.field)
			}
			if _, err := New(tc.cfg, fifo, itemKeys); err == nil {
				t.Fatal("New took a refused declaration")
			}
		})
	}
}

// A job whose key is at its limit is skipped, not blocked: the next
// eligible job starts, and the skipped one starts as soon as its key falls
// below the limit.
func TestLimitSkipsAndResumes(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Limits: []Limit{{Field: JobType, Value: "export", Max: 2}}}, fifo)
	payload := strings.Repeat("x", 4096) // the keys, not the payload, decide
	var exports []*keysItem
	for range 3 {
		exports = append(exports, b.push(t, Keys{Producer: "billing", JobType: "export", Tenant: payload[:8]}, time.Second))
	}
	other := b.push(t, Keys{Producer: "billing", JobType: "email"}, time.Millisecond)
	got := []uint64{b.f.Pop(b.now).ID, b.f.Pop(b.now).ID, b.f.Pop(b.now).ID}
	if want := []uint64{1, 2, 4}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("started %v, want %v: the third export skipped for the email", got, want)
	}
	if it := b.f.Pop(b.now); it != nil {
		t.Fatalf("started %d while export is at its limit", it.ID)
	}
	if n := b.f.Done(&other.it, b.now); n != 0 {
		t.Fatalf("the email's end freed %d starts, want 0", n)
	}
	if n := b.f.Done(&exports[0].it, b.now); n != 1 {
		t.Fatalf("an export's end freed %d starts, want 1", n)
	}
	if it := b.f.Pop(b.now); it == nil || it.ID != 3 {
		t.Fatalf("after an export ended Pop = %v, want the third export", it)
	}
}

// Lowering a limit on a live queue takes effect for the next start and
// strands nothing: the waiting jobs start as the running ones end.
func TestLimitChangeLive(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Limits: []Limit{{Field: Tenant, Max: 3}}}, fifo)
	var items []*keysItem
	for range 6 {
		items = append(items, b.push(t, Keys{Tenant: "акме"}, time.Millisecond))
	}
	var running []*keysItem
	for range 3 {
		it := b.f.Pop(b.now)
		running = append(running, items[it.ID-1])
	}
	// Redeclare with a limit of 1: rebuild and carry the jobs over, as the
	// delivery line does.
	nf, err := New(Config{Limits: []Limit{{Field: Tenant, Max: 1}}}, fifo, itemKeys)
	if err != nil {
		t.Fatal(err)
	}
	var waiting []*sched.Item
	b.f.Each(func(it *sched.Item) { waiting = append(waiting, it) })
	for _, it := range waiting {
		b.f.Remove(it)
	}
	for _, ki := range running {
		nf.Run(&ki.it, ki.keys, b.now)
	}
	for _, ki := range items[3:] {
		if err := nf.Push(&ki.it, b.now); err != nil {
			t.Fatal(err)
		}
	}
	for i, ki := range running {
		if it := nf.Pop(b.now); it != nil {
			t.Fatalf("started %d with %d running over the new limit", it.ID, 3-i)
		}
		nf.Done(&ki.it, b.now)
	}
	for want := uint64(4); want <= 6; want++ {
		it := nf.Pop(b.now)
		if it == nil || it.ID != want {
			t.Fatalf("Pop = %v, want %d", it, want)
		}
		if nf.Pop(b.now) != nil {
			t.Fatal("two running under a limit of 1")
		}
		nf.Done(it, b.now)
	}
}

// A rate limit's starts over any window stay within the burst plus the
// rate times the window, and the Fair says when to ask again.
func TestRateWindow(t *testing.T) {
	t.Parallel()
	const rate, burst = 10.0, 5
	b := setup(t, Config{Rates: []Rate{{Field: Producer, Value: "crawler", PerSecond: rate, Burst: burst}}}, fifo)
	for range 2000 {
		b.push(t, Keys{Producer: "crawler"}, time.Millisecond)
	}
	var starts []time.Time
	end := epoch.Add(2 * time.Minute)
	for b.now.Before(end) {
		for {
			it := b.f.Pop(b.now)
			if it == nil {
				break
			}
			starts = append(starts, b.now)
			b.f.Done(it, b.now)
		}
		at, ok := b.f.NextWake()
		if !ok {
			t.Fatal("blocked on a rate with no wake time")
		}
		if !at.After(b.now) {
			t.Fatalf("wake time %v not after now %v", at, b.now)
		}
		b.now = at
		b.f.Wake(b.now)
	}
	window := time.Minute
	for i, s := range starts {
		n := 0
		for _, u := range starts[i:] {
			if u.Sub(s) < window {
				n++
			}
		}
		if most := burst + rate*window.Seconds(); float64(n) > most {
			t.Fatalf("%d starts in the minute from %v, at most %v", n, s.Sub(epoch), most)
		}
	}
	// Over the whole run the rate is the declared one within 5%.
	got := float64(len(starts)-burst) / end.Sub(epoch).Seconds()
	if got < rate*0.95 || got > rate*1.05 {
		t.Fatalf("%.2f starts a second, declared %v", got, rate)
	}
}

// Two groups with work waiting share the workers by predicted work: a
// group of 1 s jobs and a group of 10 ms jobs each get about half of the
// predicted work started, weighted 3:1 when declared so.
func TestSharesByPredictedWork(t *testing.T) {
	t.Parallel()
	for _, w := range []int{1, 3} {
		b := setup(t, Config{GroupBy: Tenant, Weights: map[string]int{"big": w}, NoReserve: true}, fifo)
		for range 2000 {
			b.push(t, Keys{Tenant: "big"}, time.Second)
		}
		for range 200000 {
			b.push(t, Keys{Tenant: "small"}, 10*time.Millisecond)
		}
		work := map[string]time.Duration{}
		for range 20000 {
			it := b.f.Pop(b.now)
			work[itemKeys(it).Tenant] += it.Cost
			b.f.Done(it, b.now)
		}
		ratio := float64(work["big"]) / float64(work["small"])
		if ratio < float64(w)*0.98 || ratio > float64(w)*1.02 {
			t.Fatalf("weight %d: predicted work big:small = %.3f", w, ratio)
		}
	}
}

// Groups are served by finish tag, worked by hand: a group of 1/16 s jobs
// and one of 1 s jobs join together at virtual time 0 with a 0.5 s credit,
// so both start tags are -0.5. The short group's finish tag is
// -0.5 + k/16 after k of its starts against the long group's 0.5: it
// starts 15 jobs, then the long job goes (ties go by name, "long" first),
// then 16 short ones (their finish reaching 1.5), then the long one again.
// Start tags alone would have started the long job first. Over the round,
// each group starts about a second of predicted work.
func TestServedByFinishTag(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{GroupBy: Tenant, NoReserve: true, Credit: 500 * time.Millisecond}, fifo)
	for range 3 {
		b.push(t, Keys{Tenant: "long"}, time.Second)
	}
	for range 40 {
		b.push(t, Keys{Tenant: "short"}, time.Second/16)
	}
	var got strings.Builder
	for range 33 {
		it := b.f.Pop(b.now)
		if it == nil {
			t.Fatal("Pop = nil with work waiting and no reservation")
		}
		got.WriteByte(itemKeys(it).Tenant[0])
	}
	want := strings.Repeat("s", 15) + "l" + strings.Repeat("s", 16) + "l"
	if got.String() != want {
		t.Fatalf("order %s\nwant  %s", got.String(), want)
	}
}

// With grouping off and no limits a Fair is one lane: exactly the
// queue's policy, guard and all.
func TestOneLaneIsThePolicy(t *testing.T) {
	t.Parallel()
	pol, err := sched.NewPolicy(sched.DefaultPolicy, sched.PolicyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := sched.New(pol.Sched)
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, Config{Limits: []Limit{{Field: Producer, Value: "nobody", Max: 1}}}, pol.Sched)
	r := rand.New(rand.NewPCG(1, 2))
	twins := map[uint64]*sched.Item{}
	for range 5000 {
		b.now = b.now.Add(time.Duration(r.IntN(5)) * time.Millisecond)
		if r.IntN(3) > 0 {
			b.id++
			ki := &keysItem{keys: Keys{Producer: "p"}}
			ki.it = sched.Item{ID: b.id, Cost: time.Duration(r.ExpFloat64() * float64(20*time.Millisecond)), Tier: int8(r.IntN(3)), Long: r.IntN(20) == 0}
			if err := b.f.Push(&ki.it, b.now); err != nil {
				t.Fatal(err)
			}
			tw := &sched.Item{ID: ki.it.ID, Cost: ki.it.Cost, Tier: ki.it.Tier, Long: ki.it.Long}
			twins[tw.ID] = tw
			if err := s.Push(tw, b.now); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, want := b.f.Pop(b.now), s.Pop(b.now)
		if (got == nil) != (want == nil) || got != nil && got.ID != want.ID {
			t.Fatalf("Fair started %v, the policy %v", got, want)
		}
	}
}

// Under the reservation a group past its share leaves the last worker
// free while another group has work; with none it takes it.
func TestReservation(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{GroupBy: Tenant}, fifo)
	b.f.SetWorkers(4, b.now)
	for range 10 {
		b.push(t, Keys{Tenant: "flood"}, 2*time.Second)
	}
	for range 3 {
		if it := b.f.Pop(b.now); it == nil || itemKeys(it).Tenant != "flood" {
			t.Fatalf("Pop = %v, want a flood job: no other group has work", it)
		}
	}
	// 1.5 s on, the flood has used about 2.3 workers over the last second
	// (decayed), past its share of 2 once steady has work.
	b.now = b.now.Add(1500 * time.Millisecond)
	short := b.push(t, Keys{Tenant: "steady"}, 2*time.Millisecond)
	if it := b.f.Pop(b.now); it != &short.it {
		t.Fatalf("Pop = %v, want the steady job", it)
	}
	b.f.Done(&short.it, b.now)
	if it := b.f.Pop(b.now); it != nil {
		t.Fatalf("flood took the last worker (%d) while steady had work a moment ago", it.ID)
	}
	if b.f.Stats.Reserved == 0 {
		t.Fatal("the reservation is not counted")
	}
	at, ok := b.f.NextWake()
	if !ok || at.Sub(b.now) != DefaultReserveWindow+1 {
		t.Fatalf("NextWake = %v, %v; want the window's end", at.Sub(b.now), ok)
	}
	b.now = at
	if n := b.f.Wake(b.now); n != 1 {
		t.Fatalf("Wake freed %d", n)
	}
	if it := b.f.Pop(b.now); it == nil {
		t.Fatal("flood still held back after the window")
	}
}

// A Fair rebuilt after a restart from its buckets (Buckets, then
// RestoreBucket), or from older buckets and the starts since (Started),
// keeps every key to its token bucket across the restarts: no key gets a
// burst its rate does not allow. Rebuilt with full buckets, as before,
// the same run breaks them.
func TestRateBucketsSurviveRestart(t *testing.T) {
	t.Parallel()
	cfg := Config{GroupBy: Tenant, Rates: []Rate{
		{Field: Tenant, PerSecond: 7, Burst: 4},
		{Field: JobType, Value: "export", PerSecond: 3, Burst: 2},
	}}
	tenants := []string{"acme", "ünï", "\U0001F600"}
	type start struct {
		k  Keys
		at time.Time
	}
	run := func(restore bool) (starts []start, restarts int) {
		r := rand.New(rand.NewPCG(7, 8))
		b := setup(t, cfg, fifo)
		var saved []Bucket // the buckets at the last checkpoint
		since := 0         // starts after it
		end := epoch.Add(time.Minute)
		for b.now.Before(end) {
			for range r.IntN(4) {
				k := Keys{Tenant: tenants[r.IntN(len(tenants))], JobType: []string{"report", "export"}[r.IntN(2)]}
				b.push(t, k, time.Millisecond)
			}
			for {
				it := b.f.Pop(b.now)
				if it == nil {
					break
				}
				starts = append(starts, start{itemKeys(it), b.now})
				b.f.Done(it, b.now)
			}
			if r.IntN(10) == 0 {
				saved, since = b.f.Buckets(b.now, nil), len(starts)
			}
			if r.IntN(5) == 0 {
				// The waiting jobs go into a new Fair in their order, as a
				// recovery pushes them, with the buckets the log holds.
				restarts++
				var waiting []*sched.Item
				b.f.Each(func(it *sched.Item) { waiting = append(waiting, it) })
				slices.SortFunc(waiting, func(a, c *sched.Item) int { return cmp.Compare(a.ID, c.ID) })
				f, err := New(cfg, fifo, itemKeys)
				if err != nil {
					t.Fatal(err)
				}
				if restore {
					for _, bk := range saved {
						f.RestoreBucket(bk)
					}
					for _, s := range starts[since:] {
						f.Started(s.k, s.at)
					}
				}
				for _, it := range waiting {
					b.f.Remove(it)
					*it = sched.Item{ID: it.ID, Cost: it.Cost}
					if err := f.Push(it, b.now); err != nil {
						t.Fatal(err)
					}
				}
				b.f = f
				if err := f.Check(); err != nil {
					t.Fatal(err)
				}
			}
			b.now = b.now.Add(time.Duration(1+r.IntN(50)) * time.Millisecond)
			b.f.Wake(b.now)
		}
		return starts, restarts
	}
	// conform reports the first start that an ideal bucket of each key,
	// full at the epoch, would have refused.
	conform := func(starts []start) error {
		type bucket struct{ tokens, at float64 }
		buckets := map[string]*bucket{}
		for i, s := range starts {
			for ri, rule := range cfg.Rates {
				v := s.k.get(rule.Field)
				if rule.Value != "" && rule.Value != v {
					continue
				}
				key := fmt.Sprint(ri, v)
				bk := buckets[key]
				if bk == nil {
					bk = &bucket{tokens: float64(rule.Burst)}
					buckets[key] = bk
				}
				at := s.at.Sub(epoch).Seconds()
				bk.tokens = min(float64(rule.Burst), bk.tokens+(at-bk.at)*rule.PerSecond)
				bk.at = at
				if bk.tokens < 1-1e-6 {
					return fmt.Errorf("start %d (%v at %v) finds %.3f tokens of rule %d", i, s.k, s.at.Sub(epoch), bk.tokens, ri)
				}
				bk.tokens--
			}
		}
		return nil
	}
	starts, restarts := run(true)
	if err := conform(starts); err != nil {
		t.Fatalf("restored: %v", err)
	}
	// The rates are used, not just respected: every key with work waits
	// for its bucket, so a minute's starts are the rate's.
	if lo := 0.95 * 7 * 60 * float64(len(tenants)); float64(len(starts)) < lo {
		t.Fatalf("%d starts in a minute, want at least %.0f", len(starts), lo)
	}
	full, _ := run(false)
	if conform(full) == nil {
		t.Fatal("restarts with full buckets kept to the rates: the check has no teeth")
	}
	t.Logf("%d starts over %d restarts, every key within its bucket", len(starts), restarts)
}
