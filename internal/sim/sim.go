// Package sim owns the discrete-event simulator: it replays a job stream
// through the real scheduling core (sched.Queue and its predictor) with N
// workers in virtual time, and reduces the outcome to the pre-registered
// figures. A 300-second workload runs in milliseconds.
package sim

import (
	"container/heap"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/harbinger-mq/harbinger/internal/fair"
	"github.com/harbinger-mq/harbinger/internal/predict"
	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/internal/sched"
	"github.com/harbinger-mq/harbinger/internal/workload"
)

// Source is a job stream the simulator can replay: a workload file or a trace.
type Source interface {
	Name() string
	Workers() int
	Seeds() []uint64
	Types() []workload.JobType
	Generate(seed uint64) []workload.Job
}

// FromWorkload adapts a parsed workload file to a Source.
func FromWorkload(w *workload.Workload) Source { return wlSource{w} }

type wlSource struct{ w *workload.Workload }

func (s wlSource) Name() string                        { return s.w.Name }
func (s wlSource) Workers() int                        { return s.w.Workers }
func (s wlSource) Seeds() []uint64                     { return s.w.Seeds }
func (s wlSource) Types() []workload.JobType           { return s.w.JobTypes }
func (s wlSource) Generate(seed uint64) []workload.Job { return s.w.Generate(seed) }

// Arm is one way of scheduling the same jobs.
type Arm struct {
	Name      string
	Policy    string // a sched policy name
	Options   sched.PolicyOptions
	Predictor predict.Config
	Oracle    bool // tiers from the true durations, known in advance
	// KeyMeans places every message at its key's true mean duration over
	// the seed's jobs, known in advance: the best any estimate made from
	// the key alone can do, with no noise and no cold start.
	KeyMeans bool
	// NewModel, when set, gives each run its own Model: the estimate of a
	// warm, ungated key comes from it instead of the key's EWMA.
	NewModel func() Model
	// Overhead is each message's cost outside its handler, the round trip
	// of delivery and ack a live broker pays: a worker that takes a
	// message starts the handler Overhead later. The latency includes it;
	// the ack reports the handler's duration alone, as a live worker's
	// does. Run sets it from Options.Overhead.
	Overhead time.Duration
	// Fair, when set, is the queue's limits and fair shares: the jobs go
	// through a fair.Fair over the policy, as a live queue declared with
	// them does. A job's keys are its type's producer, name and tenant.
	Fair *fair.Config
}

// Model is another way of estimating a job's cost (the experiments'
// heavier model). Cold and spread-gated keys are still handled by the
// queue's predictor, so an arm with a Model differs only in the estimate.
type Model interface {
	// Estimate returns the predicted cost of j, or false when the model
	// has nothing to say yet.
	Estimate(t *workload.JobType, j *workload.Job) (time.Duration, bool)
	// Observe is told every completed job and its duration.
	Observe(t *workload.JobType, j *workload.Job, d time.Duration)
}

// StandardArms are the pre-registered simulator arms, in report order.
var StandardArms = []string{"fifo", "static", "predictive", "weighted", "oracle", "oracle-sjf"}

// ArmByName resolves an arm name. Besides the standard arms it knows
// "strict-aging" (the predictive policy: strict priority + step aging),
// "no-aging" (strict priority alone), "sjf" (shortest predicted first, one
// level), "oracle-sjf" (true durations known in advance, shortest first,
// one level, no bound and no aging: a fixed reference for the mean that does
// not move when the default policy changes), "oracle-sept" (each key's true
// mean duration known in advance, shortest expected first, one level, no
// bound: the most any estimate from the key alone can buy the mean),
// "oracle-keys" (the default's rules on those key means), "previous" (the bounded policy
// as it was before its guard on every message: only long messages bounded,
// at three quarters of their FIFO wait plus a second of predicted work, the
// most expensive fifth of the recent work long), "virtual-fifo" and
// "virtual-fifo-dispatch" (the default with FIFO's progress taken from a
// virtual FIFO run on the simulated workers, on the wall clock or the
// dispatch clock: sched.Bound.VirtualFIFO), "no-long-keys" (the default
// without its long keys: only the work-share cut and unpredictable messages
// long, as it was before sched.DefaultLongKeys) and "shadow"; any sched
// policy name also works as an arm.
func ArmByName(name string, types []workload.JobType) (Arm, error) {
	a := Arm{Name: name}
	switch name {
	case "fifo":
		a.Policy = sched.FIFO
	case "static":
		a.Policy = sched.Static
		a.Options.StaticTiers = StaticMap(types)
	case "predictive":
		a.Policy = sched.DefaultPolicy
	case "oracle":
		a.Policy, a.Oracle = sched.DefaultPolicy, true
	case "weighted":
		a.Policy = sched.WeightedP
	case "strict-aging":
		a.Policy = sched.Predictive
	case "no-aging":
		a.Policy = sched.Predictive
		a.Options.AgingOff = true
	case "sjf":
		a.Policy = sched.DefaultPolicy
		a.Options.Tiers = 1
		a.Options.AgingOff = true
		a.Options.ShortestFirst = true
	case "oracle-sjf":
		a.Policy, a.Oracle = sched.Bounded, true
		a.Options.Tiers = 1
		a.Options.AgingOff = true // drops the bound, guard included
		a.Options.ShortestFirst = true
	case "oracle-sept":
		a.Policy, a.KeyMeans = sched.Bounded, true
		a.Options.Tiers = 1
		a.Options.AgingOff = true
		a.Options.ShortestFirst = true
	case "oracle-keys":
		a.Policy, a.KeyMeans = sched.DefaultPolicy, true
	case "virtual-fifo":
		a.Policy = sched.Bounded
		a.Options.VirtualFIFO = true
	case "virtual-fifo-dispatch":
		a.Policy = sched.Bounded
		a.Options.VirtualFIFO, a.Options.DispatchClock = true, true
	case "no-long-keys":
		a.Policy = sched.Bounded
		a.Predictor.LongKeys = -1
	case "previous":
		a.Policy = sched.Bounded
		a.Options.GuardOff = true
		a.Options.Stretch = new(PreviousStretch)
		a.Options.MinSlack = PreviousMinSlack
		a.Predictor.LongShare = PreviousLongShare
		a.Predictor.LongKeys = -1
	default:
		if _, err := sched.NewPolicy(name, sched.PolicyOptions{StaticTiers: StaticMap(types)}); err != nil {
			return Arm{}, fmt.Errorf("sim: unknown arm %q (want %s, strict-aging, no-aging, sjf, previous, virtual-fifo, virtual-fifo-dispatch, no-long-keys, oracle-sept, oracle-keys or a policy name)", name, strings.Join(StandardArms, ", "))
		}
		a.Policy = name
		a.Options.StaticTiers = StaticMap(types)
	}
	return a, nil
}

// The long-message bound of the "previous" arm: the bounded policy's
// defaults before the guard.
const (
	PreviousStretch   = -0.25
	PreviousMinSlack  = time.Second
	PreviousLongShare = 0.2 // the most expensive fifth of the recent work
)

// StaticMap is the job type -> tier map of the static arms.
func StaticMap(types []workload.JobType) map[string]int {
	m := make(map[string]int, len(types))
	for _, t := range types {
		m[t.Name] = t.StaticTier
	}
	return m
}

// queueName is the queue every simulated message is published to.
const queueName = "sim"

// epoch is virtual time zero.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// RunSeed replays one seed's jobs through one arm with workers workers and
// returns the figures and the per-message records.
func RunSeed(types []workload.JobType, jobs []workload.Job, workers int, arm Arm, seed uint64) (report.SeedResult, []report.Record, error) {
	pol, err := sched.NewPolicy(arm.Policy, arm.Options)
	if err != nil {
		return report.SeedResult{}, nil, err
	}
	q, err := sched.NewQueue(pol, arm.Predictor)
	if err != nil {
		return report.SeedResult{}, nil, err
	}
	if workers < 1 {
		return report.SeedResult{}, nil, fmt.Errorf("sim: need at least one worker, got %d", workers)
	}
	if arm.Overhead < 0 {
		return report.SeedResult{}, nil, fmt.Errorf("sim: a message's overhead cannot be negative, got %v", arm.Overhead)
	}
	n := len(jobs)
	items := make([]sched.Item, n)
	preds := make([]predict.Prediction, n)
	keys := make([]predict.Key, n)
	started := make([]time.Duration, n)
	records := make([]report.Record, 0, n)

	var model Model
	if arm.NewModel != nil {
		model = arm.NewModel()
	}
	var keyMean map[predict.Key]time.Duration
	if arm.KeyMeans {
		keyMean = keyMeans(q, types, jobs)
	}
	// A policy that tracks FIFO in a virtual run needs the worker count.
	q.SetWorkers(workers, epoch)
	// line is what holds the waiting jobs: the policy's scheduler, or a
	// Fair over lanes of it.
	var line waitLine = q.Scheduler
	var fq *fair.Fair
	if arm.Fair != nil {
		keysOf := func(it *sched.Item) fair.Keys {
			t := &types[jobs[it.ID-1].Type]
			return fair.Keys{Producer: t.Producer, JobType: t.Name, Tenant: t.Tenant}
		}
		if fq, err = fair.New(*arm.Fair, pol.Sched, keysOf); err != nil {
			return report.SeedResult{}, nil, err
		}
		fq.SetWorkers(workers, epoch)
		line = fq
	}
	var busy busyHeap
	free := workers
	next := 0
	for next < n || busy.Len() > 0 || line.Len() > 0 {
		var now time.Duration
		wake, wakes := time.Duration(0), false
		if fq != nil {
			if at, ok := fq.NextWake(); ok {
				wake, wakes = at.Sub(epoch), true
			}
		}
		switch {
		case wakes && (busy.Len() == 0 || wake < busy[0].done) && (next >= n || wake < jobs[next].Arrival):
			now = wake
			fq.Wake(epoch.Add(now))
		case busy.Len() == 0 && next >= n:
			return report.SeedResult{}, nil, fmt.Errorf("sim: %d jobs wait with no worker busy, none to come and nothing to wake them", line.Len())
		case busy.Len() > 0 && (next >= n || busy[0].done <= jobs[next].Arrival):
			now = busy[0].done
			for busy.Len() > 0 && busy[0].done == now {
				w := heap.Pop(&busy).(running)
				if fq != nil {
					fq.Done(&items[w.seq], epoch.Add(now))
				}
				j := &jobs[w.seq]
				// The handler acks with the duration it measured.
				_ = q.Finished(&items[w.seq], keys[w.seq], preds[w.seq], j.Duration, epoch.Add(now))
				if model != nil {
					model.Observe(&types[j.Type], j, j.Duration)
				}
				records = append(records, report.Record{Job: w.seq, Type: j.Type, Class: types[j.Type].Class,
					Sent: j.Arrival, Started: started[w.seq], Done: now})
				free++
			}
		default:
			now = jobs[next].Arrival
			for next < n && jobs[next].Arrival == now {
				j := &jobs[next]
				t := &types[j.Type]
				it := &items[next]
				it.ID = uint64(next) + 1 // Push numbers an ID of 0 itself
				keys[next] = q.Predictor.KeyFor(queueName, t.Producer, t.Name, uint64(j.Size))
				switch {
				case arm.Oracle:
					preds[next] = q.ClassifyKnown(it, j.Duration)
				case arm.KeyMeans:
					preds[next] = q.ClassifyKnown(it, keyMean[keys[next]])
				case model != nil:
					preds[next] = classifyWith(q, model, it, keys[next], t, j)
				default:
					preds[next] = q.Classify(it, keys[next])
				}
				if err := line.Push(it, epoch.Add(now)); err != nil {
					return report.SeedResult{}, nil, err
				}
				next++
			}
		}
		for free > 0 && line.Len() > 0 {
			it := line.Pop(epoch.Add(now))
			if it == nil { // every waiting job's key is at its limit, or held back
				break
			}
			seq := int(it.ID) - 1
			started[seq] = now + arm.Overhead
			heap.Push(&busy, running{done: started[seq] + jobs[seq].Duration, seq: seq})
			free--
		}
	}

	res := report.Summarize(seed, n, records)
	if pol.UsePredictor || pol.Shadow || arm.Oracle || arm.KeyMeans || model != nil {
		s := q.Predictor.Summary()
		res.MAEms = report.Num(float64(s.MAE) / 1e6)
		if s.MAESamples == 0 {
			res.MAEms = report.Num(math.NaN())
		}
		res.TierAccuracy = report.Num(s.TierAccuracy)
	}
	return res, records, nil
}

// waitLine is where the simulated queue's waiting jobs are: a
// sched.Scheduler or a fair.Fair.
type waitLine interface {
	Push(it *sched.Item, now time.Time) error
	Pop(now time.Time) *sched.Item
	Len() int
}

// keyMeans is every key's mean duration over jobs, keyed as q's predictor
// keys them.
func keyMeans(q *sched.Queue, types []workload.JobType, jobs []workload.Job) map[predict.Key]time.Duration {
	type acc struct {
		sum time.Duration
		n   int64
	}
	sums := make(map[predict.Key]acc)
	for i := range jobs {
		j := &jobs[i]
		t := &types[j.Type]
		k := q.Predictor.KeyFor(queueName, t.Producer, t.Name, uint64(j.Size))
		a := sums[k]
		a.sum += j.Duration
		a.n++
		sums[k] = a
	}
	out := make(map[predict.Key]time.Duration, len(sums))
	for k, a := range sums {
		out[k] = a.sum / time.Duration(a.n)
	}
	return out
}

// classifyWith places a message by model's estimate when its key is warm
// and ungated, and by the queue's own predictor otherwise.
func classifyWith(q *sched.Queue, m Model, it *sched.Item, k predict.Key, t *workload.JobType, j *workload.Job) predict.Prediction {
	if ks, ok := q.Predictor.Lookup(k); ok && !ks.Cold && !ks.SpreadGated {
		if est, ok := m.Estimate(t, j); ok {
			return q.ClassifyKnown(it, est)
		}
	}
	return q.Classify(it, k)
}

type running struct {
	done time.Duration
	seq  int
}

type busyHeap []running

func (h busyHeap) Len() int { return len(h) }
func (h busyHeap) Less(i, j int) bool {
	if h[i].done != h[j].done {
		return h[i].done < h[j].done
	}
	return h[i].seq < h[j].seq
}
func (h busyHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *busyHeap) Push(x any)   { *h = append(*h, x.(running)) }
func (h *busyHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Options for Run.
type Options struct {
	Seeds    []uint64 // default: the source's seeds
	Workers  int      // default: the source's workers
	Parallel int      // concurrent runs; default GOMAXPROCS
	// Overhead is every arm's per-message cost outside the handler
	// (Arm.Overhead); 0, the default, is an ideal broker.
	Overhead time.Duration
}

// Run replays every seed through every arm and builds the report with the
// simulator form of the gate.
func Run(src Source, arms []Arm, o Options) (*report.Report, error) {
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
	if o.Overhead != 0 {
		arms = slices.Clone(arms)
		for i := range arms {
			arms[i].Overhead = o.Overhead
		}
	}
	types := src.Types()
	jobsBySeed := make([][]workload.Job, len(seeds))
	for i, s := range seeds {
		jobsBySeed[i] = src.Generate(s)
	}

	results := make([][]report.SeedResult, len(arms))
	for i := range results {
		results[i] = make([]report.SeedResult, len(seeds))
	}
	err := eachRun(len(arms), len(seeds), par, func(a, si int) error {
		// Each run gets its own copy of the jobs: nothing is shared but reads.
		res, _, err := RunSeed(types, jobsBySeed[si], workers, arms[a], seeds[si])
		if err != nil {
			return fmt.Errorf("arm %s seed %d: %w", arms[a].Name, seeds[si], err)
		}
		results[a][si] = res
		return nil
	})
	if err != nil {
		return nil, err
	}

	r := &report.Report{Workload: src.Name(), Seeds: seeds, Arms: map[string]*report.ArmResult{}}
	for i, a := range arms {
		r.Arms[a.Name] = report.Combine(results[i])
		r.ArmOrder = append(r.ArmOrder, a.Name)
	}
	r.Gate = report.Gate(r.Arms, report.SimBaselines)
	r.Secondary = report.Secondary(r.Arms, report.SimBaselines, false)
	r.Method = method(src, workers, seeds, arms, o.Overhead)
	return r, nil
}

// eachRun calls run for every arm and seed index, par at a time, and
// returns the first error. Each call writes only its own slot of the
// caller's results.
func eachRun(arms, seeds, par int, run func(arm, seed int) error) error {
	type task struct{ arm, seed int }
	tasks := make(chan task)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range par {
		wg.Go(func() {
			for t := range tasks {
				if err := run(t.arm, t.seed); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for a := range arms {
		for s := range seeds {
			tasks <- task{a, s}
		}
	}
	close(tasks)
	wg.Wait()
	return firstErr
}

func method(src Source, workers int, seeds []uint64, arms []Arm, overhead time.Duration) string {
	names := make([]string, len(arms))
	for i, a := range arms {
		names[i] = a.Name
	}
	sort.Strings(names)
	return fmt.Sprintf("discrete-event simulation in virtual time of %q with %d workers, seeds %v; "+
		"every arm of a seed replays identical arrivals, sizes and durations through Harbinger's real scheduler "+
		"and predictor (non-preemptive, a worker takes the next message only when free, acks with the true duration). "+
		"%s"+
		"Latency = ack - send. Per-arm figures are medians across seeds; comparisons are medians of per-seed paired "+
		"differences with 95%% percentile bootstrap intervals (10,000 resamples of seeds, fixed RNG seed); a row passes "+
		"when its point estimate meets the threshold. Simulator form of the gate: harbinger fifo stands in for the "+
		"RabbitMQ and Redis FIFO arms (so P3/P4 repeat P1/P2) and P5 compares with the static arm. Arms: %s.",
		src.Name(), workers, seeds, overheadNote(overhead), strings.Join(names, ", "))
}

func overheadNote(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return fmt.Sprintf("Every message costs its worker %v before the handler starts (a live broker's delivery and ack round trip; "+
		"the ack still reports the handler's duration). ", d)
}
