package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/harbinger-mq/harbinger/internal/sim"
	"github.com/harbinger-mq/harbinger/lab/internal/bench"
)

func init() {
	register("bench", "compare Harbinger with RabbitMQ, Redis and NATS on live brokers (flow, cost)", runBench)
}

func benchUsage(w io.Writer) {
	fmt.Fprintln(w, "Usage: harbinger-lab bench <flow|fair|cost> [flags]   (harbinger-lab bench <flow|fair|cost> -h for flags)")
	fmt.Fprintln(w, "\n  flow  replay a workload through every broker and policy; the pre-registered scheduling comparison")
	fmt.Fprintln(w, "  fair  the noisy-neighbour cases live: calm, flood without and with fair shares; each steady tenant's latency against calm")
	fmt.Fprintln(w, "  cost  peak delivery rate, latency at a fixed rate and broker CPU per message with empty handlers; the broker-cost comparison (--arms durable: the durable one)")
	fmt.Fprintln(w, "\nRabbitMQ: HARBINGER_AMQP_URL (default "+redacted(bench.DefaultAMQPURL)+"; bench flow --rabbitmq-cluster N starts a cluster of its own instead); Redis: HARBINGER_REDIS_ADDR (default "+bench.DefaultRedisAddr+").")
	fmt.Fprintln(w, "NATS: HARBINGER_NATS_SERVER, a nats-server binary to start (default: one built with go install, cached); HARBINGER_BIN, the harbinger binary the out-of-process arms start (default: cmd/harbinger built with go build).")
}

func redacted(s string) string { return strings.Replace(s, "guest:guest@", "guest:***@", 1) }

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		benchUsage(stderr)
		return errUsage
	}
	switch args[0] {
	case "flow":
		return runBenchFlow(ctx, args[1:], stdout, stderr)
	case "fair":
		return runBenchFair(ctx, args[1:], stdout, stderr)
	case "cost":
		return runBenchCost(ctx, args[1:], stdout, stderr)
	case bench.BareQueueCommand:
		// Not in the usage: the process bench cost starts for its
		// bare-grpc arm.
		return runBareQueue(ctx, args[1:], stdout, stderr)
	case bench.BareTCPCommand:
		// Not in the usage either: the process of the bare-tcp arm.
		return runBareTCP(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		benchUsage(stdout)
		return flag.ErrHelp
	default:
		fmt.Fprintf(stderr, "harbinger-lab bench: unknown benchmark %q\n\n", args[0])
		benchUsage(stderr)
		return errUsage
	}
}

// defaultOut is the output directory of a run started at t.
func defaultOut(t time.Time) string { return "bench-out/" + t.Format("20060102-150405") }

func runBenchFlow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench flow", "bench flow [--workload FILE] [--seeds 1,2] [--arms a,b] [--time-scale 0.1] [--rabbitmq-cluster N] [--harbinger-in-process|--harbinger-durable] [--out DIR] [--json] [flags]", stderr)
	wl := fs.String("workload", DefaultWorkload, "workload file (YAML); the default is built into the binary")
	seedsFlag := fs.String("seeds", "", "comma-separated seeds (default: the workload's)")
	armsFlag := fs.String("arms", strings.Join(bench.ArmNames(bench.FlowArms), ","), "comma-separated arms; "+bench.FairArm.Name+" (fair shares between producers) may be named too")
	scale := fs.Float64("time-scale", bench.DefaultTimeScale, "wall seconds per workload second (0.1 runs ten times faster; the registered run uses 0.1 or slower)")
	drain := fs.Duration("drain-timeout", bench.DefaultDrainTimeout, "wall time after the last send to wait for the backlog before counting the rest as lost")
	window := fs.Duration("arrival-window", 0, "replay only the arrivals of this much workload time (0: all; for quick checks, not registered runs)")
	cluster := fs.Int("rabbitmq-cluster", 0, "start a RabbitMQ cluster of this many nodes on this machine for the run (rabbitmq-server and rabbitmqctl on the PATH) "+
		"and run the RabbitMQ arms on it instead of HARBINGER_AMQP_URL: producer i on node i mod N, worker j on node j mod N, "+
		"rabbitmq-predictive-sidecars' sidecar i on node i mod N, queues declared through node 0 as classic queues "+
		"(RabbitMQ 3.10's quorum queues ignore priorities); 1 starts a single fresh node; 0 uses HARBINGER_AMQP_URL")
	inProcess := fs.Bool("harbinger-in-process", false, "serve the Harbinger arms from a broker inside the harness process instead of a harbinger serve --memory process per run "+
		"(a shortcut that shares the harness's CPU and garbage collector, as runs before 2026-12-02 did; the method line says which)")
	durable := fs.Bool("harbinger-durable", false, "run the Harbinger arms on harbinger serve as it starts by default, durable (--fsync always, a fresh data directory under --data-dir per run), "+
		"instead of --memory; the RabbitMQ and Redis arms stay as they are (transient messages, no AOF), so this shows what the default costs, not a like-for-like comparison")
	dataDir := fs.String("data-dir", "", "with --harbinger-durable: parent of the fresh data directories (default the system temp directory; it must be on the disk under test, not tmpfs)")
	asJSON := fs.Bool("json", false, "print the report as one JSON object")
	start := time.Now()
	out := fs.String("out", defaultOut(start), "directory for report.md, results.jsonl, summary.json and charts; \"\" writes none")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the harness process (producers, workers, client libraries) to this file; the brokers run in their own processes unless --harbinger-in-process")
	if err := parse(fs, args); err != nil {
		return err
	}
	stopProfiles, err := startProfiles(*cpuProfile, "")
	if err != nil {
		return err
	}
	defer stopProfiles()
	mode := bench.ServeMemory
	switch {
	case *inProcess && *durable:
		return errors.New("--harbinger-in-process and --harbinger-durable exclude each other")
	case *inProcess:
		mode = bench.InProcess
	case *durable:
		mode = bench.ServeDurable
	case *dataDir != "":
		return errors.New("--data-dir needs --harbinger-durable")
	}
	w, err := loadWorkload(*wl)
	if err != nil {
		return err
	}
	src := sim.FromWorkload(w)
	seeds, err := parseSeeds(*seedsFlag)
	if err != nil {
		return err
	}
	arms, err := bench.ParseArms(*armsFlag, bench.KnownFlowArms())
	if err != nil {
		return fmt.Errorf("--arms: %w", err)
	}
	if !(*scale > 0) || math.IsInf(*scale, 1) {
		return fmt.Errorf("--time-scale must be a positive number, got %g", *scale)
	}
	if *drain <= 0 {
		return fmt.Errorf("--drain-timeout must be positive, got %s", *drain)
	}
	if *window < 0 {
		return fmt.Errorf("--arrival-window must not be negative, got %s", *window)
	}
	cfg := bench.FlowConfig{Source: src, Seeds: seeds, Arms: arms, TimeScale: *scale, DrainTimeout: *drain,
		Window: *window, Progress: stderr, HarbingerMode: mode}
	brokers, err := bench.ConnectFlow(ctx, arms, bench.FlowConnect{ConnectOptions: bench.ConnectOptions{Progress: stderr,
		Harbinger: bench.HarbingerOptions{Mode: mode, DataDir: *dataDir}}, RabbitCluster: *cluster})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := brokers.Close(); cerr != nil {
			fmt.Fprintf(stderr, "bench: %v\n", cerr)
		}
	}()
	env := bench.Describe(ctx, brokers.Drivers)
	res, err := bench.RunFlow(ctx, cfg, brokers.Drivers)
	if err != nil {
		return err
	}
	res.Report.Method = bench.FlowMethod(cfg.WithDefaults(), env, res.Runs)
	if *out != "" {
		if err := bench.WriteFlowFiles(*out, res, w.JobTypes); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "bench: wrote %s\n", *out)
	}
	return writeReport(stdout, res.Report, *asJSON, time.Since(start))
}

func runBenchCost(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench cost", "bench cost [--scenario prefetch1|busy|bulk] [--duration 30s] [--warmup 5s] [--reps 5] [--rate 5000] [--arms registered|durable|unary|busy|bulk|a,b,...] [--memory-jobs N] [--memory-only] [--data-dir DIR] [--out DIR] [--json] [flags]", stderr)
	scenario := fs.String("scenario", bench.ScenarioPrefetch1, "the load: "+bench.ScenarioPrefetch1+" (the registered one: prefetch-1 consumers, each producer waiting for each publish's answer), "+
		bench.ScenarioBusy+" (busy workers: consumers with 16 handler slots, producers keeping 64 publishes unconfirmed; arms "+strings.Join(bench.ArmNames(bench.BusyArms), ",")+
		") or "+bench.ScenarioBulk+" (durable bulk: the same consumers, producers keeping 256 unconfirmed; arms "+strings.Join(bench.ArmNames(bench.BulkArms), ",")+"); it sets the arms unless --arms does")
	dur := fs.Duration("duration", bench.DefaultCostDuration, "timed window of each run")
	warm := fs.Duration("warmup", bench.DefaultCostWarmup, "untimed warm-up before each timed window")
	reps := fs.Int("reps", bench.DefaultCostReps, "repetitions; arms run interleaved within each")
	rate := fs.Float64("rate", bench.DefaultCostRate, "offered msg/s of the fixed-rate runs (the durable comparison's goal is at 1000)")
	armsFlag := fs.String("arms", "", "comma-separated arms and groups (default: the scenario's): registered ("+strings.Join(bench.ArmNames(bench.CostArms), ",")+
		"), durable ("+strings.Join(bench.ArmNames(bench.DurableArms), ",")+"), unary ("+strings.Join(bench.ArmNames(bench.UnaryArms), ",")+
		": one unary client.Publish call per message), "+bench.InProcessArm.Name+" (the broker inside the harness process) and "+bench.BareTCPArm.Name+" (the bare queue over plain TCP instead of gRPC)")
	memJobs := fs.Int("memory-jobs", 0, "also measure the RSS of harbinger serve (memory and durable mode) holding this many waiting 64-byte jobs; 0 skips it (1000000 is the documented figure)")
	memOnly := fs.Bool("memory-only", false, "run only the --memory-jobs phase, no arms")
	dataDir := fs.String("data-dir", "", "parent directory of the durable brokers' fresh data directories (default the system temp directory; it must be on the disk under test, not tmpfs)")
	asJSON := fs.Bool("json", false, "print the result as one JSON object")
	start := time.Now()
	out := fs.String("out", defaultOut(start), "directory for report.md, summary.json and the charts; \"\" writes none")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the harness process to this file (brokers run in their own processes, except harbinger-inprocess)")
	mutexProfile := fs.String("mutexprofile", "", "write a mutex contention profile of the harness process to this file")
	if err := parse(fs, args); err != nil {
		return err
	}
	stopProfiles, err := startProfiles(*cpuProfile, *mutexProfile)
	if err != nil {
		return err
	}
	defer stopProfiles()
	sc, ok := bench.CostScenarios[*scenario]
	if !ok {
		return fmt.Errorf("--scenario: unknown %q (want %s, %s or %s)", *scenario, bench.ScenarioPrefetch1, bench.ScenarioBusy, bench.ScenarioBulk)
	}
	var arms []bench.Arm
	if !*memOnly {
		if *armsFlag == "" {
			arms = sc.Arms
		} else if arms, err = bench.ParseCostArms(*armsFlag); err != nil {
			return fmt.Errorf("--arms: %w", err)
		}
	}
	switch {
	case *dur <= 0:
		return fmt.Errorf("--duration must be positive, got %s", *dur)
	case *warm < 0:
		return fmt.Errorf("--warmup must not be negative, got %s", *warm)
	case *reps < 1:
		return fmt.Errorf("--reps must be at least 1, got %d", *reps)
	case !(*rate > 0) || math.IsInf(*rate, 1):
		return fmt.Errorf("--rate must be a positive number, got %g", *rate)
	case *memJobs < 0:
		return fmt.Errorf("--memory-jobs must not be negative, got %d", *memJobs)
	case *memOnly && *memJobs == 0:
		return fmt.Errorf("--memory-only needs --memory-jobs")
	}
	cfg := bench.CostConfig{Scenario: sc.Name, Arms: arms, Duration: *dur, Warmup: *warm, Reps: *reps, Rate: *rate, Progress: stderr}
	if *warm == 0 {
		cfg.Warmup = time.Nanosecond // zero means the default; a nanosecond is none
	}
	buildDir, err := os.MkdirTemp("", "harbinger-bench-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(buildDir)
	bin, err := bench.HarbingerBinary(ctx, buildDir)
	if err != nil {
		return err
	}
	res := &bench.CostResult{Arms: map[string]*bench.CostArm{}}
	if len(arms) > 0 {
		drivers, err := bench.Connect(ctx, arms, bench.ConnectOptions{Binary: bin, BuildDir: buildDir, DataDir: *dataDir, Progress: stderr})
		if err != nil {
			return err
		}
		defer bench.CloseAll(drivers)
		env := bench.Describe(ctx, drivers)
		if res, err = bench.RunCost(ctx, cfg, drivers); err != nil {
			return err
		}
		res.Method = bench.CostMethod(cfg, env)
	}
	if *memJobs > 0 {
		if res.Memory, err = bench.RunMemory(ctx, bench.MemoryConfig{Jobs: *memJobs, Binary: bin, DataDir: *dataDir, Progress: stderr}); err != nil {
			return err
		}
		res.Method = strings.TrimSpace(res.Method + " " + bench.MemoryMethod())
	}
	if *out != "" {
		if err := bench.WriteCostFiles(*out, res); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "bench: wrote %s\n", *out)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	if err := bench.WriteCostText(stdout, res); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\n(ran in %.0f s)\n", time.Since(start).Seconds())
	return nil
}

// runBareQueue serves the bare gRPC queue of the bare-grpc arm until ctx
// ends, printing the line bench cost waits for once it listens.
func runBareQueue(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runBareServer(ctx, bench.BareQueueCommand, bench.ServeBareQueue, bench.BareQueueReady, args, stdout, stderr)
}

// runBareTCP serves the bare TCP queue of the bare-tcp arm until ctx ends,
// printing the line bench cost waits for once it listens.
func runBareTCP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runBareServer(ctx, bench.BareTCPCommand, bench.ServeBareTCP, bench.BareTCPReady, args, stdout, stderr)
}

// runBareServer is the hidden subcommand name: it serves with serve on
// --addr until ctx ends, printing ready's line once it listens.
func runBareServer(ctx context.Context, name string, serve func(context.Context, string, func(string)) error, ready func(string) string,
	args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench "+name, "bench "+name+" [--addr 127.0.0.1:0] [--cpuprofile FILE]", stderr)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file, closed at shutdown (to compare with harbinger serve --cpuprofile)")
	if err := parse(fs, args); err != nil {
		return err
	}
	stop, err := startProfiles(*cpuProfile, "")
	if err != nil {
		return err
	}
	defer stop()
	return serve(ctx, *addr, func(a string) { fmt.Fprintln(stdout, ready(a)) })
}

// startProfiles starts the CPU and mutex profiles asked for; the returned
// function writes them.
func startProfiles(cpuPath, mutexPath string) (func(), error) {
	var stops []func()
	if cpuPath != "" {
		f, err := os.Create(cpuPath)
		if err != nil {
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
	}
	if mutexPath != "" {
		runtime.SetMutexProfileFraction(5)
		stops = append(stops, func() {
			f, err := os.Create(mutexPath)
			if err != nil {
				return
			}
			defer f.Close()
			_ = pprof.Lookup("mutex").WriteTo(f, 0)
		})
	}
	return func() {
		for _, stop := range stops {
			stop()
		}
	}, nil
}
