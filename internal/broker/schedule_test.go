package broker

import (
	"errors"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
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
