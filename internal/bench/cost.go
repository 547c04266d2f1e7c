package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harbinger-mq/harbinger/internal/stats"
)

// Cost defaults: the pre-registered broker-cost settings.
const (
	DefaultCostDuration  = 30 * time.Second
	DefaultCostWarmup    = 5 * time.Second
	DefaultCostReps      = 5
	DefaultCostRate      = 5000.0
	DefaultCostProducers = 4
	DefaultCostConsumers = 4
	// DefaultCostInFlight bounds published-but-not-acked messages in the
	// peak run, so producers that outrun the consumers stall instead of
	// growing the queue without bound.
	DefaultCostInFlight = 1000
	// DefaultCostDrain is how long a fixed-rate run waits after its last
	// send for the rest to be delivered before counting them lost.
	DefaultCostDrain = 10 * time.Second
	// CostOnTime is the largest 99th-percentile send lag (actual minus
	// scheduled send time) of a fixed-rate run whose sends count as on time.
	CostOnTime  = 10 * time.Millisecond
	costPayload = 64
)

// CostArms are the broker-cost arms, in report order.
var CostArms = []Arm{
	{"harbinger", Harbinger, PolicyPredictive},
	{"rabbitmq", RabbitMQ, PolicyFIFO},
	{"redis", Redis, PolicyFIFO},
}

// CostConfig configures RunCost.
type CostConfig struct {
	Arms          []Arm
	Duration      time.Duration // timed part of each run
	Warmup        time.Duration // untimed start of each run
	Reps          int
	Rate          float64 // offered msg/s of the fixed-rate run; 0 skips it
	Producers     int
	Consumers     int
	MaxInFlight   int
	Drain         time.Duration
	Progress      io.Writer
	SkipFixedRate bool
}

// WithDefaults fills the zero fields.
func (c CostConfig) WithDefaults() CostConfig {
	if len(c.Arms) == 0 {
		c.Arms = CostArms
	}
	if c.Duration == 0 {
		c.Duration = DefaultCostDuration
	}
	if c.Warmup == 0 {
		c.Warmup = DefaultCostWarmup
	}
	if c.Reps == 0 {
		c.Reps = DefaultCostReps
	}
	if c.Rate == 0 {
		c.Rate = DefaultCostRate
	}
	if c.Producers == 0 {
		c.Producers = DefaultCostProducers
	}
	if c.Consumers == 0 {
		c.Consumers = DefaultCostConsumers
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultCostInFlight
	}
	if c.Drain == 0 {
		c.Drain = DefaultCostDrain
	}
	return c
}

func (c CostConfig) validate() error {
	switch {
	case c.Duration <= 0 || c.Warmup < 0:
		return fmt.Errorf("bench: --duration must be positive and --warmup not negative")
	case c.Reps < 1:
		return fmt.Errorf("bench: --reps must be at least 1, got %d", c.Reps)
	case c.Rate <= 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("bench: --rate must be a positive number, got %g", c.Rate)
	case c.Producers < 1 || c.Consumers < 1 || c.MaxInFlight < 1:
		return fmt.Errorf("bench: producers, consumers and the in-flight bound must be at least 1")
	}
	return nil
}

// CostResult is the broker-cost comparison; its JSON is what
// `harbinger bench cost --json` prints.
type CostResult struct {
	Arms     map[string]*CostArm `json:"arms"`
	Ratios   CostRatios          `json:"ratios"`
	Method   string              `json:"method"`
	ArmOrder []string            `json:"arm_order"`
}

// CostArm is one broker's figures across repetitions.
type CostArm struct {
	PeakPerS  float64        `json:"peak_per_s"` // median across repetitions
	PeakMin   float64        `json:"peak_min"`
	PeakMax   float64        `json:"peak_max"`
	PeakRuns  []float64      `json:"peak_runs"`
	FixedRate *FixedRateArm  `json:"fixed_rate,omitempty"`
	Runs      []FixedRateRun `json:"fixed_rate_runs,omitempty"`
}

// FixedRateArm summarises the fixed-rate runs of one broker.
type FixedRateArm struct {
	OfferedPerS float64 `json:"offered_per_s"`
	KeptUp      int     `json:"kept_up"`
	Runs        int     `json:"runs"`
	P50ms       float64 `json:"p50_ms"` // median across runs
	P99ms       float64 `json:"p99_ms"` // median across runs
}

// FixedRateRun is one fixed-rate run.
type FixedRateRun struct {
	Sent          int     `json:"sent"`
	Delivered     int     `json:"delivered"` // acks inside the timed window
	Lost          int     `json:"lost"`      // sent (whole run) - delivered after the drain
	DeliveredPerS float64 `json:"delivered_per_s"`
	SendLagP99ms  float64 `json:"send_lag_p99_ms"`
	P50ms         float64 `json:"p50_ms"`
	P99ms         float64 `json:"p99_ms"`
	KeptUp        bool    `json:"kept_up"`
	Why           string  `json:"why,omitempty"` // why it did not keep up
}

// CostRatios are medians of per-repetition ratios of peak rates, each
// ratio taken within one repetition (the arms run interleaved).
type CostRatios struct {
	HarbingerVsRedis    *float64 `json:"harbinger_vs_redis"`
	HarbingerVsRabbitMQ *float64 `json:"harbinger_vs_rabbitmq"`
}

// RunCost runs the broker-cost comparison: per repetition, every arm's
// peak run, then every arm's fixed-rate run.
func RunCost(ctx context.Context, cfg CostConfig, drivers map[string]Driver) (*CostResult, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	res := &CostResult{Arms: map[string]*CostArm{}}
	for _, a := range cfg.Arms {
		if drivers[a.Broker] == nil {
			return nil, fmt.Errorf("bench: arm %s needs a %s driver", a.Name, a.Broker)
		}
		res.Arms[a.Name] = &CostArm{}
		res.ArmOrder = append(res.ArmOrder, a.Name)
	}
	var vsRedis, vsRabbit []float64
	for rep := range cfg.Reps {
		peaks := map[string]float64{}
		for _, a := range cfg.Arms {
			rate, err := peakRun(ctx, drivers[a.Broker], a, cfg, rep)
			if err != nil {
				return nil, fmt.Errorf("%s peak run %d: %w", a.Name, rep+1, err)
			}
			peaks[a.Broker] = rate
			res.Arms[a.Name].PeakRuns = append(res.Arms[a.Name].PeakRuns, rate)
			progressf(cfg.Progress, "bench cost: rep %d/%d %s peak %.0f msg/s", rep+1, cfg.Reps, a.Name, rate)
		}
		if h, ok := peaks[Harbinger]; ok {
			if r, ok := peaks[Redis]; ok && r > 0 {
				vsRedis = append(vsRedis, h/r)
			}
			if r, ok := peaks[RabbitMQ]; ok && r > 0 {
				vsRabbit = append(vsRabbit, h/r)
			}
		}
		if cfg.SkipFixedRate {
			continue
		}
		for _, a := range cfg.Arms {
			run, err := fixedRun(ctx, drivers[a.Broker], a, cfg, rep)
			if err != nil {
				return nil, fmt.Errorf("%s fixed-rate run %d: %w", a.Name, rep+1, err)
			}
			res.Arms[a.Name].Runs = append(res.Arms[a.Name].Runs, run)
			progressf(cfg.Progress, "bench cost: rep %d/%d %s at %.0f msg/s: delivered %.0f/s, P50 %.2f ms, P99 %.2f ms, kept up: %v %s",
				rep+1, cfg.Reps, a.Name, cfg.Rate, run.DeliveredPerS, run.P50ms, run.P99ms, run.KeptUp, run.Why)
		}
	}
	for _, a := range res.Arms {
		a.PeakPerS = stats.Median(a.PeakRuns)
		a.PeakMin, a.PeakMax = slices.Min(a.PeakRuns), slices.Max(a.PeakRuns)
		if len(a.Runs) > 0 {
			f := &FixedRateArm{OfferedPerS: cfg.Rate, Runs: len(a.Runs)}
			var p50, p99 []float64
			for _, r := range a.Runs {
				if r.KeptUp {
					f.KeptUp++
				}
				p50, p99 = append(p50, r.P50ms), append(p99, r.P99ms)
			}
			f.P50ms, f.P99ms = stats.Median(p50), stats.Median(p99)
			a.FixedRate = f
		}
	}
	if len(vsRedis) > 0 {
		v := stats.Median(vsRedis)
		res.Ratios.HarbingerVsRedis = &v
	}
	if len(vsRabbit) > 0 {
		v := stats.Median(vsRabbit)
		res.Ratios.HarbingerVsRabbitMQ = &v
	}
	return res, nil
}

func progressf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

// costRun is the machinery a peak and a fixed-rate run share: a fresh
// queue, consumers with empty handlers and a record of latencies.
type costRun struct {
	q        Queue
	acked    atomic.Int64
	stopW    context.CancelFunc
	wg       sync.WaitGroup
	onAck    func() // peak run: release an in-flight slot
	mu       sync.Mutex
	from     time.Time // latencies of messages sent from here ...
	to       time.Time // ... to here are kept
	lat      []float64 // seconds
	inWindow int       // acks inside [from, to)
	seen     atomic.Int64
	workErr  chan error
}

func startCostRun(ctx context.Context, d Driver, a Arm, cfg CostConfig, rep int, onAck func()) (*costRun, error) {
	q, err := d.Setup(ctx, QueueSpec{Name: fmt.Sprintf("cost-%s-r%d-%d", a.Name, rep, time.Now().UnixNano()), Policy: a.Policy})
	if err != nil {
		return nil, err
	}
	r := &costRun{q: q, onAck: onAck, workErr: make(chan error, cfg.Consumers)}
	wctx, stop := context.WithCancel(ctx)
	r.stopW = stop
	var ready sync.WaitGroup
	// The handler under test is empty; this is only the harness's bookkeeping.
	handler := func(_ context.Context, body []byte) error {
		now := time.Now()
		if _, sent, err := decodeBody(body); err == nil {
			r.mu.Lock()
			if !sent.Before(r.from) && sent.Before(r.to) {
				r.lat = append(r.lat, now.Sub(sent).Seconds())
			}
			if !now.Before(r.from) && now.Before(r.to) {
				r.inWindow++
			}
			r.mu.Unlock()
		}
		r.acked.Add(1)
		if r.onAck != nil {
			r.onAck()
		}
		return nil
	}
	for w := range cfg.Consumers {
		r.wg.Add(1)
		ready.Add(1)
		go func() {
			defer r.wg.Done()
			var once sync.Once
			signal := func() { once.Do(ready.Done) }
			defer signal()
			if err := q.Work(wctx, w, signal, handler); err != nil && wctx.Err() == nil {
				r.workErr <- err
			}
		}()
	}
	ready.Wait()
	return r, nil
}

func (r *costRun) window(from, to time.Time) {
	r.mu.Lock()
	r.from, r.to = from, to
	r.mu.Unlock()
}

func (r *costRun) finish(ctx context.Context) error {
	r.stopW()
	r.wg.Wait()
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = r.q.Teardown(tctx)
	select {
	case err := <-r.workErr:
		return err
	default:
		return nil
	}
}

// peakRun publishes as fast as the broker accepts, with at most
// MaxInFlight messages published and not yet acked, and returns the acked
// rate over the timed window.
func peakRun(ctx context.Context, d Driver, a Arm, cfg CostConfig, rep int) (float64, error) {
	slots := make(chan struct{}, cfg.MaxInFlight)
	release := func() {
		select {
		case <-slots:
		default: // a redelivered message holds no slot
		}
	}
	r, err := startCostRun(ctx, d, a, cfg, rep, release)
	if err != nil {
		return 0, err
	}
	pctx, stopP := context.WithCancel(ctx)
	var pwg sync.WaitGroup
	pubErr := make(chan error, cfg.Producers)
	var seq atomic.Uint64
	for range cfg.Producers {
		pub, err := r.q.NewPublisher(ctx)
		if err != nil {
			stopP()
			pwg.Wait()
			r.finish(ctx)
			return 0, err
		}
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			defer pub.Close()
			for {
				select {
				case slots <- struct{}{}:
				case <-pctx.Done():
					return
				}
				m := Message{Key: Key{Producer: "cost", JobType: "noop", Size: costPayload},
					Body: encodeBody(seq.Add(1), time.Now(), costPayload)}
				if err := pub.Publish(pctx, m); err != nil {
					if pctx.Err() == nil {
						pubErr <- err
					}
					return
				}
			}
		}()
	}
	var rate float64
	select {
	case <-time.After(cfg.Warmup):
	case <-ctx.Done():
	}
	a0, t0 := r.acked.Load(), time.Now()
	select {
	case <-time.After(cfg.Duration):
	case <-ctx.Done():
	}
	a1, t1 := r.acked.Load(), time.Now()
	rate = float64(a1-a0) / t1.Sub(t0).Seconds()
	stopP()
	pwg.Wait()
	werr := r.finish(ctx)
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	select {
	case err := <-pubErr:
		return 0, err
	default:
	}
	return rate, werr
}

// fixedRun offers cfg.Rate msg/s split evenly across the producers, each on
// an absolute schedule (a late send is not skipped, it goes as soon as it
// can), for the warm-up and the timed window, then waits for the rest.
func fixedRun(ctx context.Context, d Driver, a Arm, cfg CostConfig, rep int) (FixedRateRun, error) {
	r, err := startCostRun(ctx, d, a, cfg, rep, nil)
	if err != nil {
		return FixedRateRun{}, err
	}
	total := cfg.Warmup + cfg.Duration
	per := cfg.Rate / float64(cfg.Producers)
	gap := time.Duration(float64(time.Second) / per)
	start := time.Now().Add(20 * time.Millisecond)
	from, to := start.Add(cfg.Warmup), start.Add(total)
	r.window(from, to)
	pctx, stopP := context.WithCancel(ctx)
	defer stopP()
	var pwg sync.WaitGroup
	var sent, sentTimed atomic.Int64
	lags := make([][]float64, cfg.Producers)
	pubErr := make(chan error, cfg.Producers)
	var seq atomic.Uint64
	for p := range cfg.Producers {
		pub, err := r.q.NewPublisher(ctx)
		if err != nil {
			stopP()
			pwg.Wait()
			r.finish(ctx)
			return FixedRateRun{}, err
		}
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			defer pub.Close()
			// Stagger producers so their sends interleave.
			first := start.Add(gap * time.Duration(p) / time.Duration(cfg.Producers))
			for k := 0; ; k++ {
				at := first.Add(gap * time.Duration(k))
				if !at.Before(to) {
					return
				}
				if !sleepUntil(at, pctx.Done()) {
					return
				}
				now := time.Now()
				m := Message{Key: Key{Producer: "cost", JobType: "noop", Size: costPayload},
					Body: encodeBody(seq.Add(1), now, costPayload)}
				if err := pub.Publish(pctx, m); err != nil {
					if pctx.Err() == nil {
						pubErr <- err
					}
					return
				}
				sent.Add(1)
				if !at.Before(from) {
					sentTimed.Add(1)
					lags[p] = append(lags[p], now.Sub(at).Seconds())
				}
			}
		}()
	}
	pwg.Wait()
	// Drain: wait for the rest, up to cfg.Drain.
	deadline := time.Now().Add(cfg.Drain)
	tick := time.NewTicker(5 * time.Millisecond)
	for r.acked.Load() < sent.Load() && time.Now().Before(deadline) && ctx.Err() == nil {
		<-tick.C
	}
	tick.Stop()
	werr := r.finish(ctx)
	if err := ctx.Err(); err != nil {
		return FixedRateRun{}, err
	}
	select {
	case err := <-pubErr:
		return FixedRateRun{}, err
	default:
	}
	if werr != nil {
		return FixedRateRun{}, werr
	}

	r.mu.Lock()
	lat, inWindow := r.lat, r.inWindow
	r.mu.Unlock()
	var allLags []float64
	for _, l := range lags {
		allLags = append(allLags, l...)
	}
	run := FixedRateRun{Sent: int(sent.Load()), Delivered: inWindow, Lost: int(sent.Load() - r.acked.Load())}
	run.DeliveredPerS = float64(inWindow) / cfg.Duration.Seconds()
	run.SendLagP99ms = 1000 * stats.Quantile(allLags, 0.99)
	run.P50ms = 1000 * stats.Quantile(lat, 0.5)
	run.P99ms = 1000 * stats.Quantile(lat, 0.99)
	offered := cfg.Rate * cfg.Duration.Seconds()
	switch {
	case run.Lost > 0:
		run.Why = fmt.Sprintf("%d messages not delivered within %s of the last send", run.Lost, cfg.Drain)
	case float64(inWindow) < 0.99*offered:
		run.Why = fmt.Sprintf("delivered %.0f/s, under 99%% of the offered %.0f/s", run.DeliveredPerS, cfg.Rate)
	case float64(sentTimed.Load()) < 0.99*offered || run.SendLagP99ms > float64(CostOnTime.Milliseconds()):
		run.Why = fmt.Sprintf("sends fell behind schedule (P99 lag %.1f ms, limit %s)", run.SendLagP99ms, CostOnTime)
	default:
		run.KeptUp = true
	}
	return run, nil
}

// CostMethod is the method paragraph of a cost report.
func CostMethod(cfg CostConfig, env Environment) string {
	cfg = cfg.WithDefaults()
	return fmt.Sprintf("Broker cost: empty handlers, %d-byte payloads, %d producers and %d consumers, each consumer with prefetch 1 "+
		"(Harbinger: client SDK, a Producer stream per producer and RunWorker per consumer, on a fresh in-process broker per run with the default policy, sharing the harness process and its CPU; "+
		"RabbitMQ: a classic non-durable queue, transient messages, no confirms, manual ack; Redis: the reliable list queue, LPUSH/BLMOVE/LREM). "+
		"Each run: a fresh queue, a %s warm-up, then a %s timed window; %d repetitions, arms interleaved within each repetition. "+
		"Peak: producers publish as fast as the broker accepts with at most %d messages published and not yet acked; rate = acks in the timed window / its length; "+
		"median and range across repetitions. Fixed rate: %.0f msg/s offered on an absolute schedule split across the producers; "+
		"kept up = nothing lost within %s of the last send, at least 99%% of the offered rate delivered in the timed window, and sends on time "+
		"(99th-percentile send lag <= %s); P50 and P99 of send-to-ack latency of the messages sent in the timed window, median across runs. "+
		"Ratios: median over repetitions of harbinger's peak / the other broker's peak in the same repetition. Environment: %s.",
		costPayload, cfg.Producers, cfg.Consumers, cfg.Warmup, cfg.Duration, cfg.Reps, cfg.MaxInFlight, cfg.Rate, cfg.Drain, CostOnTime, env)
}
