package sim

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/internal/sched"
	"github.com/harbinger-mq/harbinger/internal/workload"
)

// The policy's goal in a cell (a workload at an offered load, over its
// seeds), each job measured against the FIFO run of the same jobs:
//
//   - T1, long jobs: pooled over the seeds, at most GoalLongShare of the
//     long jobs finish later than GoalLongRatio x the latency FIFO gave the
//     same job, and none later than GoalLongCap x.
//   - T2, everyone: the all-message P99 at most GoalP99Ratio x FIFO's.
//   - M, the mean: a cut of the mean latency against FIFO of at least
//     GoalCapture x R, where R is the best cut in the cell among the key
//     oracle family (the default's rule on each key's true mean duration at
//     fixed settings, KeyOracleGuards) and FIFO itself, counting only the
//     settings that meet T1 and T2 there. A cell whose R is under
//     GoalMinCut is not judged on M.
//
// The long jobs are those of the job types with the largest mean duration:
// the top GoalLongTypes share of the types (at least one), so production
// flow's export and, on a trace, the costliest 5% of functions.
const (
	GoalLongRatio = 1.10
	GoalLongShare = 0.05
	GoalLongCap   = 1.5
	GoalP99Ratio  = 1.10
	GoalCapture   = 0.90
	GoalMinCut    = 0.05
	GoalLongTypes = 0.05
)

// KeyOracleGuards are the guard settings of the key oracle family, run at
// KeyOracleOvertake and KeyOracleStretch.
var KeyOracleGuards = []float64{0.1, 0.25, 0.5, 1}

// The key oracle family's fixed settings besides the guard.
const (
	KeyOracleOvertake = 0.1
	KeyOracleStretch  = -0.2
)

// KeyOracleArms are the key oracle family: the default policy on each key's
// true mean duration, one arm per guard.
func KeyOracleArms() []Arm {
	var arms []Arm
	for _, g := range KeyOracleGuards {
		a := Arm{Name: fmt.Sprintf("key-oracle:guard=%g,overtake=%g,stretch=%g", g, KeyOracleOvertake, KeyOracleStretch),
			Policy: sched.DefaultPolicy, KeyMeans: true}
		a.Options.Guard, a.Options.Overtake, a.Options.Stretch = new(g), new(KeyOracleOvertake), new(KeyOracleStretch)
		// The fixed guard the goal was set against: no adaptation.
		a.Options.Tail, a.Options.LongGuard = new(0.0), new(-1.0)
		a.Options.GatedMean, a.Options.LongKeysByTail = new(false), new(false)
		a.Options.Measured, a.Options.TailRisk = new(false), new(0.0)
		a.Options.TailKeys, a.Options.NearLongKeys = new(0.0), new(0.0)
		arms = append(arms, a)
	}
	return arms
}

// ParseArm reads an arm with optional settings: a name ArmByName knows,
// then after a colon comma-separated key=value pairs: the bounded policy's
// guard, overtake, stretch, tail, guardmin, longguard, tailrisk and
// unsuremin (sched.Bound),
// gatedmean, keysbytail, measured and tailgated (1 on, 0 off), the
// predictor's longkeys, and tailkeys (the quantile of a key's durations
// that, at a long cut, gives its messages the long guard; 0 off) and
// nearkeys (the share of keys, ranked as for the long-keys cut, whose
// messages take the long guard; 0 off), tailguard (the guard of the
// messages those two mark, in place of the long guard), tune (1: the
// guard's settings chosen per queue by replaying its history, sched.Ladder),
// e.g. "predictive:guard=0.25,overtake=0.1" or "predictive:tail=0".
// "key-oracle" is the default policy on each key's true mean duration.
func ParseArm(spec string, types []workload.JobType) (Arm, error) {
	name, settings, _ := strings.Cut(spec, ":")
	var a Arm
	var err error
	if name == "key-oracle" {
		a = Arm{Policy: sched.DefaultPolicy, KeyMeans: true}
	} else if a, err = ArmByName(name, types); err != nil {
		return Arm{}, err
	}
	a.Name = spec
	if settings == "" {
		return a, nil
	}
	for _, kv := range strings.Split(settings, ",") {
		k, v, ok := strings.Cut(kv, "=")
		f, perr := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if !ok || perr != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return Arm{}, fmt.Errorf("sim: arm %q: %q is not key=number", spec, kv)
		}
		switch strings.TrimSpace(k) {
		case "guard":
			if f < 0 {
				return Arm{}, fmt.Errorf("sim: arm %q: guard must not be negative, got %g", spec, f)
			}
			a.Options.Guard = new(f)
		case "overtake":
			a.Options.Overtake = new(f)
		case "stretch":
			a.Options.Stretch = new(f)
		case "tail":
			a.Options.Tail = new(f)
		case "guardmin":
			a.Options.GuardMin = new(f)
		case "longguard":
			a.Options.LongGuard = new(f)
		case "gatedmean":
			a.Options.GatedMean = new(f != 0)
		case "keysbytail":
			a.Options.LongKeysByTail = new(f != 0)
		case "longkeys":
			a.Predictor.LongKeys = f
		case "measured":
			a.Options.Measured = new(f != 0)
		case "tailrisk":
			a.Options.TailRisk = new(f)
		case "unsuremin":
			a.Options.UnsureGuardMin = new(f)
		case "tailkeys":
			a.Options.TailKeys = new(f)
		case "tailgated":
			a.Options.TailKeysGated = new(f != 0)
		case "nearkeys":
			a.Options.NearLongKeys = new(f)
		case "tailguard":
			a.Options.TailLongGuard = new(f)
		case "tune":
			a.Options.Tune = new(f != 0)
		default:
			return Arm{}, fmt.Errorf("sim: arm %q: unknown setting %q (want guard, overtake, stretch, tail, guardmin, longguard, gatedmean, keysbytail, longkeys, measured, tailrisk, unsuremin, tailkeys, tailgated, nearkeys, tailguard or tune)", spec, k)
		}
	}
	return a, nil
}

// Paired is one arm's per-job comparison with the FIFO run of the same jobs
// in one cell.
type Paired struct {
	Arm string `json:"arm"`
	// LongJobs is the number of long jobs pooled over the seeds;
	// LongOverRatio and LongOverCap the shares of them that finished later
	// than GoalLongRatio x and GoalLongCap x their FIFO latency, and
	// LongWorst the largest ratio.
	LongJobs      int        `json:"long_jobs"`
	LongOverRatio report.Num `json:"long_over_1_10"`
	LongOverCap   report.Num `json:"long_over_1_5"`
	LongWorst     report.Num `json:"long_worst_ratio"`
	// P99Ratio is the all-message P99 over FIFO's, pooled over the seeds;
	// MeanCut the cut of the mean latency against FIFO's (0.3 is 30%
	// lower).
	P99Ratio report.Num `json:"p99_ratio"`
	// P99BySeed is each seed's own P99 over FIFO's on the same seed, when
	// there are several: how far the pooled verdict is the draw's. A
	// pooled P99 near GoalP99Ratio that the seeds straddle can go either
	// way on other seeds.
	P99BySeed []report.Num `json:"p99_ratio_by_seed,omitempty"`
	MeanCut   report.Num   `json:"mean_cut"`
	T1        bool         `json:"t1"`
	T2        bool         `json:"t2"`
	// Capture is MeanCut over the cell's R; M says whether the arm meets
	// the mean goal (always, where R is under GoalMinCut).
	Capture report.Num `json:"capture"`
	M       bool       `json:"m"`
}

// P99Spread writes the lowest and highest of P99BySeed as "0.95-1.21x",
// or "-" when there are none (a single seed).
func (p Paired) P99Spread() string {
	if len(p.P99BySeed) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f-%.2fx", float64(slices.Min(p.P99BySeed)), float64(slices.Max(p.P99BySeed)))
}

// Pass reports whether the arm meets the whole goal in its cell.
func (p Paired) Pass() bool { return p.T1 && p.T2 && p.M }

// GoalResult is the goal's figures in one cell.
type GoalResult struct {
	Workload string   `json:"workload"`
	Workers  int      `json:"workers"`
	Seeds    []uint64 `json:"seeds"`
	// LongTypes are the job types whose jobs count as long.
	LongTypes []string `json:"long_types"`
	// R is the best mean cut of a key oracle setting (or FIFO's zero)
	// that meets T1 and T2 here, and RArm the arm that made it.
	R    report.Num `json:"r"`
	RArm string     `json:"r_arm"`
	// Arms are the arms under test, Family the key oracle family.
	Arms   []Paired `json:"arms"`
	Family []Paired `json:"key_oracle"`
	Method string   `json:"method"`
}

// Goal runs FIFO, arms and the key oracle family on every seed of src and
// measures each arm against the goal.
func Goal(src Source, arms []Arm, o Options) (*GoalResult, error) {
	seeds := o.Seeds
	if len(seeds) == 0 {
		seeds = src.Seeds()
	}
	workers := o.Workers
	if workers == 0 {
		workers = src.Workers()
	}
	par := o.Parallel
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	fifo, err := ArmByName("fifo", src.Types())
	if err != nil {
		return nil, err
	}
	family := KeyOracleArms()
	all := append(append([]Arm{fifo}, arms...), family...)
	for i := range all {
		all[i].Overhead = o.Overhead
	}
	types := src.Types()
	jobs := make([][]workload.Job, len(seeds))
	for i, s := range seeds {
		jobs[i] = src.Generate(s)
	}
	// records[arm][seed], each indexed by job.
	lat := make([][][]float64, len(all))
	for i := range lat {
		lat[i] = make([][]float64, len(seeds))
	}
	err = eachRun(len(all), len(seeds), par, func(a, si int) error {
		_, recs, err := RunSeed(types, jobs[si], workers, all[a], seeds[si])
		if err != nil {
			return fmt.Errorf("arm %s seed %d: %w", all[a].Name, seeds[si], err)
		}
		l := make([]float64, len(jobs[si]))
		for i := range l {
			l[i] = math.NaN()
		}
		for _, r := range recs {
			l[r.Job] = (r.Done - r.Sent).Seconds()
		}
		lat[a][si] = l
		return nil
	})
	if err != nil {
		return nil, err
	}
	long := LongTypes(types, jobs)
	res := &GoalResult{Workload: src.Name(), Workers: workers, Seeds: seeds}
	for t := range long {
		res.LongTypes = append(res.LongTypes, types[t].Name)
	}
	sort.Strings(res.LongTypes)
	var longMask [][]bool
	for s := range seeds {
		m := make([]bool, len(jobs[s]))
		for i, j := range jobs[s] {
			m[i] = long[j.Type]
		}
		longMask = append(longMask, m)
	}
	pair := func(a int) Paired { return PairWithFIFO(all[a].Name, lat[0], lat[a], longMask) }
	r, rArm := 0.0, "fifo"
	for i := range family {
		p := pair(1 + len(arms) + i)
		res.Family = append(res.Family, p)
		if p.T1 && p.T2 && float64(p.MeanCut) > r {
			r, rArm = float64(p.MeanCut), p.Arm
		}
	}
	res.R, res.RArm = report.Num(r), rArm
	for i := range arms {
		res.Arms = append(res.Arms, pair(1+i))
	}
	for _, ps := range [][]Paired{res.Arms, res.Family} {
		for i := range ps {
			ps[i].judge(r)
		}
	}
	res.Method = fmt.Sprintf("discrete-event simulation of %q with %d workers, seeds %v, every arm on identical jobs; "+
		"each job's latency (ack - send) against the FIFO run of the same job, pooled over the seeds; "+
		"T1: at most %.0f%% of the long jobs (types %s) over %.2fx FIFO and none over %.2gx; T2: all-message P99 at most %.2fx FIFO's; "+
		"M: a mean cut of at least %.0f%% of R, the best cut of the key oracle family (default policy on each key's true mean, guards %v, overtake %g, stretch %g) "+
		"or FIFO meeting T1 and T2, where R >= %.0f%%",
		src.Name(), workers, seeds, GoalLongShare*100, strings.Join(res.LongTypes, ", "), GoalLongRatio, GoalLongCap, GoalP99Ratio,
		GoalCapture*100, KeyOracleGuards, KeyOracleOvertake, KeyOracleStretch, GoalMinCut*100)
	return res, nil
}

// judge sets the capture and M from the cell's R.
func (p *Paired) judge(r float64) {
	p.Capture = report.Num(math.NaN())
	p.M = true
	if r >= GoalMinCut {
		p.Capture = report.Num(float64(p.MeanCut) / r)
		p.M = float64(p.MeanCut) >= GoalCapture*r
	}
}

// LongTypes picks the long job types: the top GoalLongTypes share of the
// types by their jobs' mean duration over every seed, at least one. Types
// with no job are left out.
func LongTypes(types []workload.JobType, jobs [][]workload.Job) map[int]bool {
	sum := make([]float64, len(types))
	n := make([]int, len(types))
	for _, js := range jobs {
		for _, j := range js {
			sum[j.Type] += j.Duration.Seconds()
			n[j.Type]++
		}
	}
	var idx []int
	for t := range types {
		if n[t] > 0 {
			idx = append(idx, t)
		}
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		ma, mb := sum[a]/float64(n[a]), sum[b]/float64(n[b])
		switch {
		case ma > mb:
			return -1
		case ma < mb:
			return 1
		}
		return 0
	})
	k := max(1, int(math.Ceil(GoalLongTypes*float64(len(idx)))))
	out := map[int]bool{}
	for _, t := range idx[:min(k, len(idx))] {
		out[t] = true
	}
	return out
}

// PairWithFIFO compares an arm's latencies with FIFO's, job by job: fifo
// and arm hold each seed's latencies by job (NaN for a job that never
// finished, which counts as over every ratio), and long marks the long
// jobs. It judges T1 and T2; M needs the cell's R (judge).
func PairWithFIFO(name string, fifo, arm [][]float64, long [][]bool) Paired {
	p := Paired{Arm: name}
	var over, overCap int
	worst := 0.0
	var all, allFIFO []float64
	var sum, sumFIFO float64
	for s := range fifo {
		for i, f := range fifo[s] {
			a := arm[s][i]
			all, allFIFO = append(all, a), append(allFIFO, f)
			sum += a
			sumFIFO += f
			if !long[s][i] {
				continue
			}
			p.LongJobs++
			ratio := a / f
			if math.IsNaN(ratio) {
				ratio = math.Inf(1)
			}
			if ratio > GoalLongRatio {
				over++
			}
			if ratio > GoalLongCap {
				overCap++
			}
			worst = max(worst, ratio)
		}
	}
	nan := report.Num(math.NaN())
	p.LongOverRatio, p.LongOverCap, p.LongWorst = nan, nan, nan
	if p.LongJobs > 0 {
		p.LongOverRatio = report.Num(float64(over) / float64(p.LongJobs))
		p.LongOverCap = report.Num(float64(overCap) / float64(p.LongJobs))
		p.LongWorst = report.Num(worst)
	}
	p.P99Ratio = report.Num(quantile(all, 0.99) / quantile(allFIFO, 0.99))
	if len(fifo) > 1 {
		for s := range fifo {
			p.P99BySeed = append(p.P99BySeed, report.Num(quantile(arm[s], 0.99)/quantile(fifo[s], 0.99)))
		}
	}
	p.MeanCut = report.Num(1 - sum/sumFIFO)
	p.T1 = p.LongJobs == 0 || float64(p.LongOverRatio) <= GoalLongShare && float64(p.LongWorst) <= GoalLongCap
	p.T2 = float64(p.P99Ratio) <= GoalP99Ratio
	return p
}

// quantile is the q-quantile of xs by the nearest-rank method (NaN sorts
// last, as a job that never finished is the latest).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.SortFunc(s, func(a, b float64) int {
		switch {
		case math.IsNaN(a) && math.IsNaN(b):
			return 0
		case math.IsNaN(a):
			return 1
		case math.IsNaN(b):
			return -1
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	})
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(i, 0)]
}
