package sim

import (
	"math"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/internal/workload"
)

// The paired figures of a case small enough to compute by hand: two seeds,
// five jobs each, jobs 3 and 4 long.
//
//	seed 1  FIFO  1  2  3  10  20    arm  0.5  1  2  12  20
//	seed 2  FIFO  1  1  1  10  10    arm  1    1  1  10  10
//
// Long jobs (4): ratios 1.2, 1.0, 1.0, 1.0: one over 1.10x (25%), none
// over 1.5x, worst 1.2. P99 of ten by nearest rank is the largest: 20
// against 20. Mean: 58.5 against 59, a cut of 0.5/59.
func TestPairWithFIFOByHand(t *testing.T) {
	t.Parallel()
	fifo := [][]float64{{1, 2, 3, 10, 20}, {1, 1, 1, 10, 10}}
	arm := [][]float64{{0.5, 1, 2, 12, 20}, {1, 1, 1, 10, 10}}
	long := [][]bool{{false, false, false, true, true}, {false, false, false, true, true}}
	p := PairWithFIFO("arm", fifo, arm, long)
	near := func(got report.Num, want float64) bool { return math.Abs(float64(got)-want) < 1e-9 }
	if p.LongJobs != 4 || !near(p.LongOverRatio, 0.25) || !near(p.LongOverCap, 0) || !near(p.LongWorst, 1.2) ||
		!near(p.P99Ratio, 1) || !near(p.MeanCut, 0.5/59) || len(p.P99BySeed) != 2 || !near(p.P99BySeed[0], 1) || !near(p.P99BySeed[1], 1) {
		t.Fatalf("paired = %+v", p)
	}
	// T1 fails (25% of the long jobs over 1.10x); T2 holds; the cut is
	// 8.5% of R = 10%, short of 90%.
	p.judge(0.10)
	if p.T1 || !p.T2 || p.M || !near(p.Capture, 0.5/59/0.10) {
		t.Fatalf("judged = %+v", p)
	}
	// A long job at 1.6x: over both ratios; R under 5% leaves M unjudged.
	arm[1][4] = 16
	p = PairWithFIFO("arm", fifo, arm, long)
	p.judge(0.04)
	if !near(p.LongOverRatio, 0.5) || !near(p.LongOverCap, 0.25) || !near(p.LongWorst, 1.6) || p.T1 || !p.M || !math.IsNaN(float64(p.Capture)) {
		t.Fatalf("with a long job at 1.6x: %+v", p)
	}
	// Seed 2's own P99 is now 16 against 10; the pooled P99 is still 20
	// against 20, the largest of the ten.
	if !near(p.P99Ratio, 1) || !near(p.P99BySeed[0], 1) || !near(p.P99BySeed[1], 1.6) {
		t.Fatalf("P99 pooled %v, by seed %v; want 1 and [1 1.6]", p.P99Ratio, p.P99BySeed)
	}
	if got := p.P99Spread(); got != "1.00-1.60x" {
		t.Fatalf("P99 spread %q, want 1.00-1.60x", got)
	}
	// One seed: no per-seed figures.
	if p := PairWithFIFO("arm", fifo[:1], arm[:1], long[:1]); p.P99BySeed != nil || p.P99Spread() != "-" {
		t.Fatalf("one seed gave P99 by seed %v (%s)", p.P99BySeed, p.P99Spread())
	}
	// No long job over either ratio and the same P99: T1 and T2 hold.
	arm = [][]float64{{0.5, 1, 2, 10, 20}, {1, 1, 1, 10, 10}}
	if p := PairWithFIFO("arm", fifo, arm, long); !p.T1 || !p.T2 {
		t.Fatalf("an arm that delays no long job: %+v", p)
	}
	// A job that never finished counts as over every ratio.
	arm[0][3] = math.NaN()
	if p := PairWithFIFO("arm", fifo, arm, long); !math.IsInf(float64(p.LongWorst), 1) || p.T1 {
		t.Fatalf("an unfinished long job: %+v", p)
	}
}

// The longest types by mean duration are long: one of a few types, the top
// 5% of many.
func TestLongTypes(t *testing.T) {
	t.Parallel()
	types := make([]workload.JobType, 40)
	var jobs []workload.Job
	for i := range types {
		jobs = append(jobs, workload.Job{Type: i, Duration: time.Duration(i+1) * time.Millisecond})
	}
	long := LongTypes(types, [][]workload.Job{jobs})
	if len(long) != 2 || !long[39] || !long[38] {
		t.Fatalf("long of 40 types: %v, want the two longest", long)
	}
	long = LongTypes(types[:3], [][]workload.Job{jobs[:3]})
	if len(long) != 1 || !long[2] {
		t.Fatalf("long of 3 types: %v, want the longest", long)
	}
}

// Goal on the shipped workload, three seeds: FIFO against itself changes
// nothing, and the key oracle family sets R from a setting that meets T1
// and T2.
func TestGoalOnTheShippedWorkload(t *testing.T) {
	t.Parallel()
	w, err := workload.Load("../../workloads/production-flow.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w.ArrivalsS = 60 // a minute of arrivals: enough to order the arms
	fifo, err := ParseArm("fifo", w.JobTypes)
	if err != nil {
		t.Fatal(err)
	}
	def, err := ParseArm("predictive:guard=0.25,overtake=0.1", w.JobTypes)
	if err != nil {
		t.Fatal(err)
	}
	g, err := Goal(FromWorkload(w), []Arm{fifo, def}, Options{Seeds: []uint64{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.LongTypes) != 1 || g.LongTypes[0] != "report.export" {
		t.Errorf("long types %v, want the export", g.LongTypes)
	}
	self := g.Arms[0]
	if self.LongOverRatio != 0 || self.LongWorst != 1 || self.P99Ratio != 1 || self.MeanCut != 0 || !self.T1 || !self.T2 {
		t.Errorf("FIFO against itself: %+v", self)
	}
	if len(g.Family) != len(KeyOracleGuards) {
		t.Fatalf("%d key oracle arms, want %d", len(g.Family), len(KeyOracleGuards))
	}
	found := g.RArm == "fifo" && g.R == 0
	for _, p := range g.Family {
		if p.Arm == g.RArm {
			found = p.T1 && p.T2 && p.MeanCut == g.R
		}
		if p.T1 && p.T2 && p.MeanCut > g.R {
			t.Errorf("%s meets T1 and T2 with a cut of %v, above R %v", p.Arm, p.MeanCut, g.R)
		}
	}
	if !found {
		t.Errorf("R %v from %q is no setting that meets T1 and T2: %+v", g.R, g.RArm, g.Family)
	}
	if _, err := ParseArm("predictive:guard=x", w.JobTypes); err == nil {
		t.Error("a setting that is not a number was taken")
	}
	if _, err := ParseArm("predictive:speed=2", w.JobTypes); err == nil {
		t.Error("an unknown setting was taken")
	}
	tk, err := ParseArm("predictive:tailkeys=0.99,tailgated=1,nearkeys=0.1", w.JobTypes)
	if err != nil {
		t.Fatal(err)
	}
	if o := tk.Options; o.TailKeys == nil || *o.TailKeys != 0.99 || o.TailKeysGated == nil || !*o.TailKeysGated || o.NearLongKeys == nil || *o.NearLongKeys != 0.1 {
		t.Errorf("tail keys settings: %+v", o)
	}
}
