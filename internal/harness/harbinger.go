package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/predict"
	"github.com/harbinger-mq/harbinger/internal/server"
)

// HarbingerMode says how a HarbingerDriver runs its brokers.
type HarbingerMode int

const (
	// InProcess serves a broker from inside the harness process, sharing
	// its CPU and garbage collector (the demo, and a labelled shortcut of
	// the flow comparison).
	InProcess HarbingerMode = iota
	// ServeMemory starts `harbinger serve --memory` as its own process.
	ServeMemory
	// ServeDurable starts `harbinger serve --fsync always` as its own
	// process, on a fresh data directory.
	ServeDurable
	// BareServer starts the bare gRPC queue (BareQueue) as its own process
	// with `harbinger-lab bench bare-queue-server`.
	BareServer
)

// HarbingerDriver runs the arms that speak Harbinger's gRPC API, through
// the public client: a broker in the harness process (served over gRPC on
// a loopback port, the same path a remote producer and worker take, minus
// the network), `harbinger serve` as its own process, or the bare queue.
type HarbingerDriver struct {
	o HarbingerOptions
	// fresh starts a new broker for every queue, so no run inherits a
	// predictor, queue, log or goroutine from the one before.
	fresh bool
	log   *slog.Logger

	mu     sync.Mutex
	shared *harbingerServer
}

// HarbingerOptions configures NewHarbinger.
type HarbingerOptions struct {
	// Shared serves every queue from one in-process broker (the demo runs
	// two queues side by side on one); by default each Setup starts a
	// fresh broker. Only for InProcess.
	Shared bool
	// Mode is how the brokers run; the zero value is InProcess.
	Mode HarbingerMode
	// Name is what Broker reports: the key of the arms the driver serves.
	// Default: Harbinger.
	Name string
	// Binary is the harbinger executable the other modes start (see
	// HarbingerBinary).
	Binary string
	// DataDir is where ServeDurable brokers get their fresh data
	// directories; default os.TempDir(). It must be on the disk under
	// test: on tmpfs an fsync costs nothing.
	DataDir string
	// ServeArgs are extra flags for harbinger serve (e.g. --max-depth).
	ServeArgs []string
}

// NewHarbinger returns a driver for Harbinger-API brokers.
func NewHarbinger(o HarbingerOptions) *HarbingerDriver {
	if o.Name == "" {
		o.Name = Harbinger
	}
	return &HarbingerDriver{o: o, fresh: !o.Shared || o.Mode != InProcess, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// harbingerServer is one broker with a client connected to it: in-process
// (b and gs set) or a process of its own (proc set).
type harbingerServer struct {
	b        *broker.Broker
	gs       *grpc.Server
	proc     *BrokerProcess
	dataDir  string
	httpAddr string // a durable serve's /metrics, for its log's figures
	addr     string // its gRPC address, for clients with connections of their own
	c        *client.Client
	log      *slog.Logger
}

func (d *HarbingerDriver) start(ctx context.Context) (*harbingerServer, error) {
	if d.o.Mode != InProcess {
		return d.StartProcess(ctx)
	}
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
	s := &harbingerServer{b: b, gs: gs, addr: lis.Addr().String(), log: d.log}
	go func() { _ = gs.Serve(lis) }()
	c, err := client.Dial(ctx, lis.Addr().String(), client.WithLogger(d.log))
	if err != nil {
		gs.Stop()
		return nil, err
	}
	s.c = c
	return s, nil
}

// startProcess starts a broker process of the driver's mode and connects.
func (d *HarbingerDriver) StartProcess(ctx context.Context) (*harbingerServer, error) {
	if d.o.Binary == "" {
		return nil, errors.New("harness: no harbinger binary to start (HarbingerOptions.Binary)")
	}
	s := &harbingerServer{log: d.log}
	var args []string
	var ready func(string) (string, bool)
	switch d.o.Mode {
	case ServeMemory, ServeDurable:
		args = []string{"serve", "--grpc-addr", "127.0.0.1:0", "--log-format", "json", "--shutdown-timeout", "5s"}
		if d.o.Mode == ServeMemory {
			args = append(args, "--http-addr", "off", "--memory")
		} else {
			dir, err := os.MkdirTemp(d.o.DataDir, "harbinger-bench-data-")
			if err != nil {
				return nil, err
			}
			s.dataDir = dir
			// Its /metrics tell how the log spent the timed window.
			args = append(args, "--http-addr", "127.0.0.1:0", "--data-dir", dir, "--fsync", "always")
		}
		args = append(args, d.o.ServeArgs...)
		ready = func(line string) (string, bool) {
			addr, http, ok := serveReady(line)
			if ok && http != "off" {
				s.httpAddr = http // read after startProcess has returned addr
			}
			return addr, ok
		}
	case BareServer:
		args = []string{"bench", BareQueueCommand, "--addr", "127.0.0.1:0"}
		ready = func(line string) (string, bool) { return strings.CutPrefix(line, bareListening) }
	default:
		return nil, fmt.Errorf("harness: unknown harbinger mode %d", d.o.Mode)
	}
	p, err := StartProcess(ctx, d.o.Name, d.o.Binary, args, ready, nil)
	if err != nil {
		s.removeData()
		return nil, err
	}
	s.proc, s.addr = p, p.addr
	c, err := client.Dial(ctx, p.addr, client.WithLogger(d.log))
	if err != nil {
		s.stop()
		return nil, err
	}
	s.c = c
	return s, nil
}

// serveReady finds the gRPC and HTTP addresses in harbinger serve's JSON
// log line "harbinger: serving".
func serveReady(line string) (grpcAddr, httpAddr string, ok bool) {
	var rec struct {
		Msg  string `json:"msg"`
		GRPC string `json:"grpc"`
		HTTP string `json:"http"`
	}
	if json.Unmarshal([]byte(line), &rec) != nil || rec.Msg != "harbinger: serving" || rec.GRPC == "" {
		return "", "", false
	}
	return rec.GRPC, rec.HTTP, true
}

// BareQueueCommand is the hidden `harbinger-lab bench` subcommand that serves a
// BareQueue; it prints bareListening and the address once it listens.
const BareQueueCommand = "bare-queue-server"

// bareListening prefixes the line the bare queue server prints when ready.
const bareListening = "bare-queue-server: listening on "

// BareQueueReady is the line the bare queue server prints once it listens
// on addr.
func BareQueueReady(addr string) string { return bareListening + addr }

// logger is the quiet logger the driver's clients log to.
func (s *harbingerServer) logger() *slog.Logger { return s.log }

func (s *harbingerServer) stop() {
	if s.c != nil {
		s.c.Close()
	}
	if s.proc != nil {
		_ = s.proc.Stop()
		s.removeData()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.b.Shutdown(ctx)
	s.gs.Stop()
}

func (s *harbingerServer) removeData() {
	if s.dataDir != "" {
		_ = os.RemoveAll(s.dataDir)
	}
}

// pid is the broker process's id, 0 for an in-process broker.
func (s *harbingerServer) pid() int {
	if s.proc == nil {
		return 0
	}
	return s.proc.PID()
}

// Broker implements Driver.
func (d *HarbingerDriver) Broker() string { return d.o.Name }

// Version implements Driver: the module version this binary was built from.
func (d *HarbingerDriver) Version(context.Context) string { return d.version(false) }

// UnaryVersion is Version for an arm that publishes one client.Publish
// call per message on this driver's brokers (NewUnaryPublisher).
func (d *HarbingerDriver) UnaryVersion(context.Context) string { return d.version(true) }

func (d *HarbingerDriver) version(unary bool) string {
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
	how := map[HarbingerMode]string{
		InProcess:    "in-process broker, gRPC on loopback, in-memory store",
		ServeMemory:  "harbinger serve --memory, its own process",
		ServeDurable: "harbinger serve --fsync always, its own process, data on " + FSType(d.dataDir()) + "; its /metrics on loopback, read at each timed window's two ends",
		BareServer:   "bare gRPC queue server from this build, its own process",
	}[d.o.Mode]
	pub := "a Producer stream per producer"
	if unary {
		pub = "one client.Publish call per message"
	}
	if d.o.Mode == BareServer {
		return "bare-grpc (" + how + "; " + pub + ")"
	}
	return "harbinger " + v + " (" + how + "; " + pub + ")"
}

func (d *HarbingerDriver) dataDir() string {
	if d.o.DataDir != "" {
		return d.o.DataDir
	}
	return os.TempDir()
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
	case PolicyFair:
		cfg.Policy, cfg.GroupBy = "", "producer"
		cfg.Reserve, cfg.ReserveAbove = uint32(max(spec.Fair.Reserve, 0)), spec.Fair.ReserveAbove
	default:
		return nil, fmt.Errorf("%w: harbinger %s", ErrPolicy, spec.Policy)
	}
	var s *harbingerServer
	if d.fresh {
		var err error
		if s, err = d.start(ctx); err != nil {
			return nil, fmt.Errorf("harness: harbinger: %w", err)
		}
	} else {
		d.mu.Lock()
		if d.shared == nil {
			var err error
			if d.shared, err = d.start(ctx); err != nil {
				d.mu.Unlock()
				return nil, fmt.Errorf("harness: harbinger: %w", err)
			}
		}
		s = d.shared
		d.mu.Unlock()
	}
	q := &HarbingerQueue{s: s, name: spec.Name, own: d.fresh}
	if _, err := s.c.DeclareQueue(ctx, spec.Name, cfg); err != nil {
		q.Teardown(ctx)
		return nil, fmt.Errorf("harness: harbinger declare %s: %w", spec.Name, err)
	}
	if _, err := s.c.PurgeQueue(ctx, spec.Name); err != nil {
		q.Teardown(ctx)
		return nil, fmt.Errorf("harness: harbinger purge %s: %w", spec.Name, err)
	}
	return q, nil
}

type HarbingerQueue struct {
	s    *harbingerServer
	name string
	own  bool // the broker is this queue's alone
}

// BrokerPID implements brokerPID.
func (q *HarbingerQueue) BrokerPID() int { return q.s.pid() }

// LogSample implements logSampler: a durable serve's log counters, read
// from its /metrics.
func (q *HarbingerQueue) LogSample(ctx context.Context) (LogSample, bool) {
	if q.s.httpAddr == "" {
		return LogSample{}, false
	}
	return scrapeLog(ctx, "http://"+q.s.httpAddr+"/metrics")
}

// Teardown implements Queue: stops the queue's own broker, or purges the
// queue on a shared one.
func (q *HarbingerQueue) Teardown(ctx context.Context) error {
	if q.own {
		q.s.stop()
		return nil
	}
	_, err := q.s.c.PurgeQueue(ctx, q.name)
	return err
}

// PredictorStats implements predictorStats from the broker's own figures
// for the queue: MAE over the acks of routed predictions, tier accuracy
// over the same acks. An in-process broker is read directly; a serve
// process through Admin.ListKeys, whose per-key figures add up to the
// queue's (keysStats). Arms whose policy makes no predictions, and the
// bare queue, have neither.
func (q *HarbingerQueue) PredictorStats(ctx context.Context) (maeMS, tierAccuracy float64) {
	if q.s.b == nil {
		return q.keysStats(ctx)
	}
	in, err := q.s.b.Queue(q.name)
	if err != nil {
		return math.NaN(), math.NaN()
	}
	return SummaryStats(in.Predictor)
}

// keysStats is PredictorStats from the broker's ListKeys: every key's MAE
// and tier accuracy weighted by the predictions it scored, which is the
// queue's own figure while no key was evicted and ListKeys returns them
// all (at most server.MaxListLimit; a flow run has a few dozen). NaN
// where nothing was scored or the broker does not answer (the bare
// queue).
func (q *HarbingerQueue) keysStats(ctx context.Context) (maeMS, tierAccuracy float64) {
	maeMS, tierAccuracy = math.NaN(), math.NaN()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	keys, err := q.s.c.ListKeys(ctx, q.name, server.MaxListLimit)
	if err != nil {
		return maeMS, tierAccuracy
	}
	var n, absErr, hits float64
	for _, k := range keys {
		s := float64(k.Scored)
		n += s
		absErr += k.MaeMs * s
		hits += k.TierAccuracy * s
	}
	if n > 0 {
		maeMS, tierAccuracy = absErr/n, hits/n
	}
	return maeMS, tierAccuracy
}

// SummaryStats reads MAE (wall ms) and tier accuracy from a predictor
// summary, NaN where it has no samples.
func SummaryStats(s predict.Summary) (maeMS, tierAccuracy float64) {
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
// one gRPC stream; each Publish waits for the broker's answer (on a
// durable broker, for its record to be on disk).
func (q *HarbingerQueue) NewPublisher(context.Context) (Publisher, error) {
	return &harbingerPublisher{p: q.s.c.NewProducer(client.ProducerConfig{}), queue: q.name}, nil
}

// NewUnaryPublisher is a publisher that makes one client.Publish call per
// message, whatever the driver's own publishing.
func (q *HarbingerQueue) NewUnaryPublisher(context.Context) (Publisher, error) {
	return &unaryPublisher{c: q.s.c, queue: q.name}, nil
}

// unaryPublisher publishes each message with one client.Publish call: the
// call returns once the broker has stored the message (on a durable
// broker, once its record is fsynced).
type unaryPublisher struct {
	c     *client.Client
	queue string
}

func (p *unaryPublisher) Publish(ctx context.Context, m Message) error {
	_, err := p.c.Publish(ctx, &client.Message{Queue: p.queue, Producer: m.Key.Producer, JobType: m.Key.JobType,
		SizeHint: m.Key.Size, Payload: m.Body})
	return err
}

func (p *unaryPublisher) Close() error { return nil }

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

// NewWindowPublisher is a publisher on a connection of its own that keeps
// up to window publishes unanswered: a client Producer with MaxPending
// window, whose Publish queues the message and returns, waiting only
// while window messages await their answers (on a durable broker, the
// fsync that covers them). An error an answer brings is returned by a
// later Publish or by Close, which waits for every answer.
func (q *HarbingerQueue) NewWindowPublisher(ctx context.Context, window int) (Publisher, error) {
	c, err := client.Dial(ctx, q.s.addr, client.WithLogger(q.s.logger()))
	if err != nil {
		return nil, err
	}
	return &windowPublisher{c: c, p: c.NewProducer(client.ProducerConfig{MaxPending: window}), queue: q.name}, nil
}

// windowPublisher publishes through a Producer with a window.
type windowPublisher struct {
	c     *client.Client
	p     *client.Producer
	queue string
	mu    sync.Mutex
	err   error // the first refusal
}

func (p *windowPublisher) failed(id string, err error) {
	if err == nil {
		return
	}
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
}

func (p *windowPublisher) firstErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *windowPublisher) Publish(ctx context.Context, m Message) error {
	if err := p.firstErr(); err != nil {
		return err
	}
	return p.p.PublishAsync(&client.Message{Queue: p.queue, Producer: m.Key.Producer, JobType: m.Key.JobType,
		SizeHint: m.Key.Size, Payload: m.Body}, p.failed)
}

func (p *windowPublisher) Close() error {
	_ = p.p.Close()
	_ = p.c.Close()
	return p.firstErr()
}

// WorkSlots runs one worker on a connection of its own with slots
// handlers: client.RunWorker with Concurrency and Prefetch slots. ready
// fires as for Work.
func (q *HarbingerQueue) WorkSlots(ctx context.Context, worker, slots int, ready func(), h Handler) error {
	c, err := client.Dial(ctx, q.s.addr, client.WithLogger(q.s.logger()))
	if err != nil {
		return err
	}
	defer c.Close()
	return q.work(ctx, c, worker, slots, ready, h)
}

// Work implements Queue: client.RunWorker with concurrency 1 and prefetch 1;
// the SDK times the handler and acks with the measured duration. ready fires
// once the broker counts this worker's subscription.
func (q *HarbingerQueue) Work(ctx context.Context, worker int, ready func(), h Handler) error {
	return q.work(ctx, q.s.c, worker, 1, ready, h)
}

func (q *HarbingerQueue) work(ctx context.Context, c *client.Client, worker, slots int, ready func(), h Handler) error {
	errc := make(chan error, 1)
	go func() {
		errc <- c.RunWorker(ctx, client.WorkerConfig{Queue: q.name, Concurrency: slots, Prefetch: slots,
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

func (q *HarbingerQueue) waitConsumers(ctx context.Context, n int, errc chan error) error {
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

// Client is the client connected to the queue's broker.
func (q *HarbingerQueue) Client() *client.Client { return q.s.c }

// Name is the queue's name.
func (q *HarbingerQueue) Name() string { return q.name }

// DataDir is the data directory of a durable broker, or "".
func (q *HarbingerQueue) DataDir() string { return q.s.dataDir }
