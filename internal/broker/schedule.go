package broker

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // schedules name time zones; the binary must know them anywhere
	"unicode"
	"unicode/utf8"

	"github.com/harbinger-mq/harbinger/internal/periodic"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// DefaultCatchUp is how late a tick may still fire after the broker was
// down through it.
const DefaultCatchUp = time.Hour

// MaxSchedules bounds the periodic schedules a broker holds.
const MaxSchedules = 10_000

// MinEvery is the shortest interval a schedule may have (see
// periodic.MinEvery).
const MinEvery = periodic.MinEvery

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

	spec periodic.Spec
}

// compile checks s and prepares its next-tick function.
func (s *Schedule) compile(b *Broker) error {
	if s.Name == "" || len(s.Name) > 200 || strings.ContainsAny(s.Name, "\x00\n") {
		return invalid("schedule name", "must be 1 to 200 bytes, no NUL or newline")
	}
	if err := b.Validate(&Message{Queue: s.Queue, Producer: s.Producer, JobType: s.JobType, Payload: s.Payload, Headers: s.Headers}); err != nil {
		return err
	}
	spec, err := periodic.Compile(s.Cron, s.TimeZone, s.Every, s.Start)
	if err != nil {
		return fieldError(err)
	}
	if s.CatchUp < 0 || s.CatchUp > 7*24*time.Hour {
		return invalid("catch_up", fmt.Sprintf("must be 0 (default %v) to 7 days, got %v", DefaultCatchUp, s.CatchUp))
	}
	if s.CatchUp == 0 {
		s.CatchUp = DefaultCatchUp
	}
	s.spec = spec
	return nil
}

// fieldError is a periodic.FieldError as the broker's invalid-field error.
func fieldError(err error) error {
	var fe *periodic.FieldError
	if errors.As(err, &fe) {
		return invalid(fe.Field, fe.Msg)
	}
	return err
}

// next is the first tick strictly after t and not before Start (see
// periodic.Spec.Next).
func (s *Schedule) next(t time.Time) time.Time { return s.timing().Next(t) }

// timing is the schedule's tick arithmetic from its Start as it is now.
func (s *Schedule) timing() periodic.Spec { return s.spec.Starting(s.Start) }

// uniqueFor is the unique-key window of a tick's job (see
// periodic.Spec.UniqueFor), at most MaxUniqueFor.
func (s *Schedule) uniqueFor(tick time.Time) time.Duration {
	return s.timing().UniqueFor(tick, s.CatchUp, MaxUniqueFor)
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
	if !s.Start.IsZero() && (s.Start.Before(now.Add(-periodic.MaxStartAge)) || s.Start.After(now.Add(periodic.MaxStartAge))) {
		return Schedule{}, invalid("start", fmt.Sprintf("%v is more than 100 years from now", s.Start.Format(time.RFC3339)))
	}
	if err := s.compile(b); err != nil {
		return Schedule{}, err
	}
	if err := periodic.CheckCronEvery(s.Cron); err != nil {
		return Schedule{}, fieldError(err)
	}
	// A date that never comes (February 30) parses; the cron library then
	// answers each Next with the zero time after searching five years. A
	// recovered schedule is not checked: it was when it was declared.
	if s.spec.IsCron() && s.next(now).IsZero() {
		from := now
		if s.Start.After(now) {
			from = s.Start
		}
		return Schedule{}, invalid("cron", fmt.Sprintf("%q has no tick in the five years after %s (a date that never comes, such as February 30?)",
			s.Cron, from.Format(time.RFC3339)))
	}
	b.periodic.mu.Lock()
	defer b.periodic.mu.Unlock()
	if b.periodic.all == nil {
		b.periodic.all = map[string]*Schedule{}
	}
	old := b.periodic.all[s.Name]
	if old == nil && len(b.periodic.all) >= MaxSchedules {
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
	b.periodic.all[s.Name] = &s
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
	b.periodic.mu.Lock()
	defer b.periodic.mu.Unlock()
	out := make([]Schedule, 0, len(b.periodic.all))
	for _, s := range b.periodic.all {
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
	b.periodic.mu.Lock()
	defer b.periodic.mu.Unlock()
	s := b.periodic.all[name]
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
	b.periodic.mu.Lock()
	defer b.periodic.mu.Unlock()
	if b.periodic.all[name] == nil {
		return fmt.Errorf("%w: schedule %q", ErrScheduleNotFound, name)
	}
	delete(b.periodic.all, name)
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
	for _, s := range b.periodic.all {
		if !s.Paused && !s.NextTick.IsZero() && (first.IsZero() || s.NextTick.Before(first)) {
			first = s.NextTick
		}
	}
	if first.IsZero() || b.draining.Load() || !b.periodic.timer.due(first) {
		return
	}
	b.periodic.timer.arm(b.clk, first, now, b.onScheduleTimer)
}

func (b *Broker) onScheduleTimer(g uint64) {
	b.periodic.mu.Lock()
	defer b.periodic.mu.Unlock()
	if !b.periodic.timer.fired(g) || b.draining.Load() {
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
	for _, name := range slices.Sorted(maps.Keys(b.periodic.all)) {
		s := b.periodic.all[name]
		if s.Paused || s.NextTick.IsZero() || s.NextTick.After(now) {
			continue // a cron with no tick left has a zero NextTick
		}
		f, ok := s.timing().Due(s.NextTick, now, s.CatchUp)
		if !ok {
			continue
		}
		tick := f.Tick
		if f.Skipped > 0 {
			b.log.Warn("broker: schedule missed ticks while the broker was down; they are skipped",
				"schedule", s.Name, "skipped", f.Skipped, "from", s.NextTick, "to", tick)
		}
		if s.NextTick = f.Next; s.NextTick.IsZero() {
			b.log.Warn("broker: schedule has no tick in the five years after this one; it will not fire again unless redeclared", "schedule", s.Name, "tick", tick)
		}
		if f.TooLate {
			b.log.Warn("broker: schedule tick is older than its catch-up window; skipped", "schedule", s.Name, "tick", tick, "late", now.Sub(tick), "catch_up", s.CatchUp)
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
	b.periodic.mu.Lock()
	defer b.periodic.mu.Unlock()
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
		if b.periodic.all == nil {
			b.periodic.all = map[string]*Schedule{}
		}
		b.periodic.all[name] = &s
	}
	return nil
}

// scheduleRecords is every schedule as records, for a checkpoint.
func (b *Broker) scheduleRecords() []*store.Record {
	b.periodic.mu.Lock()
	defer b.periodic.mu.Unlock()
	var recs []*store.Record
	for _, s := range b.periodic.all {
		if data, err := json.Marshal(s); err == nil {
			recs = append(recs, &store.Record{Kind: store.KindSchedule, ID: s.Name, Data: data})
		}
	}
	return recs
}

// startSchedules fires what the downtime owes and arms the timer; called
// once recovery is complete.
func (b *Broker) startSchedules() {
	b.periodic.mu.Lock()
	defer b.periodic.mu.Unlock()
	now := b.clk.Now()
	b.fireDueLocked(now)
	b.armScheduleLocked(now)
}
