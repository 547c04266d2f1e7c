package sim

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/history"
	"github.com/harbinger-mq/harbinger/internal/workload"
)

// recordRun runs jobs through arm as a live broker would and records
// what its history would hold: each job's arrival, start, settle and
// measured duration, with the given key names.
func recordRun(t *testing.T, types []workload.JobType, jobs []workload.Job, workers int, arm Arm, names []string) []history.Entry {
	t.Helper()
	_, recs, err := RunSeed(types, jobs, workers, arm, 1)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	var es []history.Entry
	for _, r := range recs {
		j := jobs[r.Job]
		es = append(es, history.Entry{Arrived: base.Add(r.Sent), Producer: types[j.Type].Producer, Key: names[j.Type], Size: uint64(j.Size),
			Attempt: 1, Started: base.Add(r.Started), Done: base.Add(r.Done), Duration: j.Duration, Outcome: history.Ack})
	}
	return es
}

// roundTrip writes es as a history file and reads it back, as export and
// import do.
func roundTrip(t *testing.T, h history.Header, es []history.Entry) *HistorySource {
	t.Helper()
	h.WorkersSeen = history.WorkersSeen(es)
	var buf bytes.Buffer
	if err := history.Encode(&buf, h, es); err != nil {
		t.Fatal(err)
	}
	h2, es2, err := history.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	src, err := FromHistory(h2, es2)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// TestReplayReproducesRecordedRun records the production flow run under
// FIFO and under the default policy, replays each history, and finds the
// replay of the recorded policy reproduce every key's live mean and P99
// exactly (the simulator is the broker here, so there is no overhead to
// differ by), the worker count inferred from the record, and the default
// cut the short keys' mean.
func TestReplayReproducesRecordedRun(t *testing.T) {
	t.Parallel()
	w := mustLoad(t, productionFlow)
	jobs := firstJobs(w.Generate(1))
	// Key text as users write it: non-ASCII, one with invalid UTF-8
	// (which the file carries as U+FFFD).
	names := make([]string, len(w.JobTypes))
	for i, jt := range w.JobTypes {
		names[i] = jt.Name
	}
	names[0] = "通知.email"
	names[1] = "notify.push\xff"
	for _, policy := range []string{"fifo", "bounded"} {
		arm := mustArm(t, ArmFor(policy), w.JobTypes)
		es := recordRun(t, w.JobTypes, jobs, w.Workers, arm, names)
		src := roundTrip(t, history.Header{Queue: "jobs", Policy: policy}, es)
		if src.Workers() != w.Workers {
			t.Fatalf("%s: %d workers inferred, want %d", policy, src.Workers(), w.Workers)
		}
		res, err := Replay(src, nil, ReplayOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.TooLittle != "" || len(res.Loads) != 1 {
			t.Fatalf("%s: %q, %d loads", policy, res.TooLittle, len(res.Loads))
		}
		rl := res.Loads[0]
		if rl.FidelityArm != ArmFor(policy) {
			t.Fatalf("%s: fidelity arm %q", policy, rl.FidelityArm)
		}
		for _, k := range rl.Keys {
			if k.TooFew {
				continue
			}
			var mean, p99 float64
			if policy == "fifo" {
				mean, p99 = float64(k.FIFOMeanS), float64(k.FIFOP99S)
			} else {
				a := k.Arms[0] // predictive, the default
				mean, p99 = float64(a.MeanS), float64(a.P99S)
			}
			if math.Abs(mean-float64(k.LiveMeanS)) > 1e-9 || math.Abs(p99-float64(k.LiveP99S)) > 1e-9 {
				t.Errorf("%s %s: replayed mean %.6f P99 %.6f, live %.6f %.6f", policy, k.Key, mean, p99, float64(k.LiveMeanS), float64(k.LiveP99S))
			}
		}
		var email *ReplayKey
		for i := range rl.Keys {
			if rl.Keys[i].Key == "通知.email" {
				email = &rl.Keys[i]
			}
		}
		if email == nil || float64(email.Arms[0].MeanCut) < 0.3 {
			t.Fatalf("%s: the default's cut of the short key's mean: %+v", policy, email)
		}
		if words := email.Words("predictive"); !strings.HasPrefix(words, "通知.email: mean -") {
			t.Fatalf("words: %q", words)
		}
		if !strings.Contains(joinNames(src), "notify.push\uFFFD|") {
			t.Fatalf("invalid UTF-8 key not carried as U+FFFD: %v", joinNames(src))
		}
	}
}

// firstJobs is the jobs of the run's first 100 s (of 300) under the race
// detector, which slows the simulator tenfold: the flash sale and all.
func firstJobs(jobs []workload.Job) []workload.Job {
	if !raceEnabled {
		return jobs
	}
	n := 0
	for n < len(jobs) && jobs[n].Arrival < 100*time.Second {
		n++
	}
	return jobs[:n]
}

func joinNames(s *HistorySource) string {
	var b strings.Builder
	for _, t := range s.Types() {
		b.WriteString(t.Name + "|")
	}
	return b.String()
}

// TestReplayDeterministicAndLoads replays the same history twice, at the
// recorded load and a higher one, and gets the same JSON both times.
func TestReplayDeterministicAndLoads(t *testing.T) {
	t.Parallel()
	w := mustLoad(t, productionFlow)
	jobs := firstJobs(w.Generate(2))
	names := make([]string, len(w.JobTypes))
	for i, jt := range w.JobTypes {
		names[i] = jt.Name
	}
	es := recordRun(t, w.JobTypes, jobs, w.Workers, mustArm(t, "fifo", w.JobTypes), names)
	var out [2][]byte
	for i := range out {
		src := roundTrip(t, history.Header{Queue: "jobs", Policy: "fifo"}, es)
		res, err := Replay(src, nil, ReplayOptions{Loads: []float64{0.97}, Overhead: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Loads) != 2 || math.Abs(res.Loads[1].Load-0.97) > 1e-9 || res.Loads[1].Recorded {
			t.Fatalf("loads %+v", res.Loads)
		}
		if out[i], err = json.Marshal(res); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(out[0], out[1]) {
		t.Fatal("two replays of one history differ")
	}
}

// TestReplayTooLittle: a short history, and a quiet one, say so; a key
// with few jobs is marked and left out.
func TestReplayTooLittle(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	var es []history.Entry
	for i := range 150 {
		at := base.Add(time.Duration(i) * time.Second)
		es = append(es, history.Entry{Arrived: at, Key: "a", Attempt: 1, Started: at, Done: at.Add(10 * time.Millisecond), Duration: 10 * time.Millisecond, Outcome: history.Ack})
	}
	src := roundTrip(t, history.Header{Queue: "q", Policy: "fifo"}, es)
	res, err := Replay(src, nil, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.TooLittle, "150 settled jobs") || len(res.Loads) != 0 {
		t.Fatalf("short history: %q", res.TooLittle)
	}
	// Quiet: 3000 jobs a second apart on one worker, a few of another key.
	es = es[:0]
	for i := range 3000 {
		at := base.Add(time.Duration(i) * time.Second)
		key := "a"
		if i%500 == 0 {
			key = "rare"
		}
		es = append(es, history.Entry{Arrived: at, Key: key, Attempt: 1, Started: at, Done: at.Add(10 * time.Millisecond), Duration: 10 * time.Millisecond, Outcome: history.Ack})
	}
	res, err = Replay(roundTrip(t, history.Header{Queue: "q", Policy: "fifo"}, es), nil, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.TooLittle, "barely waited") {
		t.Fatalf("quiet history: %q", res.TooLittle)
	}
	for _, k := range res.Loads[0].Keys {
		if (k.Key == "rare") != k.TooFew {
			t.Fatalf("key %s: too few %v with %d jobs", k.Key, k.TooFew, k.Jobs)
		}
		if k.Key == "rare" && k.Words("predictive") != "rare: 6 jobs, too few to say" {
			t.Fatalf("words %q", k.Words("predictive"))
		}
	}
}
