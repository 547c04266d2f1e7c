package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"

	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/rabbitmq"
)

// Environment describes where a comparison ran, for its method line.
type Environment struct {
	Brokers   map[string]string // broker name -> server version
	GoVersion string
	CPUs      int
	MaxProcs  int
	// EnvMaxProcs is GOMAXPROCS as set in the environment, "" when unset:
	// the Go broker processes the harness starts inherit it.
	EnvMaxProcs string
}

// Describe asks each driver for its server's version.
func Describe(ctx context.Context, drivers map[string]Driver) Environment {
	e := Environment{Brokers: map[string]string{}, GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), MaxProcs: runtime.GOMAXPROCS(0),
		EnvMaxProcs: os.Getenv("GOMAXPROCS")}
	for name, d := range drivers {
		if d != nil {
			e.Brokers[name] = d.Version(ctx)
		}
	}
	return e
}

// Host describes the client side: Go version and cores.
func (e Environment) Host() string {
	return fmt.Sprintf("client: %s on %d cores (GOMAXPROCS %d), every broker on the same machine%s", e.GoVersion, e.CPUs, e.MaxProcs, e.inherited())
}

// inherited says that the Go brokers the harness started ran with the
// environment's GOMAXPROCS too, when it was set.
func (e Environment) inherited() string {
	if e.EnvMaxProcs == "" {
		return ""
	}
	return "; GOMAXPROCS=" + e.EnvMaxProcs + " was set in the environment, so the Go brokers the harness started (harbinger serve, the bare queues, nats-server) ran with it as well; Redis and RabbitMQ are not Go programs"
}

func (e Environment) String() string {
	names := make([]string, 0, len(e.Brokers))
	for n := range e.Brokers {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, e.Brokers[n])
	}
	return fmt.Sprintf("brokers: %s; client: %s on %d cores (GOMAXPROCS %d), every broker on the same machine%s",
		strings.Join(parts, "; "), e.GoVersion, e.CPUs, e.MaxProcs, e.inherited())
}

// FlowMethod is the method paragraph of a flow report.
func FlowMethod(cfg FlowConfig, env Environment, runs []RunResult) string {
	cfg = cfg.WithDefaults()
	producers := map[string]bool{}
	for _, t := range cfg.Source.Types() {
		producers[t.Producer] = true
	}
	over := make([]float64, 0, len(runs))
	for _, r := range runs {
		over = append(over, r.OverrunUS)
	}
	window := "the whole arrival window"
	if cfg.Window > 0 {
		window = fmt.Sprintf("only the first %s of arrivals", cfg.Window)
	}
	return fmt.Sprintf("Live run of %q, %s, seeds %v, time scale %g (every inter-arrival gap and duration multiplied by it; "+
		"latencies quoted back in workload seconds by dividing by it). Arms: %s, run one at a time, arms interleaved within each seed, "+
		"each on a fresh queue (Harbinger: "+flowHarbinger(cfg.HarbingerMode)+"; "+
		"RabbitMQ: a new non-durable classic queue, purged; Redis: fresh keys). "+
		"Identical for every arm: %d producer goroutines (one per workload producer, each with its own channel or stream) publish each job "+
		"at its scaled arrival time with its key (producer, job type, size hint) and the send time in the payload; %d workers, each "+
		"with prefetch 1, sleep the job's scaled true duration and ack (Harbinger and rabbitmq-predictive ack with the measured duration). "+
		"Handlers (and producers, between arrivals) sleep the last 1.5 ms "+PreciseSleepMethod+", with a learned wake-up correction; the mean overrun per run was %s µs. "+
		"RabbitMQ: transient messages, no publisher confirms, manual ack; rabbitmq-priority uses x-max-priority 3 and the workload's static_tier map "+
		"with tier t -> AMQP priority 2-t (tier 0 -> 2, 1 -> 1, 2 -> 0), no aging; rabbitmq-predictive publishes and consumes through Harbinger's "+
		"rabbitmq package with a fresh in-process predictor per run and the package's defaults: "+rabbitPredictiveLayout()+". "+
		sidecarArmMethod(cfg.Arms)+
		"Redis: reliable list queue (LPUSH; BLMOVE into a per-worker processing list; LREM as the ack; a starting worker pushes its processing list back). "+
		"Latency: producer send to handler return (the ack), per message. "+
		"Turnaround (wall µs; each run's figures in the progress output, with the CPU per message of the broker process and of the harness): "+
		"the time from a handler's return to the same worker's next handler start, counted when the message it then got was sent at least "+
		TurnaroundMargin.String()+" before, so that work was waiting: the ack, the broker's choice and the delivery; its mean per run ranged "+
		turnaroundRanges(runs)+" (a policy changes which waits count, so arms compare by the share of worker time the waits took, on each run's line). "+
		"MAE (workload ms, routed predictions only) and tier accuracy come from the arm's own predictor after the run: "+
		"the Harbinger broker's own figures for its queue (it predicts under every policy; "+flowHarbingerStats(cfg.HarbingerMode)+"), the rabbitmq package's Local for rabbitmq-predictive "+
		"(each completion scored against the prediction stamped on the message); none for the other arms. Lost = sent - completed after a drain timeout of %s (wall) after the last send. "+
		"Per-arm figures are medians across seeds; comparisons are medians of per-seed paired differences with 95%% percentile bootstrap intervals "+
		"(10,000 resamples of seeds, fixed RNG seed); a row passes when its point estimate meets the threshold. Live form of the gate: "+
		"baselines rabbitmq-fifo and redis-fifo, P5 against rabbitmq-predictive. "+
		"Warnings name a gate baseline whose throughput is below "+fmt.Sprintf("%.2f", report.G4MinThroughput)+"x another FIFO arm's (paired median), "+
		"and a FIFO arm's seed whose mean latency, over the simulator's FIFO mean on the same jobs and workers, is more than "+
		fmt.Sprintf("%g", report.SlowSeedFactor)+"x that arm's median. "+
		"Arrivals: %s. Environment: %s.",
		cfg.Source.Name(), describeLoad(cfg), cfg.Seeds, cfg.TimeScale, strings.Join(ArmNames(cfg.Arms), ", "),
		len(producers), cfg.Workers, rangeStr(over, "%.0f"), cfg.DrainTimeout, window, env)
}

// flowHarbinger says how a flow run's Harbinger brokers ran.
func flowHarbinger(m HarbingerMode) string {
	switch m {
	case ServeMemory:
		return "a fresh `harbinger serve --memory` process per run, as transient as the RabbitMQ and Redis arms' queues, " +
			"used through the public client SDK over gRPC on loopback"
	case ServeDurable:
		return "a fresh `harbinger serve --fsync always` process per run on a fresh data directory (durable, as serve starts by default; " +
			"the RabbitMQ and Redis arms stay transient), used through the public client SDK over gRPC on loopback"
	}
	return "a fresh broker per run inside the harness process (a shortcut: it shares the harness's CPU and garbage collector), " +
		"served over gRPC on loopback and used through the public client SDK"
}

// flowHarbingerStats says where a flow run read the Harbinger broker's
// predictor figures.
func flowHarbingerStats(m HarbingerMode) string {
	if m == InProcess {
		return "read from the broker in process"
	}
	return "read through Admin.ListKeys, every key's figures weighted by the acks it scored"
}

// sidecarArmMethod describes rabbitmq-predictive-sidecars when the run
// has it, and nothing otherwise.
func sidecarArmMethod(arms []Arm) string {
	i := slices.IndexFunc(arms, func(a Arm) bool { return a.Broker == RabbitSidecars })
	if i < 0 {
		return ""
	}
	return fmt.Sprintf("%s: the same layout, with its priorities and holds from %d `harbinger sidecar --hold` processes the harness starts per run "+
		"(producers and workers alternating between them, the clients caching each key's answer for %v and sending their reports in batches, "+
		"a batch at most %v after its first report, the sidecars combining their queues' backlogs); "+
		"its MAE and tier accuracy are the mean of the sidecars' own scores. ", arms[i].Name, SidecarsPerRun, SidecarCacheFor, rabbitmq.DefaultReportEvery)
}

func describeLoad(cfg FlowConfig) string {
	return fmt.Sprintf("%d workers, %d job types", cfg.Workers, len(cfg.Source.Types()))
}

// rangeStr renders min-max of xs, or one value when they agree.
func rangeStr(xs []float64, format string) string {
	if len(xs) == 0 {
		return "n/a"
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range xs {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	a, b := fmt.Sprintf(format, lo), fmt.Sprintf(format, hi)
	if a == b {
		return a
	}
	return a + " to " + b
}

// turnaroundRanges is each arm's range of mean turnarounds over its runs,
// in the order the arms first ran.
func turnaroundRanges(runs []RunResult) string {
	var order []string
	by := map[string][]float64{}
	for _, r := range runs {
		if math.IsNaN(r.TurnaroundUS) {
			continue
		}
		if _, ok := by[r.Arm]; !ok {
			order = append(order, r.Arm)
		}
		by[r.Arm] = append(by[r.Arm], r.TurnaroundUS)
	}
	if len(order) == 0 {
		return "n/a (no run had work waiting)"
	}
	parts := make([]string, len(order))
	for i, a := range order {
		parts[i] = a + " " + rangeStr(by[a], "%.0f")
	}
	return strings.Join(parts, ", ")
}

// rabbitPredictiveLayout describes the priorities the rabbitmq package's
// defaults give, from the package itself.
func rabbitPredictiveLayout() string {
	top := uint8(rabbitmq.DefaultMaxPriority)
	tiers := rabbitmq.DefaultTiers
	first := rabbitmq.PriorityFor(0, tiers, false, top)
	last := rabbitmq.PriorityFor(tiers-1, tiers, false, top)
	return fmt.Sprintf("x-max-priority %d, long and unpredictable messages -> priority %d, tiers 0..%d -> priorities %d..%d; "+
		"a long message is first held in a hold queue (per-message TTL, dead-lettered into the queue at the top priority) "+
		"for %g of its FIFO wait as the predictor estimates it (predicted work published and not completed, over the consumers)",
		top, rabbitmq.PriorityFor(0, tiers, true, top), tiers-1, first, last, rabbitmq.DefaultHold)
}
