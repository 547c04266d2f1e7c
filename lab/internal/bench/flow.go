package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/internal/rmqcluster"
	"github.com/harbinger-mq/harbinger/internal/sim"
)

// Flow defaults.
const (
	// DefaultTimeScale compresses every duration and inter-arrival gap
	// tenfold, the slowest factor the pre-registration allows for a
	// registered run.
	DefaultTimeScale = 0.1
	// DefaultProgressEvery is the interval of the progress lines.
	DefaultProgressEvery = 5 * time.Second
)

// FlowConfig configures RunFlow.
type FlowConfig struct {
	Source       sim.Source
	Seeds        []uint64      // default: the source's
	Arms         []Arm         // default: FlowArms
	Workers      int           // default: the source's
	TimeScale    float64       // default DefaultTimeScale
	DrainTimeout time.Duration // default DefaultDrainTimeout
	// Window keeps only the jobs arriving before it (workload time); zero
	// keeps them all. Tests use it for a short run.
	Window        time.Duration
	Progress      io.Writer // progress lines; nil for none
	ProgressEvery time.Duration
	// HarbingerMode is how the Harbinger arms' brokers run, as
	// ConnectOptions.Harbinger.Mode had them started; the method line
	// says so.
	HarbingerMode HarbingerMode
	// Fair is what the fair arm's queue declares of the reservation;
	// zero is the broker's defaults.
	Fair FairSettings
}

// WithDefaults fills the zero fields.
func (c FlowConfig) WithDefaults() FlowConfig {
	if len(c.Seeds) == 0 && c.Source != nil {
		c.Seeds = c.Source.Seeds()
	}
	if len(c.Arms) == 0 {
		c.Arms = FlowArms
	}
	if c.Workers == 0 && c.Source != nil {
		c.Workers = c.Source.Workers()
	}
	if c.TimeScale == 0 {
		c.TimeScale = DefaultTimeScale
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = DefaultProgressEvery
	}
	return c
}

func (c FlowConfig) validate() error {
	switch {
	case c.Source == nil:
		return fmt.Errorf("bench: no workload")
	case c.TimeScale <= 0 || math.IsInf(c.TimeScale, 0) || math.IsNaN(c.TimeScale):
		return fmt.Errorf("bench: --time-scale must be a positive number, got %g", c.TimeScale)
	case c.Workers < 1:
		return fmt.Errorf("bench: need at least one worker, got %d", c.Workers)
	case c.DrainTimeout < 0 || c.Window < 0:
		return fmt.Errorf("bench: --drain-timeout and the arrival window must not be negative")
	}
	return nil
}

// FlowResult is a whole flow comparison: the report in the simulator's
// shape and every run's raw records.
type FlowResult struct {
	Report *report.Report
	Runs   []RunResult // seed-major, arms in order within a seed
}

// RunFlow runs every arm over every seed, one run at a time, arms
// interleaved within each seed so that drift on the machine touches every
// arm alike. drivers maps broker names to connected drivers; method
// describes the environment (see Method).
func RunFlow(ctx context.Context, cfg FlowConfig, drivers map[string]Driver) (*FlowResult, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	for _, a := range cfg.Arms {
		if drivers[a.Broker] == nil {
			return nil, fmt.Errorf("bench: arm %s needs a %s driver", a.Name, a.Broker)
		}
	}
	types := cfg.Source.Types()
	static := sim.StaticMap(types)
	out := &FlowResult{}
	perArm := make(map[string][]report.SeedResult)
	simFIFO := make(map[uint64]float64) // FIFO's mean latency per seed, simulated: the baselines' yardstick
	fifo, err := sim.ArmByName("fifo", types)
	if err != nil {
		return nil, err
	}
	for _, seed := range cfg.Seeds {
		jobs := cfg.Source.Generate(seed)
		if cfg.Window > 0 {
			k := 0
			for k < len(jobs) && jobs[k].Arrival < cfg.Window {
				k++
			}
			jobs = jobs[:k]
		}
		sr, _, err := sim.RunSeed(types, jobs, cfg.Workers, fifo, seed)
		if err != nil {
			return nil, fmt.Errorf("bench: simulating FIFO for seed %d: %w", seed, err)
		}
		simFIFO[seed] = float64(sr.MeanS)
		for _, arm := range cfg.Arms {
			prog := &Progress{}
			stop := StartProgress(cfg.Progress, "bench", cfg.ProgressEvery, prog)
			res, err := RunArm(ctx, drivers[arm.Broker], RunSpec{Arm: arm, Seed: seed, Types: types, Jobs: jobs,
				Workers: cfg.Workers, TimeScale: cfg.TimeScale, DrainTimeout: cfg.DrainTimeout, Static: static, Fair: cfg.Fair}, prog)
			stop()
			if err != nil {
				return nil, err
			}
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "bench: %s seed %d finished in %.1f s: %d/%d done, handler overrun %.0f µs, turnaround mean %.0f µs, P99 %.0f µs, %.1f%% of worker time; CPU per message: %s\n",
					arm.Name, seed, res.Wall.Seconds(), len(res.Records), res.Sent,
					res.OverrunUS, res.TurnaroundUS, res.TurnaroundP99US, 100*res.TurnaroundShare, res.CPU)
			}
			out.Runs = append(out.Runs, res)
			sr := report.Summarize(seed, res.Sent, res.Records)
			sr.MAEms, sr.TierAccuracy = report.Num(res.MAEms), report.Num(res.TierAccuracy)
			perArm[arm.Name] = append(perArm[arm.Name], sr)
		}
	}
	r := &report.Report{Workload: cfg.Source.Name(), Seeds: cfg.Seeds, Arms: map[string]*report.ArmResult{}}
	for _, a := range cfg.Arms {
		r.Arms[a.Name] = report.Combine(perArm[a.Name])
		r.ArmOrder = append(r.ArmOrder, a.Name)
	}
	r.Gate = report.Gate(r.Arms, report.LiveBaselines)
	r.Secondary = report.Secondary(r.Arms, report.LiveBaselines, true)
	r.Warnings = report.BaselineWarnings(r.Arms, report.LiveBaselines)
	var fifoArms []string
	for _, a := range cfg.Arms {
		if a.Policy == PolicyFIFO {
			fifoArms = append(fifoArms, a.Name)
		}
	}
	r.Warnings = append(r.Warnings, report.SlowSeeds(r.Arms, fifoArms, simFIFO)...)
	out.Report = r
	return out, nil
}

// FlowConnect configures ConnectFlow.
type FlowConnect struct {
	ConnectOptions
	// RabbitCluster, when positive, is how many RabbitMQ nodes to start
	// as a cluster for the run (package rmqcluster); the RabbitMQ arms
	// then run on it instead of the RabbitMQ at AMQPURL(). 1 starts a
	// single fresh node. Zero runs them on AMQPURL().
	RabbitCluster int
	// ClusterDir is the parent of the cluster's temporary directory;
	// default the system temporary directory.
	ClusterDir string
}

// FlowBrokers are a flow run's drivers and, with FlowConnect.RabbitCluster,
// the RabbitMQ cluster the harness started for it.
type FlowBrokers struct {
	Drivers map[string]Driver
	// Cluster is nil unless ConnectFlow started one.
	Cluster *rmqcluster.Cluster
}

// Close closes the drivers and then tears the cluster down.
func (b *FlowBrokers) Close() error {
	CloseAll(b.Drivers)
	if b.Cluster == nil {
		return nil
	}
	return b.Cluster.Close()
}

// ConnectFlow dials or prepares the brokers the arms need, as Connect
// does, except that with o.RabbitCluster it first starts a RabbitMQ
// cluster of that many nodes and connects the RabbitMQ arms to it. The
// caller closes the result, which stops the cluster, even if the run
// fails.
func ConnectFlow(ctx context.Context, arms []Arm, o FlowConnect) (*FlowBrokers, error) {
	if o.RabbitCluster < 0 {
		return nil, fmt.Errorf("bench: --rabbitmq-cluster takes a number of nodes, 1 or more (0: the RabbitMQ at HARBINGER_AMQP_URL), got %d", o.RabbitCluster)
	}
	if o.RabbitCluster == 0 {
		drivers, err := Connect(ctx, arms, o.ConnectOptions)
		if err != nil {
			return nil, err
		}
		return &FlowBrokers{Drivers: drivers}, nil
	}
	var rabbit, others []Arm
	for _, a := range arms {
		if isRabbitArm(a) {
			rabbit = append(rabbit, a)
		} else {
			others = append(others, a)
		}
	}
	if len(rabbit) == 0 {
		return nil, errors.New("bench: --rabbitmq-cluster needs a RabbitMQ arm in --arms")
	}
	drivers, err := Connect(ctx, others, o.ConnectOptions)
	if err != nil {
		return nil, err
	}
	b := &FlowBrokers{Drivers: drivers}
	c, err := rmqcluster.Start(ctx, rmqcluster.Config{Nodes: o.RabbitCluster, Dir: o.ClusterDir, Progress: o.Progress})
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("bench: starting a %d-node RabbitMQ cluster: %w", o.RabbitCluster, err)
	}
	b.Cluster = c
	rd, err := connectRabbitCluster(ctx, rabbit, c.URLs(), o.ConnectOptions)
	if err != nil {
		return nil, errors.Join(err, b.Close())
	}
	for name, d := range rd {
		b.Drivers[name] = d
	}
	return b, nil
}
