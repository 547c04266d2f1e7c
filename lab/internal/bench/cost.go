package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
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

// CostArms are the broker-cost arms `bench cost` runs by default, in
// report order: the pre-registered three (Harbinger as `harbinger serve
// --memory` in its own process, as users run it; nothing is durable) and
// the bare gRPC queue, the limit of Harbinger's transport.
var CostArms = []Arm{
	{Name: "harbinger", Broker: HarbingerServe, Policy: PolicyPredictive},
	{Name: "bare-grpc", Broker: BareGRPC, Policy: PolicyFIFO},
	{Name: "rabbitmq", Broker: RabbitMQ, Policy: PolicyFIFO},
	{Name: "redis", Broker: Redis, Policy: PolicyFIFO},
}

// InProcessArm is Harbinger served from inside the harness process, which
// it shares with the producers and consumers: how `bench cost` measured
// Harbinger before it started the broker as its own process. Reported as
// in-process; never a substitute for the harbinger arm.
var InProcessArm = Arm{Name: "harbinger-inprocess", Broker: Harbinger, Policy: PolicyPredictive}

// DurableArms are the durable comparison's arms: every broker in its own
// process, every message on disk before the broker confirms it, and each
// producer waiting for that confirmation before its next publish (the
// Harbinger arms: one Producer stream per producer, as users publish, and
// Producer.Publish returns once the broker has answered). Harbinger's
// memory mode and the bare gRPC queue, published to the same way, are its
// baseline and its transport's ceiling.
var DurableArms = []Arm{
	{Name: "harbinger-durable", Broker: HarbingerDurable, Policy: PolicyPredictive},
	{Name: "harbinger", Broker: HarbingerServe, Policy: PolicyPredictive},
	{Name: "nats-jetstream", Broker: NATS, Policy: PolicyFIFO},
	{Name: "rabbitmq-quorum", Broker: RabbitQuorum, Policy: PolicyFIFO},
	{Name: "redis-aof", Broker: RedisAOF, Policy: PolicyFIFO},
	{Name: "bare-grpc", Broker: BareGRPC, Policy: PolicyFIFO},
}

// UnaryArms publish as the durable comparison first did, one unary
// client.Publish call per message, waiting for its answer: Harbinger
// durable and in memory, and the bare gRPC queue (the ceiling of that way
// of publishing). Run with --arms unary; not part of the durable goals.
var UnaryArms = []Arm{
	{Name: "harbinger-durable-unary", Broker: HarbingerDurable, Policy: PolicyPredictive},
	{Name: "harbinger-memory-unary", Broker: HarbingerServe, Policy: PolicyPredictive},
	{Name: BareUnaryArm, Broker: BareGRPC, Policy: PolicyFIFO},
}

// BareUnaryArm is the bare gRPC queue published to one unary call per
// message. It stores nothing, so it is the ceiling of that way of
// publishing over Harbinger's transport and SDK on this machine.
const BareUnaryArm = "bare-grpc-unary"

// unaryArms publish each message with a call of its own that returns once
// the broker has answered, on a driver that otherwise streams.
var unaryArms = map[string]bool{}

func init() {
	for _, a := range UnaryArms {
		unaryArms[a.Name] = true
	}
}

// unaryQueue is a queue that can also be published to one call per
// message.
type unaryQueue interface {
	NewUnaryPublisher(context.Context) (Publisher, error)
}

// unaryVersioner describes its broker published to one call per message.
type unaryVersioner interface {
	UnaryVersion(context.Context) string
}

// newPublisher is the arm's publisher on q: one call per message for the
// unary arms, the driver's own otherwise.
func newPublisher(ctx context.Context, q Queue, a Arm) (Publisher, error) {
	if !unaryArms[a.Name] {
		return q.NewPublisher(ctx)
	}
	uq, ok := q.(unaryQueue)
	if !ok {
		return nil, fmt.Errorf("bench: arm %s needs a broker that can be published to one call per message", a.Name)
	}
	return uq.NewUnaryPublisher(ctx)
}

// BareTCPArm is the bare queue without gRPC (BareTCPServer): what a
// message would cost over a framed TCP protocol of Harbinger's own. Run
// with --arms; not part of the registered comparison.
var BareTCPArm = Arm{Name: "bare-tcp", Broker: BareTCP, Policy: PolicyFIFO}

// BusyArms are the busy-workers scenario's arms (ScenarioBusy): every
// broker in its own process, nothing durable. Harbinger as `harbinger
// serve --memory`; RabbitMQ a classic queue with transient messages at
// prefetch 16, publisher confirms; Redis the reliable list queue, one
// BLMOVE per job; NATS JetStream a memory-storage stream with a pull
// consumer that each worker fetches from in batches of up to 16.
var BusyArms = []Arm{
	{Name: "harbinger", Broker: HarbingerServe, Policy: PolicyPredictive},
	{Name: "rabbitmq", Broker: RabbitMQ, Policy: PolicyFIFO},
	{Name: "redis", Broker: Redis, Policy: PolicyFIFO},
	{Name: "nats-jetstream-memory", Broker: NATSMemory, Policy: PolicyFIFO},
}

// BulkArms are the durable-bulk scenario's arms (ScenarioBulk): every
// broker in its own process, fsyncing before it confirms, each producer
// keeping a window of publishes unconfirmed; Harbinger's memory mode,
// published to and consumed the same way, is its baseline.
var BulkArms = []Arm{
	{Name: "harbinger-durable", Broker: HarbingerDurable, Policy: PolicyPredictive},
	{Name: "harbinger", Broker: HarbingerServe, Policy: PolicyPredictive},
	{Name: "nats-jetstream", Broker: NATS, Policy: PolicyFIFO},
	{Name: "rabbitmq-quorum", Broker: RabbitQuorum, Policy: PolicyFIFO},
	{Name: "redis-aof", Broker: RedisAOF, Policy: PolicyFIFO},
}

// AllCostArms is every arm `bench cost --arms` accepts.
var AllCostArms = uniqueArms(CostArms, []Arm{InProcessArm, BareTCPArm}, DurableArms, UnaryArms, BusyArms, BulkArms)

// Scenarios of bench cost: the shape of the load every arm of a run gets.
const (
	// ScenarioPrefetch1 is the registered shape: each consumer holds one
	// message at a time, each producer waits for each publish's answer.
	ScenarioPrefetch1 = "prefetch1"
	// ScenarioBusy is busy workers: each consumer runs 16 handler slots
	// (prefetch 16), each producer keeps 64 publishes unconfirmed.
	ScenarioBusy = "busy"
	// ScenarioBulk is durable bulk: consumers as in ScenarioBusy, each
	// producer keeping 256 publishes unconfirmed, on durable brokers.
	ScenarioBulk = "bulk"
)

// CostScenario is a scenario's load and its default arms.
type CostScenario struct {
	Name string
	// Slots is each consumer's handler slots, and so its prefetch.
	Slots int
	// Window is the publishes each producer keeps unconfirmed; 0: each
	// waits for one publish's answer before its next.
	Window int
	Arms   []Arm
}

// CostScenarios are the scenarios `bench cost --scenario` runs.
var CostScenarios = map[string]CostScenario{
	ScenarioPrefetch1: {Name: ScenarioPrefetch1, Slots: 1, Arms: CostArms},
	ScenarioBusy:      {Name: ScenarioBusy, Slots: 16, Window: 64, Arms: BusyArms},
	ScenarioBulk:      {Name: ScenarioBulk, Slots: 16, Window: 256, Arms: BulkArms},
}

func uniqueArms(groups ...[]Arm) []Arm {
	var out []Arm
	seen := map[string]bool{}
	for _, g := range groups {
		for _, a := range g {
			if !seen[a.Name] {
				seen[a.Name] = true
				out = append(out, a)
			}
		}
	}
	return out
}

// costArmGroups are the names --arms expands.
var costArmGroups = map[string][]Arm{"registered": CostArms, "durable": DurableArms, "unary": UnaryArms, "busy": BusyArms, "bulk": BulkArms}

// ParseCostArms resolves --arms for bench cost: arm names and the groups
// "registered" (CostArms), "durable" (DurableArms), "unary"
// (UnaryArms), "busy" (BusyArms) and "bulk" (BulkArms), in the order
// given; an arm named twice runs once.
func ParseCostArms(s string) ([]Arm, error) {
	var names []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if g, ok := costArmGroups[f]; ok {
			names = append(names, ArmNames(g)...)
			continue
		}
		names = append(names, f)
	}
	return ParseArms(strings.Join(names, ","), AllCostArms)
}

// CostConfig configures RunCost.
type CostConfig struct {
	// Scenario names the load (CostScenarios); default ScenarioPrefetch1.
	// It sets Slots and Window where they are 0, and Arms where empty.
	Scenario      string
	Slots         int // handler slots (and prefetch) per consumer
	Window        int // publishes each producer keeps unconfirmed; 0: one at a time
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
	if c.Scenario == "" {
		c.Scenario = ScenarioPrefetch1
	}
	sc := CostScenarios[c.Scenario]
	if c.Slots == 0 {
		c.Slots = max(sc.Slots, 1)
	}
	if c.Window == 0 {
		c.Window = sc.Window
	}
	if len(c.Arms) == 0 {
		c.Arms = sc.Arms
	}
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
		// Room for every producer's window and every consumer's slots
		// twice over: the bound only stops a queue growing without end.
		c.MaxInFlight = max(DefaultCostInFlight, 2*(c.Producers*c.Window+c.Consumers*c.Slots))
	}
	if c.Window > 0 {
		// A fixed rate means one publish at a time, on schedule; the
		// windowed scenarios measure peaks only.
		c.SkipFixedRate = true
	}
	if c.Drain == 0 {
		c.Drain = DefaultCostDrain
	}
	return c
}

func (c CostConfig) validate() error {
	if _, ok := CostScenarios[c.Scenario]; !ok {
		return fmt.Errorf("bench: unknown scenario %q (want %s, %s or %s)", c.Scenario, ScenarioPrefetch1, ScenarioBusy, ScenarioBulk)
	}
	switch {
	case c.Slots < 1 || c.Window < 0:
		return fmt.Errorf("bench: slots must be at least 1 and the window not negative")
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
// `harbinger-lab bench cost --json` prints.
type CostResult struct {
	Scenario string              `json:"scenario,omitempty"`
	Arms     map[string]*CostArm `json:"arms"`
	Ratios   []Ratio             `json:"ratios"`
	Goals    []Goal              `json:"goals,omitempty"`
	Memory   []MemoryResult      `json:"memory,omitempty"`
	Method   string              `json:"method"`
	ArmOrder []string            `json:"arm_order"`
}

// CostArm is one broker's figures across repetitions.
type CostArm struct {
	Broker   string      `json:"broker"`     // the Version line of its driver
	PeakPerS float64     `json:"peak_per_s"` // median across repetitions
	PeakMin  float64     `json:"peak_min"`
	PeakMax  float64     `json:"peak_max"`
	PeakRuns []float64   `json:"peak_runs"`
	PeakCPU  CPUPerMsg   `json:"peak_cpu"` // medians across repetitions
	PeakCPUs []CPUPerMsg `json:"peak_cpu_runs"`
	// PeakLog is a durable Harbinger's log over the peak windows (the
	// median repetition's by rate), when its /metrics could be read.
	PeakLog   *LogFigures    `json:"peak_log,omitempty"`
	PeakLogs  []*LogFigures  `json:"peak_log_runs,omitempty"`
	FixedRate *FixedRateArm  `json:"fixed_rate,omitempty"`
	Runs      []FixedRateRun `json:"fixed_rate_runs,omitempty"`
}

// FixedRateArm summarises the fixed-rate runs of one broker.
type FixedRateArm struct {
	OfferedPerS float64   `json:"offered_per_s"`
	KeptUp      int       `json:"kept_up"`
	Runs        int       `json:"runs"`
	P50ms       float64   `json:"p50_ms"` // median across runs
	P99ms       float64   `json:"p99_ms"` // median across runs
	CPU         CPUPerMsg `json:"cpu"`    // medians across runs
}

// FixedRateRun is one fixed-rate run.
type FixedRateRun struct {
	Sent          int       `json:"sent"`
	Delivered     int       `json:"delivered"` // acks inside the timed window
	Lost          int       `json:"lost"`      // sent (whole run) - delivered after the drain
	DeliveredPerS float64   `json:"delivered_per_s"`
	SendLagP99ms  float64   `json:"send_lag_p99_ms"`
	P50ms         float64   `json:"p50_ms"`
	P99ms         float64   `json:"p99_ms"`
	KeptUp        bool      `json:"kept_up"`
	Why           string    `json:"why,omitempty"` // why it did not keep up
	CPU           CPUPerMsg `json:"cpu"`
	// SlowFsyncs are a durable Harbinger's fsyncs in the timed window that
	// took over 10 ms (from its /metrics); nil for other brokers.
	SlowFsyncs *int `json:"slow_fsyncs,omitempty"`
}

// Ratio is the median over repetitions of one arm's peak rate over
// another's (or over the best of several), each ratio taken within one
// repetition, where the arms run interleaved.
type Ratio struct {
	ID     string    `json:"id"`
	Label  string    `json:"label"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Runs   []float64 `json:"runs"`
}

// ratioSpec is a ratio RunCost reports when all its arms ran.
type ratioSpec struct {
	id, label string
	num       string
	den       []string // the best (highest peak) of these in each repetition
}

// costRatios are the ratios of a cost report, in report order.
var costRatios = []ratioSpec{
	{"harbinger_vs_redis", "harbinger / redis", "harbinger", []string{"redis"}},
	{"harbinger_vs_rabbitmq", "harbinger / rabbitmq", "harbinger", []string{"rabbitmq"}},
	{"harbinger_vs_bare_grpc", "harbinger / bare-grpc (how close Harbinger comes to its transport's limit)", "harbinger", []string{"bare-grpc"}},
	{"inprocess_vs_harbinger", "harbinger-inprocess / harbinger (in-process over own process)", "harbinger-inprocess", []string{"harbinger"}},
	{"durable_vs_best_durable", "harbinger-durable / best of nats-jetstream, rabbitmq-quorum, redis-aof", "harbinger-durable",
		[]string{"nats-jetstream", "rabbitmq-quorum", "redis-aof"}},
	{"durable_vs_memory", "harbinger-durable / harbinger (durable over memory mode, same publishing)", "harbinger-durable",
		[]string{"harbinger"}},
	{"durable_vs_bare_grpc", "harbinger-durable / bare-grpc (durable over the transport's limit, same publishing)", "harbinger-durable",
		[]string{"bare-grpc"}},
	{"durable_unary_vs_memory_unary", "harbinger-durable-unary / harbinger-memory-unary (one unary call per message)", "harbinger-durable-unary",
		[]string{"harbinger-memory-unary"}},
	{"memory_unary_vs_bare_unary", "harbinger-memory-unary / bare-grpc-unary (how close unary publishing comes to its transport's limit)",
		"harbinger-memory-unary", []string{BareUnaryArm}},
}

// Goal is one target of the durable-queues issue, checked against a run.
// Goals are not pre-registered: they are the issue's, reported as reached
// or missed.
type Goal struct {
	ID        string  `json:"id"`
	Criterion string  `json:"criterion"`
	Estimate  float64 `json:"estimate"`
	Threshold string  `json:"threshold"`
	Met       bool    `json:"met"`
	Note      string  `json:"note,omitempty"`
}

// Durable-queue goals.
const (
	GoalDurableVsBest   = 3.0                  // harbinger-durable peak over the best other durable broker's
	GoalDurableVsMemory = 0.6                  // harbinger-durable peak over its memory mode's
	GoalDurableP99      = 5 * time.Millisecond // P99 at GoalDurableRate
	GoalDurableRate     = 1000.0
)

// RunCost runs the broker-cost comparison: per repetition, every arm's
// peak run, then every arm's fixed-rate run.
func RunCost(ctx context.Context, cfg CostConfig, drivers map[string]Driver) (*CostResult, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	res := &CostResult{Scenario: cfg.Scenario, Arms: map[string]*CostArm{}}
	for _, a := range cfg.Arms {
		if drivers[a.Broker] == nil {
			return nil, fmt.Errorf("bench: arm %s needs a %s driver", a.Name, a.Broker)
		}
		version := drivers[a.Broker].Version(ctx)
		if uv, ok := drivers[a.Broker].(unaryVersioner); ok && unaryArms[a.Name] {
			version = uv.UnaryVersion(ctx)
		}
		res.Arms[a.Name] = &CostArm{Broker: version}
		res.ArmOrder = append(res.ArmOrder, a.Name)
	}
	var peaksByRep []map[string]float64
	var cpusByRep []map[string]CPUPerMsg
	for rep := range cfg.Reps {
		peaks := map[string]float64{}
		cpus := map[string]CPUPerMsg{}
		for _, a := range cfg.Arms {
			rate, cpu, lf, err := peakRun(ctx, drivers[a.Broker], a, cfg, rep)
			if err != nil {
				return nil, fmt.Errorf("%s peak run %d: %w", a.Name, rep+1, err)
			}
			peaks[a.Name], cpus[a.Name] = rate, cpu
			arm := res.Arms[a.Name]
			arm.PeakRuns = append(arm.PeakRuns, rate)
			arm.PeakCPUs = append(arm.PeakCPUs, cpu)
			arm.PeakLogs = append(arm.PeakLogs, lf)
			progressf(cfg.Progress, "bench cost: rep %d/%d %s peak %.0f msg/s, CPU per message: %s", rep+1, cfg.Reps, a.Name, rate, cpu)
			if lf != nil {
				progressf(cfg.Progress, "bench cost: rep %d/%d %s log: %s", rep+1, cfg.Reps, a.Name, lf)
			}
		}
		peaksByRep = append(peaksByRep, peaks)
		cpusByRep = append(cpusByRep, cpus)
		if cfg.SkipFixedRate {
			continue
		}
		for _, a := range cfg.Arms {
			run, err := fixedRun(ctx, drivers[a.Broker], a, cfg, rep)
			if err != nil {
				return nil, fmt.Errorf("%s fixed-rate run %d: %w", a.Name, rep+1, err)
			}
			res.Arms[a.Name].Runs = append(res.Arms[a.Name].Runs, run)
			progressf(cfg.Progress, "bench cost: rep %d/%d %s at %.0f msg/s: delivered %.0f/s, P50 %.2f ms, P99 %.2f ms, CPU per message: %s, kept up: %v %s",
				rep+1, cfg.Reps, a.Name, cfg.Rate, run.DeliveredPerS, run.P50ms, run.P99ms, run.CPU, run.KeptUp, run.Why)
		}
	}
	for _, a := range res.Arms {
		a.PeakPerS = stats.Median(a.PeakRuns)
		a.PeakMin, a.PeakMax = slices.Min(a.PeakRuns), slices.Max(a.PeakRuns)
		a.PeakCPU = medianCPU(a.PeakCPUs)
		a.PeakLog = medianRunLog(a.PeakRuns, a.PeakLogs)
		if len(a.Runs) > 0 {
			f := &FixedRateArm{OfferedPerS: cfg.Rate, Runs: len(a.Runs)}
			var p50, p99 []float64
			var cpus []CPUPerMsg
			for _, r := range a.Runs {
				if r.KeptUp {
					f.KeptUp++
				}
				p50, p99 = append(p50, r.P50ms), append(p99, r.P99ms)
				cpus = append(cpus, r.CPU)
			}
			f.P50ms, f.P99ms = stats.Median(p50), stats.Median(p99)
			f.CPU = medianCPU(cpus)
			a.FixedRate = f
		}
	}
	switch cfg.Scenario {
	case ScenarioBusy:
		res.Ratios = scenarioRatios(busyRatios, peaksByRep, cpusByRep)
		res.Goals = CheckBusyGoals(res)
	case ScenarioBulk:
		res.Ratios = scenarioRatios(bulkRatios, peaksByRep, cpusByRep)
		res.Goals = CheckBulkGoals(res)
	default:
		res.Ratios = ratios(peaksByRep)
		res.Goals = CheckGoals(res, cfg.Rate)
	}
	return res, nil
}

// ratios computes every costRatios entry whose arms all ran.
func ratios(peaksByRep []map[string]float64) []Ratio {
	var out []Ratio
	for _, spec := range costRatios {
		var runs []float64
		for _, peaks := range peaksByRep {
			num, ok := peaks[spec.num]
			if !ok {
				break
			}
			best := 0.0
			for _, d := range spec.den {
				v, ok := peaks[d]
				if !ok {
					best = -1
					break
				}
				best = max(best, v)
			}
			if best <= 0 {
				break
			}
			runs = append(runs, num/best)
		}
		if len(runs) == len(peaksByRep) && len(runs) > 0 {
			out = append(out, Ratio{ID: spec.id, Label: spec.label, Median: stats.Median(runs),
				Min: slices.Min(runs), Max: slices.Max(runs), Runs: runs})
		}
	}
	return out
}

// ratio returns the ratio with id, or nil.
func (r *CostResult) ratio(id string) *Ratio {
	for i := range r.Ratios {
		if r.Ratios[i].ID == id {
			return &r.Ratios[i]
		}
	}
	return nil
}

// CheckGoals checks the durable-queues issue's goals where their arms ran;
// rate is the offered rate of the fixed-rate runs.
func CheckGoals(res *CostResult, rate float64) []Goal {
	var out []Goal
	if r := res.ratio("durable_vs_best_durable"); r != nil {
		out = append(out, Goal{ID: "D1", Criterion: "harbinger-durable peak / best of nats-jetstream, rabbitmq-quorum, redis-aof (same repetition)",
			Estimate: r.Median, Threshold: fmt.Sprintf(">= %.1fx", GoalDurableVsBest), Met: r.Median >= GoalDurableVsBest})
	}
	if r := res.ratio("durable_vs_memory"); r != nil {
		out = append(out, Goal{ID: "D2", Criterion: "harbinger-durable peak / harbinger (memory mode) peak (same repetition)",
			Estimate: r.Median, Threshold: fmt.Sprintf(">= %.1fx", GoalDurableVsMemory), Met: r.Median >= GoalDurableVsMemory})
	}
	if a := res.Arms["harbinger-durable"]; a != nil && a.FixedRate != nil {
		f := a.FixedRate
		g := Goal{ID: "D3", Criterion: fmt.Sprintf("harbinger-durable P99 send-to-ack at %.0f msg/s (median of runs), every run kept up", rate),
			Estimate: f.P99ms, Threshold: fmt.Sprintf("< %s", GoalDurableP99), Met: f.P99ms < float64(GoalDurableP99)/float64(time.Millisecond)}
		switch {
		case rate != GoalDurableRate:
			g.Met = false
			g.Note = fmt.Sprintf("the goal is at %.0f msg/s; this run offered %.0f msg/s", GoalDurableRate, rate)
		case f.KeptUp < f.Runs:
			// Latency counts from the actual send: a run whose sends fell
			// behind hides its stalls from it.
			g.Met = false
			g.Note = fmt.Sprintf("%d of %d runs did not keep up; their latency, counted from the actual send, leaves out the time sends waited", f.Runs-f.KeptUp, f.Runs)
		}
		out = append(out, g)
	}
	return out
}

// medianCPU is the median of each figure across runs; the broker's where
// every run has one.
func medianCPU(cpus []CPUPerMsg) CPUPerMsg {
	var b, h []float64
	for _, c := range cpus {
		if c.BrokerUS != nil {
			b = append(b, *c.BrokerUS)
		}
		h = append(h, c.HarnessUS)
	}
	var out CPUPerMsg
	if len(b) == len(cpus) && len(b) > 0 {
		v := stats.Median(b)
		out.BrokerUS = &v
	}
	if len(h) > 0 {
		out.HarnessUS = stats.Median(h)
	}
	return out
}

// medianRunLog is the log figures of the repetition with the median peak
// (the lower middle one of an even count), nil if it has none.
func medianRunLog(peaks []float64, logs []*LogFigures) *LogFigures {
	if len(peaks) == 0 || len(logs) != len(peaks) {
		return nil
	}
	idx := make([]int, len(peaks))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(peaks[a], peaks[b]) })
	return logs[idx[(len(idx)-1)/2]]
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
		if _, sent, err := DecodeBody(body); err == nil {
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
			if err := work(wctx, q, a, cfg.Slots, w, signal, handler); err != nil && wctx.Err() == nil {
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
func peakRun(ctx context.Context, d Driver, a Arm, cfg CostConfig, rep int) (float64, CPUPerMsg, *LogFigures, error) {
	slots := make(chan struct{}, cfg.MaxInFlight)
	release := func() {
		select {
		case <-slots:
		default: // a redelivered message holds no slot
		}
	}
	r, err := startCostRun(ctx, d, a, cfg, rep, release)
	if err != nil {
		return 0, CPUPerMsg{}, nil, err
	}
	pctx, stopP := context.WithCancel(ctx)
	var pwg sync.WaitGroup
	pubErr := make(chan error, cfg.Producers)
	var seq atomic.Uint64
	for range cfg.Producers {
		pub, err := newWindowPublisher(ctx, r.q, a, cfg.Window)
		if err != nil {
			stopP()
			pwg.Wait()
			r.finish(ctx)
			return 0, CPUPerMsg{}, nil, err
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
					Body: EncodeBody(seq.Add(1), time.Now(), costPayload)}
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
	a0, t0, c0 := r.acked.Load(), time.Now(), SampleCPU(r.q)
	select {
	case <-time.After(cfg.Duration):
	case <-ctx.Done():
	}
	a1, t1, c1 := r.acked.Load(), time.Now(), SampleCPU(r.q)
	rate = float64(a1-a0) / t1.Sub(t0).Seconds()
	cpu := PerMsg(c0, c1, a1-a0)
	lf := LogFiguresBetween(c0.Log, c1.Log, c0.LogOK, c1.LogOK, t1.Sub(t0))
	stopP()
	pwg.Wait()
	werr := r.finish(ctx)
	if err := ctx.Err(); err != nil {
		return 0, CPUPerMsg{}, nil, err
	}
	select {
	case err := <-pubErr:
		return 0, CPUPerMsg{}, nil, err
	default:
	}
	return rate, cpu, lf, werr
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
	// CPU over the timed window, sampled at its two ends.
	var c0, c1 CPUSample
	cpuDone := make(chan struct{})
	go func() {
		defer close(cpuDone)
		if SleepUntil(from, pctx.Done()) {
			c0 = SampleCPU(r.q)
		}
		if SleepUntil(to, pctx.Done()) {
			c1 = SampleCPU(r.q)
		}
	}()
	var pwg sync.WaitGroup
	var sent, sentTimed atomic.Int64
	lags := make([][]float64, cfg.Producers)
	pubErr := make(chan error, cfg.Producers)
	var seq atomic.Uint64
	for p := range cfg.Producers {
		pub, err := newPublisher(ctx, r.q, a)
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
				if !SleepUntil(at, pctx.Done()) {
					return
				}
				now := time.Now()
				m := Message{Key: Key{Producer: "cost", JobType: "noop", Size: costPayload},
					Body: EncodeBody(seq.Add(1), now, costPayload)}
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
	<-cpuDone
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
	run := FixedRateRun{Sent: int(sent.Load()), Delivered: inWindow, Lost: int(sent.Load() - r.acked.Load()),
		CPU: PerMsg(c0, c1, int64(inWindow))}
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
	if c0.LogOK && c1.LogOK {
		n := int(c1.Log.SlowSyncs - c0.Log.SlowSyncs)
		run.SlowFsyncs = &n
		if !run.KeptUp {
			run.Why += fmt.Sprintf("; %d of the broker's fsyncs in the window took over %s", n, SlowSync)
		}
	}
	return run, nil
}

// CostMethod is the method paragraph of a cost report.
func CostMethod(cfg CostConfig, env Environment) string {
	cfg = cfg.WithDefaults()
	has, hasArm := map[string]bool{}, map[string]bool{}
	for _, a := range cfg.Arms {
		has[a.Broker] = true
		hasArm[a.Name] = true
	}
	var b strings.Builder
	busy := cfg.Slots > 1 || cfg.Window > 0
	if busy {
		fmt.Fprintf(&b, "Broker cost, scenario %s: empty handlers, %d-byte payloads, %d producers, each keeping up to %d publishes unconfirmed, and %d consumers, "+
			"each a worker with %d handler slots holding at most %d messages (prefetch %d); every producer and every worker on a connection of its own "+
			"(goroutine groups of the harness process, not processes of their own). Arms: ",
			cfg.Scenario, costPayload, cfg.Producers, cfg.Window, cfg.Consumers, cfg.Slots, cfg.Slots, cfg.Slots)
	} else {
		fmt.Fprintf(&b, "Broker cost: empty handlers, %d-byte payloads, %d producers and %d consumers, each consumer with at most one unacknowledged message (prefetch 1). Arms: ",
			costPayload, cfg.Producers, cfg.Consumers)
	}
	for i, a := range cfg.Arms {
		if i > 0 {
			b.WriteString("; ")
		}
		broker := env.Brokers[a.Broker]
		if unaryArms[a.Name] {
			// The driver describes how it publishes for its own arms.
			broker = strings.Replace(broker, "a Producer stream per producer", "one client.Publish call per message", 1)
		}
		fmt.Fprintf(&b, "%s = %s", a.Name, broker)
	}
	b.WriteString(". ")
	if has[HarbingerServe] || has[HarbingerDurable] || has[BareGRPC] || has[Harbinger] {
		var unary []string
		for _, a := range cfg.Arms {
			if unaryArms[a.Name] {
				unary = append(unary, a.Name)
			}
		}
		if busy {
			fmt.Fprintf(&b, "Harbinger-API arms go through the public client SDK: a Producer per producer with MaxPending %d, publishing with PublishAsync "+
				"(the SDK gathers what is queued into one request; a durable broker answers a request once its records are on disk); "+
				"RunWorker per consumer with Concurrency and Prefetch %d (the broker sends several deliveries in one response when several slots are free, "+
				"and the SDK gathers the acks of handlers that finish together into one request). "+
				"Every run starts a fresh broker process with the default policy and stops it afterwards", cfg.Window, cfg.Slots)
		} else {
			b.WriteString("Harbinger-API arms go through the public client SDK: a Producer stream per producer, each Producer.Publish waiting for the broker's answer " +
				"(on a durable broker, given once the message's record is on disk) before the next")
			if len(unary) > 0 {
				b.WriteString(", or for " + strings.Join(unary, ", ") + " one unary client.Publish call per message, which returns once the broker has stored it")
			}
			b.WriteString("; RunWorker per consumer (concurrency 1, prefetch 1). " +
				"Every run starts a fresh broker process with the default policy and stops it afterwards")
		}
		if has[HarbingerDurable] {
			b.WriteString(" (a durable one on a fresh data directory)")
		}
		b.WriteString("; ")
		if has[Harbinger] {
			b.WriteString("harbinger-inprocess instead serves the broker from inside the harness process, sharing its CPU and garbage collector, and has no broker CPU figure of its own; ")
		}
		if hasArm[BareUnaryArm] {
			b.WriteString(BareUnaryArm + " is the bare gRPC queue published to one unary call per message, " +
				"so it marks the limit of that way of publishing over the transport; ")
		}
		if has[BareGRPC] {
			b.WriteString("bare-grpc is a server in this repository (lab/internal/bench BareQueue, started as `harbinger-lab bench " + BareQueueCommand + "`) that speaks the same gRPC API with the same server options " +
				"and keeps one slice of waiting messages per queue: no scheduling, predictor, leases, redelivery or store, so it marks the limit of the transport and SDK; ")
		}
		if has[BareTCP] {
			b.WriteString("bare-tcp is the bare queue without gRPC (lab/internal/bench BareTCPServer, started as `harbinger-lab bench " + BareTCPCommand + "`): " +
				"the same publish, prefetch-1 delivery and ack over plain TCP in length-prefixed frames, each publish answered and the answers flushed when no further request is buffered, as Redis does; " +
				"it marks what a framed protocol of Harbinger's own, instead of gRPC, would cost per message; ")
		}
		b.WriteString("processes started by the harness run on this machine beside it. ")
	}
	switch {
	case busy:
		if has[RabbitMQ] {
			fmt.Fprintf(&b, "rabbitmq: a classic non-durable queue, transient messages; each producer's channel in confirm mode with up to %d publishes awaiting their confirms; "+
				"each worker's channel at basic.qos prefetch %d, its %d handler goroutines taking deliveries from one consumer and acking each (manual ack). ", cfg.Window, cfg.Slots, cfg.Slots)
		}
		if has[RabbitQuorum] {
			fmt.Fprintf(&b, "rabbitmq-quorum: a quorum queue (one node), persistent messages, each producer's channel in confirm mode with up to %d publishes awaiting their confirms; "+
				"workers as for rabbitmq, at prefetch %d. ", cfg.Window, cfg.Slots)
		}
		if has[Redis] || has[RedisAOF] {
			fmt.Fprintf(&b, "Redis: the reliable list queue, each handler slot a consumer of its own (BLMOVE one job into its own processing list, run it, LREM it), "+
				"each producer sending pipelines of LPUSHes of whatever queued while its last pipeline was answered, up to %d unconfirmed", cfg.Window)
			if has[RedisAOF] {
				b.WriteString("; redis-aof on a redis-server started per run on a free port in a fresh directory with appendonly yes, appendfsync always and no RDB snapshots")
			}
			if has[Redis] {
				b.WriteString("; redis is the machine's own server")
			}
			b.WriteString(". ")
		}
		if has[NATS] || has[NATSMemory] {
			fmt.Fprintf(&b, "NATS JetStream: a nats-server started per run, a stream with work-queue retention and one durable pull consumer with explicit acks shared by the workers; "+
				"each worker fetches as many messages as it has free slots (up to %d) and its handlers ack each; producers use js.PublishAsync with max pending %d", cfg.Slots, cfg.Window)
			if has[NATS] {
				b.WriteString("; nats-jetstream: file storage, `sync_interval: always`")
			}
			if has[NATSMemory] {
				b.WriteString("; nats-jetstream-memory: memory storage, nothing on disk, as nothing is for Harbinger's --memory")
			}
			b.WriteString(". ")
		}
	default:
		if has[RabbitMQ] {
			b.WriteString("rabbitmq: a classic non-durable queue, transient messages, no confirms, manual ack. ")
		}
		if has[RabbitQuorum] {
			b.WriteString("rabbitmq-quorum: a quorum queue (one node), persistent messages, a channel per producer in confirm mode waiting for each publish's confirm, manual ack. ")
		}
		if has[Redis] || has[RedisAOF] {
			b.WriteString("Redis: the reliable list queue, LPUSH / BLMOVE into a per-worker list / LREM")
			if has[RedisAOF] {
				b.WriteString("; redis-aof on a redis-server started per run on a free port in a fresh directory with appendonly yes, appendfsync always and no RDB snapshots")
			}
			b.WriteString(". ")
		}
		if has[NATS] {
			b.WriteString("nats-jetstream: a nats-server started per run with `sync_interval: always`, a file-storage stream with work-queue retention, one durable pull consumer with explicit acks " +
				"shared by the workers, each fetching one message at a time and acking it; producers use js.Publish, which waits for the stream's ack. ")
		}
	}
	fixed := fmt.Sprintf("Fixed rate: %.0f msg/s offered on an absolute schedule split across the producers; "+
		"kept up = nothing lost within %s of the last send, at least 99%% of the offered rate delivered in the timed window, and sends on time "+
		"(99th-percentile send lag <= %s); P50 and P99 of send-to-ack latency of the messages sent in the timed window, median across runs. ", cfg.Rate, cfg.Drain, CostOnTime)
	if cfg.SkipFixedRate {
		fixed = "No fixed-rate runs in this scenario. "
	}
	fmt.Fprintf(&b, "Each run: a fresh queue, a %s warm-up, then a %s timed window; %d repetitions, arms interleaved within each repetition. "+
		"Peak: producers publish as fast as the broker accepts with at most %d messages published and not yet acked; rate = acks in the timed window / its length; "+
		"median and range across repetitions. %s"+
		"CPU per message: the broker process's utime + stime from /proc/PID/stat (10 ms resolution) over the timed window, divided by the messages acked in it "+
		"(RabbitMQ's is its Erlang VM, beam.smp, and the redis arm's the redis-server it dials: both are shared with anything else using them); "+
		"the harness's own CPU (getrusage) alongside. Ratios: median over repetitions of one arm's peak / the other's in the same repetition. "+
		"The machine is shared with other work, so figures are noisy; only figures from one run are compared. Environment: %s.",
		cfg.Warmup, cfg.Duration, cfg.Reps, cfg.MaxInFlight, fixed, env.Host())
	return b.String()
}
