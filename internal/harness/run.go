package harness

import (
	"context"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/internal/stats"
	"github.com/harbinger-mq/harbinger/internal/workload"
)

const (
	// DefaultDrainTimeout is how long, in wall time after the last send, a
	// run waits for the backlog to finish before counting the rest as lost.
	DefaultDrainTimeout = 2 * time.Minute
	// bodySize is the payload size of a message.
	bodySize = 64
)

// RunSpec is one arm's run over one seed's jobs.
type RunSpec struct {
	Arm          Arm
	Seed         uint64
	Types        []workload.JobType
	Jobs         []workload.Job // in arrival order; Seq indexes the slice
	Workers      int
	TimeScale    float64       // wall seconds per workload second
	DrainTimeout time.Duration // wall time after the last send
	Static       map[string]int
	Fair         FairSettings // for PolicyFair
}

// RunResult is what one run measured, in workload time.
type RunResult struct {
	Arm        string
	Seed       uint64
	Sent       int
	Records    []report.Record // one per completed message, in completion order
	Duplicates int             // completions of a message already completed
	Wall       time.Duration
	// Overrun is the mean time, in wall microseconds, handlers slept past
	// the scaled duration they were asked to sleep.
	OverrunUS float64
	// Turnaround is what a busy queue costs a worker per message: the
	// wall time from a handler's return to the same worker's next handler
	// start, over the messages sent at least TurnaroundMargin before that
	// return (so that a worker idle for lack of work, or waiting for a
	// message still on its way to the broker, is not counted). It is the
	// ack, the broker's choice of the next message and its delivery. TurnaroundUS
	// is the mean, TurnaroundP99US the 99th percentile, in microseconds;
	// NaN when no message qualified. TurnaroundShare is the sum of those
	// waits over the workers' wall time: the capacity the run lost to
	// turnarounds while work waited. Compare arms by the share: a policy
	// changes which waits qualify (shortest-first leaves fewer, in busier
	// moments), so means over different moments can mislead.
	TurnaroundUS, TurnaroundP99US, TurnaroundShare float64
	// CPU is the CPU the broker process (where the harness can account
	// for it) and the harness used per completed message, from the first
	// send to the end of the run.
	CPU CPUPerMsg
	// MAEms and TierAccuracy are the predictor's, where the arm's driver
	// can report them (NaN otherwise). MAE is in workload milliseconds.
	MAEms, TierAccuracy float64
}

// predictorStats is implemented by queues whose predictor the harness can
// read: the mean absolute error of routed predictions, in wall
// milliseconds, and the share of messages whose predicted tier was the one
// their duration earned; NaN for what the predictor cannot tell.
type predictorStats interface {
	PredictorStats(ctx context.Context) (maeMS, tierAccuracy float64)
}

// Progress counts a run's messages for the progress lines; it is safe to
// read while the run goes on.
type Progress struct {
	Arm   string
	Seed  uint64
	Total int
	start atomic.Int64 // Unix nanos
	sent  atomic.Int64
	done  atomic.Int64
}

// String is one progress line.
func (p *Progress) String() string {
	el := 0.0
	if s := p.start.Load(); s != 0 {
		el = time.Since(time.Unix(0, s)).Seconds()
	}
	return fmt.Sprintf("%s seed %d: %5.1f s, %d/%d done (of %d)", p.Arm, p.Seed, el, p.done.Load(), p.sent.Load(), p.Total)
}

// Done reports how many messages completed so far.
func (p *Progress) Done() int { return int(p.done.Load()) }

// RunArm replays one seed's jobs through a fresh queue on d: one producer
// goroutine per workload producer publishes each job at its scaled arrival
// time, Workers workers with prefetch 1 sleep each job's scaled true
// duration, and the run ends when every message is done or DrainTimeout
// after the last send. Several RunArm calls may share a driver.
func RunArm(ctx context.Context, d Driver, rs RunSpec, prog *Progress) (RunResult, error) {
	if rs.TimeScale <= 0 {
		return RunResult{}, fmt.Errorf("harness: time scale must be positive, got %g", rs.TimeScale)
	}
	if rs.Workers < 1 {
		return RunResult{}, fmt.Errorf("harness: need at least one worker, got %d", rs.Workers)
	}
	if prog == nil {
		prog = &Progress{}
	}
	prog.Arm, prog.Seed, prog.Total = rs.Arm.Name, rs.Seed, len(rs.Jobs)
	q, err := d.Setup(ctx, QueueSpec{Name: queueName(rs.Arm.Name, rs.Seed), Policy: rs.Arm.Policy, Static: rs.Static, Fair: rs.Fair})
	if err != nil {
		return RunResult{}, fmt.Errorf("%s: setup: %w", rs.Arm.Name, err)
	}
	defer func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = q.Teardown(tctx)
	}()

	n := len(rs.Jobs)
	scale := func(x time.Duration) time.Duration { return time.Duration(float64(x) * rs.TimeScale) }
	back := func(x time.Duration) time.Duration { return time.Duration(float64(x) / rs.TimeScale) }

	var (
		t0ns      atomic.Int64 // run start, Unix nanos; set once the workers are up
		mu        sync.Mutex
		completed = make([]bool, n)
		records   = make([]report.Record, 0, n)
		dups      int
		overrun   time.Duration
		turns     turnarounds
		allDone   = make(chan struct{})
		comp      wakeCompensator
	)
	// newHandler is one worker's handler: it sleeps the job's scaled
	// duration and records it; prevEnd is when this worker's last handler
	// returned, for the turnaround (turnarounds.add).
	newHandler := func() Handler {
		var prevEnd time.Time
		return func(hctx context.Context, body []byte) error {
			start := time.Now()
			seq, sent, err := DecodeBody(body)
			if err != nil || seq >= uint64(n) {
				return nil // not ours: ack and drop
			}
			want := scale(rs.Jobs[seq].Duration)
			if !SleepUntil(start.Add(want-comp.estimate(want)), hctx.Done()) {
				return hctx.Err()
			}
			end := time.Now()
			comp.observe(end.Sub(start) - want)
			t0 := time.Unix(0, t0ns.Load())
			mu.Lock()
			defer mu.Unlock()
			overrun += end.Sub(start) - want
			turns = turns.add(prevEnd, sent, start)
			prevEnd = end
			if completed[seq] {
				dups++
				return nil
			}
			completed[seq] = true
			j := &rs.Jobs[seq]
			records = append(records, report.Record{Type: j.Type, Class: rs.Types[j.Type].Class,
				Sent: back(sent.Sub(t0)), Started: back(start.Sub(t0)), Done: back(end.Sub(t0))})
			if int(prog.done.Add(1)) == n {
				close(allDone)
			}
			return nil
		}
	}

	// Workers first, so that no arm's first messages wait for a consumer.
	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	var wg sync.WaitGroup
	workErr := make(chan error, rs.Workers)
	var ready sync.WaitGroup
	for w := range rs.Workers {
		wg.Add(1)
		ready.Add(1)
		go func() {
			defer wg.Done()
			var once sync.Once
			signal := func() { once.Do(ready.Done) }
			defer signal()
			if err := q.Work(wctx, w, signal, newHandler()); err != nil && wctx.Err() == nil {
				workErr <- fmt.Errorf("%s worker %d: %w", rs.Arm.Name, w, err)
			}
		}()
	}
	ready.Wait()

	// One producer goroutine per workload producer, each with its own
	// publisher, publishing its jobs at their scaled arrival times.
	byProducer := map[string][]int{}
	var order []string
	for i := range rs.Jobs {
		p := rs.Types[rs.Jobs[i].Type].Producer
		if _, ok := byProducer[p]; !ok {
			order = append(order, p)
		}
		byProducer[p] = append(byProducer[p], i)
	}
	pubs := make([]Publisher, len(order))
	for i := range order {
		p, err := q.NewPublisher(ctx)
		if err != nil {
			for _, o := range pubs[:i] {
				o.Close()
			}
			stopWorkers()
			wg.Wait()
			return RunResult{}, fmt.Errorf("%s: publisher: %w", rs.Arm.Name, err)
		}
		pubs[i] = p
	}
	if n == 0 {
		close(allDone)
	}

	cpu0 := SampleCPU(q)
	t0 := time.Now()
	t0ns.Store(t0.UnixNano())
	prog.start.Store(t0.UnixNano())
	pctx, stopProducers := context.WithCancel(ctx)
	defer stopProducers()
	var pwg sync.WaitGroup
	pubErr := make(chan error, len(order))
	var sentCount atomic.Int64
	for i, name := range order {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			defer pubs[i].Close()
			for _, seq := range byProducer[name] {
				j := &rs.Jobs[seq]
				if !SleepUntil(t0.Add(scale(j.Arrival)), pctx.Done()) {
					return
				}
				jt := &rs.Types[j.Type]
				m := Message{Key: Key{Producer: jt.Producer, JobType: jt.Name, Size: uint64(j.Size)},
					Body: EncodeBody(uint64(seq), time.Now(), bodySize)}
				if err := pubs[i].Publish(pctx, m); err != nil {
					if pctx.Err() == nil {
						pubErr <- fmt.Errorf("%s: publish %s: %w", rs.Arm.Name, name, err)
						stopProducers()
					}
					return
				}
				sentCount.Add(1)
				prog.sent.Add(1)
			}
		}()
	}
	pwg.Wait()
	select {
	case err := <-pubErr:
		stopWorkers()
		wg.Wait()
		return RunResult{}, err
	default:
	}
	if ctx.Err() != nil {
		stopWorkers()
		wg.Wait()
		return RunResult{}, ctx.Err()
	}

	drain := rs.DrainTimeout
	if drain <= 0 {
		drain = DefaultDrainTimeout
	}
	timer := time.NewTimer(drain)
	var runErr error
	select {
	case <-allDone:
	case <-timer.C:
	case err := <-workErr:
		runErr = err
	case <-ctx.Done():
		runErr = ctx.Err()
	}
	timer.Stop()
	cpu1 := SampleCPU(q)
	stopWorkers()
	wg.Wait()
	if runErr != nil {
		return RunResult{}, runErr
	}

	mu.Lock()
	defer mu.Unlock()
	res := RunResult{Arm: rs.Arm.Name, Seed: rs.Seed, Sent: int(sentCount.Load()), Records: records,
		Duplicates: dups, Wall: time.Since(t0)}
	if c := len(records) + dups; c > 0 {
		res.OverrunUS = float64(overrun.Microseconds()) / float64(c)
	}
	res.TurnaroundUS, res.TurnaroundP99US = turns.stats()
	res.TurnaroundShare = turns.share(rs.Workers, res.Wall)
	res.CPU = PerMsg(cpu0, cpu1, int64(len(records)))
	res.MAEms, res.TierAccuracy = math.NaN(), math.NaN()
	if ps, ok := q.(predictorStats); ok {
		mae, acc := ps.PredictorStats(ctx)
		res.MAEms, res.TierAccuracy = mae/rs.TimeScale, acc
	}
	return res, nil
}

// TurnaroundMargin is how long before a worker's handler returned a
// message must have been sent for its wait to count in the turnaround: a
// publish's own trip to the broker (a millisecond at its 99th percentile
// on one machine) is not the worker's turnaround.
const TurnaroundMargin = 2 * time.Millisecond

// turnarounds are the waits that count toward RunResult.Turnaround.
type turnarounds []time.Duration

// add counts the wait of a worker whose last handler returned at prevEnd
// (zero for its first message) and whose next handler started at start,
// on a message sent at sent, if the message was surely waiting at the
// broker when the worker came free.
func (ts turnarounds) add(prevEnd, sent, start time.Time) turnarounds {
	if prevEnd.IsZero() || !sent.Before(prevEnd.Add(-TurnaroundMargin)) {
		return ts
	}
	return append(ts, start.Sub(prevEnd))
}

// share is the waits' sum over workers x wall.
func (ts turnarounds) share(workers int, wall time.Duration) float64 {
	if workers < 1 || wall <= 0 {
		return math.NaN()
	}
	var sum time.Duration
	for _, t := range ts {
		sum += t
	}
	return float64(sum) / (float64(workers) * float64(wall))
}

// stats is the mean and 99th percentile in microseconds, NaN for none.
func (ts turnarounds) stats() (meanUS, p99US float64) {
	if len(ts) == 0 {
		return math.NaN(), math.NaN()
	}
	us := make([]float64, len(ts))
	for i, t := range ts {
		us[i] = float64(t) / float64(time.Microsecond)
	}
	return stats.Mean(us), stats.Quantile(us, 0.99)
}

// wakeCompensator learns how late the OS wakes a sleeping handler on this
// machine (a few hundred microseconds when the brokers keep the cores busy)
// and lets the handler aim that much early, so handlers take their jobs'
// true durations on average rather than a fixed overhead more; at a time
// scale of 0.1 an uncorrected 250 µs would add 2.5 ms of work to every job.
type wakeCompensator struct {
	mu  sync.Mutex
	est time.Duration // EWMA of the remaining overrun plus the current correction
}

// estimate is how early to aim for a sleep of want.
func (c *wakeCompensator) estimate(want time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return min(max(c.est, 0), want)
}

// observe feeds back one handler's overrun (actual - asked).
func (c *wakeCompensator) observe(overrun time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.est += overrun / 16
}

// queueName is a queue name unique to one run.
func queueName(arm string, seed uint64) string {
	return fmt.Sprintf("bench-%s-s%d-%d", arm, seed, time.Now().UnixNano())
}

// StartProgress prints a line "prefix: <progress>" for each of ps every
// interval to w until the returned stop is called.
func StartProgress(w io.Writer, prefix string, every time.Duration, ps ...*Progress) (stop func()) {
	if w == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				for _, p := range ps {
					fmt.Fprintf(w, "%s: %s\n", prefix, p)
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
