package delivery

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The done log against a plain slice of what it should keep: the newest
// keep entries, through adds, growing and shrinking.
func TestDoneLogAgainstModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 3))
		var d doneLog
		var kept []string // the model: ids, oldest first
		keep := 1 + rng.IntN(6)
		names := &Names{Producer: "wéb", JobType: "rapport"}
		n := 0
		for step := range 400 {
			switch op := rng.IntN(10); {
			case op < 7:
				n++
				j := &Job{attempt: uint16(n % 4)}
				j.SetID(fmt.Sprintf("job-%d-ü", n))
				d.add(keep, j, names, []State{Done, Cancelled}[n%2], time.Duration(n)*time.Millisecond, t0.Add(time.Duration(n)*time.Second))
				kept = append(kept, j.ID())
			case op < 9:
				keep = rng.IntN(7) // 0 keeps nothing
				d.resize(keep)
			default:
				keep = 1 + rng.IntN(6)
				d.resize(keep)
			}
			kept = kept[len(kept)-min(len(kept), keep):]
			// Every id ever added: found exactly when the model keeps it,
			// with what was added.
			for i := 1; i <= n; i++ {
				id := fmt.Sprintf("job-%d-ü", i)
				dj, ok := d.find(id)
				if want := slices.Contains(kept, id); ok != want {
					t.Fatalf("seed %d step %d (keep %d): find(%s) = %v, want %v; model %v", seed, step, keep, id, ok, want, kept)
				}
				if ok && (dj.ID != id || dj.State != []State{Done, Cancelled}[i%2] || dj.Took != time.Duration(i)*time.Millisecond ||
					!dj.At.Equal(t0.Add(time.Duration(i)*time.Second)) || dj.Attempts != i%4 || dj.Producer != "wéb" || dj.JobType != "rapport") {
					t.Fatalf("seed %d step %d: find(%s) = %+v", seed, step, id, dj)
				}
			}
			if len(d.byID) != len(kept) || len(d.ring) > max(keep, 0) {
				t.Fatalf("seed %d step %d: %d indexed, ring of %d, keep %d; model %d", seed, step, len(d.byID), len(d.ring), keep, len(kept))
			}
		}
	}
}

// A Line reports the jobs that ended while they are among its last
// KeepDone: acked (with the time the worker reported), cancelled waiting,
// delayed or running (whatever its worker then answers); not purged ones,
// and none at all with KeepDone 0.
func TestKeepDone(t *testing.T) {
	t.Parallel()
	cfg := modelConfig()
	cfg.KeepDone = 4
	l := newLine(t, cfg)
	now := t0
	publish(t, l, now, "acked", "nacked-after-cancel", "acked-after-cancel", "waiting", "purged")
	late := newJob("delayed", []byte("later"))
	if _, err := l.Admit(late, Names{"p", "t"}, now.Add(time.Hour), now); err != nil {
		t.Fatal(err)
	}
	l.Commit(late, now)
	h := l.Attach()
	for range 3 {
		l.Deliver(h, now)
	}
	now = now.Add(time.Second)
	if _, err := l.Ack(h, "acked", 1500*time.Millisecond, now); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"nacked-after-cancel", "acked-after-cancel", "waiting", "delayed"} {
		if _, err := l.Cancel(id, now); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := l.FindDone("nacked-after-cancel"); ok {
		t.Error("a running job cancelled is reported ended before its worker lets it go")
	}
	if err := l.Nack(h, "nacked-after-cancel", Requeue, 0, "", false, now); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Ack(h, "acked-after-cancel", time.Second, now); err != nil {
		t.Fatal(err)
	}
	l.Purge()
	want := map[string]State{"acked": Done, "nacked-after-cancel": Cancelled, "acked-after-cancel": Cancelled, "waiting": Cancelled, "delayed": Cancelled}
	// Five ended, four kept: the first, "acked", is gone.
	for id, st := range want {
		dj, ok := l.FindDone(id)
		if id == "acked" {
			if ok {
				t.Errorf("the oldest of five ended jobs is still kept with KeepDone 4: %+v", dj)
			}
			continue
		}
		if !ok || dj.State != st || !dj.At.Equal(now) || dj.Producer != "p" {
			t.Errorf("FindDone(%s) = %+v, %v; want %s at %v", id, dj, ok, st, now)
		}
	}
	if _, ok := l.FindDone("purged"); ok {
		t.Error("a purged job is reported")
	}
	if j, st := l.Find("waiting"); j != nil || st != "" {
		t.Errorf("Find reports an ended job as held: %v", st)
	}

	// Grown at a reconfigure, the log keeps what it had and takes more.
	cfg.KeepDone = 10
	l.Reconfigure(cfg, l.Sched(), now)
	publish(t, l, now, "second")
	l.Deliver(h, now)
	if _, err := l.Ack(h, "second", 20*time.Millisecond, now); err != nil {
		t.Fatal(err)
	}
	if dj, ok := l.FindDone("second"); !ok || dj.State != Done || dj.Took != 20*time.Millisecond || dj.Attempts != 1 {
		t.Errorf("FindDone(second) = %+v, %v", dj, ok)
	}
	if _, ok := l.FindDone("waiting"); !ok {
		t.Error("growing the log lost what it kept")
	}
	// And with KeepDone 0 it keeps nothing.
	cfg.KeepDone = 0
	l.Reconfigure(cfg, l.Sched(), now)
	if _, ok := l.FindDone("second"); ok {
		t.Error("KeepDone 0 still reports ended jobs")
	}
}
