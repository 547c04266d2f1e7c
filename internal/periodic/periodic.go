// Package periodic owns the time arithmetic of periodic schedules: when a
// schedule's next tick falls (a cron expression in a time zone, or a fixed
// interval from a start), which tick a late firing fires and how many it
// passes over, whether it is too late to fire at all, and how long a
// tick's unique key must be held. It is pure: every time is passed in. The
// broker keeps the schedules, their timer, their log records and the jobs
// their ticks publish.
package periodic

import (
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // schedules name time zones; the binary must know them anywhere

	"github.com/robfig/cron/v3"
)

// MinEvery is the shortest interval a schedule may have, given as every
// or as a cron expression's @every: ticks come no faster than once a
// second (the cron library's own floor, which it applied without a word,
// rounding @every 1ns up to 1s and cutting @every 1.5s to 1s).
const MinEvery = time.Second

// FieldError says which setting of a schedule is wrong and why.
type FieldError struct {
	Field, Msg string
}

func (e *FieldError) Error() string { return "periodic: " + e.Field + ": " + e.Msg }

// Spec is when a schedule ticks: on a cron expression in a time zone, or
// every Every from Start. Cron ticks before Start do not fire.
type Spec struct {
	cron  cron.Schedule // nil for an interval
	every time.Duration
	start time.Time
}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Compile reads a schedule's timing: exactly one of spec (a cron
// expression, five fields or a descriptor such as @hourly, in the IANA
// zone tz, default UTC) and every (at least MinEvery), from start.
func Compile(spec, tz string, every time.Duration, start time.Time) (Spec, error) {
	switch {
	case (spec == "") == (every == 0):
		return Spec{}, &FieldError{"schedule", "give either a cron expression or an interval (every)"}
	case every < 0 || (every > 0 && every < MinEvery):
		return Spec{}, &FieldError{"every", fmt.Sprintf("must be at least %v, got %v", MinEvery, every)}
	}
	s := Spec{every: every, start: start}
	if spec == "" {
		return s, nil
	}
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil {
			return Spec{}, &FieldError{"time_zone", fmt.Sprintf("%q is not a time zone name such as Europe/Paris", tz)}
		}
		loc = l
	}
	c, err := parseCron(spec)
	if err != nil {
		return Spec{}, &FieldError{"cron", err.Error()}
	}
	s.cron = zoned{c, loc}
	return s, nil
}

// parseCron reads a cron expression. The parser panics on some input (a
// TZ= prefix without a space after it, robfig/cron v3.0.1), which must not
// take the broker down.
func parseCron(spec string) (_ cron.Schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%q is not a cron expression the parser can read", spec)
		}
	}()
	return cronParser.Parse(spec)
}

// CheckCronEvery holds a cron expression's @every to what every takes: at
// least MinEvery, in whole seconds, since the cron library rounds anything
// shorter up to a second and drops a fraction of a second. (A schedule
// recovered from a log is not checked: it was declared before the rule.)
func CheckCronEvery(spec string) error {
	arg, ok := strings.CutPrefix(strings.TrimSpace(spec), "@every ")
	if !ok {
		return nil
	}
	d, err := time.ParseDuration(arg)
	if err != nil {
		return nil // Compile refuses it
	}
	switch {
	case d < MinEvery:
		return &FieldError{"cron", fmt.Sprintf("%q: @every must be at least %v, got %v", spec, MinEvery, d)}
	case d%time.Second != 0:
		return &FieldError{"cron", fmt.Sprintf("%q: @every takes whole seconds (the cron library would tick every %v); for %v give every instead", spec, d.Truncate(time.Second), d)}
	}
	return nil
}

// zoned evaluates a cron schedule in a time zone.
type zoned struct {
	s   cron.Schedule
	loc *time.Location
}

func (z zoned) Next(t time.Time) time.Time { return z.s.Next(t.In(z.loc)) }

// Starting is s counted from start instead: a schedule's start may be
// settled after its timing was compiled.
func (s Spec) Starting(start time.Time) Spec {
	s.start = start
	return s
}

// IsCron reports whether s runs on a cron expression.
func (s Spec) IsCron() bool { return s.cron != nil }

// Next is the first tick strictly after t and not before the start; the
// zero time when a cron expression has none in the five years after t.
func (s Spec) Next(t time.Time) time.Time {
	if s.cron != nil {
		if t.Before(s.start) {
			t = s.start.Add(-time.Nanosecond) // a tick at the start itself may fire
		}
		return s.cron.Next(t)
	}
	if t.Before(s.start) {
		return s.start
	}
	// Whole intervals since the start, then one more: neither product can
	// overflow, as (d/every)*every <= d (MaxStartAge keeps d from
	// saturating).
	d := t.Sub(s.start)
	return s.start.Add(d / s.every * s.every).Add(s.every)
}

// MaxStartAge is how far in the past (or the future) a schedule's start
// may be: far enough for any real calendar, near enough that the time
// since it fits a time.Duration for centuries.
const MaxStartAge = 100 * 365 * 24 * time.Hour

// LastTick is the latest tick at or before now, counting from next (a tick
// not after now), and how many ticks it passed over. An interval's is
// computed; a cron expression's is searched, at most a million ticks at a
// time (a later firing goes on from there).
func (s Spec) LastTick(next, now time.Time) (tick time.Time, skipped int) {
	tick = next
	if s.cron == nil {
		// k*every <= now-next; were now centuries on, the difference would
		// saturate and the tick found be earlier, never after now.
		k := now.Sub(tick) / s.every
		return tick.Add(k * s.every), int(k)
	}
	for n := s.Next(tick); !n.IsZero() && !n.After(now); n = s.Next(n) {
		tick = n
		if skipped++; skipped >= 1_000_000 {
			break
		}
	}
	return tick, skipped
}

// Firing is what a schedule whose next tick is due does at now.
type Firing struct {
	Tick    time.Time // the tick that fires: the latest at or before now
	Skipped int       // ticks passed over (the broker was down through them)
	Next    time.Time // the tick after it; zero when a cron expression has none in five years
	// TooLate: the tick is older than the catch-up window, and is skipped
	// rather than fired.
	TooLate bool
}

// Due says what a schedule whose next tick is next does at now: nothing
// (ok false) before that tick, else fire the latest tick at or before now,
// unless it is more than catchUp old.
func (s Spec) Due(next, now time.Time, catchUp time.Duration) (f Firing, ok bool) {
	if next.IsZero() || next.After(now) {
		return Firing{}, false
	}
	f.Tick, f.Skipped = s.LastTick(next, now)
	f.Next = s.Next(f.Tick)
	f.TooLate = now.Sub(f.Tick) > catchUp
	return f, true
}

// UniqueFor is the unique-key window of a tick's job: the catch-up window
// and two periods, so that a tick fired again after a restart (which only
// happens within the catch-up window) finds its key still held; at most
// limit, which a monthly schedule's two periods can pass.
func (s Spec) UniqueFor(tick time.Time, catchUp, limit time.Duration) time.Duration {
	p := min(s.period(tick), limit) // two of it cannot overflow
	return min(catchUp+2*p, limit)
}

// period estimates the time between ticks, for the unique-key window.
func (s Spec) period(from time.Time) time.Duration {
	n := s.Next(from)
	return max(s.Next(n).Sub(n), time.Second)
}
