package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"runtime/debug"
	"sync"
	"time"

	"google.golang.org/grpc"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/predict"
	"github.com/harbinger-mq/harbinger/internal/server"
)

// HarbingerDriver runs the Harbinger arms against an in-process broker
// served over gRPC on a loopback port, through the public client: the same
// path a remote producer and worker take, minus the network.
type HarbingerDriver struct {
	// fresh starts a new broker for every queue, so no run inherits a
	// predictor, queue or goroutine from the one before.
	fresh bool
	log   *slog.Logger

	mu     sync.Mutex
	shared *harbingerServer
}

// HarbingerOptions configures NewHarbinger.
type HarbingerOptions struct {
	// Shared serves every queue from one broker (the demo runs two queues
	// side by side on one); by default each Setup starts a fresh broker.
	Shared bool
}

// NewHarbinger returns a driver for in-process brokers.
func NewHarbinger(o HarbingerOptions) *HarbingerDriver {
	return &HarbingerDriver{fresh: !o.Shared, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// harbingerServer is one in-process broker with its gRPC server and a client
// connected to it.
type harbingerServer struct {
	b   *broker.Broker
	gs  *grpc.Server
	c   *client.Client
	err chan error
}

func (d *HarbingerDriver) start(ctx context.Context) (*harbingerServer, error) {
	cfg := broker.Config{Logger: d.log}
	b, err := broker.New(cfg)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := server.New(b, d.log)
	gs := grpc.NewServer(server.ServerOptions(cfg)...)
	srv.Register(gs)
	s := &harbingerServer{b: b, gs: gs, err: make(chan error, 1)}
	go func() { s.err <- gs.Serve(lis) }()
	c, err := client.Dial(ctx, lis.Addr().String(), client.WithLogger(d.log))
	if err != nil {
		gs.Stop()
		return nil, err
	}
	s.c = c
	return s, nil
}

func (s *harbingerServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.b.Shutdown(ctx)
	s.c.Close()
	s.gs.Stop()
}

// Broker implements Driver.
func (d *HarbingerDriver) Broker() string { return Harbinger }

// Version implements Driver: the module version this binary was built from.
func (d *HarbingerDriver) Version(context.Context) string {
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " " + s.Value[:12]
			}
		}
	}
	return "harbinger " + v + " (in-process broker, gRPC on loopback, in-memory store)"
}

// Close implements Driver.
func (d *HarbingerDriver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.shared != nil {
		d.shared.stop()
		d.shared = nil
	}
	return nil
}

// Setup implements Driver: declares the queue with the policy.
func (d *HarbingerDriver) Setup(ctx context.Context, spec QueueSpec) (Queue, error) {
	cfg := &pb.QueueConfig{}
	switch spec.Policy {
	case PolicyFIFO:
		cfg.Policy = "fifo"
	case PolicyStatic:
		cfg.Policy = "static"
		cfg.StaticTiers = make(map[string]uint32, len(spec.Static))
		for k, v := range spec.Static {
			cfg.StaticTiers[k] = uint32(max(v, 0))
		}
	case PolicyPredictive:
		cfg.Policy = "" // the broker's default policy
	case PolicyWeighted:
		cfg.Policy = "weighted"
	default:
		return nil, fmt.Errorf("%w: harbinger %s", ErrPolicy, spec.Policy)
	}
	var s *harbingerServer
	if d.fresh {
		var err error
		if s, err = d.start(ctx); err != nil {
			return nil, fmt.Errorf("bench: harbinger: %w", err)
		}
	} else {
		d.mu.Lock()
		if d.shared == nil {
			var err error
			if d.shared, err = d.start(ctx); err != nil {
				d.mu.Unlock()
				return nil, fmt.Errorf("bench: harbinger: %w", err)
			}
		}
		s = d.shared
		d.mu.Unlock()
	}
	q := &harbingerQueue{s: s, name: spec.Name, own: d.fresh}
	if _, err := s.c.DeclareQueue(ctx, spec.Name, cfg); err != nil {
		q.Teardown(ctx)
		return nil, fmt.Errorf("bench: harbinger declare %s: %w", spec.Name, err)
	}
	if _, err := s.c.PurgeQueue(ctx, spec.Name); err != nil {
		q.Teardown(ctx)
		return nil, fmt.Errorf("bench: harbinger purge %s: %w", spec.Name, err)
	}
	return q, nil
}

type harbingerQueue struct {
	s    *harbingerServer
	name string
	own  bool // the broker is this queue's alone
}

// Teardown implements Queue: stops the queue's own broker, or purges the
// queue on a shared one.
func (q *harbingerQueue) Teardown(ctx context.Context) error {
	if q.own {
		q.s.stop()
		return nil
	}
	_, err := q.s.c.PurgeQueue(ctx, q.name)
	return err
}

// PredictorStats implements predictorStats from the in-process broker's
// own figures for the queue: MAE over the acks of routed predictions, tier
// accuracy over every ack with a prediction. Arms whose policy makes no
// predictions have neither.
func (q *harbingerQueue) PredictorStats() (maeMS, tierAccuracy float64) {
	in, err := q.s.b.Queue(q.name)
	if err != nil {
		return math.NaN(), math.NaN()
	}
	return summaryStats(in.Predictor)
}

// summaryStats reads MAE (wall ms) and tier accuracy from a predictor
// summary, NaN where it has no samples.
func summaryStats(s predict.Summary) (maeMS, tierAccuracy float64) {
	maeMS, tierAccuracy = math.NaN(), math.NaN()
	if s.MAESamples > 0 {
		maeMS = float64(s.MAE) / float64(time.Millisecond)
	}
	if s.TierSamples > 0 {
		tierAccuracy = s.TierAccuracy
	}
	return maeMS, tierAccuracy
}

// NewPublisher implements Queue: a client Producer, which publishes over
// one gRPC stream.
func (q *harbingerQueue) NewPublisher(context.Context) (Publisher, error) {
	return &harbingerPublisher{p: q.s.c.NewProducer(client.ProducerConfig{}), queue: q.name}, nil
}

type harbingerPublisher struct {
	p     *client.Producer
	queue string
}

func (p *harbingerPublisher) Publish(ctx context.Context, m Message) error {
	_, err := p.p.Publish(ctx, &client.Message{Queue: p.queue, Producer: m.Key.Producer, JobType: m.Key.JobType,
		SizeHint: m.Key.Size, Payload: m.Body})
	return err
}

func (p *harbingerPublisher) Close() error { return p.p.Close() }

// Work implements Queue: client.RunWorker with concurrency 1 and prefetch 1;
// the SDK times the handler and acks with the measured duration. ready fires
// once the broker counts this worker's subscription.
func (q *harbingerQueue) Work(ctx context.Context, worker int, ready func(), h Handler) error {
	errc := make(chan error, 1)
	go func() {
		errc <- q.s.c.RunWorker(ctx, client.WorkerConfig{Queue: q.name, Concurrency: 1, Prefetch: 1,
			Name: fmt.Sprintf("%s-w%d", q.name, worker)},
			func(ctx context.Context, d *client.Delivery) error { return h(ctx, d.Payload) })
	}()
	if ready != nil {
		// Workers start together; waiting for worker+1 subscriptions means
		// that once every worker is ready, all of them are subscribed.
		if err := q.waitConsumers(ctx, worker+1, errc); err != nil {
			return err
		}
		ready()
	}
	err := <-errc
	if ctx.Err() != nil {
		return nil
	}
	if err == nil {
		err = errors.New("worker stopped")
	}
	return err
}

func (q *harbingerQueue) waitConsumers(ctx context.Context, n int, errc chan error) error {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := q.s.c.Queue(ctx, q.name)
		if err == nil && int(info.Consumers) >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return nil // the run goes on; the first messages may wait a little
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			errc <- err
			return nil
		case <-t.C:
		}
	}
}
