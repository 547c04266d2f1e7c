package delivery

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/harbinger-mq/harbinger/internal/sched"
	"github.com/harbinger-mq/harbinger/internal/store"
)

func publish(t *testing.T, l *Line, now time.Time, ids ...string) []*Job {
	t.Helper()
	var js []*Job
	for _, id := range ids {
		j := newJob(id, []byte("payload of "+id))
		if _, err := l.Admit(j, Names{"p", "t"}, time.Time{}, now); err != nil {
			t.Fatal(err)
		}
		l.Commit(j, now)
		js = append(js, j)
	}
	return js
}

// The retry curve: the base doubled per attempt, capped at the max,
// within the jitter; a job's own policy wins over the queue's.
func TestBackoff(t *testing.T) {
	t.Parallel()
	cfg := modelConfig()
	cfg.RetryBase, cfg.RetryMax, cfg.RetryJitter = 10*time.Second, 40*time.Second, 0.2
	l := newLine(t, cfg)
	for _, c := range []struct {
		j    *Job
		want time.Duration
	}{
		{&Job{attempt: 1}, 10 * time.Second},
		{&Job{attempt: 2}, 20 * time.Second},
		{&Job{attempt: 3}, 40 * time.Second},
		{&Job{attempt: 9}, 40 * time.Second},
		{&Job{attempt: 200}, 40 * time.Second}, // no overflow
		{&Job{attempt: 2, m: &meta{opts: options{retryBase: time.Second, retryMax: time.Hour}}}, 2 * time.Second},
		{&Job{attempt: 5, m: &meta{opts: options{retryBase: time.Second, retryMax: 3 * time.Second}}}, 3 * time.Second},
	} {
		lo, hi := time.Duration(float64(c.want)*0.8), time.Duration(float64(c.want)*1.2)
		seen := map[time.Duration]bool{}
		for range 200 {
			d := l.backoff(c.j)
			if d < lo || d > hi {
				t.Fatalf("attempt %d: backoff %v outside [%v, %v]", c.j.attempt, d, lo, hi)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Fatalf("attempt %d: %d distinct delays in 200: no jitter", c.j.attempt, len(seen))
		}
	}
	// An injected source makes it exact.
	cfg.Rand = func() float64 { return 0.5 }
	l = newLine(t, cfg)
	if d := l.backoff(&Job{attempt: 2}); d != 20*time.Second {
		t.Errorf("backoff with the jitter's midpoint = %v, want 20s", d)
	}
}

// The retry curve never falls back once it reaches the max: a base whose
// doubling overflowed a Duration wrapped around to a positive delay below
// the max (22m54.39s doubled 26 times came out as 8h40m instead of 24h),
// for jobs allowed many attempts.
func TestBackoffNeverFallsBack(t *testing.T) {
	t.Parallel()
	cfg := modelConfig()
	cfg.MaxDelay, cfg.RetryJitter = 24*time.Hour, 0.2
	cfg.Rand = func() float64 { return 0.5 }
	l := newLine(t, cfg)
	for _, base := range []time.Duration{22*time.Minute + 54390*time.Millisecond, 13*time.Hour + 7*time.Minute + 59*time.Second, 10 * time.Second, time.Hour} {
		prev := time.Duration(0)
		for attempt := uint16(1); attempt <= 100; attempt++ {
			j := &Job{attempt: attempt, MaxAttempts: 100, m: &meta{opts: options{retryBase: base, retryMax: 24 * time.Hour}}}
			d := l.backoff(j)
			if d < prev || d > 24*time.Hour {
				t.Fatalf("base %v: attempt %d waits %v after %v, want the curve to grow to 24h and stay", base, attempt, d, prev)
			}
			prev = d
		}
		if prev != 24*time.Hour {
			t.Errorf("base %v: the curve ends at %v, want 24h", base, prev)
		}
	}
}

// Past MaxDead the oldest dead letter is dropped and released.
func TestDeadLettersBounded(t *testing.T) {
	t.Parallel()
	cfg := modelConfig()
	cfg.MaxDead = 2
	l := newLine(t, cfg)
	publish(t, l, t0, "a", "b", "c")
	h := l.Attach()
	for range 3 {
		j := l.Deliver(h, t0)
		if err := l.Nack(h, j.ID(), DeadLetter, 0, "bad", false, t0); err != nil {
			t.Fatal(err)
		}
	}
	var dead []string
	for _, d := range l.Dead() {
		dead = append(dead, d.Job.ID()+": "+d.Reason)
	}
	if !slices.Equal(dead, []string{"b: nacked: bad", "c: nacked: bad"}) {
		t.Errorf("dead letters %v", dead)
	}
	if len(l.Fx.Released) != 1 || l.Fx.Released[0].ID() != "a" || l.Stats.DeadDropped != 1 {
		t.Errorf("released %v, dropped %d; want a, 1", l.Fx.Released, l.Stats.DeadDropped)
	}
}

// Shutdown returns what is in flight with its attempt not counted and
// drops what was cancelled; nothing else moves.
func TestShutdownReturnsInFlight(t *testing.T) {
	t.Parallel()
	l := newLine(t, modelConfig())
	publish(t, l, t0, "a", "b", "c")
	h := l.Attach()
	a, b := l.Deliver(h, t0), l.Deliver(h, t0)
	if _, err := l.Cancel(b.ID(), t0); err != nil {
		t.Fatal(err)
	}
	if n := l.Shutdown(t0); n != 1 {
		t.Errorf("Shutdown returned %d, want 1", n)
	}
	if a.Attempt() != 0 || l.Len() != 2 || l.InFlight() != 0 || l.Held(h) != 0 {
		t.Errorf("after shutdown: attempt %d, %d waiting, %d in flight", a.Attempt(), l.Len(), l.InFlight())
	}
	if len(l.Fx.Released) != 1 || l.Fx.Released[0] != b || l.Fx.Settled != 2 {
		t.Errorf("released %v, settled %d", l.Fx.Released, l.Fx.Settled)
	}
	// a keeps its place ahead of c.
	if j := l.Deliver(h, t0); j != a {
		t.Errorf("first after shutdown: %v, want a", idOf(j))
	}
}

// What StateRecords writes, Restore brings back: every job where it was,
// its attempts, its place in line, its dead letter's reason.
func TestRestoreFromStateRecords(t *testing.T) {
	t.Parallel()
	cfg := modelConfig()
	l := newLine(t, cfg)
	now := t0
	publish(t, l, now, "w1", "w2", "run", "late", "dead")
	sched := newJob("sched", []byte("later"))
	if _, err := l.Admit(sched, Names{}, now.Add(time.Hour), now); err != nil {
		t.Fatal(err)
	}
	l.Commit(sched, now)
	h := l.Attach()
	l.Deliver(h, now)         // w1, then nacked to wait 30 s
	l.Deliver(h, now)         // w2, returned
	run := l.Deliver(h, now)  // run, stays in flight
	l.Deliver(h, now)         // late, stays in flight
	dead := l.Deliver(h, now) // dead
	_ = l.Nack(h, "w1", RequeueAfter, 30*time.Second, "", false, now)
	l.Return(h, "w2", now)
	_ = l.Nack(h, dead.ID(), DeadLetter, 0, "poison \xff", false, now)
	_ = run

	var recs []*store.Record
	n := l.StateRecords(func(r *store.Record) { recs = append(recs, r) })
	if n != 6 || len(recs) != 6 {
		t.Fatalf("%d records for %d jobs, want 6", len(recs), n)
	}
	r := newLine(t, cfg)
	for _, rec := range recs {
		if rec.Kind != store.KindJob {
			t.Fatalf("record kind %v", rec.Kind)
		}
		r.Restore(rec.Job, rec.Job.Reset, now)
	}
	r.SortDead()
	if len(r.Fx.Records) != 0 {
		t.Errorf("Restore wrote %d records", len(r.Fx.Records))
	}
	want, got := lineView(l, true), lineView(r, false)
	if !slices.Equal(want, got) {
		t.Errorf("restored\n%v\nwant\n%v", got, want)
	}
	// In line in the same order: the returned job, then the two that were
	// in flight (a crash brings them back with their attempt counted).
	var order []string
	for j := r.Deliver(r.Attach(), now); j != nil; j = r.Deliver(r.Attach(), now) {
		order = append(order, fmt.Sprint(j.ID(), "#", j.Attempt()))
	}
	if !slices.Equal(order, []string{"w2#1", "run#2", "late#2"}) {
		t.Errorf("restored line hands out %v", order)
	}
}

// jobOf finds a job from its item, for jobs anywhere in memory, among
// them one inside a larger allocation.
func TestJobOf(t *testing.T) {
	t.Parallel()
	jobs := make([]Job, 3)
	for i := range jobs {
		if got := jobOf(&jobs[i].item); got != &jobs[i] {
			t.Fatalf("jobOf(item %d) = %p, want %p", i, got, &jobs[i])
		}
	}
	j := newJob("alone", nil)
	if got := jobOf(&j.item); got != j || got.ID() != "alone" {
		t.Fatalf("jobOf = %p, want %p", got, j)
	}
}

// A waiting job is held by the million: the Job must stay within its
// allocation size class (128 bytes) and its scheduler item within 72, or
// every waiting job pays for what was added.
func TestJobSize(t *testing.T) {
	if n := unsafe.Sizeof(Job{}); n > 128 {
		t.Errorf("a Job is %d bytes, more than 128", n)
	}
	if n := unsafe.Sizeof(sched.Item{}); n > 72 {
		t.Errorf("a scheduler item is %d bytes, more than 72", n)
	}
}

// A size hint equal to the payload's size costs the job nothing; another
// is kept among its options, through SetOptions either side of it, and
// goes into the job's record.
func TestSizeHint(t *testing.T) {
	t.Parallel()
	j := &Job{}
	j.SetPayload(make([]byte, 4096))
	j.SetSizeHint(4096)
	if j.m != nil || j.SizeHint() != 4096 {
		t.Fatalf("hint of the payload's size: meta %v, hint %d", j.m, j.SizeHint())
	}
	j.SetSizeHint(1 << 40)
	j.SetOptions(map[string]string{"trace": "ünïcode"}, time.Minute, 0, 0)
	if j.SizeHint() != 1<<40 || j.TTL() != time.Minute || j.Headers()["trace"] != "ünïcode" {
		t.Fatalf("hint %d, TTL %v, headers %v after SetOptions", j.SizeHint(), j.TTL(), j.Headers())
	}
	j.SetOptions(nil, 0, 0, 0)
	if j.SizeHint() != 1<<40 || j.m == nil {
		t.Fatalf("options cleared: hint %d", j.SizeHint())
	}
	j.SetSizeHint(4096)
	if j.m != nil {
		t.Fatalf("no options left, yet kept %+v", *j.m)
	}
	j.SetSizeHint(0) // an empty hint on a payload is a hint all the same
	if j.SizeHint() != 0 {
		t.Fatalf("hint %d, want 0", j.SizeHint())
	}

	cfg := modelConfig()
	cfg.Durable = true
	l := newLine(t, cfg)
	now := t0
	j = newJob("hinted", []byte("x"))
	j.SetSizeHint(12345)
	r, err := l.Admit(j, Names{"p", "t"}, time.Time{}, now)
	if err != nil {
		t.Fatal(err)
	}
	if r.Job.SizeHint != 12345 {
		t.Fatalf("record's hint %d, want 12345", r.Job.SizeHint)
	}
	l2 := newLine(t, cfg)
	if got := l2.Restore(r.Job, false, now); got.SizeHint() != 12345 {
		t.Fatalf("restored hint %d, want 12345", got.SizeHint())
	}
}

// A job keeps an id of up to 15 bytes in itself and a longer one among
// its options, whatever else the options hold; SetIDBytes copies; ids of
// any bytes (non-ASCII, invalid UTF-8) come back as they went in, through
// a record and Restore too.
func TestJobID(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("ü\xff", 20) // 60 bytes
	j := &Job{}
	j.SetPayload([]byte("p"))
	j.SetID("0123456789abcde") // 15: the most kept inline
	if j.ID() != "0123456789abcde" || j.m != nil {
		t.Fatalf("inline id %q, meta %v", j.ID(), j.m)
	}
	j.SetOptions(map[string]string{"k": "v"}, time.Second, 0, 0)
	j.SetID(long)
	if j.ID() != long || j.Headers()["k"] != "v" || j.TTL() != time.Second {
		t.Fatalf("long id %q, headers %v, TTL %v", j.ID(), j.Headers(), j.TTL())
	}
	j.SetOptions(nil, 0, 0, 0)
	if j.ID() != long {
		t.Fatalf("SetOptions lost the long id: %q", j.ID())
	}
	j.SetID("short")
	if j.ID() != "short" || j.m != nil {
		t.Fatalf("id %q, meta %+v", j.ID(), j.m)
	}
	buf := []byte("abc\xfe")
	j.SetIDBytes(buf)
	buf[0] = 'X'
	if j.ID() != "abc\xfe" {
		t.Fatalf("SetIDBytes kept the caller's buffer: %q", j.ID())
	}
	j.SetIDBytes([]byte(long))
	if j.ID() != long {
		t.Fatalf("long id from bytes %q", j.ID())
	}

	cfg := modelConfig()
	cfg.Durable = true
	l := newLine(t, cfg)
	for _, id := range []string{"", "ä", "0123456789abcdef", long} {
		r, err := l.Admit(newJob(id, []byte(id)), Names{"p", "t"}, time.Time{}, t0)
		if err != nil {
			t.Fatal(err)
		}
		if r.Job.ID != id || r.ID != id {
			t.Fatalf("record of %q: %q, %q", id, r.Job.ID, r.ID)
		}
		if got := newLine(t, cfg).Restore(r.Job, false, t0); got.ID() != id {
			t.Fatalf("restored %q as %q", id, got.ID())
		}
	}
}

// Cancel finds jobs by id in every state once its index is built, keeps
// finding jobs that arrive later (published or restored), and finds none
// that have gone.
func TestCancelByID(t *testing.T) {
	t.Parallel()
	l := newLine(t, modelConfig())
	now := t0
	if _, err := l.Cancel("nobody", now); !errors.Is(err, ErrNotFound) {
		t.Fatalf("cancel of an unknown id: %v", err) // builds the index
	}
	publish(t, l, now, "run", "dead", "acked", "wait") // one key: handed out in this order
	later := newJob("later", []byte("due in an hour"))
	if _, err := l.Admit(later, Names{"p", "t"}, now.Add(time.Hour), now); err != nil {
		t.Fatal(err)
	}
	l.Commit(later, now)
	h := l.Attach()
	for range 3 {
		l.Deliver(h, now)
	}
	if _, err := l.Ack(h, "acked", time.Second, now); err != nil {
		t.Fatalf("ack: %v", err)
	}
	_ = l.Nack(h, "dead", DeadLetter, 0, "poison", false, now)
	restored := l.Restore(&store.Job{ID: "restored", Seq: 99, State: store.Ready, Payload: []byte("from the log")}, false, now)
	for id, want := range map[string]State{"wait": Waiting, "run": Running, "later": Delayed, "restored": Waiting} {
		if got, err := l.Cancel(id, now); err != nil || got != want {
			t.Errorf("Cancel(%s) = %v, %v; want %v", id, got, err, want)
		}
	}
	for _, id := range []string{"dead", "acked", "wait", "later", "restored"} {
		if _, err := l.Cancel(id, now); !errors.Is(err, ErrNotFound) {
			t.Errorf("Cancel(%s) again: %v, want ErrNotFound", id, err)
		}
	}
	if !restored.is(flagGone) {
		t.Error("the cancelled restored job is still held")
	}
	if got, err := l.Cancel("run", now); err != nil || got != Running {
		t.Errorf("a second cancel of the running job: %v, %v", got, err)
	}
}

// lineView lists where each job is; inFlightAsReady shows jobs in flight
// as a crash leaves them.
func lineView(l *Line, inFlightAsReady bool) []string {
	var out []string
	add := func(state string) func(j *Job) {
		return func(j *Job) {
			out = append(out, fmt.Sprint(j.ID(), " ", state, " attempt ", j.Attempt(), " seq ", j.Seq()))
		}
	}
	running := add("running")
	if inFlightAsReady {
		running = add("ready")
	}
	l.Each(add("ready"), running, add("delayed"), func(d DeadLetterEntry) {
		out = append(out, fmt.Sprint(d.Job.ID(), " dead ", d.Reason, " attempt ", d.Job.Attempt()))
	})
	slices.Sort(out)
	return out
}

// A durable line reuses its records: a job's publish, delivery and ack
// make no garbage of their log records once the first few are made. The
// records still come out right: the log they went to replays to the same
// jobs.
func TestDurableCycleReusesRecords(t *testing.T) {
	l := newLine(t, modelConfig())
	st := store.NewMemory()
	if err := st.Replay(func(*store.Record) error { return nil }); err != nil {
		t.Fatal(err)
	}
	h := l.Attach()
	payload := make([]byte, 1024)
	const runs = 500
	ids := make([]string, runs+1)
	for i := range ids {
		ids[i] = fmt.Sprintf("job-%d", i)
	}
	n := 0
	cycle := func() {
		j := newJob(ids[n], payload)
		n++
		if _, err := l.Admit(j, Names{"p", "t"}, time.Time{}, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Append(l.Fx.Records...); err != nil {
			t.Fatal(err)
		}
		l.Fx.ClearRecords()
		l.Commit(j, t0)
		if l.Deliver(h, t0) != j {
			t.Fatal("the job just published was not delivered")
		}
		if _, err := l.Ack(h, j.ID(), time.Millisecond, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Append(l.Fx.Records...); err != nil {
			t.Fatal(err)
		}
		l.Fx.Clear()
	}
	// AllocsPerRun runs it once more to warm up. One allocation is the
	// job itself; before records were reused there were four more.
	if a := testing.AllocsPerRun(runs, cycle); a > 2 {
		t.Errorf("a durable publish, delivery and ack allocate %.1f times, want at most 2", a)
	}
	kinds := map[store.Kind]int{}
	acked := map[string]bool{}
	if err := st.Replay(func(r *store.Record) error {
		kinds[r.Kind]++
		switch r.Kind {
		case store.KindJob:
			if r.Job == nil || r.Job.ID != r.ID || len(r.Job.Payload) != len(payload) || r.Job.Producer != "p" {
				t.Fatalf("job record %+v", r)
			}
		case store.KindAck:
			acked[r.ID] = true
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if kinds[store.KindJob] != runs+1 || kinds[store.KindDeliver] != runs+1 || kinds[store.KindAck] != runs+1 || len(acked) != runs+1 {
		t.Fatalf("the log holds %v records (%d jobs acked), want %d of each", kinds, len(acked), runs+1)
	}
}

// newJob is a job with an id and a payload, ready for Admit.
func newJob(id string, payload []byte) *Job {
	j := &Job{}
	j.SetPayload(payload)
	j.SetID(id)
	return j
}

// A reconfigure marks every job out of line (in flight, delayed for a
// retry, dead) to be classified afresh at its next push, and keeps the
// lease end, due time and death time each keeps in its item's parked word;
// a waiting job is moved over at once and reports no deadline.
func TestReconfigureMarksJobsOutOfLineStale(t *testing.T) {
	t.Parallel()
	cfg := modelConfig()
	l := newLine(t, cfg)
	t0 := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	js := publish(t, l, t0, "running", "retrying", "dead", "waiting")
	later := newJob("later", []byte("run at ten"))
	if _, err := l.Admit(later, Names{"p", "t"}, t0.Add(time.Hour), t0); err != nil {
		t.Fatal(err)
	}
	l.Commit(later, t0)
	h := l.Attach()
	for _, want := range js[:3] {
		if j := l.Deliver(h, t0); j != want {
			t.Fatalf("delivered %v, want %s", j, want.ID())
		}
	}
	if err := l.Nack(h, "retrying", RequeueAfter, time.Minute, "", false, t0); err != nil {
		t.Fatal(err)
	}
	if err := l.Nack(h, "dead", DeadLetter, 0, "bad input", false, t0); err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Time{"running": t0.Add(cfg.Lease), "retrying": t0.Add(time.Minute), "dead": t0, "later": t0.Add(time.Hour)}

	l.Reconfigure(cfg, newQueue(t, sched.Bounded), t0.Add(time.Second))
	for _, j := range append(js, later) {
		stale := j.ID() != "waiting"
		if l.Stale(j) != stale {
			t.Errorf("%s: stale %v, want %v", j.ID(), l.Stale(j), stale)
		}
		if !j.Deadline().Equal(want[j.ID()]) {
			t.Errorf("%s: deadline %v, want %v", j.ID(), j.Deadline(), want[j.ID()])
		}
	}
	if l.Len() != 1 {
		t.Fatalf("%d jobs waiting after the reconfigure, want 1", l.Len())
	}
	// Back in line, the running job is classified by the new scheduler.
	l.Return(h, "running", t0.Add(2*time.Second))
	if l.Stale(js[0]) || l.Len() != 2 || !js[0].Deadline().IsZero() {
		t.Errorf("returned: stale %v, %d waiting, deadline %v; want fresh, 2, none", l.Stale(js[0]), l.Len(), js[0].Deadline())
	}
}

// Jobs of one producer and job type without options share one meta, and
// so do a job published to run later, once due, and a requeued dead
// letter, which keep the time they took their place in the job, to the
// millisecond after the publish; a job with options, and one that took
// its place more than 49 days after its publish (kept exactly among its
// options), have a meta of their own with the same names; the shared
// meta is never written through any of them; the done log keeps the
// shared names, not a job's options; and all of it survives records and
// Restore.
func TestJobMeta(t *testing.T) {
	t.Parallel()
	cfg := modelConfig()
	cfg.KeepDone = 10
	l := newLine(t, cfg)
	now := t0
	names := Names{"wéb-\xff", "rapport"}
	admit := func(j *Job, runAt time.Time) *Job {
		t.Helper()
		if _, err := l.Admit(j, names, runAt, now); err != nil {
			t.Fatal(err)
		}
		l.Commit(j, now)
		return j
	}
	plain := []*Job{admit(newJob("a", []byte("1")), time.Time{}), admit(newJob("b", []byte("2")), time.Time{})}
	shared := plain[0].m
	if shared == nil || plain[1].m != shared || l.names[names] != shared {
		t.Fatalf("plain jobs' metas %p and %p, the Line's %p: want one shared", plain[0].m, plain[1].m, l.names[names])
	}
	withOpts := newJob("c", []byte("3"))
	withOpts.SetOptions(map[string]string{"trace": "ünï"}, 3*time.Hour, 0, 0)
	admit(withOpts, time.Time{})
	later := admit(newJob("d", []byte("4")), now.Add(time.Hour))
	if withOpts.m == shared || later.m != shared {
		t.Fatalf("a job with options shares the meta (%v), or a delayed one does not (%v)", withOpts.m == shared, later.m == shared)
	}
	if !later.Enqueued().IsZero() {
		t.Fatalf("a job not yet due says it took its place at %v", later.Enqueued())
	}

	now = now.Add(time.Hour)
	l.Tick(now) // d is due: it joins the line now
	h := l.Attach()
	for _, id := range []string{"a", "b", "c"} {
		j := l.Deliver(h, now)
		if j.ID() != id {
			t.Fatalf("delivered %s, want %s", j.ID(), id)
		}
	}
	dead := l.Deliver(h, now)
	if dead != later {
		t.Fatalf("delivered %s, want d", dead.ID())
	}
	if err := l.Nack(h, "d", DeadLetter, 0, "poison", false, now); err != nil {
		t.Fatal(err)
	}
	requeuedAt := now.Add(time.Minute)
	if n := l.TakeDead([]string{"d"}, true, requeuedAt); n != 1 {
		t.Fatalf("requeued %d", n)
	}
	if got := later.Enqueued(); !got.Equal(requeuedAt) || later.m != shared || later.PublishedAt() != t0 {
		t.Fatalf("requeued job: enqueued %v (want %v), shares the meta %v, published %v", got, requeuedAt, later.m == shared, later.PublishedAt())
	}
	// Dead again, and requeued 60 days after its publish, to the
	// nanosecond: past what the job keeps in itself.
	if dead = l.Deliver(h, requeuedAt); dead != later {
		t.Fatalf("delivered %v, want d", dead)
	}
	if err := l.Nack(h, "d", DeadLetter, 0, "poison again", false, requeuedAt); err != nil {
		t.Fatal(err)
	}
	requeuedAt = t0.Add(60*24*time.Hour + 7)
	if n := l.TakeDead([]string{"d"}, true, requeuedAt); n != 1 {
		t.Fatalf("requeued %d", n)
	}
	if got := later.Enqueued(); !got.Equal(requeuedAt) || later.m == shared {
		t.Fatalf("requeued 60 days on: enqueued %v (want %v), shares the meta %v", got, requeuedAt, later.m == shared)
	}
	now = requeuedAt
	for _, j := range append(plain, withOpts, later) {
		if j.Producer() != names.Producer || j.JobType() != names.JobType {
			t.Errorf("%s: names %q %q", j.ID(), j.Producer(), j.JobType())
		}
		if j != later && !j.Enqueued().Equal(t0) {
			t.Errorf("%s: enqueued %v, want its publish %v", j.ID(), j.Enqueued(), t0)
		}
	}
	if shared.opts.enqueued != 0 || shared.names != names || !shared.opts.isZero() {
		t.Fatalf("the shared meta was written: %+v", *shared)
	}

	if _, err := l.Ack(h, "c", time.Second, now); err != nil {
		t.Fatal(err)
	}
	if dj, ok := l.FindDone("c"); !ok || dj.Producer != names.Producer || dj.JobType != names.JobType {
		t.Fatalf("done entry %+v, %v", dj, ok)
	}
	if e := l.done.ring[l.done.byID["c"]]; e.names != &shared.names {
		t.Fatalf("the done log keeps names of its own, not the Line's")
	}

	var recs []*store.Record
	l.StateRecords(func(r *store.Record) { recs = append(recs, r) })
	r := newLine(t, cfg)
	for _, rec := range recs {
		j := r.Restore(rec.Job, rec.Job.Reset, now)
		orig, _ := l.Find(j.ID())
		if !j.Enqueued().Equal(orig.Enqueued()) || j.Producer() != names.Producer || j.JobType() != names.JobType || j.TTL() != orig.TTL() {
			t.Errorf("restored %s: enqueued %v, names %q %q, TTL %v; want %v, %v", j.ID(), j.Enqueued(), j.Producer(), j.JobType(), j.TTL(), orig.Enqueued(), orig.TTL())
		}
		if (j.m == r.names[names]) != (orig.m == shared) {
			t.Errorf("restored %s shares its Line's meta: %v, the original %v", j.ID(), j.m == r.names[names], orig.m == shared)
		}
	}
}
