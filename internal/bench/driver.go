// Package bench owns the live side-by-side comparison of Harbinger with
// RabbitMQ, Redis and NATS JetStream: one Driver per broker, the flow
// harness that replays a workload through every arm with identical
// producers, handlers and arrival schedules, the broker-cost harness
// (including the brokers it starts as processes of their own and the bare
// gRPC queue that marks the transport's limit), and the files a run writes
// (report, raw records, charts). It is the only package that imports the
// AMQP, Redis and NATS clients.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
)

// Broker names: the drivers an arm can ask for (Arm.Broker).
const (
	// Harbinger is a broker in the harness process (the flow comparison,
	// the demo and cost's harbinger-inprocess arm).
	Harbinger = "harbinger"
	// HarbingerServe is `harbinger serve --memory`, a process of its own.
	HarbingerServe = "harbinger-serve"
	// HarbingerDurable is `harbinger serve --fsync always`, a process of
	// its own on a fresh data directory.
	HarbingerDurable = "harbinger-durable"
	// BareGRPC is the bare gRPC queue (BareQueue), a process of its own.
	BareGRPC = "bare-grpc"
	// BareTCP is the bare TCP queue (BareTCPServer), a process of its own:
	// the bare queue without gRPC.
	BareTCP = "bare-tcp"
	// RabbitMQ is a RabbitMQ the user runs: classic queues, no confirms.
	RabbitMQ = "rabbitmq"
	// RabbitQuorum is the same RabbitMQ with quorum queues, persistent
	// messages and publisher confirms.
	RabbitQuorum = "rabbitmq-quorum"
	// RabbitSidecars is the same RabbitMQ with the predictive layout run
	// through `harbinger sidecar` processes the harness starts per run
	// (SidecarDriver).
	RabbitSidecars = "rabbitmq-sidecars"
	// Redis is a Redis the user runs.
	Redis = "redis"
	// RedisAOF is a redis-server the harness starts per run with
	// appendfsync always.
	RedisAOF = "redis-aof"
	// NATS is a nats-server with JetStream the harness starts per run.
	NATS = "nats-jetstream"
)

// Queue policies an arm asks a driver for. Not every driver supports every
// policy; Setup returns ErrPolicy for the rest.
const (
	PolicyFIFO       = "fifo"       // one level, arrival order
	PolicyStatic     = "static"     // the workload's static_tier map, strict priority, no aging
	PolicyPredictive = "predictive" // the per-key predictor with the broker's default policy
	PolicyWeighted   = "weighted"   // Harbinger's predictor with level weights and pausing aging
)

// ErrPolicy is returned by Setup for a policy the broker cannot run.
var ErrPolicy = errors.New("bench: policy not supported by this broker")

// Key is what a producer reports about a message and what a predictor keys
// on: who sent it, what kind of job it is and how big it is.
type Key struct {
	Producer string
	JobType  string
	Size     uint64
}

// QueueSpec describes the fresh queue one run needs.
type QueueSpec struct {
	Name   string         // unique for the run
	Policy string         // one of the Policy constants
	Static map[string]int // job type -> tier (0 is served first), for PolicyStatic
}

// Message is one message a producer publishes.
type Message struct {
	Key  Key
	Body []byte
}

// Handler runs one delivery. The driver acks the message when it returns nil
// (with the handler's measured duration where the broker takes one) and lets
// the broker's own rules redeliver it otherwise.
type Handler func(ctx context.Context, body []byte) error

// Driver connects the harness to one broker. A Driver is safe for concurrent
// use; several queues may be set up on it at once.
type Driver interface {
	// Broker is the broker's name (Harbinger, RabbitMQ or Redis).
	Broker() string
	// Version describes the broker's server for the method line.
	Version(ctx context.Context) string
	// Setup creates a fresh, empty queue with the spec's policy.
	Setup(ctx context.Context, spec QueueSpec) (Queue, error)
	// Close releases the driver's connections.
	Close() error
}

// Queue is one run's queue on one broker.
type Queue interface {
	// NewPublisher returns a publisher for one producer goroutine.
	NewPublisher(ctx context.Context) (Publisher, error)
	// Work runs one worker with prefetch 1 until ctx ends, calling h for
	// every delivery. It calls ready (once) when the worker can receive.
	// It returns nil when ctx ends; a worker whose ctx ends mid-handler
	// stops as a crashed process would, without acking.
	Work(ctx context.Context, worker int, ready func(), h Handler) error
	// Teardown deletes the queue and anything left on it.
	Teardown(ctx context.Context) error
}

// Publisher publishes messages for one producer goroutine.
type Publisher interface {
	Publish(ctx context.Context, m Message) error
	Close() error
}

// Arm is one broker and policy under comparison.
type Arm struct {
	Name   string // e.g. "rabbitmq-priority"
	Broker string
	Policy string
}

// FlowArms are the pre-registered live arms, in report order.
var FlowArms = []Arm{
	{"harbinger-fifo", Harbinger, PolicyFIFO},
	{"harbinger-static", Harbinger, PolicyStatic},
	{"harbinger-predictive", Harbinger, PolicyPredictive},
	{"harbinger-weighted", Harbinger, PolicyWeighted},
	{"rabbitmq-fifo", RabbitMQ, PolicyFIFO},
	{"rabbitmq-priority", RabbitMQ, PolicyStatic},
	{"rabbitmq-predictive", RabbitMQ, PolicyPredictive},
	{"rabbitmq-predictive-sidecars", RabbitSidecars, PolicyPredictive},
	{"redis-fifo", Redis, PolicyFIFO},
}

// ArmNames lists the names of arms.
func ArmNames(arms []Arm) []string {
	out := make([]string, len(arms))
	for i, a := range arms {
		out[i] = a.Name
	}
	return out
}

// ParseArms resolves a comma-separated list of arm names against known, in
// the order given, dropping duplicates.
func ParseArms(s string, known []Arm) ([]Arm, error) {
	byName := map[string]Arm{}
	for _, a := range known {
		byName[a.Name] = a
	}
	var out []Arm
	seen := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" || seen[f] {
			continue
		}
		a, ok := byName[f]
		if !ok {
			return nil, fmt.Errorf("unknown arm %q (want one of %s)", f, strings.Join(ArmNames(known), ", "))
		}
		seen[f] = true
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, errors.New("name at least one arm")
	}
	return out, nil
}

// PriorityOf maps a static tier to the AMQP priority of the rabbitmq-priority
// arm: tier 0 (served first) -> 2, tier 1 -> 1, tier 2 -> 0, on a queue with
// x-max-priority 3. Tiers outside 0-2 clamp to the nearest end.
func PriorityOf(tier int) uint8 {
	return uint8(2 - min(max(tier, 0), 2))
}

// ConnectOptions configures Connect.
type ConnectOptions struct {
	// Harbinger configures the driver of the arms whose broker is
	// Harbinger (the flow comparison's): in process by default, or, with
	// its Mode set, a `harbinger serve` process per run.
	Harbinger HarbingerOptions
	// Binary is the harbinger executable the out-of-process arms start;
	// Connect finds one with HarbingerBinary when it is empty and an arm
	// needs it, building into BuildDir if it must.
	Binary   string
	BuildDir string
	// DataDir is where the durable brokers the harness starts keep their
	// data; default os.TempDir().
	DataDir string
	// Progress, if set, is told about slow setup steps.
	Progress io.Writer
}

// Connect dials or prepares the brokers the arms need: RabbitMQ at
// AMQPURL() (with sidecar processes for rabbitmq-sidecars), Redis at RedisAddr(), and the brokers the harness starts
// itself (Harbinger in or out of process, the bare queue, nats-server,
// redis-server with AOF). The caller closes the drivers with CloseAll.
func Connect(ctx context.Context, arms []Arm, o ConnectOptions) (map[string]Driver, error) {
	drivers := map[string]Driver{}
	binary := func() (string, error) {
		if o.Binary == "" {
			var err error
			if o.Binary, err = HarbingerBinary(ctx, o.BuildDir); err != nil {
				return "", err
			}
		}
		return o.Binary, nil
	}
	for _, a := range arms {
		if drivers[a.Broker] != nil {
			continue
		}
		switch a.Broker {
		case Harbinger:
			h := o.Harbinger
			if h.Mode != InProcess {
				bin, err := binary()
				if err != nil {
					CloseAll(drivers)
					return nil, err
				}
				h.Binary, h.DataDir = bin, o.DataDir
			}
			drivers[Harbinger] = NewHarbinger(h)
		case HarbingerServe, HarbingerDurable, BareGRPC:
			bin, err := binary()
			if err != nil {
				CloseAll(drivers)
				return nil, err
			}
			h := HarbingerOptions{Name: a.Broker, Binary: bin, DataDir: o.DataDir}
			switch a.Broker {
			case HarbingerServe:
				h.Mode = ServeMemory
			case HarbingerDurable:
				h.Mode = ServeDurable
			case BareGRPC:
				h.Mode = BareServer
			}
			drivers[a.Broker] = NewHarbinger(h)
		case BareTCP:
			bin, err := binary()
			if err != nil {
				CloseAll(drivers)
				return nil, err
			}
			drivers[BareTCP] = NewBareTCP(bin)
		case RabbitMQ, RabbitQuorum:
			dial := DialRabbit
			if a.Broker == RabbitQuorum {
				dial = DialRabbitQuorum
			}
			d, err := dial(AMQPURL())
			if err != nil {
				CloseAll(drivers)
				return nil, fmt.Errorf("RabbitMQ at %s is unreachable (set HARBINGER_AMQP_URL, or leave the rabbitmq arms out with --arms): %w", redactURL(AMQPURL()), err)
			}
			drivers[a.Broker] = d
		case RabbitSidecars:
			bin, err := binary()
			if err != nil {
				CloseAll(drivers)
				return nil, err
			}
			d, err := DialRabbitSidecars(AMQPURL(), bin)
			if err != nil {
				CloseAll(drivers)
				return nil, fmt.Errorf("RabbitMQ at %s is unreachable (set HARBINGER_AMQP_URL, or leave the rabbitmq arms out with --arms): %w", redactURL(AMQPURL()), err)
			}
			drivers[RabbitSidecars] = d
		case RedisAOF:
			d, err := StartRedisAOF(ctx, RedisAOFOptions{DataDir: o.DataDir})
			if err != nil {
				CloseAll(drivers)
				return nil, err
			}
			drivers[RedisAOF] = d
		case NATS:
			bin, err := FindNATSServer(ctx, o.Progress)
			if err != nil {
				CloseAll(drivers)
				return nil, err
			}
			drivers[NATS] = NewNATS(NATSOptions{Binary: bin, DataDir: o.DataDir})
		case Redis:
			d, err := DialRedis(ctx, RedisAddr())
			if err != nil {
				CloseAll(drivers)
				return nil, fmt.Errorf("Redis at %s is unreachable (set HARBINGER_REDIS_ADDR, or leave the redis arms out with --arms): %w", RedisAddr(), err)
			}
			drivers[Redis] = d
		default:
			CloseAll(drivers)
			return nil, fmt.Errorf("bench: unknown broker %q", a.Broker)
		}
	}
	return drivers, nil
}

// CloseAll closes every driver.
func CloseAll(drivers map[string]Driver) {
	for _, d := range drivers {
		d.Close()
	}
}

// redactURL hides the password of a URL for messages.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
