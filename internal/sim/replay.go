package sim

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/harbinger-mq/harbinger/internal/history"
	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/internal/sched"
	"github.com/harbinger-mq/harbinger/internal/stats"
	"github.com/harbinger-mq/harbinger/internal/workload"
)

// What a replay needs of a history to say anything, and of a key to
// report it alone.
const (
	ReplayMinJobs    = 200
	ReplayMinKeyJobs = 20
	// ReplayMinWait: when FIFO's jobs waited (latency past their run)
	// less than this share of their mean latency, no order can cut it.
	ReplayMinWait = 0.02
	// laterRatio is the ratio to FIFO above which a job counts as later
	// (below it is the replay's rounding).
	laterRatio = 1.001
)

// ReplayArms are the arms a replay runs besides FIFO: the default policy
// and the other learning policies.
var ReplayArms = []string{"predictive", "strict-aging", "weighted"}

// ReplayOptions for Replay.
type ReplayOptions struct {
	// Workers replaces the record's worker count when positive.
	Workers int
	// Loads are offered loads (busy workers / workers) to replay at
	// besides the recorded one: arrivals scaled, durations unchanged.
	Loads []float64
	// Overhead is each job's cost outside its handler (Arm.Overhead);
	// InferOverhead estimates it from a record.
	Overhead time.Duration
	// Parallel is the concurrent runs; default GOMAXPROCS.
	Parallel int
}

// ReplayKeyArm is one arm's figures on one key's jobs, each job against
// the FIFO replay of the same job.
type ReplayKeyArm struct {
	Arm string `json:"arm"`
	// MeanS and P99S are the key's latency under the arm, in seconds;
	// MeanCut its cut of FIFO's mean (0.3 is 30% lower) and P99Ratio its
	// P99 over FIFO's.
	MeanS    report.Num `json:"mean_s"`
	P99S     report.Num `json:"p99_s"`
	MeanCut  report.Num `json:"mean_cut"`
	P99Ratio report.Num `json:"p99_ratio"`
	// Later is the share of the key's jobs that finished later than
	// under FIFO, Over110 the share later than 1.10x their FIFO latency,
	// Worst the largest ratio.
	Later   report.Num `json:"later"`
	Over110 report.Num `json:"over_1_10"`
	Worst   report.Num `json:"worst_ratio"`
}

// ReplayKey is one key's figures at one load.
type ReplayKey struct {
	Key      string `json:"key"`
	Producer string `json:"producer"`
	Jobs     int    `json:"jobs"`
	// TooFew is set when the key has under ReplayMinKeyJobs jobs: its
	// figures are left out.
	TooFew    bool       `json:"too_few,omitempty"`
	FIFOMeanS report.Num `json:"fifo_mean_s"`
	FIFOP99S  report.Num `json:"fifo_p99_s"`
	// LiveMeanS and LiveP99S are the recorded latencies (at the recorded
	// load only), to hold the replay of the recorded policy against.
	LiveMeanS report.Num     `json:"live_mean_s,omitempty"`
	LiveP99S  report.Num     `json:"live_p99_s,omitempty"`
	Arms      []ReplayKeyArm `json:"arms,omitempty"`
	// Oracle is the key oracle's figures here: the reference setting the
	// whole replay picked (ReplayLoad.Goal.RArm).
	Oracle *ReplayKeyArm `json:"key_oracle,omitempty"`
}

// ReplayLoad is a replay at one offered load.
type ReplayLoad struct {
	Load     float64 `json:"load"`
	Recorded bool    `json:"recorded"`
	// Arms are each arm against FIFO over every job (the goal's figures),
	// Family the key oracle family; R and RArm as in GoalResult.
	Arms   []Paired    `json:"arms"`
	Family []Paired    `json:"key_oracle"`
	R      report.Num  `json:"r"`
	RArm   string      `json:"r_arm"`
	Keys   []ReplayKey `json:"keys"`
	// Fidelity is the replay of the recorded policy against the live
	// latencies, per key (at the recorded load).
	FidelityArm string `json:"fidelity_arm,omitempty"`
	// Dists are the latency distributions over every job: FIFO's, each
	// arm's and (at the recorded load) the live one, as "live".
	Dists []ReplayDist `json:"dists"`
}

// DistPoints is the number of quantiles a ReplayDist holds.
const DistPoints = 101

// ReplayDist is a latency distribution: Quantiles[i] is the i/100
// quantile in seconds (0 the fastest job, 100 the slowest).
type ReplayDist struct {
	Arm       string       `json:"arm"`
	Quantiles []report.Num `json:"quantiles_s"`
}

func dist(name string, lat []float64) ReplayDist {
	s := slices.Clone(lat)
	slices.SortFunc(s, func(a, b float64) int {
		switch {
		case math.IsNaN(a) && math.IsNaN(b):
			return 0
		case math.IsNaN(a):
			return 1
		case math.IsNaN(b):
			return -1
		}
		return cmpFloat(a, b)
	})
	d := ReplayDist{Arm: name, Quantiles: make([]report.Num, DistPoints)}
	for i := range d.Quantiles {
		k := int(math.Round(float64(i) / float64(DistPoints-1) * float64(len(s)-1)))
		d.Quantiles[i] = report.Num(s[k])
	}
	return d
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ReplayResult is a history replayed through the policies.
type ReplayResult struct {
	Queue    string       `json:"queue"`
	Policy   string       `json:"recorded_policy"`
	Since    time.Time    `json:"since"`
	Until    time.Time    `json:"until"`
	Jobs     int          `json:"jobs"`
	Keys     int          `json:"keys"`
	Workers  int          `json:"workers"`
	Overhead report.Num   `json:"overhead_ms"`
	Loads    []ReplayLoad `json:"loads"`
	// TooLittle, when set, says why the history is too short or too
	// sparse to say anything; Loads is then empty.
	TooLittle string `json:"too_little,omitempty"`
	Method    string `json:"method"`
}

// ArmFor is the replay arm of a recorded queue policy: the arm whose
// replay is held against the live latencies.
func ArmFor(policy string) string {
	switch policy {
	case sched.FIFO, sched.Shadow:
		return "fifo"
	case sched.Bounded:
		return "predictive"
	case sched.Predictive:
		return "strict-aging"
	case sched.WeightedP:
		return "weighted"
	}
	return ""
}

// InferOverhead is the median of settle - start - duration over the acked
// entries: a live job's delivery and ack round trip, which holds its
// worker outside the handler.
func InferOverhead(es []history.Entry) time.Duration {
	var xs []time.Duration
	for i := range es {
		e := &es[i]
		if e.Outcome == history.Ack && e.Duration > 0 {
			xs = append(xs, max(e.Done.Sub(e.Started)-e.Duration, 0))
		}
	}
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// Replay runs the history through FIFO, arms (ReplayArms when nil) and
// the key oracle family at the recorded load and each of o.Loads, and
// reports the per-key figures. The same history and options always give
// the same figures.
func Replay(src *HistorySource, arms []Arm, o ReplayOptions) (*ReplayResult, error) {
	h := src.Header()
	res := &ReplayResult{Queue: h.Queue, Policy: h.Policy, Since: h.Since, Until: h.Until, Jobs: len(src.jobs), Keys: len(src.types)}
	res.Workers = src.Workers()
	if o.Workers > 0 {
		res.Workers = o.Workers
	}
	res.Overhead = report.Num(float64(o.Overhead) / 1e6)
	if arms == nil {
		for _, name := range ReplayArms {
			a, err := ArmByName(name, src.Types())
			if err != nil {
				return nil, err
			}
			arms = append(arms, a)
		}
	}
	fid := ArmFor(h.Policy)
	defer func() { res.Method = replayMethod(res, arms) }()
	if len(src.jobs) < ReplayMinJobs {
		res.TooLittle = fmt.Sprintf("%d settled jobs in the history; a replay needs at least %d to say anything", len(src.jobs), ReplayMinJobs)
		return res, nil
	}
	load, err := OfferedLoad(src.jobs, res.Workers)
	if err != nil {
		res.TooLittle = fmt.Sprintf("the history cannot be replayed: %v", err)
		return res, nil
	}
	loads := append([]float64{load}, o.Loads...)
	for li, l := range loads {
		var s Source = src
		if li > 0 {
			if s, err = AtLoad(withWorkers{src, res.Workers}, l); err != nil {
				return nil, err
			}
		}
		rl, err := replayAt(s, src, arms, res.Workers, o, fid, li == 0)
		if err != nil {
			return nil, err
		}
		rl.Load = l
		res.Loads = append(res.Loads, *rl)
	}
	if rl := res.Loads[0]; rl.R < GoalMinCut && waitShare(src, res.Workers, o) < ReplayMinWait {
		res.TooLittle = fmt.Sprintf("at the recorded load (%.2f of %d workers) jobs barely waited under FIFO: no order of them changes much; try a higher load (--at-load)", load, res.Workers)
	}
	return res, nil
}

// withWorkers is a Source with its worker count replaced, so AtLoad
// measures the load on the workers the replay uses.
type withWorkers struct {
	Source
	n int
}

func (w withWorkers) Workers() int { return w.n }

// waitShare is FIFO's mean wait (latency past the run) over its mean
// latency, on the recorded arrivals.
func waitShare(src *HistorySource, workers int, o ReplayOptions) float64 {
	fifo, _ := ArmByName("fifo", nil)
	fifo.Overhead = o.Overhead
	_, recs, err := RunSeed(src.types, src.jobs, workers, fifo, 1)
	if err != nil || len(recs) == 0 {
		return 0
	}
	var wait, lat float64
	for _, r := range recs {
		lat += (r.Done - r.Sent).Seconds()
		wait += (r.Started - r.Sent).Seconds()
	}
	return wait / lat
}

func replayAt(s Source, src *HistorySource, arms []Arm, workers int, o ReplayOptions, fid string, recorded bool) (*ReplayLoad, error) {
	fifo, _ := ArmByName("fifo", nil)
	all := append(append([]Arm{fifo}, arms...), KeyOracleArms()...)
	for i := range all {
		all[i].Overhead = o.Overhead
	}
	par := o.Parallel
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	jobs := s.Generate(1)
	types := s.Types()
	lat := make([][]float64, len(all))
	err := eachRun(len(all), 1, par, func(a, _ int) error {
		_, recs, err := RunSeed(types, jobs, workers, all[a], 1)
		if err != nil {
			return fmt.Errorf("arm %s: %w", all[a].Name, err)
		}
		l := make([]float64, len(jobs))
		for i := range l {
			l[i] = math.NaN()
		}
		for _, r := range recs {
			l[r.Job] = (r.Done - r.Sent).Seconds()
		}
		lat[a] = l
		return nil
	})
	if err != nil {
		return nil, err
	}
	long := LongTypes(types, [][]workload.Job{jobs})
	mask := make([]bool, len(jobs))
	for i, j := range jobs {
		mask[i] = long[j.Type]
	}
	rl := &ReplayLoad{Recorded: recorded}
	pair := func(a int) Paired {
		return PairWithFIFO(all[a].Name, [][]float64{lat[0]}, [][]float64{lat[a]}, [][]bool{mask})
	}
	r, rArm, rIdx := 0.0, "fifo", -1
	for i := range KeyOracleGuards {
		a := 1 + len(arms) + i
		p := pair(a)
		rl.Family = append(rl.Family, p)
		if p.T1 && p.T2 && float64(p.MeanCut) > r {
			r, rArm, rIdx = float64(p.MeanCut), p.Arm, a
		}
	}
	rl.R, rl.RArm = report.Num(r), rArm
	for i := range arms {
		rl.Arms = append(rl.Arms, pair(1+i))
	}
	rl.Dists = append(rl.Dists, dist("fifo", lat[0]))
	for i := range arms {
		rl.Dists = append(rl.Dists, dist(arms[i].Name, lat[1+i]))
	}
	if recorded {
		live := make([]float64, len(jobs))
		for i, j := range jobs {
			live[i] = src.live[j.Seq].Seconds()
		}
		rl.Dists = append(rl.Dists, dist("live", live))
	}
	for _, ps := range [][]Paired{rl.Arms, rl.Family} {
		for i := range ps {
			ps[i].judge(r)
		}
	}
	// Per key: the jobs of each type, in job order.
	byType := make([][]int, len(types))
	for i, j := range jobs {
		byType[j.Type] = append(byType[j.Type], i)
	}
	fidIdx := -1
	if recorded {
		if fid == "fifo" {
			fidIdx = 0
		}
		for i, a := range arms {
			if a.Name == fid {
				fidIdx = 1 + i
			}
		}
		if fidIdx >= 0 {
			rl.FidelityArm = all[fidIdx].Name
		}
	}
	for t, idx := range byType {
		if len(idx) == 0 {
			continue
		}
		k := ReplayKey{Key: types[t].Name, Producer: types[t].Producer, Jobs: len(idx)}
		if len(idx) < ReplayMinKeyJobs {
			k.TooFew = true
			rl.Keys = append(rl.Keys, k)
			continue
		}
		pick := func(a int) []float64 {
			out := make([]float64, len(idx))
			for i, j := range idx {
				out[i] = lat[a][j]
			}
			return out
		}
		f := pick(0)
		k.FIFOMeanS, k.FIFOP99S = report.Num(stats.Mean(f)), report.Num(quantile(f, 0.99))
		nan := report.Num(math.NaN())
		k.LiveMeanS, k.LiveP99S = nan, nan
		if recorded {
			live := make([]float64, len(idx))
			for i, j := range idx {
				live[i] = src.live[jobs[j].Seq].Seconds()
			}
			k.LiveMeanS, k.LiveP99S = report.Num(stats.Mean(live)), report.Num(quantile(live, 0.99))
		}
		for i := range arms {
			k.Arms = append(k.Arms, keyArm(arms[i].Name, f, pick(1+i)))
		}
		if rIdx >= 0 {
			ka := keyArm(rArm, f, pick(rIdx))
			k.Oracle = &ka
		}
		rl.Keys = append(rl.Keys, k)
	}
	return rl, nil
}

// keyArm compares one key's latencies under an arm with FIFO's, job by job.
func keyArm(name string, fifo, arm []float64) ReplayKeyArm {
	all := make([]bool, len(fifo))
	for i := range all {
		all[i] = true
	}
	p := PairWithFIFO(name, [][]float64{fifo}, [][]float64{arm}, [][]bool{all})
	later := 0
	for i := range fifo {
		if r := arm[i] / fifo[i]; r > laterRatio || math.IsNaN(r) {
			later++
		}
	}
	return ReplayKeyArm{Arm: name, MeanS: report.Num(stats.Mean(arm)), P99S: report.Num(quantile(arm, 0.99)),
		MeanCut: p.MeanCut, P99Ratio: p.P99Ratio, Later: report.Num(float64(later) / float64(len(fifo))),
		Over110: p.LongOverRatio, Worst: p.LongWorst}
}

// Words says what arm does to the key, in a user's terms: "send-email:
// mean -92%, P99 -80%" or "report.export: mean +1%, P99 +2%; 3% of jobs
// up to 1.08x later".
func (k ReplayKey) Words(arm string) string {
	name := k.Key
	if name == "" {
		name = "(no job type)"
	}
	if k.TooFew {
		return fmt.Sprintf("%s: %d jobs, too few to say", name, k.Jobs)
	}
	for _, a := range k.Arms {
		if a.Arm != arm {
			continue
		}
		s := fmt.Sprintf("%s: mean %s, P99 %s", name, signedPct(-float64(a.MeanCut)), signedPct(float64(a.P99Ratio)-1))
		if l := float64(a.Later); l > 0 {
			s += fmt.Sprintf("; %s of jobs up to %.2fx later", pctWord(l), float64(a.Worst))
		}
		return s
	}
	return name + ": not replayed under " + arm
}

func signedPct(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.Abs(v) < 0.005:
		return "±0%"
	}
	return fmt.Sprintf("%+.0f%%", v*100)
}

func pctWord(v float64) string {
	if v < 0.01 {
		return fmt.Sprintf("%.1f%%", v*100)
	}
	return fmt.Sprintf("%.0f%%", v*100)
}

func replayMethod(res *ReplayResult, arms []Arm) string {
	names := []string{"fifo"}
	for _, a := range arms {
		names = append(names, a.Name)
	}
	return fmt.Sprintf("the recorded history of queue %q (%d settled deliveries of %d keys, recorded under %s) replayed in virtual time through Harbinger's real scheduler "+
		"with %d workers and a per-job overhead of %.3g ms outside the handler: each delivery arrives when it took its place in line and runs for the duration its worker reported "+
		"(a nack for its time from delivery to settle; each attempt a job of its own); arms %s and the key oracle family (guards %v); "+
		"every job's latency against the FIFO replay of the same job; a key needs %d jobs to be reported, a history %d",
		res.Queue, res.Jobs, res.Keys, res.Policy, res.Workers, float64(res.Overhead), strings.Join(names, ", "), KeyOracleGuards, ReplayMinKeyJobs, ReplayMinJobs)
}
