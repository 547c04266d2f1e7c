package sim

import (
	"bytes"
	"cmp"
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/internal/workload"
)

const productionFlow = "../../workloads/production-flow.yaml"

func mustLoad(t testing.TB, path string) *workload.Workload {
	t.Helper()
	w, err := workload.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func mustArm(t testing.TB, name string, types []workload.JobType) Arm {
	t.Helper()
	a, err := ArmByName(name, types)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// fifoReference is an independent FIFO multi-server queue: jobs in arrival
// order, each started on the worker that frees up first.
func fifoReference(types []workload.JobType, jobs []workload.Job, workers int) []report.Record {
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(jobs[a].Arrival, jobs[b].Arrival) })
	free := make([]time.Duration, workers) // when each worker is next free
	var out []report.Record
	for _, i := range order {
		j := jobs[i]
		w := slices.Index(free, slices.Min(free))
		start := max(j.Arrival, free[w])
		free[w] = start + j.Duration
		out = append(out, report.Record{Job: i, Type: j.Type, Class: types[j.Type].Class, Sent: j.Arrival, Started: start, Done: free[w]})
	}
	return out
}

func sortRecords(rs []report.Record) {
	slices.SortFunc(rs, func(a, b report.Record) int {
		return cmp.Or(cmp.Compare(a.Sent, b.Sent), cmp.Compare(a.Type, b.Type),
			cmp.Compare(a.Started, b.Started), cmp.Compare(a.Done, b.Done), cmp.Compare(a.Job, b.Job))
	})
}

func TestFIFOMatchesReference(t *testing.T) {
	t.Parallel()
	w := mustLoad(t, productionFlow)
	arm := mustArm(t, "fifo", w.JobTypes)
	seeds, workerCounts := []uint64{1, 2}, []int{1, 3, 4, 8}
	if raceEnabled {
		seeds, workerCounts = seeds[:1], []int{1, 4}
	}
	for _, seed := range seeds {
		jobs := w.Generate(seed)
		for _, workers := range workerCounts {
			res, got, err := RunSeed(w.JobTypes, jobs, workers, arm, seed)
			if err != nil {
				t.Fatal(err)
			}
			want := fifoReference(w.JobTypes, jobs, workers)
			sortRecords(got)
			sortRecords(want)
			if len(got) != len(jobs) || res.Sent != len(jobs) || res.Completed != len(jobs) || res.Lost != 0 {
				t.Fatalf("seed %d, %d workers: %d records, %+v, for %d jobs", seed, workers, len(got), res, len(jobs))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("seed %d, %d workers: record %d = %+v, reference %+v", seed, workers, i, got[i], want[i])
				}
			}
		}
	}
}

// erlangCWait is the mean wait in queue of an M/M/c queue with arrival rate
// lambda and service rate mu per server.
func erlangCWait(c int, lambda, mu float64) float64 {
	a := lambda / mu
	rho := a / float64(c)
	term, sum := 1.0, 0.0 // a^k/k!
	for k := range c {
		sum += term
		term *= a / float64(k+1)
	}
	top := term / (1 - rho)
	pWait := top / (sum + top)
	return pWait / (float64(c)*mu - lambda)
}

func TestErlangCWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		c              int
		lambda, mu, wq float64
	}{
		{1, 0.5, 1, 1},     // M/M/1: rho/(mu-lambda)
		{1, 0.9, 1, 9},     //
		{2, 1, 1, 1.0 / 3}, // M/M/2 at rho 0.5: C = 1/3, over 2mu-lambda = 1
	}
	for _, tt := range tests {
		if got := erlangCWait(tt.c, tt.lambda, tt.mu); math.Abs(got-tt.wq) > 1e-12 {
			t.Errorf("erlangCWait(%d, %v, %v) = %v, want %v", tt.c, tt.lambda, tt.mu, got, tt.wq)
		}
	}
}

func TestMMcMeanWait(t *testing.T) {
	t.Parallel()
	w := mustLoad(t, "testdata/mmc.yaml")
	jt := w.JobTypes[0]
	lambda, mu := jt.RatePerS, 1000/jt.Duration.MeanMS
	if load := lambda / mu / float64(w.Workers); math.Abs(load-0.7) > 1e-9 {
		t.Fatalf("test workload at load %v", load)
	}
	want := erlangCWait(w.Workers, lambda, mu) // 35.7 ms
	arm := mustArm(t, "fifo", w.JobTypes)
	// Each seed replays about 84,000 jobs. Waits are strongly correlated in
	// time, so one seed's mean wait is only good to about 5% (over seeds
	// 1-30 the per-seed means average 35.6 ms with a standard deviation of
	// 1.8 ms); the tolerances are three standard deviations.
	pooled := 0.0
	for _, seed := range w.Seeds {
		jobs := w.Generate(seed)
		_, recs, err := RunSeed(w.JobTypes, jobs, w.Workers, arm, seed)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != len(jobs) {
			t.Fatalf("seed %d: %d records for %d jobs", seed, len(recs), len(jobs))
		}
		wait, service := 0.0, 0.0
		for _, r := range recs {
			wait += (r.Started - r.Sent).Seconds()
			service += (r.Done - r.Started).Seconds()
		}
		wait /= float64(len(recs))
		service /= float64(len(recs))
		pooled += wait / float64(len(w.Seeds))
		t.Logf("seed %d: %d jobs, mean wait %.2f ms, Erlang C %.2f ms, mean service %.2f ms", seed, len(recs), wait*1000, want*1000, service*1000)
		if math.Abs(wait-want) > 0.15*want {
			t.Errorf("seed %d: mean wait %.2f ms, Erlang C says %.2f ms", seed, wait*1000, want*1000)
		}
		if math.Abs(service-1/mu) > 0.02/mu {
			t.Errorf("seed %d: mean service %.2f ms, want %.2f", seed, service*1000, 1000/mu)
		}
	}
	if math.Abs(pooled-want) > 0.08*want {
		t.Errorf("mean wait over seeds %v: %.2f ms, Erlang C says %.2f ms", w.Seeds, pooled*1000, want*1000)
	}
}

// Under a backlog oracle SJF, which knows every duration and has no bound,
// serves the short type first; FIFO serves arrival order.
func TestOracleServesShortFirst(t *testing.T) {
	t.Parallel()
	types := []workload.JobType{
		{Name: "short", Producer: "p", Class: "short", Duration: workload.DurationSpec{Dist: "fixed", MeanMS: 10}},
		{Name: "long", Producer: "p", Class: "mid", Duration: workload.DurationSpec{Dist: "fixed", MeanMS: 300}},
	}
	// 40 jobs at once, alternating long and short, for one worker, then a
	// second burst a while later.
	var jobs []workload.Job
	for burst, at := range []time.Duration{0, 5 * time.Second} {
		for i := range 40 {
			ty := (i + 1) % 2
			jobs = append(jobs, workload.Job{Seq: burst*40 + i, Type: ty, Arrival: at,
				Duration: time.Duration(types[ty].Duration.MeanMS) * time.Millisecond})
		}
	}
	for _, name := range []string{"oracle-sjf", "fifo"} {
		_, recs, err := RunSeed(types, jobs, 1, mustArm(t, name, types), 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, burst := range []time.Duration{0, 5 * time.Second} {
			lastShort, firstLong := time.Duration(-1), time.Duration(math.MaxInt64)
			for _, r := range recs {
				switch {
				case r.Sent != burst:
				case r.Type == 0:
					lastShort = max(lastShort, r.Started)
				default:
					firstLong = min(firstLong, r.Started)
				}
			}
			if shortFirst := lastShort < firstLong; shortFirst != (name == "oracle-sjf") {
				t.Errorf("%s, burst at %v: last short starts at %v, first long at %v", name, burst, lastShort, firstLong)
			}
		}
	}
}

// Oracle SEPT knows each key's mean, not each job's duration: under a
// backlog it serves the key with the shorter mean first and a key's own jobs
// in arrival order, however their true durations differ; oracle SJF goes by
// the true durations.
func TestOracleSEPTServesShortKeyFirst(t *testing.T) {
	t.Parallel()
	types := []workload.JobType{
		{Name: "mixed", Producer: "p", Class: "mid"}, // 1 ms and 199 ms, mean 100 ms
		{Name: "steady", Producer: "p", Class: "short"},
	}
	var jobs []workload.Job
	for i := range 60 {
		j := workload.Job{Seq: i, Type: i % 2, Duration: 50 * time.Millisecond}
		if j.Type == 0 {
			j.Duration = time.Millisecond
			if i%4 == 0 {
				j.Duration = 199 * time.Millisecond
			}
		}
		jobs = append(jobs, j)
	}
	for _, name := range []string{"oracle-sept", "oracle-sjf"} {
		_, recs, err := RunSeed(types, jobs, 1, mustArm(t, name, types), 1)
		if err != nil {
			t.Fatal(err)
		}
		// The one worker starts jobs one after another: each record's start
		// is its place in the order served.
		slices.SortFunc(recs, func(a, b report.Record) int { return cmp.Compare(a.Started, b.Started) })
		var order []int
		var prevMixed time.Duration = -1
		for _, r := range recs {
			order = append(order, r.Type)
			if name == "oracle-sept" && r.Type == 0 {
				// Arrival order within the key: the mixed jobs alternate
				// 199 ms, 1 ms, 199 ms ... so their durations alternate too.
				d := r.Done - r.Started
				if prevMixed >= 0 && (d == prevMixed) {
					t.Errorf("oracle-sept: two mixed jobs of %v in a row: not arrival order", d)
				}
				prevMixed = d
			}
		}
		switch name {
		case "oracle-sept":
			for i, ty := range order {
				if want := 0; i >= 30 && ty != want || i < 30 && ty != 1 {
					t.Fatalf("oracle-sept served types %v: want the 30 steady jobs (mean 50 ms) before the mixed (mean 100 ms)", order)
				}
			}
		case "oracle-sjf":
			if order[0] != 0 {
				t.Errorf("oracle-sjf served a %d first: the 1 ms mixed jobs are the shortest", order[0])
			}
		}
	}
}

func TestProductionFlowGate(t *testing.T) {
	t.Parallel()
	w := mustLoad(t, productionFlow)
	var arms []Arm
	for _, name := range StandardArms {
		arms = append(arms, mustArm(t, name, w.JobTypes))
	}
	src := FromWorkload(w)
	r, err := Run(src, arms, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Seeds, []uint64{1, 2, 3, 4, 5}) || !slices.Equal(r.ArmOrder, StandardArms) {
		t.Fatalf("seeds %v, arms %v", r.Seeds, r.ArmOrder)
	}
	if len(r.Gate) == 0 {
		t.Fatal("no gate rows")
	}
	for _, row := range r.Gate {
		if !row.Pass {
			t.Errorf("gate %s fails: %s = %v (threshold %v, CI %v) %s", row.ID, row.Criterion, row.Estimate, row.Threshold, row.CI, row.Note)
		}
	}
	for name, a := range r.Arms {
		if a.Lost != 0 || len(a.PerSeed) != 5 {
			t.Errorf("arm %s: lost %d, %d seeds", name, a.Lost, len(a.PerSeed))
		}
		for _, s := range a.PerSeed {
			if s.Sent == 0 || s.Completed != s.Sent || s.Lost != 0 {
				t.Errorf("arm %s seed %d: sent %d, completed %d, lost %d", name, s.Seed, s.Sent, s.Completed, s.Lost)
			}
		}
	}

	// Deterministic, however many runs go at once. (Under the race
	// detector, on two arms and seeds, with runs still concurrent.)
	opts := Options{Parallel: 1}
	if raceEnabled {
		arms, opts.Seeds = arms[:2], []uint64{1, 2}
		if r, err = Run(src, arms, Options{Seeds: opts.Seeds, Parallel: 4}); err != nil {
			t.Fatal(err)
		}
	}
	again, err := Run(src, arms, opts)
	if err != nil {
		t.Fatal(err)
	}
	a, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(again)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("two runs of the same workload give different reports")
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	w := mustLoad(t, productionFlow)
	jobs := w.Generate(1)[:100]
	fifo := mustArm(t, "fifo", w.JobTypes)
	for _, workers := range []int{0, -1} {
		if _, _, err := RunSeed(w.JobTypes, jobs, workers, fifo, 1); err == nil || !strings.Contains(err.Error(), "need at least one worker") {
			t.Errorf("%d workers: error %v", workers, err)
		}
	}
	if _, err := ArmByName("lifo", w.JobTypes); err == nil || !strings.Contains(err.Error(), `unknown arm "lifo"`) {
		t.Errorf("ArmByName: error %v", err)
	}
	bad := Arm{Name: "bad", Policy: "lifo"}
	if _, _, err := RunSeed(w.JobTypes, jobs, 4, bad, 1); err == nil || !strings.Contains(err.Error(), `unknown policy "lifo"`) {
		t.Errorf("RunSeed with an unknown policy: error %v", err)
	}
	if _, err := Run(FromWorkload(w), []Arm{fifo, bad}, Options{Seeds: []uint64{1}}); err == nil || !strings.Contains(err.Error(), "arm bad seed 1") {
		t.Errorf("Run with a bad arm: error %v", err)
	}
	// Every named arm resolves.
	for _, name := range append(slices.Clone(StandardArms), "strict-aging", "no-aging", "sjf", "oracle-sjf", "previous", "virtual-fifo", "virtual-fifo-dispatch", "no-long-keys", "oracle-sept", "oracle-keys", "shadow", "bounded") {
		if _, err := ArmByName(name, w.JobTypes); err != nil {
			t.Errorf("ArmByName(%q): %v", name, err)
		}
	}
}

// A per-message overhead delays every handler's start by that much and
// keeps the worker busy for it, and the ack still reports the handler's
// own duration. Checked against a reference FIFO on two workers written
// with a plain slice of free times.
func TestOverheadDelaysEveryHandler(t *testing.T) {
	t.Parallel()
	types := []workload.JobType{
		{Name: "resize", Producer: "p", Class: "short", Duration: workload.DurationSpec{Dist: "fixed", MeanMS: 20}},
		{Name: "export", Producer: "p", Class: "export", Duration: workload.DurationSpec{Dist: "fixed", MeanMS: 700}},
	}
	rng := rand.New(rand.NewPCG(11, 12))
	var jobs []workload.Job
	at := time.Duration(0)
	for i := range 400 {
		at += time.Duration(rng.IntN(200)) * time.Millisecond
		ty := 0
		if rng.IntN(8) == 0 {
			ty = 1
		}
		jobs = append(jobs, workload.Job{Seq: i, Type: ty, Arrival: at,
			Duration: time.Duration(types[ty].Duration.MeanMS) * time.Millisecond})
	}
	const overhead = 7 * time.Millisecond
	fifo := mustArm(t, "fifo", types)
	fifo.Overhead = overhead
	_, recs, err := RunSeed(types, jobs, 2, fifo, 1)
	if err != nil {
		t.Fatal(err)
	}
	free := []time.Duration{0, 0}
	want := map[time.Duration][]time.Duration{} // sent -> starts, in order
	for _, j := range jobs {
		w := 0
		if free[1] < free[0] {
			w = 1
		}
		start := max(j.Arrival, free[w]) + overhead
		free[w] = start + j.Duration
		want[j.Arrival] = append(want[j.Arrival], start)
	}
	got := map[time.Duration][]time.Duration{}
	for _, r := range recs {
		if r.Done-r.Started != time.Duration(types[r.Type].Duration.MeanMS)*time.Millisecond {
			t.Fatalf("a %s job ran %v from its handler's start", types[r.Type].Name, r.Done-r.Started)
		}
		got[r.Sent] = append(got[r.Sent], r.Started)
	}
	for sent, starts := range want {
		g := slices.Clone(got[sent])
		slices.Sort(g)
		if !slices.Equal(g, starts) {
			t.Fatalf("jobs sent at %v started at %v, want %v", sent, g, starts)
		}
	}

	// The predictor learns the handlers' durations, not the overhead:
	// with fixed durations it ends up exact.
	pred := mustArm(t, "predictive", types)
	pred.Overhead = 50 * time.Millisecond
	res, _, err := RunSeed(types, jobs, 2, pred, 1)
	if err != nil {
		t.Fatal(err)
	}
	if mae := float64(res.MAEms); !(mae < 0.5) {
		t.Errorf("with fixed durations and an overhead the predictor is off by %v ms on average", mae)
	}
	pred.Overhead = -time.Millisecond
	if _, _, err := RunSeed(types, jobs, 2, pred, 1); err == nil || !strings.Contains(err.Error(), "overhead") {
		t.Errorf("a negative overhead: %v", err)
	}
}
