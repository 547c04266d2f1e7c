package broker

import (
	"errors"
	"math/big"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/periodic"
	"github.com/harbinger-mq/harbinger/internal/store"
)

func ready(t *testing.T, b *Broker, q string) int {
	t.Helper()
	in, err := b.Queue(q)
	if err != nil {
		return 0
	}
	return in.Ready
}

func TestScheduleEvery(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	s, err := tb.b.DeclareSchedule(Schedule{Name: "sweep", Queue: "q", Every: 10 * time.Minute, JobType: "sweep", Payload: []byte("✓")})
	if err != nil {
		t.Fatal(err)
	}
	if want := tb.clk.Now().Add(10 * time.Minute); !s.NextTick.Equal(want) {
		t.Fatalf("next tick %v, want %v", s.NextTick, want)
	}
	tb.clk.Advance(10*time.Minute - time.Second)
	if n := ready(t, tb.b, "q"); n != 0 {
		t.Fatalf("%d jobs before the first tick", n)
	}
	tb.clk.Advance(time.Second)
	if n := ready(t, tb.b, "q"); n != 1 {
		t.Fatalf("%d jobs after the first tick", n)
	}
	tb.clk.Advance(10 * time.Minute)
	if n := ready(t, tb.b, "q"); n != 2 {
		t.Fatalf("%d jobs after the second tick", n)
	}
	// Paused, ticks pass without firing; resumed, the next one fires.
	if _, err := tb.b.PauseSchedule("sweep", true); err != nil {
		t.Fatal(err)
	}
	tb.clk.Advance(30 * time.Minute)
	if n := ready(t, tb.b, "q"); n != 2 {
		t.Fatalf("a paused schedule fired: %d jobs", n)
	}
	if _, err := tb.b.PauseSchedule("sweep", false); err != nil {
		t.Fatal(err)
	}
	tb.clk.Advance(10 * time.Minute)
	if n := ready(t, tb.b, "q"); n != 3 {
		t.Fatalf("%d jobs after resuming", n)
	}
	if got := tb.b.Schedules(); len(got) != 1 || got[0].Fired != 3 {
		t.Fatalf("schedules: %+v", got)
	}
	if err := tb.b.DeleteSchedule("sweep"); err != nil {
		t.Fatal(err)
	}
	tb.clk.Advance(time.Hour)
	if n := ready(t, tb.b, "q"); n != 3 {
		t.Fatalf("a deleted schedule fired: %d jobs", n)
	}
	if err := tb.b.DeleteSchedule("sweep"); !errors.Is(err, ErrScheduleNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
}

func TestScheduleCronInTimeZone(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{}) // the clock starts at 2026-01-01 00:00 UTC
	s, err := tb.b.DeclareSchedule(Schedule{Name: "report", Queue: "q", Cron: "0 9 * * *", TimeZone: "Europe/Paris"})
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 1, 1, 8, 0, 0, 0, time.UTC); !s.NextTick.Equal(want) {
		t.Fatalf("next tick %v, want 09:00 Paris = %v", s.NextTick.UTC(), want)
	}
	tb.clk.Advance(8*time.Hour - time.Second)
	if n := ready(t, tb.b, "q"); n != 0 {
		t.Fatalf("fired before 09:00 Paris")
	}
	tb.clk.Advance(time.Second)
	if n := ready(t, tb.b, "q"); n != 1 {
		t.Fatalf("%d jobs at 09:00 Paris", n)
	}
	for _, bad := range []Schedule{
		{Name: "x", Queue: "q", Cron: "61 * * * *"},
		{Name: "x", Queue: "q", Cron: "0 9 * * *", TimeZone: "Mars/Olympus"},
		{Name: "x", Queue: "q"},
		{Name: "x", Queue: "q", Cron: "@hourly", Every: time.Hour},
		{Name: "x", Queue: "q", Every: time.Millisecond},
		{Name: "", Queue: "q", Every: time.Hour},
		{Name: "x", Queue: "bad queue", Every: time.Hour},
	} {
		if _, err := tb.b.DeclareSchedule(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("DeclareSchedule(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
}

// Across restarts a tick fires neither twice nor silently: one missed
// inside the catch-up window fires once at start, older ones are skipped.
func TestScheduleAcrossRestarts(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store, clk *clock.Fake) {
		b := durable(t, st, clk, Config{})
		if _, err := b.DeclareSchedule(Schedule{Name: "hourly", Queue: "q", Every: time.Hour, CatchUp: 30 * time.Minute}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Hour) // tick 1 fires
		if n := ready(t, b, "q"); n != 1 {
			t.Fatalf("%d jobs after tick 1", n)
		}
		crash(b)
		clk.Advance(70 * time.Minute) // down through tick 2 (10 min late at restart)
		b = durable(t, st, clk, Config{})
		if n := ready(t, b, "q"); n != 2 {
			t.Fatalf("%d jobs after a restart 10 min past tick 2, want 2", n)
		}
		crash(b)
		b = durable(t, st, clk, Config{}) // restarting again fires nothing more
		if n := ready(t, b, "q"); n != 2 {
			t.Fatalf("%d jobs after a second restart, want 2", n)
		}
		crash(b)
		clk.Advance(2*time.Hour + 40*time.Minute) // down through ticks 3 and 4, until 04:50: tick 4 is 50 min late
		b = durable(t, st, clk, Config{})
		if n := ready(t, b, "q"); n != 2 {
			t.Fatalf("%d jobs: a tick older than the catch-up window fired", n)
		}
		clk.Advance(10 * time.Minute) // tick 5 fires live
		if n := ready(t, b, "q"); n != 3 {
			t.Fatalf("%d jobs after tick 5", n)
		}
	})
}

// What a schedule cannot keep is refused when it is declared, with the
// reason: a cron date that never comes (which the cron library answers
// only after searching five years on every call), a start so far away
// that the time since it overflows, a zone inside the expression, and a
// name that is not text.
func TestScheduleRefusesTimesItCannotKeep(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	now := tb.clk.Now()
	for _, tc := range []struct {
		s    Schedule
		want string
	}{
		{Schedule{Name: "feb30", Queue: "q", Cron: "0 0 30 2 *"}, "no tick in the five years"},
		{Schedule{Name: "april-31", Queue: "q", Cron: "0 12 31 4 *", TimeZone: "Asia/Kolkata"}, "no tick in the five years"},
		{Schedule{Name: "old", Queue: "q", Every: time.Second, Start: now.AddDate(-101, 0, 0)}, "more than 100 years"},
		{Schedule{Name: "1700", Queue: "q", Every: 3 * time.Second, Start: time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC)}, "more than 100 years"},
		{Schedule{Name: "far", Queue: "q", Cron: "@daily", Start: now.AddDate(101, 0, 0)}, "more than 100 years"},
		// The cron library panics on a TZ= prefix without a space.
		{Schedule{Name: "tz", Queue: "q", Cron: "TZ=UTC"}, "time_zone"},
		{Schedule{Name: "cron-tz", Queue: "q", Cron: " CRON_TZ=Asia/Tokyo 0 9 * * *"}, "time_zone"},
		{Schedule{Name: "bad\xffname", Queue: "q", Every: time.Hour}, "not valid UTF-8"},
		{Schedule{Name: "tab\tname", Queue: "q", Every: time.Hour}, "control characters"},
		// every and @every have one minimum. The cron library rounded
		// @every 1ns up to a second and cut @every 1.5s to one.
		{Schedule{Name: "every-ns", Queue: "q", Every: time.Nanosecond}, "at least 1s"},
		{Schedule{Name: "cron-every-ns", Queue: "q", Cron: "@every 1ns"}, "at least 1s"},
		{Schedule{Name: "cron-every-999ms", Queue: "q", Cron: "@every 999ms"}, "at least 1s"},
		{Schedule{Name: "cron-every-0", Queue: "q", Cron: "@every 0s"}, "at least 1s"},
		{Schedule{Name: "cron-every-neg", Queue: "q", Cron: "@every -5m"}, "at least 1s"},
		{Schedule{Name: "cron-every-frac", Queue: "q", Cron: "@every 1.5s"}, "whole seconds"},
	} {
		_, err := tb.b.DeclareSchedule(tc.s)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", tc.s.Name, err, tc.want)
		}
	}
	if got := tb.b.Schedules(); len(got) != 0 {
		t.Errorf("refused schedules were kept: %+v", got)
	}
	for _, spec := range []string{"@every 1s", "@every 90s", "@every 1h30m"} {
		if _, err := tb.b.DeclareSchedule(Schedule{Name: spec, Queue: "q", Cron: spec}); err != nil {
			t.Errorf("%q: %v", spec, err)
		}
	}
}

// A cron schedule's Start is the first moment a tick may fire, as it is
// for an interval.
func TestScheduleCronWaitsForStart(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	start := tb.clk.Now().Add(time.Hour)
	s, err := tb.b.DeclareSchedule(Schedule{Name: "later", Queue: "q", Cron: "*/15 * * * *", Start: start})
	if err != nil {
		t.Fatal(err)
	}
	if !s.NextTick.Equal(start) {
		t.Errorf("next tick %v, want the start %v", s.NextTick, start)
	}
	tb.clk.Advance(time.Hour - time.Second)
	if n := ready(t, tb.b, "q"); n != 0 {
		t.Fatalf("%d ticks fired before the start", n)
	}
	tb.clk.Advance(time.Second)
	if n := ready(t, tb.b, "q"); n != 1 {
		t.Fatalf("%d ticks at the start, want 1", n)
	}
	tb.clk.Advance(15 * time.Minute)
	if n := ready(t, tb.b, "q"); n != 2 {
		t.Fatalf("%d ticks a quarter after the start, want 2", n)
	}
}

// A cron schedule whose next tick is beyond what the cron library
// searches (February 29 in 2096, then 2104, as 2100 is no leap year) stops
// after its tick instead of searching on every timer, and the others go
// on.
func TestScheduleWithoutAFurtherTick(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	leap := time.Date(2096, 2, 29, 0, 0, 0, 0, time.UTC)
	if _, err := tb.b.DeclareSchedule(Schedule{Name: "leap-day", Queue: "leap", Cron: "0 0 29 2 *", Start: leap.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.b.DeclareSchedule(Schedule{Name: "daily", Queue: "daily", Every: 24 * time.Hour, Start: leap.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	tb.clk.Advance(leap.Add(-time.Hour).Sub(tb.clk.Now()))
	for range 90 * 24 {
		tb.clk.Advance(time.Hour)
	}
	if n := ready(t, tb.b, "leap"); n != 1 {
		t.Errorf("%d leap-day ticks, want 1", n)
	}
	if n := ready(t, tb.b, "daily"); n != 91 {
		t.Errorf("%d daily ticks in 90 days from the first, want 91", n)
	}
	for _, s := range tb.b.Schedules() {
		if s.Name == "leap-day" && (!s.NextTick.IsZero() || s.Fired != 1) {
			t.Errorf("leap-day fired %d times and ticks next at %v, want once and none", s.Fired, s.NextTick)
		}
	}
}

// next against a reference in big integers: for random starts within the
// bound, intervals from a second to centuries and times on either side of
// the start, the next tick is the first multiple of the interval past t.
func TestScheduleNextAgainstModel(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	now := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	for range 100_000 {
		s := Schedule{Start: now.Add(time.Duration(r.Int64N(int64(2*periodic.MaxStartAge))) - periodic.MaxStartAge)}
		switch r.IntN(3) {
		case 0:
			s.Every = time.Second * time.Duration(1+r.IntN(100))
		case 1:
			s.Every = time.Duration(r.Int64N(int64(time.Hour*24*365*290))) + time.Second
		default:
			s.Every = time.Duration(1<<63 - 1)
		}
		at := now.Add(time.Duration(r.Int64N(int64(20 * 365 * 24 * time.Hour))))
		spec, err := periodic.Compile("", "", s.Every, s.Start)
		if err != nil {
			t.Fatal(err)
		}
		s.spec = spec
		got := s.next(at)
		want := s.Start
		if !at.Before(s.Start) {
			d := new(big.Int).Sub(big.NewInt(at.UnixNano()), big.NewInt(s.Start.UnixNano()))
			k := new(big.Int).Quo(d, big.NewInt(int64(s.Every)))
			k.Add(k, big.NewInt(1)).Mul(k, big.NewInt(int64(s.Every)))
			wantNs := new(big.Int).Add(big.NewInt(s.Start.UnixNano()), k)
			if !wantNs.IsInt64() {
				continue // past 2262: beyond what UnixNano holds, not a tick anyone waits for
			}
			want = time.Unix(0, wantNs.Int64()).UTC()
		}
		if !got.Equal(want) {
			t.Fatalf("start %v every %v: next(%v) = %v, want %v", s.Start, s.Every, at, got, want)
		}
	}
}

// A schedule declared with the cron library's own zone prefix, which
// DeclareSchedule refuses now and took before, still recovers from the
// log: an upgrade must not stop the broker from starting.
func TestScheduleWithZonePrefixRecovers(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 12, 2, 0, 30, 0, 0, time.UTC))
	st := store.NewMemory()
	data := []byte(`{"name":"tokyo","queue":"q","cron":"CRON_TZ=Asia/Tokyo 0 9 * * *","start":"2026-12-01T00:00:00Z","catch_up":3600000000000}`)
	if _, err := st.Append(&store.Record{Kind: store.KindSchedule, ID: "tokyo", Data: data}); err != nil {
		t.Fatal(err)
	}
	b := durable(t, st, clk, Config{})
	got := b.Schedules()
	if want := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC); len(got) != 1 || !got[0].NextTick.Equal(want) {
		t.Fatalf("recovered %+v, want tokyo ticking next at %v (09:00 in Tokyo)", got, want)
	}
	if _, err := b.DeclareSchedule(Schedule{Name: "tokyo", Queue: "q", Cron: "CRON_TZ=Asia/Tokyo 0 9 * * *"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("declaring it again: %v, want ErrInvalid", err)
	}
}

// Schedules with long periods fire: a tick's unique-key window grew with
// the period past the 30 days a unique key may be held, so a monthly or
// yearly schedule's every tick was refused.
func TestScheduleLongPeriodsFire(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	for _, s := range []Schedule{
		{Name: "monthly", Queue: "monthly", Cron: "@monthly"},
		{Name: "yearly", Queue: "yearly", Cron: "0 6 1 1 *", TimeZone: "Australia/Sydney"},
		{Name: "fortnight", Queue: "fortnight", Every: 16 * 24 * time.Hour},
		{Name: "century", Queue: "century", Every: 100 * 365 * 24 * time.Hour, Start: tb.clk.Now().Add(time.Hour)},
	} {
		if _, err := tb.b.DeclareSchedule(s); err != nil {
			t.Fatal(err)
		}
	}
	for range 400 { // 2026-01-01 to 2027-02-05, a day at a time
		tb.clk.Advance(24 * time.Hour)
	}
	for q, want := range map[string]int{"monthly": 13, "yearly": 1, "fortnight": 25, "century": 1} {
		if n := ready(t, tb.b, q); n != want {
			t.Errorf("%s fired %d times in 400 days, want %d", q, n, want)
		}
	}
	for _, s := range tb.b.Schedules() {
		for _, tick := range []time.Time{s.LastTick, s.NextTick} {
			if w := s.uniqueFor(tick); w <= s.CatchUp || w > MaxUniqueFor {
				t.Errorf("%s: unique window %v, want over the catch-up %v and at most %v", s.Name, w, s.CatchUp, MaxUniqueFor)
			}
		}
	}
}

// Interval schedules against a model: for random intervals (a second to
// 40 days) and starts (before or after the declaration), with the clock
// advanced in random steps no longer than the interval or the catch-up
// window, every tick after the declaration fires once and no other.
func TestScheduleEveryAgainstModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 17))
		tb := setup(t, Config{})
		declared := tb.clk.Now()
		every := time.Second * time.Duration(1+r.Int64N(40*24*3600))
		start := declared.Add(time.Duration(r.Int64N(int64(4*every))) - 2*every)
		s, err := tb.b.DeclareSchedule(Schedule{Name: "s", Queue: "q", Every: every, Start: start, CatchUp: 7 * 24 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		maxStep := min(every, s.CatchUp)
		for range 200 {
			tb.clk.Advance(time.Duration(1 + r.Int64N(int64(maxStep))))
		}
		end := tb.clk.Now()
		// The model: ticks Start + k*Every after the declaration (at Start
		// itself when that is still to come), up to now.
		want := 0
		for tick := start; !tick.After(end); tick = tick.Add(every) {
			if tick.After(declared) || (tick.Equal(declared) && start.After(declared)) {
				want++
			}
		}
		if got := ready(t, tb.b, "q"); got != want {
			t.Fatalf("seed %d: every %v from %v (declared %v): %d ticks fired by %v, want %d", seed, every, start, declared, got, end, want)
		}
	}
}

// A broker down for three years under a one-second schedule skips the
// missed ticks in one step (about 95 million of them) and fires the next
// tick after now, not a stale one.
func TestScheduleAfterLongDowntime(t *testing.T) {
	t.Parallel()
	last := time.Date(2023, 12, 2, 9, 0, 0, 0, time.UTC)
	clk := clock.NewFake(last.AddDate(3, 0, 0).Add(300 * time.Millisecond))
	st := store.NewMemory()
	data := []byte(`{"name":"tick","queue":"q","every":1000000000,"start":"2023-01-01T00:00:00Z","catch_up":3600000000000,"last_tick":"2023-12-02T09:00:00Z","fired":5}`)
	if _, err := st.Append(&store.Record{Kind: store.KindSchedule, ID: "tick", Data: data}); err != nil {
		t.Fatal(err)
	}
	b := durable(t, st, clk, Config{})
	clk.Advance(0)
	s := b.Schedules()
	if len(s) != 1 {
		t.Fatalf("schedules: %+v", s)
	}
	now := clk.Now()
	if next := s[0].NextTick; !next.After(now) || next.Sub(now) > time.Second {
		t.Errorf("after three years down the next tick is %v, want within a second after %v", next, now)
	}
	// The latest missed tick was 300 ms before now, within the catch-up
	// window: it fires once.
	if n := ready(t, b, "q"); n != 1 {
		t.Errorf("%d ticks fired at recovery, want 1", n)
	}
	clk.Advance(time.Second)
	if n := ready(t, b, "q"); n != 2 {
		t.Errorf("%d ticks fired a second later, want 2", n)
	}
}

// A restart keeps a schedule's next tick as it was, where that is not
// the tick after its last: a resumed schedule does not fire, at the
// restart, the tick it skipped while paused, and a cron schedule whose
// start is on a tick still fires that tick after a restart before it.
func TestScheduleRestartKeepsNextTick(t *testing.T) {
	t.Parallel()
	payload := []byte(strings.Repeat("résumé ✓ ", 128)) // a kilobyte and more
	eachStore(t, func(t *testing.T, st store.Store, clk *clock.Fake) {
		b := durable(t, st, clk, Config{})
		start := clk.Now().Add(2 * time.Hour) // 02:00, on a tick
		for _, s := range []Schedule{
			{Name: "stündlich-résumé", Queue: "resumed", Cron: "0 * * * *", Payload: payload},
			{Name: "später ✓", Queue: "started", Cron: "0 * * * *", Start: start, Payload: payload},
		} {
			if _, err := b.DeclareSchedule(s); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(time.Hour) // 01:00 fires
		if _, err := b.PauseSchedule("stündlich-résumé", true); err != nil {
			t.Fatal(err)
		}
		clk.Advance(90 * time.Minute) // 02:30: 02:00 passed while paused
		if _, err := b.PauseSchedule("stündlich-résumé", false); err != nil {
			t.Fatal(err)
		}
		if n := ready(t, b, "resumed"); n != 1 {
			t.Fatalf("%d ticks before the restart, want 1", n)
		}
		if n := ready(t, b, "started"); n != 1 {
			t.Fatalf("%d ticks at and after the start, want 1", n)
		}
		want := map[string]time.Time{}
		for _, s := range b.Schedules() {
			want[s.Name] = s.NextTick
		}
		crash(b)
		clk.Advance(10 * time.Minute)
		b = durable(t, st, clk, Config{})
		for _, s := range b.Schedules() {
			if !s.NextTick.Equal(want[s.Name]) {
				t.Errorf("%s: next tick %v after the restart, want %v as before it", s.Name, s.NextTick, want[s.Name])
			}
		}
		if n := ready(t, b, "resumed"); n != 1 {
			t.Errorf("%d ticks after the restart, want 1: the tick skipped while paused fired", n)
		}

		// A cron schedule that starts on a tick, restarted before it.
		start = time.Date(2026, 1, 1, 5, 0, 0, 0, time.UTC)
		if _, err := b.DeclareSchedule(Schedule{Name: "later", Queue: "later", Cron: "0 */5 * * *", Start: start, Payload: payload}); err != nil {
			t.Fatal(err)
		}
		crash(b)
		b = durable(t, st, clk, Config{})
		clk.Advance(start.Sub(clk.Now()))
		if n := ready(t, b, "later"); n != 1 {
			t.Errorf("%d ticks at the start after a restart before it, want 1", n)
		}
	})
}

// Declaring a schedule again (a deployment that declares its schedules at
// every start, with a new payload) owes no tick its pause skipped: not one
// passed while it was paused and since resumed, nor one passed while it
// is still paused and the declaration resumes it.
func TestScheduleRedeclareOwesNoSkippedTick(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	decl := func(v string) Schedule {
		t.Helper()
		s, err := tb.b.DeclareSchedule(Schedule{Name: "täglich/报告", Queue: "q", Cron: "0 * * * *",
			Payload: []byte(strings.Repeat(v+" \xff ", 256)), Headers: map[string]string{"version": v}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	pause := func(p bool) {
		t.Helper()
		if _, err := tb.b.PauseSchedule("täglich/报告", p); err != nil {
			t.Fatal(err)
		}
	}
	decl("v1")
	tb.clk.Advance(time.Hour) // 01:00 fires
	pause(true)
	tb.clk.Advance(90 * time.Minute) // 02:30: 02:00 passed while paused
	pause(false)
	tb.clk.Advance(5 * time.Minute)
	if s := decl("v2"); s.NextTick.Hour() != 3 {
		t.Errorf("redeclared after a resume: next tick %v, want 03:00", s.NextTick)
	}
	tb.clk.Advance(0)
	if n := ready(t, tb.b, "q"); n != 1 {
		t.Errorf("%d ticks after a redeclare that followed a resume, want 1", n)
	}
	pause(true)
	tb.clk.Advance(time.Hour) // 03:35: 03:00 passed while paused
	if s := decl("v3"); s.NextTick.Hour() != 4 {
		t.Errorf("redeclared while paused: next tick %v, want 04:00", s.NextTick)
	}
	tb.clk.Advance(0)
	if n := ready(t, tb.b, "q"); n != 1 {
		t.Errorf("%d ticks after a redeclare that resumed it, want 1", n)
	}
	tb.clk.Advance(25 * time.Minute) // 04:00 fires
	if n := ready(t, tb.b, "q"); n != 2 {
		t.Errorf("%d ticks at 04:00, want 2", n)
	}
}

// scheduleLosing is a store that loses schedule records while lose is
// set, as a broker killed after a tick's job reached the disk and before
// the tick's own record did loses it.
type scheduleLosing struct {
	store.Store
	lose atomic.Bool
}

func (s *scheduleLosing) Append(recs ...*store.Record) (store.Pos, error) {
	if s.lose.Load() {
		kept := recs[:0:0]
		for _, r := range recs {
			if r.Kind != store.KindSchedule {
				kept = append(kept, r)
			}
		}
		recs = kept
	}
	return s.Store.Append(recs...)
}

// A schedule's fired count is the ticks whose job was published, kill or
// no kill. A kill after a tick's job was durable and before the tick's
// record was fires the tick again at restart, which finds its job by its
// unique key and publishes nothing; before, that tick was then not
// counted, so after each such kill the count fell one further behind the
// jobs the schedule had published.
func TestScheduleFiredCountsTicksAcrossKills(t *testing.T) {
	t.Parallel()
	st := &scheduleLosing{Store: store.NewMemory()}
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := durable(t, st, clk, Config{})
	if _, err := b.DeclareSchedule(Schedule{Name: "hourly", Queue: "q", Every: time.Hour}); err != nil {
		t.Fatal(err)
	}
	fired := func(b *Broker) uint64 {
		t.Helper()
		s := b.Schedules()
		if len(s) != 1 {
			t.Fatalf("schedules: %+v", s)
		}
		return s[0].Fired
	}
	for kill := 1; kill <= 5; kill++ {
		st.lose.Store(true)
		clk.Advance(time.Hour) // a tick fires; its record is lost
		crash(b)
		st.lose.Store(false)
		b = durable(t, st, clk, Config{}) // the tick fires again: a duplicate
		if n, f := ready(t, b, "q"), fired(b); n != kill || f != uint64(kill) {
			t.Fatalf("after kill %d: %d jobs published, fired %d; want %d and %d", kill, n, f, kill, kill)
		}
	}
	clk.Advance(time.Hour) // a tick without a kill
	if n, f := ready(t, b, "q"), fired(b); n != 6 || f != 6 {
		t.Fatalf("after a tick without a kill: %d jobs, fired %d; want 6 and 6", n, f)
	}
	crash(b)
	b = durable(t, st, clk, Config{})
	if n, f := ready(t, b, "q"), fired(b); n != 6 || f != 6 {
		t.Fatalf("after a restart: %d jobs, fired %d; want 6 and 6", n, f)
	}
}

// A job a schedule fires says which schedule and tick fired it, beside
// the schedule's own headers.
func TestScheduledJobNamesItsSchedule(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	if _, err := tb.b.DeclareSchedule(Schedule{Name: "nightly", Queue: "q", Every: time.Hour, JobType: "sweep",
		Headers: map[string]string{"team": "ops"}}); err != nil {
		t.Fatal(err)
	}
	tb.clk.Advance(time.Hour)
	jobs, err := tb.b.WaitingJobs("q", 0)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("WaitingJobs = %+v, %v", jobs, err)
	}
	j, err := tb.b.GetJob("q", jobs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	tick := tb.clk.Now().UTC().Format(time.RFC3339Nano)
	if j.Headers[HeaderSchedule] != "nightly" || j.Headers[HeaderScheduleTick] != tick || j.Headers["team"] != "ops" {
		t.Errorf("headers %v: want the schedule's name, tick %s and its own header", j.Headers, tick)
	}
	if s := tb.b.Schedules()[0]; len(s.Headers) != 1 {
		t.Errorf("the schedule's own headers became %v", s.Headers)
	}
}
