package sched

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/predict"
)

// A hand-worked FIFO run on two workers: jobs pushed at 0, 0, 1 and 2
// seconds running 4, 2, 3 and 1 s. The third starts when the second's
// worker frees at 2 s, the fourth when the first's frees at 4 s.
func TestReplayFIFOByHand(t *testing.T) {
	s := func(at, took float64) tuneSample {
		return tuneSample{pushed: int64(at * 1e9), took: int64(took * 1e9)}
	}
	got := replayFIFO([]tuneSample{s(0, 4), s(0, 2), s(1, 3), s(2, 1)}, 2)
	want := []int64{4e9, 2e9, 4e9, 3e9}
	if !slices.Equal(got, want) {
		t.Fatalf("FIFO latencies %v, want %v", got, want)
	}
}

// With the guard's settings at zero and every cost equal the rule is FIFO,
// so its replay gives FIFO's latencies exactly.
func TestReplayRungOfEqualCostsIsFIFO(t *testing.T) {
	pol, err := NewPolicy(Bounded, PolicyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ss := make([]tuneSample, 500)
	at := int64(0)
	for i := range ss {
		at += rng.Int64N(int64(300 * time.Millisecond))
		ss[i] = tuneSample{pushed: at, took: int64(time.Duration(50+rng.IntN(900)) * time.Millisecond), cost: time.Second, tier: 1}
	}
	fifo := replayFIFO(ss, 3)
	got := replayRung(pol.Sched, Rung{0, 0}, ss, 3)
	if !slices.Equal(got, fifo) {
		for i := range got {
			if got[i] != fifo[i] {
				t.Fatalf("message %d: latency %v under the rule, %v under FIFO", i, time.Duration(got[i]), time.Duration(fifo[i]))
			}
		}
	}
}

func TestKeeps(t *testing.T) {
	fifo := make([]int64, 200)
	for i := range fifo {
		fifo[i] = int64(i+1) * 1e9
	}
	long := []int{10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160, 170, 180, 190, 199}
	cases := []struct {
		name string
		edit func(lat []int64)
		want bool
	}{
		{"FIFO itself", func([]int64) {}, true},
		{"P99 at 1.10x", func(l []int64) { l[198], l[199] = 218e9, 220e9 }, true},
		{"P99 past 1.10x", func(l []int64) { l[197], l[198], l[199] = 220e9, 221e9, 222e9 }, false},
		{"one long job of 20 at 1.2x", func(l []int64) { l[50] = 61e9 }, true},
		{"two long jobs of 20 at 1.2x", func(l []int64) { l[50], l[60] = 61e9, 73e9 }, false},
		{"a long job past 1.5x", func(l []int64) { l[10] = 17e9 }, false},
		{"a short job at 3x", func(l []int64) { l[11] = 36e9 }, true},
	}
	for _, c := range cases {
		lat := slices.Clone(fifo)
		c.edit(lat)
		if got := keeps(fifo, lat, long); got != c.want {
			t.Errorf("%s: keeps %v, want %v", c.name, got, c.want)
		}
	}
}

// The long jobs are those of the costliest 5% of the keys by mean measured
// duration, at least one key; a key with one slow run among many quick
// ones is not among them.
func TestLongSamples(t *testing.T) {
	var ss []tuneSample
	for k := range 40 {
		for i := range 5 {
			took := int64(k+1) * 1e8
			if k == 0 && i == 0 {
				took = 50e9 // key 0: one run of 50 s, mean 10.08 s
			}
			ss = append(ss, tuneSample{took: took, key: predict.Key{Queue: "q", JobType: fmt.Sprintf("jöb-%d", k)}})
		}
	}
	got := longSamples(ss)
	var keys []string
	for _, i := range got {
		if !slices.Contains(keys, ss[i].key.JobType) {
			keys = append(keys, ss[i].key.JobType)
		}
	}
	slices.Sort(keys)
	if want := []string{"jöb-0", "jöb-39"}; !slices.Equal(keys, want) || len(got) != 10 {
		t.Fatalf("long keys %v (%d messages), want %v (10)", keys, len(got), want)
	}
	one := longSamples(ss[:5])
	if len(one) != 5 {
		t.Fatalf("a single key: %d long messages, want its 5", len(one))
	}
}

// A message joins the history once every message pushed before it has
// finished, whatever order they finish in.
func TestTunerHistoryIsAPrefix(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tu := newTuner()
	const n = 5000
	for id := uint64(1); id <= n; id++ {
		tu.arrive(id)
	}
	order := rng.Perm(n)
	finished := map[uint64]bool{}
	for _, p := range order {
		id := uint64(p) + 1
		finished[id] = true
		tu.add(id, tuneSample{pushed: int64(id)})
		prefix := 0
		for prefix < n && finished[uint64(prefix)+1] {
			prefix++
		}
		if len(tu.hist) != prefix {
			t.Fatalf("after %d finished: history of %d, want the %d-message prefix", len(finished), len(tu.hist), prefix)
		}
	}
	for i, s := range tu.hist {
		if s.pushed != int64(i)+1 {
			t.Fatalf("history[%d] is message %d", i, s.pushed)
		}
	}
	if len(tu.done) != 0 {
		t.Fatalf("%d finished messages left out of the history", len(tu.done))
	}
}

// choose returns the loosest rung whose replay keeps the promise: checked
// against every rung replayed on its own, on a busy queue of many keys
// whose costs spread from milliseconds to seconds.
func TestChooseIsTheLoosestRungKept(t *testing.T) {
	pol, err := NewPolicy(Bounded, PolicyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 7))
		tu := newTuner()
		tu.workers = 4
		at := int64(0)
		load := 0.8 + 0.1*float64(seed)
		for id := uint64(1); id <= 3000; id++ {
			k := rng.IntN(30)
			mean := time.Duration(1<<(k%12)) * time.Millisecond
			took := time.Duration(float64(mean) * (0.5 + rng.Float64()))
			cost := time.Duration(float64(mean) * (0.7 + 0.6*rng.Float64()))
			at += int64(float64(300*time.Millisecond) / 4 / load * 2 * rng.Float64())
			tu.arrive(id)
			tu.add(id, tuneSample{pushed: at, took: int64(took), cost: cost, tier: int8(k % 3), long: k%12 == 11,
				key: predict.Key{Queue: "q", JobType: fmt.Sprintf("kind-%d", k)}})
		}
		got := tu.choose(pol.Sched, at)
		tu.rung = 3
		tu.retune(pol.Sched, at+int64(TuneInterval))
		if wantRung := min(got, 4); tu.rung != wantRung {
			t.Errorf("seed %d: from rung 3, moved to %d when the replay kept %d; want %d", seed, tu.rung, got, wantRung)
		}
		fifo := replayFIFO(tu.hist, 4)
		long := longSamples(tu.hist)
		want := 0
		for r := len(Ladder) - 1; r > 0; r-- {
			if keeps(fifo, replayRung(pol.Sched, Ladder[r], tu.hist, 4), long) {
				want = r
				break
			}
		}
		if got != want {
			t.Errorf("seed %d: chose rung %d, want %d", seed, got, want)
		}
	}
}

// A tuned queue starts at the tightest rung, replays once enough messages
// have finished and enough time has passed, climbs one rung a replay while
// the replays keep the promise, and its scheduler sets deadlines with the
// rung it is on.
func TestQueueTunesItsGuard(t *testing.T) {
	pol, err := NewPolicy(Bounded, PolicyOptions{Tune: new(true)})
	if err != nil {
		t.Fatal(err)
	}
	q, err := NewQueue(pol, predict.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := q.Rung(); !ok || r != Ladder[0] {
		t.Fatalf("a new tuned queue's rung %v (%v), want the tightest", r, ok)
	}
	now := time.Unix(1_700_000_000, 0)
	q.SetWorkers(2, now)
	k := predict.Key{Queue: "q", JobType: "resize"}
	id := uint64(0)
	run := func(n int, step time.Duration) {
		for range n {
			id++
			it := &Item{ID: id}
			pr := q.Classify(it, k)
			if err := q.Push(it, now); err != nil {
				t.Fatal(err)
			}
			if got := q.Pop(now); got != it {
				t.Fatalf("message %d: popped %v", id, got)
			}
			now = now.Add(step)
			if err := q.Finished(it, k, pr, step, now); err != nil {
				t.Fatal(err)
			}
		}
	}
	// One kind of job, one at a time: every rung is FIFO, so every replay
	// keeps the promise at the loosest rung, and the queue climbs.
	run(TuneMin-1, 10*time.Millisecond)
	if q.tune.replays != 0 {
		t.Fatalf("%d replays before %d messages", q.tune.replays, TuneMin)
	}
	run(1, 10*time.Millisecond)
	for want := 1; want < len(Ladder)+2; want++ {
		if got := q.tune.replays; got != want {
			t.Fatalf("%d replays, want %d", got, want)
		}
		r := Ladder[min(want, len(Ladder)-1)]
		if got, _ := q.Rung(); got != r {
			t.Fatalf("after %d replays: rung %v, want %v", want, got, r)
		}
		if b := q.Config().Bound; *b.Guard != r.Guard || b.GuardMin != r.GuardMin {
			t.Fatalf("after %d replays: the scheduler's guard %v, %v; want %v", want, *b.Guard, b.GuardMin, r)
		}
		// Messages enough for the next replay, but in less time than
		// TuneInterval: none until the interval has passed.
		run(TuneEvery, time.Millisecond)
		if got := q.tune.replays; got != want {
			t.Fatalf("%d replays within %v of the last, want %d", got, TuneInterval, want)
		}
		now = now.Add(TuneInterval)
		run(1, time.Millisecond)
	}
	if b := pol.Sched.Bound; *b.Guard != DefaultGuard || b.GuardMin != DefaultGuardMin {
		t.Fatalf("the policy's own bound changed to %v, %v", *b.Guard, b.GuardMin)
	}
}

// BenchmarkTunerChoose is one replay of a full history (TuneHistory
// messages of 30 keys on 4 workers at a load near 1) at every rung: what a
// tuned queue pays each time it retunes.
func BenchmarkTunerChoose(b *testing.B) {
	pol, err := NewPolicy(Bounded, PolicyOptions{})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	tu := newTuner()
	tu.workers = 4
	at := int64(0)
	for id := uint64(1); id <= TuneHistory; id++ {
		k := rng.IntN(30)
		mean := time.Duration(1<<(k%12)) * time.Millisecond
		at += int64(float64(300*time.Millisecond) / 4 * 2 * rng.Float64())
		tu.arrive(id)
		tu.add(id, tuneSample{pushed: at, took: int64(float64(mean) * (0.5 + rng.Float64())), cost: mean, tier: int8(k % 3),
			key: predict.Key{Queue: "q", JobType: fmt.Sprintf("kind-%d", k)}})
	}
	b.ResetTimer()
	for range b.N {
		tu.choose(pol.Sched, at)
	}
}
