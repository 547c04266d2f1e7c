package bench

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/internal/sim"
	"github.com/harbinger-mq/harbinger/internal/workload"
)

func near(got, want float64) bool { return math.Abs(got-want) < 1e-9 }

// Tenants on three jobs whose figures are worked out by hand.
func TestTenantsByHand(t *testing.T) {
	t.Parallel()
	s := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
	types := []workload.JobType{{Name: "a.job", Producer: "a"}, {Name: "b.job", Producer: "b"}}
	res := RunResult{Arm: "x", Seed: 7, Sent: 4, OverrunUS: 12, TurnaroundUS: math.NaN(), Records: []report.Record{
		{Type: 0, Sent: 0, Started: 0, Done: s(1)},         // latency 1, work 1, none of it in [1, 3)
		{Type: 1, Sent: s(0.5), Started: s(1), Done: s(4)}, // latency 3.5, work 3, 2 of it in the window; sent before it
		{Type: 0, Sent: s(1), Started: s(2), Done: s(3)},   // latency 2, work 1, all in the window; sent in it
	}}
	got := Tenants(res, types, 2, [2]time.Duration{s(1), s(3)})
	if got.Arm != "x" || got.Seed != 7 || got.Sent != 4 || len(got.Tenants) != 2 {
		t.Fatalf("run %+v", got)
	}
	a, _ := got.Tenant("a")
	b, _ := got.Tenant("b")
	// a: latencies 1 and 2; the P99 interpolates between them (type 7).
	if a.Jobs != 2 || !near(a.MeanS, 1.5) || !near(a.P99S, 1.99) || a.WindowJobs != 1 || !near(a.WindowMeanS, 2) || !near(a.WindowP99S, 2) {
		t.Errorf("a: %+v", a)
	}
	if b.Jobs != 1 || !near(b.MeanS, 3.5) || !near(b.P99S, 3.5) || b.WindowJobs != 0 || b.WindowMeanS != 0 {
		t.Errorf("b: %+v", b)
	}
	// Work: a 2 s of 5, b 3 of 5; in the window a 1 s of 3, b 2 of 3.
	if !near(a.WorkShare, 0.4) || !near(b.WorkShare, 0.6) || !near(a.WindowShare, 1.0/3) || !near(b.WindowShare, 2.0/3) {
		t.Errorf("shares: a %v %v, b %v %v", a.WorkShare, a.WindowShare, b.WorkShare, b.WindowShare)
	}
	// 3 jobs from 0 s to 4 s; 3 s of work in 2 workers x 2 s of window.
	if !near(got.MakespanS, 4) || !near(got.ThroughputPerS, 0.75) || !near(got.BusyShare, 0.75) {
		t.Errorf("totals: makespan %v, throughput %v, busy %v", got.MakespanS, got.ThroughputPerS, got.BusyShare)
	}
	if got.OverrunUS != 12 || !math.IsNaN(float64(got.TurnaroundUS)) {
		t.Errorf("harness figures: overrun %v, turnaround %v", got.OverrunUS, got.TurnaroundUS)
	}
}

// The steady tenants' ratios leave the flooding tenant out, meet a goal
// on its line, and never meet it on a missing figure; medians are over
// seeds and merging two results takes them over every seed.
func TestFairSummary(t *testing.T) {
	t.Parallel()
	run := func(arm string, seed uint64, mean, p99 float64) TenantRun {
		return TenantRun{Arm: arm, Seed: seed, Tenants: []TenantFigures{
			{Producer: "flood", MeanS: 9, P99S: 9},
			{Producer: "steady", MeanS: mean, P99S: p99, WindowMeanS: mean, WindowP99S: p99},
			{Producer: "quiet", MeanS: mean, P99S: p99}, // nothing sent in the window
		}}
	}
	c := FairCaseResult{Name: "case", Workers: 4, Seeds: []uint64{1}, FloodProducer: "flood", MeanGoal: 1.2, P99Goal: 2,
		Runs: []TenantRun{run(FairCalm, 1, 1, 2), run(FairFloodOff, 1, 3, 8), run(FairFloodOn, 1, 1.2, 4)}}
	c.summarize()
	if len(c.Steady) != 2 {
		t.Fatalf("steady %+v, want quiet and steady", c.Steady)
	}
	q, s := c.Steady[0], c.Steady[1]
	if s.Producer != "steady" || !near(s.OffMean, 3) || !near(s.OffP99, 4) || !near(s.OnMean, 1.2) || !near(s.OnP99, 2) ||
		!s.MeetsGoal || !s.MeetsGoalInWindow {
		t.Errorf("steady: %+v", s)
	}
	if q.Producer != "quiet" || !q.MeetsGoal || q.MeetsGoalInWindow || q.OnWindowMean != 0 {
		t.Errorf("quiet: %+v", q)
	}
	if !c.GoalMet() {
		t.Error("goal not met")
	}
	// Seeds 2 and 3, run apart, worse with fair shares: the medians over
	// three seeds move to seed 2's figures.
	other := FairCaseResult{Name: "case", Workers: 4, Seeds: []uint64{2, 3}, FloodProducer: "flood", MeanGoal: 1.2, P99Goal: 2,
		Runs: []TenantRun{run(FairCalm, 2, 1, 2), run(FairFloodOff, 2, 3, 8), run(FairFloodOn, 2, 1.5, 4),
			run(FairCalm, 3, 1, 2), run(FairFloodOff, 3, 3, 8), run(FairFloodOn, 3, 2, 4)}}
	m, err := MergeFair([]*FairResult{{Method: "m.", Cases: []FairCaseResult{c}}, {Cases: []FairCaseResult{other}}})
	if err != nil {
		t.Fatal(err)
	}
	mc := m.Cases[0]
	if len(mc.Runs) != 9 || len(mc.Seeds) != 3 || !near(mc.Steady[1].OnMean, 1.5) || mc.GoalMet() {
		t.Errorf("merged: %d runs, seeds %v, steady %+v", len(mc.Runs), mc.Seeds, mc.Steady[1])
	}
	if !strings.Contains(m.Method, "seeds [1], [2 3]") {
		t.Errorf("merged method %q does not name the seeds", m.Method)
	}
	if _, err := MergeFair([]*FairResult{{Cases: []FairCaseResult{c}}, {Cases: []FairCaseResult{{Name: "case", Workers: 2}}}}); err == nil {
		t.Error("merged cases with different workers")
	}
}

// RunFair runs a case's three arms end to end on a broker in process, over
// a second of each noisy-neighbour workload's arrivals.
func TestRunFairShort(t *testing.T) {
	t.Parallel()
	load := func(name string) sim.Source {
		w, err := workload.Load("../../../workloads/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return sim.FromWorkload(w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := FairConfig{Cases: []FairCase{{Name: "equal", Calm: load("noisy-equal-calm.yaml"), Flood: load("noisy-equal.yaml"),
		MeanGoal: 1.2, P99Goal: 1.2, FloodProducer: "flood"}},
		Seeds: []uint64{1}, TimeScale: 0.1, ArrivalWindow: time.Second, DrainTimeout: 10 * time.Second,
		Window: [2]time.Duration{0, 500 * time.Millisecond}}
	res, err := RunFair(ctx, cfg, map[string]Driver{Harbinger: harbingerForTest(t)})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Cases[0]
	if len(c.Runs) != 3 {
		t.Fatalf("%d runs, want calm, flood off and flood on", len(c.Runs))
	}
	for i, want := range []string{FairCalm, FairFloodOff, FairFloodOn} {
		r := c.Runs[i]
		if r.Arm != want || len(r.Tenants) != 4 || r.Sent == 0 || r.ThroughputPerS <= 0 {
			t.Errorf("run %d: %s, %d tenants, %d sent; want %s and four tenants", i, r.Arm, len(r.Tenants), r.Sent, want)
		}
	}
	if len(c.Steady) != 3 || c.Steady[0].OnMean <= 0 {
		t.Errorf("steady: %+v", c.Steady)
	}
	res.Method = FairMethod(cfg, Environment{})
	var b bytes.Buffer
	if err := FairMarkdown(&b, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"harbinger-predictive-fair", "group_by producer", "time scale 0.1", "4 workers", "| steady-a |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// --skip-off leaves out the flood run with fair shares off, and the report
// says so instead of printing zero ratios.
func TestRunFairSkipOff(t *testing.T) {
	t.Parallel()
	w, err := workload.Load("../../../workloads/noisy-sizes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := workload.Load("../../../workloads/noisy-sizes-calm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := FairConfig{Cases: []FairCase{{Name: "sizes", Calm: sim.FromWorkload(c), Flood: sim.FromWorkload(w),
		MeanGoal: 1.5, P99Goal: 2, FloodProducer: "flood"}},
		Seeds: []uint64{2}, TimeScale: 0.1, ArrivalWindow: time.Second, DrainTimeout: 10 * time.Second,
		Window: [2]time.Duration{0, 500 * time.Millisecond}, SkipOff: true}
	res, err := RunFair(ctx, cfg, map[string]Driver{Harbinger: harbingerForTest(t)})
	if err != nil {
		t.Fatal(err)
	}
	cr := res.Cases[0]
	if len(cr.Runs) != 2 || cr.Runs[0].Arm != FairCalm || cr.Runs[1].Arm != FairFloodOn {
		t.Fatalf("runs %d, want calm and flood on only", len(cr.Runs))
	}
	if len(cr.Off.Tenants) != 0 || cr.Steady[0].OffMean != 0 || cr.Steady[0].OnMean <= 0 {
		t.Errorf("off %+v, steady %+v", cr.Off, cr.Steady[0])
	}
	res.Method = FairMethod(cfg, Environment{})
	var b bytes.Buffer
	if err := FairMarkdown(&b, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--skip-off", "| not run |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "| flood, fair off |") {
		t.Errorf("report has a row for the run not made:\n%s", b.String())
	}
}

// bench flow takes the fair arm by name; the pre-registered arms stay as
// they were.
func TestFairArmKnown(t *testing.T) {
	t.Parallel()
	arms, err := ParseArms("harbinger-predictive,harbinger-predictive-fair", KnownFlowArms())
	if err != nil || len(arms) != 2 || arms[1] != FairArm || arms[1].Policy != PolicyFair {
		t.Fatalf("arms %+v, %v", arms, err)
	}
	if _, err := ParseArms(FairArm.Name, FlowArms); err == nil {
		t.Error("the fair arm is among the pre-registered flow arms")
	}
}

// specDriver notes the queues it is asked for and refuses them.
type specDriver struct {
	Driver
	specs []QueueSpec
}

func (d *specDriver) Setup(_ context.Context, spec QueueSpec) (Queue, error) {
	d.specs = append(d.specs, spec)
	return nil, errRefused
}

var errRefused = errors.New("refused")

// RunFair asks for its queues with the configured fair settings (every
// run's spec carries them; only PolicyFair's queue declares them), the
// first being the calm run's.
func TestRunFairPassesFairSettings(t *testing.T) {
	t.Parallel()
	w, err := workload.Load("../../../workloads/noisy-equal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src := sim.FromWorkload(w)
	want := FairSettings{Reserve: 1, ReserveAbove: 1.5}
	d := &specDriver{}
	cfg := FairConfig{Cases: []FairCase{{Name: "equal", Calm: src, Flood: src, FloodProducer: "flood"}},
		Seeds: []uint64{1}, SkipOff: true, Fair: want}
	if _, err := RunFair(t.Context(), cfg, map[string]Driver{Harbinger: d}); !errors.Is(err, errRefused) {
		t.Fatalf("RunFair = %v", err)
	}
	if len(d.specs) != 1 || d.specs[0].Fair != want {
		t.Fatalf("asked for %+v, want the settings %+v", d.specs, want)
	}
}
