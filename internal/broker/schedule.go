package broker

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // schedules name time zones; the binary must know them anywhere
	"unicode"
	"unicode/utf8"

	"github.com/robfig/cron/v3"

	"github.com/harbinger-mq/harbinger/internal/store"
)

// DefaultCatchUp is how late a tick may still fire after the broker was
// down through it.
const DefaultCatchUp = time.Hour

// MaxSchedules bounds the periodic schedules a broker holds.
const MaxSchedules = 10_000

// MinEvery is the shortest interval a schedule may have, given as every
// or as a cron expression's @every: ticks come no faster than once a
// second (the cron library's own floor, which it applied without a word,
// rounding @every 1ns up to 1s and cutting @every 1.5s to 1s).
const MinEvery = time.Second

// Schedule is a periodic job: each tick publishes one job to Queue. It
// runs either on a cron expression in a time zone, or every Every.
type Schedule struct {
	Name     string        `json:"name"`
	Queue    string        `json:"queue"`
	Cron     string        `json:"cron,omitempty"`      // five fields (minute hour day month weekday), or @hourly and the like
	TimeZone string        `json:"time_zone,omitempty"` // IANA name for Cron; default UTC
	Every    time.Duration `json:"every,omitempty"`     // a fixed interval instead of Cron, counted from Start
	Start    time.Time     `json:"start,omitzero"`      // Every's first tick, and the first moment a cron tick may fire; default the declaration
	// CatchUp: a tick missed by at most this much (the broker was down)
	// fires once at start; older missed ticks are logged and skipped.
	CatchUp time.Duration `json:"catch_up,omitempty"`
	Paused  bool          `json:"paused,omitempty"`

	// The job each tick publishes.
	Producer string            `json:"producer,omitempty"`
	JobType  string            `json:"job_type,omitempty"`
	Payload  []byte            `json:"payload,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"`

	// Set by the broker.
	LastTick time.Time `json:"last_tick,omitzero"` // the last tick that fired
	// NextTick is the next tick, in the schedule's zone. It is logged
	// because it is not always next(LastTick): a resume skips the ticks
	// missed while paused, and a Start on a cron tick is itself a tick.
	NextTick time.Time `json:"next_tick,omitzero"`
	Fired    uint64    `json:"fired,omitempty"`

	cron cron.Schedule
}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// compile checks s and prepares its next-tick function.
func (s *Schedule) compile(b *Broker) error {
	if s.Name == "" || len(s.Name) > 200 || strings.ContainsAny(s.Name, "\x00\n") {
		return invalid("schedule name", "must be 1 to 200 bytes, no NUL or newline")
	}
	if err := b.Validate(&Message{Queue: s.Queue, Producer: s.Producer, JobType: s.JobType, Payload: s.Payload, Headers: s.Headers}); err != nil {
		return err
	}
	switch {
	case (s.Cron == "") == (s.Every == 0):
		return invalid("schedule", "give either a cron expression or an interval (every)")
	case s.Every < 0 || (s.Every > 0 && s.Every < MinEvery):
		return invalid("every", fmt.Sprintf("must be at least %v, got %v", MinEvery, s.Every))
	case s.CatchUp < 0 || s.CatchUp > 7*24*time.Hour:
		return invalid("catch_up", fmt.Sprintf("must be 0 (default %v) to 7 days, got %v", DefaultCatchUp, s.CatchUp))
	}
	if s.CatchUp == 0 {
		s.CatchUp = DefaultCatchUp
	}
	if s.Cron != "" {
		loc := time.UTC
		if s.TimeZone != "" {
			l, err := time.LoadLocation(s.TimeZone)
			if err != nil {
				return invalid("time_zone", fmt.Sprintf("%q is not a time zone name such as Europe/Paris", s.TimeZone))
			}
			loc = l
		}
		sched, err := parseCron(s.Cron)
		if err != nil {
			return invalid("cron", err.Error())
		}
		s.cron = zoned{sched, loc}
	}
	return nil
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

// checkCronEvery holds a cron expression's @every to what every takes: at
// least MinEvery, in whole seconds, since the cron library rounds anything
// shorter up to a second and drops a fraction of a second. A schedule
// recovered from the log is not checked: it was declared before this.
func checkCronEvery(spec string) error {
	arg, ok := strings.CutPrefix(strings.TrimSpace(spec), "@every ")
	if !ok {
		return nil
	}
	d, err := time.ParseDuration(arg)
	if err != nil {
		return nil // compile has refused it
	}
	switch {
	case d < MinEvery:
		return invalid("cron", fmt.Sprintf("%q: @every must be at least %v, got %v", spec, MinEvery, d))
	case d%time.Second != 0:
		return invalid("cron", fmt.Sprintf("%q: @every takes whole seconds (the cron library would tick every %v); for %v give every instead", spec, d.Truncate(time.Second), d))
	}
	return nil
}

// zoned evaluates a cron schedule in a time zone.
type zoned struct {
	s   cron.Schedule
	loc *time.Location
}

func (z zoned) Next(t time.Time) time.Time { return z.s.Next(t.In(z.loc)) }

// next is the first tick strictly after t and not before Start; the zero
// time when a cron expression has none in the five years after t.
func (s *Schedule) next(t time.Time) time.Time {
	if s.cron != nil {
		if t.Before(s.Start) {
			t = s.Start.Add(-time.Nanosecond) // a tick at Start itself may fire
		}
		return s.cron.Next(t)
	}
	if t.Before(s.Start) {
		return s.Start
	}
	// Whole intervals since Start, then one more: neither product can
	// overflow, as (d/Every)*Every <= d (DeclareSchedule keeps Start
	// within maxStartAge, so d does not saturate).
	d := t.Sub(s.Start)
	return s.Start.Add(d / s.Every * s.Every).Add(s.Every)
}

// maxStartAge is how far in the past (or the future) a schedule's Start
// may be when it is declared: far enough for any real calendar, near
// enough that the time since it fits a time.Duration for centuries.
const maxStartAge = 100 * 365 * 24 * time.Hour

// lastTick is the latest tick at or before now, counting from NextTick
// (which must not be after now), and how many ticks it passed over. An
// interval's is computed; a cron expression's is searched, at most a
// million ticks at a time (a later firing goes on from there).
func (s *Schedule) lastTick(now time.Time) (tick time.Time, skipped int) {
	tick = s.NextTick
	if s.cron == nil {
		// k*Every <= now-NextTick; were now centuries on, the difference
		// would saturate and the tick found be earlier, never after now.
		k := now.Sub(tick) / s.Every
		return tick.Add(k * s.Every), int(k)
	}
	for n := s.next(tick); !n.IsZero() && !n.After(now); n = s.next(n) {
		tick = n
		if skipped++; skipped >= 1_000_000 {
			break
		}
	}
	return tick, skipped
}

// uniqueFor is the unique-key window of a tick's job: the catch-up window
// and two periods, so that a tick fired again after a restart (which only
// happens within the catch-up window) finds its key still held; at most
// MaxUniqueFor (30 days, over the longest catch-up of 7), which a monthly
// schedule's two periods passed, so that its every tick was refused.
func (s *Schedule) uniqueFor(tick time.Time) time.Duration {
	p := min(s.period(tick), MaxUniqueFor) // two of it cannot overflow
	return min(s.CatchUp+2*p, MaxUniqueFor)
}

// period estimates the time between ticks, for the unique-key window.
func (s *Schedule) period(from time.Time) time.Duration {
	n := s.next(from)
	return max(s.next(n).Sub(n), time.Second)
}

// schedules is the broker's periodic jobs, with one timer for the earliest
// tick. Lock order: schedules.mu, then a queue's lock (through Publish).
type schedules struct {
	mu    sync.Mutex
	all   map[string]*Schedule
	timer wake
}

// DeclareSchedule creates or replaces a schedule; a replaced one keeps
// its last tick, so redeclaring it fires nothing twice.
func (b *Broker) DeclareSchedule(s Schedule) (Schedule, error) {
	now := b.clk.Now()
	// Stricter than compile, which also reads schedules declared before
	// these checks: a name is shown and answered as text.
	if !utf8.ValidString(s.Name) || strings.IndexFunc(s.Name, unicode.IsControl) >= 0 {
		return Schedule{}, invalid("schedule name", fmt.Sprintf("%q is not valid UTF-8 text without control characters", s.Name))
	}
	if !utf8.ValidString(s.Cron) || !utf8.ValidString(s.TimeZone) {
		return Schedule{}, invalid("schedule", "cron and time_zone must be valid UTF-8")
	}
	// The zone goes in TimeZone: the parser's own TZ= prefix would be a
	// second one. (A schedule declared with one before this check still
	// recovers: compile takes it.)
	if t := strings.TrimSpace(s.Cron); strings.HasPrefix(t, "TZ=") || strings.HasPrefix(t, "CRON_TZ=") {
		return Schedule{}, invalid("cron", fmt.Sprintf("%q: give the time zone in time_zone, not in the expression", s.Cron))
	}
	if !s.Start.IsZero() && (s.Start.Before(now.Add(-maxStartAge)) || s.Start.After(now.Add(maxStartAge))) {
		return Schedule{}, invalid("start", fmt.Sprintf("%v is more than 100 years from now", s.Start.Format(time.RFC3339)))
	}
	if err := s.compile(b); err != nil {
		return Schedule{}, err
	}
	if err := checkCronEvery(s.Cron); err != nil {
		return Schedule{}, err
	}
	// A date that never comes (February 30) parses; the cron library then
	// answers each Next with the zero time after searching five years. A
	// recovered schedule is not checked: it was when it was declared.
	if s.cron != nil && s.next(now).IsZero() {
		from := now
		if s.Start.After(now) {
			from = s.Start
		}
		return Schedule{}, invalid("cron", fmt.Sprintf("%q has no tick in the five years after %s (a date that never comes, such as February 30?)",
			s.Cron, from.Format(time.RFC3339)))
	}
	b.sched.mu.Lock()
	defer b.sched.mu.Unlock()
	if b.sched.all == nil {
		b.sched.all = map[string]*Schedule{}
	}
	old := b.sched.all[s.Name]
	if old == nil && len(b.sched.all) >= MaxSchedules {
		return Schedule{}, fmt.Errorf("%w: a broker holds at most %d schedules", ErrInvalid, MaxSchedules)
	}
	if s.Start.IsZero() {
		s.Start = now
		if old != nil {
			s.Start = old.Start
		}
	}
	from := now
	if old != nil {
		s.LastTick, s.Fired = old.LastTick, old.Fired
		switch {
		case old.Paused:
			// As a resume: the ticks missed while paused are not owed.
		case !old.NextTick.IsZero():
			// Nor are those a resume skipped, before the old next tick.
			if due := old.NextTick.Add(-time.Nanosecond); due.Before(from) {
				from = due
			}
			if s.LastTick.After(from) {
				from = s.LastTick
			}
		case !s.LastTick.IsZero():
			from = s.LastTick
		}
	}
	s.NextTick = s.next(from)
	b.sched.all[s.Name] = &s
	if err := b.logSchedule(&s); err != nil {
		return Schedule{}, err
	}
	b.armScheduleLocked(now)
	return s, nil
}

// Headers a schedule's jobs carry besides its own: which schedule fired
// the job, and for which tick.
const (
	HeaderSchedule     = "harbinger-schedule"
	HeaderScheduleTick = "harbinger-schedule-tick"
)

// firedHeaders are the headers of the job s publishes for tick: its own,
// and which schedule and tick fired it.
func firedHeaders(s *Schedule, tick time.Time) map[string]string {
	h := make(map[string]string, len(s.Headers)+2)
	maps.Copy(h, s.Headers)
	h[HeaderSchedule] = s.Name
	h[HeaderScheduleTick] = tick.UTC().Format(time.RFC3339Nano)
	return h
}

// Schedules reports every schedule, by name.
func (b *Broker) Schedules() []Schedule {
	b.sched.mu.Lock()
	defer b.sched.mu.Unlock()
	out := make([]Schedule, 0, len(b.sched.all))
	for _, s := range b.sched.all {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b Schedule) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// schedulesInto names the schedules that publish to queue.
func (b *Broker) schedulesInto(queue string) []string {
	var names []string
	for _, s := range b.Schedules() {
		if s.Queue == queue {
			names = append(names, s.Name)
		}
	}
	return names
}

// PauseSchedule stops (or restarts) a schedule's ticks; ticks that pass
// while it is paused do not fire.
func (b *Broker) PauseSchedule(name string, paused bool) (Schedule, error) {
	b.sched.mu.Lock()
	defer b.sched.mu.Unlock()
	s := b.sched.all[name]
	if s == nil {
		return Schedule{}, fmt.Errorf("%w: schedule %q", ErrScheduleNotFound, name)
	}
	if s.Paused != paused {
		s.Paused = paused
		now := b.clk.Now()
		if !paused {
			s.NextTick = s.next(now) // the ticks it missed while paused are not owed
		}
		if err := b.logSchedule(s); err != nil {
			return Schedule{}, err
		}
		b.armScheduleLocked(now)
	}
	return *s, nil
}

// DeleteSchedule removes a schedule.
func (b *Broker) DeleteSchedule(name string) error {
	b.sched.mu.Lock()
	defer b.sched.mu.Unlock()
	if b.sched.all[name] == nil {
		return fmt.Errorf("%w: schedule %q", ErrScheduleNotFound, name)
	}
	delete(b.sched.all, name)
	if st := b.cfg.Store; st != nil {
		pos, err := st.Append(&store.Record{Kind: store.KindSchedule, ID: name})
		if err == nil {
			err = st.Wait(pos)
		}
		if err != nil {
			return fmt.Errorf("%w: %v; the schedule is deleted but a restart may bring it back", ErrNotDurable, err)
		}
	}
	return nil
}

// logSchedule writes s (its definition and last tick) to the log and
// waits for it.
func (b *Broker) logSchedule(s *Schedule) error {
	st := b.cfg.Store
	if st == nil || b.recovering.Load() {
		return nil
	}
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	pos, err := st.Append(&store.Record{Kind: store.KindSchedule, ID: s.Name, Data: data})
	if err == nil {
		err = st.Wait(pos)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotDurable, err)
	}
	return nil
}

func (b *Broker) armScheduleLocked(now time.Time) {
	var first time.Time
	for _, s := range b.sched.all {
		if !s.Paused && !s.NextTick.IsZero() && (first.IsZero() || s.NextTick.Before(first)) {
			first = s.NextTick
		}
	}
	if first.IsZero() || b.draining.Load() || !b.sched.timer.due(first) {
		return
	}
	b.sched.timer.arm(b.clk, first, now, b.onScheduleTimer)
}

func (b *Broker) onScheduleTimer(g uint64) {
	b.sched.mu.Lock()
	defer b.sched.mu.Unlock()
	if !b.sched.timer.fired(g) || b.draining.Load() {
		return
	}
	now := b.clk.Now()
	b.fireDueLocked(now)
	b.armScheduleLocked(now)
}

// fireDueLocked fires every schedule whose tick has come: the latest tick
// that passed, once, if it is within the catch-up window; older ones are
// logged as skipped. Each tick's job carries a unique key made of the
// schedule and the tick, so a tick that fired just before a crash, whose
// record was lost, fires nothing the second time.
func (b *Broker) fireDueLocked(now time.Time) {
	for _, name := range slices.Sorted(maps.Keys(b.sched.all)) {
		s := b.sched.all[name]
		if s.Paused || s.NextTick.IsZero() || s.NextTick.After(now) {
			continue // a cron with no tick left has a zero NextTick
		}
		tick, skipped := s.lastTick(now)
		if skipped > 0 {
			b.log.Warn("broker: schedule missed ticks while the broker was down; they are skipped",
				"schedule", s.Name, "skipped", skipped, "from", s.NextTick, "to", tick)
		}
		if s.NextTick = s.next(tick); s.NextTick.IsZero() {
			b.log.Warn("broker: schedule has no tick in the five years after this one; it will not fire again unless redeclared", "schedule", s.Name, "tick", tick)
		}
		if late := now.Sub(tick); late > s.CatchUp {
			b.log.Warn("broker: schedule tick is older than its catch-up window; skipped", "schedule", s.Name, "tick", tick, "late", late, "catch_up", s.CatchUp)
			continue
		}
		m := &Message{Queue: s.Queue, Producer: s.Producer, JobType: s.JobType, Payload: s.Payload, Headers: firedHeaders(s, tick),
			UniqueKey: fmt.Sprintf("harbinger:schedule:%s:%d", s.Name, tick.UnixNano()), UniqueFor: s.uniqueFor(tick)}
		res := b.PublishEach([]*Message{m}, nil)[0]
		if res.Err != nil {
			b.log.Error("broker: schedule tick not published", "schedule", s.Name, "tick", tick, "err", res.Err)
			continue
		}
		// Counted even when the job is a duplicate: a tick fires once per
		// run (NextTick has moved past it), so a duplicate is this tick's
		// own job, published before a kill that lost the tick's record
		// (LastTick and Fired), and the tick has not been counted yet.
		s.Fired++
		s.LastTick = tick
		if err := b.logSchedule(s); err != nil {
			b.log.Error("broker: schedule tick not logged", "schedule", s.Name, "err", err)
		}
	}
}

// restoreSchedules loads schedules from their last records and fires what
// the downtime owes.
func (b *Broker) restoreSchedules(defs map[string][]byte) error {
	b.sched.mu.Lock()
	defer b.sched.mu.Unlock()
	for name, data := range defs {
		var s Schedule
		if err := json.Unmarshal(data, &s); err != nil {
			return fmt.Errorf("broker: recovering schedule %q: %w", name, err)
		}
		if err := s.compile(b); err != nil {
			return fmt.Errorf("broker: recovering schedule %q: %w", name, err)
		}
		if s.NextTick.IsZero() {
			// Logged before the next tick was: from the last tick, or
			// owed from its declaration.
			from := s.LastTick
			if from.IsZero() {
				from = s.Start
				if s.Every > 0 {
					from = s.Start.Add(-time.Nanosecond)
				}
			}
			s.NextTick = s.next(from)
		}
		if b.sched.all == nil {
			b.sched.all = map[string]*Schedule{}
		}
		b.sched.all[name] = &s
	}
	return nil
}

// scheduleRecords is every schedule as records, for a checkpoint.
func (b *Broker) scheduleRecords() []*store.Record {
	b.sched.mu.Lock()
	defer b.sched.mu.Unlock()
	var recs []*store.Record
	for _, s := range b.sched.all {
		if data, err := json.Marshal(s); err == nil {
			recs = append(recs, &store.Record{Kind: store.KindSchedule, ID: s.Name, Data: data})
		}
	}
	return recs
}

// startSchedules fires what the downtime owes and arms the timer; called
// once recovery is complete.
func (b *Broker) startSchedules() {
	b.sched.mu.Lock()
	defer b.sched.mu.Unlock()
	now := b.clk.Now()
	b.fireDueLocked(now)
	b.armScheduleLocked(now)
}
