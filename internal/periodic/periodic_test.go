package periodic

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 27, 0, 0, 0, 0, time.UTC) // two days before Europe's clocks go forward

// ticksRef lists a schedule's ticks in [from, to] the slow way: every
// interval from the start, or every minute checked against the cron
// fields by hand ("30 2 * * *": 02:30 local time).
func ticksRef(every time.Duration, start, from, to time.Time, loc *time.Location) []time.Time {
	var out []time.Time
	if every > 0 {
		for t := start; !t.After(to); t = t.Add(every) {
			if !t.Before(from) {
				out = append(out, t)
			}
		}
		return out
	}
	for t := from.Truncate(time.Minute); !t.After(to); t = t.Add(time.Minute) {
		l := t.In(loc)
		if l.Hour() == 2 && l.Minute() == 30 && !t.Before(start) && !t.Before(from) {
			out = append(out, t)
		}
	}
	return out
}

// Next and LastTick agree with the slow reference, for an interval and for
// a cron expression in a zone whose clocks jump (02:30 does not exist in
// Paris on 29 March 2026: the library moves that tick, and the reference
// must say where; we check only what the reference can see: no tick is
// invented before start, ticks are in order, and every reference tick is
// found).
func TestNextAndLastTickAgainstReference(t *testing.T) {
	t.Parallel()
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for range 200 {
		every := time.Duration(1+rng.IntN(7200)) * time.Second
		start := t0.Add(time.Duration(rng.IntN(86400)) * time.Second)
		s, err := Compile("", "", every, start)
		if err != nil {
			t.Fatal(err)
		}
		from := t0.Add(time.Duration(rng.IntN(3*86400)) * time.Second)
		to := from.Add(time.Duration(rng.IntN(86400)) * time.Second)
		ref := ticksRef(every, start, from, to, nil)
		var got []time.Time
		for n := s.Next(from.Add(-time.Nanosecond)); !n.After(to); n = s.Next(n) {
			got = append(got, n)
		}
		if len(got) != len(ref) {
			t.Fatalf("every %v from %v: %d ticks in [%v, %v], reference %d", every, start, len(got), from, to, len(ref))
		}
		for i := range ref {
			if !got[i].Equal(ref[i]) {
				t.Fatalf("every %v: tick %d at %v, reference %v", every, i, got[i], ref[i])
			}
		}
		if len(ref) > 1 {
			tick, skipped := s.LastTick(ref[0], to)
			if !tick.Equal(ref[len(ref)-1]) || skipped != len(ref)-1 {
				t.Fatalf("every %v: LastTick = %v, %d; want %v, %d", every, tick, skipped, ref[len(ref)-1], len(ref)-1)
			}
		}
	}
	s, err := Compile("30 2 * * *", "Europe/Paris", 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	from, to := t0, t0.Add(10*24*time.Hour)
	ref := ticksRef(0, t0, from, to, paris)
	var got []time.Time
	for n := s.Next(from.Add(-time.Nanosecond)); !n.After(to); n = s.Next(n) {
		if len(got) > 0 && !n.After(got[len(got)-1]) {
			t.Fatalf("ticks out of order: %v after %v", n, got[len(got)-1])
		}
		got = append(got, n)
	}
	found := map[int64]bool{}
	for _, g := range got {
		found[g.UnixNano()] = true
	}
	for _, r := range ref {
		if !found[r.UnixNano()] {
			t.Fatalf("cron tick %v missing from %v", r, got)
		}
	}
	if len(ref) != 9 { // ten days, less the one with no 02:30
		t.Fatalf("the reference found %d ticks, want 9", len(ref))
	}
}

// Due fires the latest tick at or before now, says how many it passed
// over, and refuses a tick older than the catch-up window.
func TestDue(t *testing.T) {
	t.Parallel()
	s, err := Compile("", "", time.Minute, t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		next    time.Time
		now     time.Time
		ok      bool
		tick    time.Time
		skipped int
		tooLate bool
	}{
		{"not yet", t0.Add(time.Minute), t0.Add(59 * time.Second), false, time.Time{}, 0, false},
		{"on time", t0.Add(time.Minute), t0.Add(time.Minute), true, t0.Add(time.Minute), 0, false},
		{"down for ten minutes", t0.Add(time.Minute), t0.Add(11*time.Minute + 30*time.Second), true, t0.Add(11 * time.Minute), 10, false},
		{"down past the catch-up", t0.Add(time.Minute), t0.Add(3*time.Hour + 30*time.Second), true, t0.Add(3 * time.Hour), 179, false},
		{"no tick left", time.Time{}, t0, false, time.Time{}, 0, false},
	} {
		f, ok := s.Due(c.next, c.now, 20*time.Minute)
		if ok != c.ok || ok && (!f.Tick.Equal(c.tick) || f.Skipped != c.skipped || !f.Next.Equal(c.tick.Add(time.Minute)) || f.TooLate != c.tooLate) {
			t.Errorf("%s: Due = %+v, %v", c.name, f, ok)
		}
	}
	// A tick 30 s old with a 20 s window is too late.
	if f, _ := s.Due(t0.Add(time.Minute), t0.Add(90*time.Second), 20*time.Second); !f.TooLate {
		t.Errorf("a tick 30 s late with a 20 s catch-up fires: %+v", f)
	}
}

func TestCompileRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		spec, tz string
		every    time.Duration
		field    string
	}{
		{"", "", 0, "schedule"},
		{"* * * * *", "", time.Minute, "schedule"},
		{"", "", time.Millisecond, "every"},
		{"* * * * *", "Mars/Olympus", 0, "time_zone"},
		{"TZ=", "", 0, "cron"}, // the parser panics on this one
		{"61 * * * *", "", 0, "cron"},
	} {
		_, err := Compile(c.spec, c.tz, c.every, t0)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("Compile(%q, %q, %v) = %v, want a FieldError on %s", c.spec, c.tz, c.every, err, c.field)
		}
	}
	for spec, bad := range map[string]bool{"@every 1ns": true, "@every 1500ms": true, "@every 2s": false, "@hourly": false} {
		if err := CheckCronEvery(spec); (err != nil) != bad {
			t.Errorf("CheckCronEvery(%q) = %v", spec, err)
		}
	}
}
