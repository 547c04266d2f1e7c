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

// FlowArms are the pre-registered live arms, in report order.
var FlowArms = []Arm{
	{Name: "harbinger-fifo", Broker: Harbinger, Policy: PolicyFIFO},
	{Name: "harbinger-static", Broker: Harbinger, Policy: PolicyStatic},
	{Name: "harbinger-predictive", Broker: Harbinger, Policy: PolicyPredictive},
	{Name: "harbinger-weighted", Broker: Harbinger, Policy: PolicyWeighted},
	{Name: "rabbitmq-fifo", Broker: RabbitMQ, Policy: PolicyFIFO},
	{Name: "rabbitmq-priority", Broker: RabbitMQ, Policy: PolicyStatic},
	{Name: "rabbitmq-predictive", Broker: RabbitMQ, Policy: PolicyPredictive},
	{Name: "rabbitmq-predictive-sidecars", Broker: RabbitSidecars, Policy: PolicyPredictive},
	{Name: "redis-fifo", Broker: Redis, Policy: PolicyFIFO},
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
	Binary string
	// LabBinary is the harbinger-lab executable that serves the bare
	// queues; Connect finds one with LabBinary when it is empty.
	LabBinary string
	BuildDir  string
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
	labBinary := func() (string, error) {
		if o.LabBinary == "" {
			var err error
			if o.LabBinary, err = LabBinary(ctx, o.BuildDir); err != nil {
				return "", err
			}
		}
		return o.LabBinary, nil
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
			find := binary
			if a.Broker == BareGRPC {
				find = labBinary // harbinger-lab bench bare-queue-server
			}
			bin, err := find()
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
			bin, err := labBinary()
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
		case NATS, NATSMemory:
			bin, err := FindNATSServer(ctx, o.Progress)
			if err != nil {
				CloseAll(drivers)
				return nil, err
			}
			drivers[a.Broker] = NewNATS(NATSOptions{Binary: bin, DataDir: o.DataDir, Memory: a.Broker == NATSMemory})
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
