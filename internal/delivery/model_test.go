package delivery

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/predict"
	"github.com/harbinger-mq/harbinger/internal/sched"
	"github.com/harbinger-mq/harbinger/internal/store"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newLine is a FIFO line, so that the order jobs come out in is the order
// they first joined the line (retries keep their place).
func newLine(t testing.TB, cfg Config) *Line {
	t.Helper()
	return New("q", cfg, newQueue(t, sched.FIFO))
}

// newQueue is a scheduler with the named policy's defaults and a default
// predictor.
func newQueue(t testing.TB, policy string) *sched.Queue {
	t.Helper()
	pol, err := sched.NewPolicy(policy, sched.PolicyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sq, err := sched.NewQueue(pol, predict.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return sq
}

func modelConfig() Config {
	return Config{
		MaxDepth: 40, MaxAttempts: 3, Lease: 10 * time.Second, RetryBase: time.Second, RetryMax: 4 * time.Second,
		MaxDelay: time.Hour, MaxDuration: time.Hour, MaxDead: 1000, MaxNames: 100, Durable: true,
	}
}

// Where the reference model has a job.
type place int

const (
	pWaiting place = iota
	pRunning
	pDelayed
	pDead
	pGone
)

func (p place) String() string {
	return [...]string{"waiting", "running", "delayed", "dead", "gone"}[p]
}

// refJob is the model's view of one job, written from Line's documentation
// with plain fields and linear scans.
type refJob struct {
	id        string
	place     place
	order     uint64    // its place in line: set when it first joins one, kept across retries
	entered   time.Time // when it took that place
	attempt   int
	max       int
	holder    Holder
	due       time.Time // running: lease end; delayed: when due
	scheduled bool      // delayed for its first run: joins the line afresh when due
	ttl       time.Duration
	expires   time.Time // set when it joins the line; zero is never
	cancelled bool
	died      int // when it became a dead letter, in deaths
	names     Names
	headers   map[string]string
	published time.Time
}

// enqueued is when the Line says j took its place: entered, kept to the
// millisecond after the publish when it is not the publish.
func (j *refJob) enqueued() time.Time {
	return j.published.Add(j.entered.Sub(j.published).Truncate(time.Millisecond))
}

type refLine struct {
	cfg    Config
	jobs   []*refJob
	order  uint64
	deaths int
}

// kill makes j a dead letter, the newest.
func (m *refLine) kill(j *refJob) {
	m.deaths++
	j.place, j.holder, j.died = pDead, 0, m.deaths
}

func (m *refLine) in(p place) []*refJob {
	var out []*refJob
	for _, j := range m.jobs {
		if j.place == p {
			out = append(out, j)
		}
	}
	return out
}

func (m *refLine) find(id string) *refJob {
	for _, j := range m.jobs {
		if j.id == id {
			return j
		}
	}
	return nil
}

// join puts j in line; fresh gives it a new place (a first entry, or a
// requeued dead letter), else it keeps its old one.
func (m *refLine) join(j *refJob, now time.Time, fresh bool) {
	if fresh {
		m.order++
		j.order, j.entered = m.order, now
	}
	j.place, j.holder = pWaiting, 0
}

// enter is a job's first entry: its TTL counts from now.
func (m *refLine) enter(j *refJob, now time.Time) {
	if j.ttl > 0 {
		j.expires = now.Add(j.ttl)
	}
	j.scheduled = false
	m.join(j, now, true)
}

// retry is what a failed delivery does: drop a cancelled job, dead-letter
// one out of attempts, else back in line at its place.
func (m *refLine) retry(j *refJob, now time.Time) {
	switch {
	case j.cancelled:
		j.place = pGone
	case j.attempt >= j.max:
		m.kill(j)
	default:
		m.join(j, now, false)
	}
}

// expire dead-letters every waiting job whose TTL has passed.
func (m *refLine) expire(now time.Time) {
	waiting := m.in(pWaiting)
	slices.SortFunc(waiting, func(a, b *refJob) int { return a.expires.Compare(b.expires) })
	for _, j := range waiting {
		if !j.expires.IsZero() && !j.expires.After(now) {
			m.kill(j)
		}
	}
}

func (m *refLine) tick(now time.Time) {
	running := m.in(pRunning)
	slices.SortFunc(running, func(a, b *refJob) int { return a.due.Compare(b.due) })
	for _, j := range running {
		if !j.due.After(now) {
			m.retry(j, now)
		}
	}
	m.expire(now)
	delayed := m.in(pDelayed)
	slices.SortFunc(delayed, func(a, b *refJob) int { return a.due.Compare(b.due) })
	for _, j := range delayed {
		if j.due.After(now) {
			continue
		}
		if j.scheduled {
			m.enter(j, now)
		} else {
			m.join(j, now, false)
		}
	}
}

func (m *refLine) deliver(h Holder, now time.Time) *refJob {
	m.expire(now)
	var next *refJob
	for _, j := range m.in(pWaiting) {
		if next == nil || j.order < next.order {
			next = j
		}
	}
	if next != nil {
		next.place, next.holder, next.due = pRunning, h, now.Add(m.cfg.Lease)
		next.attempt++
	}
	return next
}

func (m *refLine) nextDeadline() (time.Time, bool) {
	var at time.Time
	for _, j := range m.jobs {
		t := j.due
		if j.place == pWaiting {
			t = j.expires
		} else if j.place != pRunning && j.place != pDelayed {
			continue
		}
		if !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	return at, !at.IsZero()
}

// TestLineAgainstModel runs random operation sequences on a Line and on
// the reference model and compares them after every step: where each job
// is, its attempts, what a delivery hands out, what the Line let go of,
// and the next deadline.
func TestLineAgainstModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			runModel(t, seed, 400)
		})
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	cfg := modelConfig()
	l := newLine(t, cfg)
	m := &refLine{cfg: cfg}
	now := t0
	jobs := map[string]*Job{}
	released := map[string]bool{}
	settled, deliveries := 0, 0
	holders := []Holder{l.Attach(), l.Attach(), l.Attach()}
	n := 0
	var log []string
	snap := &Snapshot{}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d after %v: %s", seed, log[max(0, len(log)-400):], fmt.Sprintf(format, args...))
	}
	anyJob := func(p place) *refJob {
		js := m.in(p)
		if len(js) == 0 {
			return nil
		}
		return js[rng.IntN(len(js))]
	}
	for step := range steps {
		switch op := rng.IntN(100); {
		case op < 25: // publish, some delayed, some with a TTL or their own attempts
			n++
			id := "j" + strconv.Itoa(n)
			j := newJob(id, []byte(id))
			names := Names{"p", "t" + strconv.Itoa(n%3)}
			if n%7 == 0 {
				names.Producer = "prödücer-\xff" // not valid UTF-8: the Line keeps bytes
			}
			r := &refJob{id: id, max: cfg.MaxAttempts, names: names, published: now}
			if rng.IntN(4) == 0 {
				r.ttl = time.Duration(1+rng.IntN(30))*time.Second + time.Duration(n) // distinct expiries
			}
			if rng.IntN(4) == 0 {
				r.headers = map[string]string{"trace": "ünï-" + id}
			}
			if r.ttl > 0 || r.headers != nil {
				j.SetOptions(r.headers, r.ttl, 0, 0)
			}
			if rng.IntN(5) == 0 {
				r.max = 1 + rng.IntN(4)
				j.SetMaxAttempts(r.max)
			}
			var runAt time.Time
			if rng.IntN(5) == 0 {
				runAt = now.Add(time.Duration(1+rng.IntN(20))*time.Second + time.Duration(n))
			}
			rec, err := l.Admit(j, names, runAt, now)
			log = append(log, "publish "+id)
			if len(m.in(pWaiting)) >= cfg.MaxDepth {
				if err != ErrFull {
					fail("publish to a full line: %v, want ErrFull", err)
				}
				continue
			}
			if err != nil || rec == nil || rec.Kind != store.KindJob || rec.Job.ID != id {
				fail("Admit = %v, %v", rec, err)
			}
			l.Commit(j, now)
			jobs[id] = j
			m.jobs = append(m.jobs, r)
			if runAt.IsZero() {
				m.enter(r, now)
			} else {
				r.place, r.scheduled, r.due = pDelayed, true, runAt
			}
		case op < 45: // deliver
			h := holders[rng.IntN(len(holders))]
			got := l.Deliver(h, now)
			want := m.deliver(h, now)
			log = append(log, fmt.Sprintf("deliver to %d: %v", h, idOf(got)))
			if got != nil {
				deliveries++
			}
			if (got == nil) != (want == nil) || got != nil && got.ID() != want.id {
				var line []string
				for _, j := range l.Peek(now, 100) {
					line = append(line, j.ID())
				}
				var ref []string
				ws := m.in(pWaiting)
				slices.SortFunc(ws, func(a, b *refJob) int { return int(a.order) - int(b.order) })
				for _, r := range ws {
					ref = append(ref, fmt.Sprintf("%s@%d", r.id, r.order))
				}
				fail("Deliver = %v, model %v; line then %v, model %v", idOf(got), refID(want), line, ref)
			}
		case op < 60: // ack
			r := anyJob(pRunning)
			if r == nil {
				continue
			}
			d := time.Duration(1+rng.IntN(1000)) * time.Millisecond
			log = append(log, "ack "+r.id)
			if _, err := l.Ack(r.holder, r.id, d, now); err != nil {
				fail("Ack(%s): %v", r.id, err)
			}
			r.place = pGone
		case op < 70: // nack, each action
			r := anyJob(pRunning)
			if r == nil {
				continue
			}
			action := NackAction(rng.IntN(4))
			delay := time.Duration(rng.IntN(3)) * time.Second
			log = append(log, fmt.Sprintf("nack %s %d %v", r.id, action, delay))
			if err := l.Nack(r.holder, r.id, action, delay, "boom", false, now); err != nil {
				fail("Nack(%s): %v", r.id, err)
			}
			if action == Retry {
				delay = min(cfg.RetryBase<<max(r.attempt-1, 0), cfg.RetryMax)
				action = RequeueAfter
			}
			switch {
			case r.cancelled:
				r.place = pGone
			case action == DeadLetter:
				m.kill(r)
			case action == RequeueAfter && delay > 0 && r.attempt < r.max:
				r.place, r.holder, r.due = pDelayed, 0, now.Add(delay)
			default:
				m.retry(r, now)
			}
		case op < 73: // a send that failed
			r := anyJob(pRunning)
			if r == nil {
				continue
			}
			log = append(log, "return "+r.id)
			l.Return(r.holder, r.id, now)
			if r.cancelled {
				r.place = pGone
			} else {
				r.attempt--
				m.join(r, now, false)
			}
		case op < 76: // extend
			r := anyJob(pRunning)
			if r == nil {
				continue
			}
			lease := time.Duration(rng.IntN(30)) * time.Second
			log = append(log, fmt.Sprintf("extend %s %v", r.id, lease))
			if err := l.Extend(r.holder, r.id, lease, now); err != nil {
				fail("Extend: %v", err)
			}
			if lease == 0 {
				lease = cfg.Lease
			}
			r.due = now.Add(lease)
		case op < 79: // a consumer goes away
			h := holders[rng.IntN(len(holders))]
			log = append(log, fmt.Sprintf("detach %d", h))
			l.Detach(h, now)
			for _, r := range m.in(pRunning) {
				if r.holder == h {
					m.retry(r, now)
				}
			}
		case op < 84: // cancel anything, even a job that is gone
			if len(m.jobs) == 0 {
				continue
			}
			r := m.jobs[rng.IntN(len(m.jobs))]
			log = append(log, "cancel "+r.id)
			st, err := l.Cancel(r.id, now)
			want := map[place]State{pWaiting: Waiting, pDelayed: Delayed, pRunning: Running}[r.place]
			if want == "" {
				if err != ErrNotFound {
					fail("Cancel(%s) of a %v job = %v, %v; want ErrNotFound", r.id, r.place, st, err)
				}
				continue
			}
			if err != nil || st != want {
				fail("Cancel(%s) = %v, %v; want %v", r.id, st, err, want)
			}
			if r.place == pRunning {
				r.cancelled = true
			} else {
				r.place = pGone
			}
		case op < 86: // dead letters requeued or deleted
			requeue := rng.IntN(2) == 0
			var ids []string
			for _, r := range m.in(pDead) {
				if rng.IntN(2) == 0 {
					ids = append(ids, r.id)
				}
			}
			if len(ids) == 0 {
				continue
			}
			log = append(log, fmt.Sprintf("take dead %v requeue %v", ids, requeue))
			if got := l.TakeDead(ids, requeue, now); got != len(ids) {
				fail("TakeDead moved %d, want %d", got, len(ids))
			}
			// The Line takes them oldest dead first.
			slices.SortFunc(ids, func(a, b string) int { return m.find(a).died - m.find(b).died })
			for _, id := range ids {
				r := m.find(id)
				if !requeue {
					r.place = pGone
					continue
				}
				r.attempt, r.expires = 0, time.Time{}
				m.join(r, now, true)
			}
		case op < 87: // purge
			log = append(log, "purge")
			want := len(m.in(pWaiting))
			if got := l.Purge(); got != want {
				fail("Purge = %d, want %d", got, want)
			}
			for _, r := range m.in(pWaiting) {
				r.place = pGone
			}
		default: // time passes; the timer fires at the next deadline or later
			d := time.Duration(rng.IntN(8000)) * time.Millisecond
			if at, ok := l.NextDeadline(); ok && rng.IntN(2) == 0 && at.After(now) {
				d = at.Sub(now)
			}
			now = now.Add(d)
			log = append(log, fmt.Sprintf("tick +%v", d))
			l.Tick(now)
			m.tick(now)
		}
		// The effects: what was let go of, and deliveries that ended.
		for _, j := range l.Fx.Released {
			if released[j.ID()] {
				fail("%s released twice", j.ID())
			}
			released[j.ID()] = true
		}
		settled += l.Fx.Settled
		for _, c := range l.Fx.Cancels {
			if r := m.find(c.ID); r == nil || r.place != pRunning || r.holder != c.Holder {
				fail("cancel notice %+v for a job not running with that holder", c)
			}
		}
		l.Fx.Clear()
		check(t, step, l, m, released, fail)
		// A checkpoint written a batch at a time: every job of a snapshot
		// taken some steps ago must come out as the whole-Line dump has it
		// now, or not at all once it is gone.
		if step%29 == 0 {
			snap = l.Snapshot()
		}
		checkSnapshot(step, l, snap, fail)
	}
	if settled+l.InFlight() != deliveries {
		t.Errorf("%d deliveries, %d settled and %d in flight", deliveries, settled, l.InFlight())
	}
}

// check compares the Line with the model.
func check(t *testing.T, step int, l *Line, m *refLine, released map[string]bool, fail func(string, ...any)) {
	t.Helper()
	got := map[string]place{}
	attempts := map[string]int{}
	held := map[string]*Job{}
	each := func(p place) func(*Job) {
		return func(j *Job) { got[j.ID()], attempts[j.ID()], held[j.ID()] = p, j.Attempt(), j }
	}
	l.Each(each(pWaiting), each(pRunning), each(pDelayed), func(d DeadLetterEntry) { each(pDead)(d.Job) })
	// What each job says of itself: the names and options it was
	// published with, and, while it waits, when it took its place.
	for _, r := range m.jobs {
		j := held[r.id]
		if j == nil {
			continue
		}
		if j.Producer() != r.names.Producer || j.JobType() != r.names.JobType || j.TTL() != r.ttl || !maps.Equal(j.Headers(), r.headers) {
			fail("step %d: %s says %q %q, TTL %v, headers %v; published %q %q, %v, %v", step, r.id,
				j.Producer(), j.JobType(), j.TTL(), j.Headers(), r.names.Producer, r.names.JobType, r.ttl, r.headers)
		}
		if r.place == pWaiting && !j.Enqueued().Equal(r.enqueued()) {
			fail("step %d: %s took its place at %v, model %v", step, r.id, j.Enqueued(), r.enqueued())
		}
	}
	// Lookup says where each job stands, as the model does, with the index
	// or without it, and never builds one.
	states := map[place]State{pWaiting: Waiting, pRunning: Running, pDelayed: Delayed, pDead: Dead, pGone: ""}
	indexed := l.byID != nil
	for _, r := range m.jobs {
		j, st := l.Lookup(r.id)
		if st != states[r.place] || (j == nil) != (r.place == pGone) || (j != nil && j.ID() != r.id) {
			fail("step %d: Lookup(%s) = %v, %q; the model has it %v", step, r.id, j != nil, st, r.place)
		}
	}
	if !indexed && l.byID != nil {
		fail("step %d: Lookup built the index", step)
	}
	// Once a Cancel has built the index by id, it holds every job the
	// Line holds, and nothing else.
	if l.byID != nil {
		if len(l.byID) != len(got) {
			fail("step %d: the index holds %d jobs, the Line %d", step, len(l.byID), len(got))
		}
		for id, j := range l.byID {
			if _, ok := got[id]; !ok || j.ID() != id || j.is(flagGone) {
				fail("step %d: the index holds %s, which the Line does not", step, id)
			}
		}
		// And Find says where each job stands, as the model does.
		for _, r := range m.jobs {
			j, st := l.Find(r.id)
			if st != states[r.place] || (j == nil) != (r.place == pGone) || (j != nil && j.ID() != r.id) {
				fail("step %d: Find(%s) = %v, %q; the model has it %v", step, r.id, j != nil, st, r.place)
			}
		}
	}
	for _, r := range m.jobs {
		p, ok := got[r.id]
		if !ok {
			p = pGone
		}
		if p != r.place {
			fail("step %d: %s is %v, model %v", step, r.id, p, r.place)
		}
		if (p == pGone) != released[r.id] {
			fail("step %d: %s is %v, released %v", step, r.id, p, released[r.id])
		}
		if p != pGone && attempts[r.id] != r.attempt {
			fail("step %d: %s has %d attempts, model %d", step, r.id, attempts[r.id], r.attempt)
		}
	}
	if len(got) != len(m.jobs)-len(m.in(pGone)) {
		fail("step %d: the line holds %d jobs, the model %d", step, len(got), len(m.jobs)-len(m.in(pGone)))
	}
	if l.Len() != len(m.in(pWaiting)) || l.InFlight() != len(m.in(pRunning)) || l.DelayedLen() != len(m.in(pDelayed)) {
		fail("step %d: counts %d/%d/%d", step, l.Len(), l.InFlight(), l.DelayedLen())
	}
	// How long the waiting jobs have waited: the oldest, and the entry
	// times at a few ranks, to the millisecond.
	var entered []time.Time
	for _, r := range m.in(pWaiting) {
		entered = append(entered, r.enqueued().Truncate(time.Millisecond))
	}
	slices.SortFunc(entered, time.Time.Compare)
	oldest, ok := l.OldestWaiting()
	if ok != (len(entered) > 0) || ok && !oldest.Equal(entered[0]) {
		fail("step %d: oldest waiting %v %v, model %v", step, oldest, ok, entered[:min(1, len(entered))])
	}
	qs := []float64{0, 0.5, 0.99, 1}
	for i, got := range WaitQuantiles(l.AppendWaitCounts(nil), qs...) {
		var want time.Time
		if len(entered) > 0 {
			want = entered[int(qs[i]*float64(len(entered)-1))]
		}
		if !got.Equal(want) {
			fail("step %d: the waiting job at rank %v entered at %v, model %v", step, qs[i], got, want)
		}
	}
	at, ok := l.NextDeadline()
	wat, wok := m.nextDeadline()
	if ok != wok || !at.Equal(wat) {
		fail("step %d: next deadline %v %v, model %v %v", step, at, ok, wat, wok)
	}
}

// checkSnapshot compares StateRecord for each job of snap with the record
// StateRecords writes for it now. A snapshot gives up each job it writes,
// so a copy of snap is written, and snap can be checked again later.
func checkSnapshot(step int, l *Line, snap *Snapshot, fail func(string, ...any)) {
	snap = &Snapshot{items: slices.Clone(snap.items), dead: snap.dead}
	want := map[string]*store.Record{}
	l.StateRecords(func(r *store.Record) { want[r.ID] = r })
	for i := range snap.Len() {
		j := jobOf(snap.items[i])
		got := l.StateRecord(snap, i)
		if snap.items[i] != nil {
			fail("step %d: %s: the snapshot still holds the job it wrote", step, j.ID())
		}
		w := want[j.ID()]
		if (got == nil) != (w == nil) || got != nil && !reflect.DeepEqual(*got.Job, *w.Job) {
			fail("step %d: %s: checkpoint record %+v, the whole dump has %+v", step, j.ID(), recordJob(got), recordJob(w))
		}
	}
}

func recordJob(r *store.Record) any {
	if r == nil {
		return nil
	}
	return *r.Job
}

func idOf(j *Job) string {
	if j == nil {
		return "none"
	}
	return j.ID()
}

func refID(j *refJob) string {
	if j == nil {
		return "none"
	}
	return j.id
}
