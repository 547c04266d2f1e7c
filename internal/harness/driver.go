// Package harness runs a workload against a broker in wall time: the
// Driver interface a broker is reached through, the driver of Harbinger's
// own API (a broker in this process, or `harbinger serve` as a process of
// its own), the paced producers and timed workers of one run (RunArm) and
// its progress lines. `harbinger demo` runs its two arms with it; the lab's
// benchmarks add their peers' drivers (RabbitMQ, Redis, NATS JetStream) and
// the comparisons on top.
package harness

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Broker names of the drivers this package provides (Arm.Broker); the
// lab's bench package adds its peers'.
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
)

// Queue policies an arm asks a driver for. Not every driver supports every
// policy; Setup returns ErrPolicy for the rest.
const (
	PolicyFIFO       = "fifo"       // one level, arrival order
	PolicyStatic     = "static"     // the workload's static_tier map, strict priority, no aging
	PolicyPredictive = "predictive" // the per-key predictor with the broker's default policy
	PolicyWeighted   = "weighted"   // Harbinger's predictor with level weights and pausing aging
	// PolicyFair is PolicyPredictive with fair shares between producers:
	// group_by producer with the broker's default fair settings (the
	// reservation on), as docs/limits.md declares them, but for those
	// QueueSpec.Fair sets.
	PolicyFair = "fair"
)

// ErrPolicy is returned by Setup for a policy the broker cannot run.
var ErrPolicy = errors.New("harness: policy not supported by this broker")

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
	Fair   FairSettings   // for PolicyFair
}

// FairSettings are the reservation's settings PolicyFair declares its
// queue with; zero fields take the broker's defaults.
type FairSettings struct {
	Reserve      int     // workers the reservation keeps (the queue's reserve)
	ReserveAbove float64 // how many times the other groups' mean a job it holds back costs (reserve_above)
}

// String says what the settings declare, "" for the broker's defaults.
func (f FairSettings) String() string {
	var parts []string
	if f.Reserve != 0 {
		parts = append(parts, fmt.Sprintf("reserve %d", f.Reserve))
	}
	if f.ReserveAbove != 0 {
		parts = append(parts, fmt.Sprintf("reserve_above %g", f.ReserveAbove))
	}
	return strings.Join(parts, ", ")
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
