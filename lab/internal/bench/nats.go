package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSServerVersion is the nats-server the durable comparison builds when
// none is given: the Debian package (2.9) lacks `sync_interval: always`.
const NATSServerVersion = "v2.15.2"

// natsFetchWait bounds each one-message fetch so a worker notices its
// context ending; a message arriving meanwhile is delivered at once.
const natsFetchWait = time.Second

// NATSDriver runs the nats-jetstream arm: for every queue, a fresh
// nats-server of its own (file storage, `sync_interval: always`, so each
// write is fsynced before it is acknowledged) with one stream of
// work-queue retention and one durable pull consumer with explicit acks.
// Producers publish with js.Publish, which waits for the stream's ack;
// each worker fetches one message at a time (its prefetch 1), runs it and
// acks it.
type NATSDriver struct {
	bin     string
	dataDir string
	memory  bool
}

// NATSOptions configures NewNATS.
type NATSOptions struct {
	// Binary is a nats-server of version 2.10 or later; default: see
	// FindNATSServer.
	Binary string
	// DataDir is where each server gets its fresh store directory; default
	// os.TempDir(). It must be on the disk under test.
	DataDir string
	// Memory makes every stream a memory-storage stream, with nothing
	// on disk (the NATSMemory arms); the server keeps its defaults.
	Memory bool
}

// NewNATS returns a driver for the nats-jetstream arm, or with Memory for
// the nats-jetstream-memory arm.
func NewNATS(o NATSOptions) *NATSDriver {
	return &NATSDriver{bin: o.Binary, dataDir: o.DataDir, memory: o.Memory}
}

// FindNATSServer returns a nats-server that supports `sync_interval:
// always`: $HARBINGER_NATS_SERVER, else NATSServerVersion in the user's
// cache directory, else one on PATH of version 2.10 or later, else it
// builds NATSServerVersion into the cache with `go install` (a minute or
// so, once) and says so on progress.
func FindNATSServer(ctx context.Context, progress io.Writer) (string, error) {
	if bin, ok := LocateNATSServer(ctx); ok {
		return bin, nil
	}
	dir := natsCacheDir()
	bin := filepath.Join(dir, "nats-server")
	if _, err := exec.LookPath("go"); err != nil {
		return "", fmt.Errorf("bench: no nats-server of version 2.10 or later (set HARBINGER_NATS_SERVER, or leave the %s arm out with --arms), and no Go toolchain to build %s", NATS, NATSServerVersion)
	}
	progressf(progress, "bench: building nats-server %s into %s (once)", NATSServerVersion, dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "install", "github.com/nats-io/nats-server/v2@"+NATSServerVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
	cmd.Dir = dir // outside any module, so no go.mod decides anything
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("bench: building nats-server %s: %v: %s", NATSServerVersion, err, out)
	}
	return bin, nil
}

// LocateNATSServer is FindNATSServer without the build: it reports
// whether a usable nats-server is already there.
func LocateNATSServer(ctx context.Context) (string, bool) {
	if p := os.Getenv("HARBINGER_NATS_SERVER"); p != "" {
		return p, true
	}
	bin := filepath.Join(natsCacheDir(), "nats-server")
	if _, err := os.Stat(bin); err == nil {
		return bin, true
	}
	if p, err := exec.LookPath("nats-server"); err == nil && natsSyncAlways(ctx, p) {
		return p, true
	}
	return "", false
}

// natsCacheDir is where FindNATSServer builds NATSServerVersion.
func natsCacheDir() string {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	return filepath.Join(cache, "harbinger", "bench", "nats-server-"+NATSServerVersion)
}

// natsSyncAlways reports whether the nats-server at bin is 2.10 or later.
func natsSyncAlways(ctx context.Context, bin string) bool {
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return false
	}
	m := regexp.MustCompile(`v(\d+)\.(\d+)\.`).FindSubmatch(out)
	if m == nil {
		return false
	}
	major, _ := strconv.Atoi(string(m[1]))
	minor, _ := strconv.Atoi(string(m[2]))
	return major > 2 || major == 2 && minor >= 10
}

// Broker implements Driver.
func (d *NATSDriver) Broker() string {
	if d.memory {
		return NATSMemory
	}
	return NATS
}

// Version implements Driver.
func (d *NATSDriver) Version(ctx context.Context) string {
	v := "nats-server (version unknown)"
	if out, err := exec.CommandContext(ctx, d.bin, "--version").Output(); err == nil {
		v = strings.TrimSpace(string(out))
	}
	dir := d.dataDir
	if dir == "" {
		dir = os.TempDir()
	}
	if d.memory {
		return v + " (its own process per run, JetStream memory storage; nats.go " + nats.Version + ")"
	}
	return v + " (its own process per run, JetStream file storage, sync_interval: always, data on " + FSType(dir) + "; nats.go " + nats.Version + ")"
}

// Close implements Driver.
func (d *NATSDriver) Close() error { return nil }

// natsListening is how nats-server announces its client port.
var natsListening = regexp.MustCompile(`Listening for client connections on (\S+)`)

// Setup implements Driver: a fresh server, stream and consumer.
func (d *NATSDriver) Setup(ctx context.Context, spec QueueSpec) (Queue, error) {
	if spec.Policy != PolicyFIFO {
		return nil, fmt.Errorf("%w: nats %s", ErrPolicy, spec.Policy)
	}
	dir, err := os.MkdirTemp(d.dataDir, "harbinger-bench-nats-")
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nats.conf")
	store := filepath.Join(dir, "store")
	sync := "  sync_interval: always\n"
	if d.memory {
		sync = "" // nothing of a memory stream is written
	}
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("listen: \"127.0.0.1:-1\"\njetstream {\n  store_dir: %q\n%s}\n", store, sync)), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ready := func(line string) (string, bool) {
		m := natsListening.FindStringSubmatch(line)
		if m == nil {
			return "", false
		}
		return m[1], true
	}
	p, err := StartProcess(ctx, NATS, d.bin, []string{"-c", conf}, ready, nil)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	q := &natsQueue{proc: p, dir: dir, subject: spec.Name, addr: "nats://" + p.Addr()}
	fail := func(err error) (Queue, error) {
		q.Teardown(ctx)
		return nil, fmt.Errorf("bench: nats: %w", err)
	}
	if q.nc, err = nats.Connect("nats://"+p.Addr(), nats.MaxReconnects(0)); err != nil {
		return fail(err)
	}
	if q.js, err = jetstream.New(q.nc); err != nil {
		return fail(err)
	}
	// Stream names may not hold dots; the harness's queue names have none.
	storage := jetstream.FileStorage
	if d.memory {
		storage = jetstream.MemoryStorage
	}
	s, err := q.js.CreateStream(ctx, jetstream.StreamConfig{Name: spec.Name, Subjects: []string{spec.Name},
		Retention: jetstream.WorkQueuePolicy, Storage: storage})
	if err != nil {
		return fail(err)
	}
	if q.cons, err = s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "workers",
		AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		return fail(err)
	}
	return q, nil
}

type natsQueue struct {
	proc    *BrokerProcess
	dir     string
	subject string
	addr    string // the server's URL, for connections of their own
	nc      *nats.Conn
	js      jetstream.JetStream
	cons    jetstream.Consumer
}

// BrokerPID implements brokerPID.
func (q *natsQueue) BrokerPID() int { return q.proc.PID() }

// Teardown implements Queue: stops the queue's server and removes its store.
func (q *natsQueue) Teardown(context.Context) error {
	if q.nc != nil {
		q.nc.Close()
	}
	err := q.proc.Stop()
	os.RemoveAll(q.dir)
	return err
}

// NewPublisher implements Queue. Publishers share the queue's connection,
// as the RabbitMQ arms share theirs.
func (q *natsQueue) NewPublisher(context.Context) (Publisher, error) { return natsPublisher{q}, nil }

type natsPublisher struct{ q *natsQueue }

// Publish waits for the stream's ack: the message is stored (and, with
// sync_interval: always, fsynced).
func (p natsPublisher) Publish(ctx context.Context, m Message) error {
	_, err := p.q.js.Publish(ctx, p.q.subject, m.Body)
	return err
}

func (natsPublisher) Close() error { return nil }

// Work implements Queue: fetch one message, run it, ack it.
func (q *natsQueue) Work(ctx context.Context, _ int, ready func(), h Handler) error {
	if ready != nil {
		ready()
	}
	for ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, natsFetchWait)
		batch, err := q.cons.Fetch(1, jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("bench: nats fetch: %w", err)
		}
		for msg := range batch.Messages() {
			herr := h(ctx, msg.Data())
			if ctx.Err() != nil {
				cancel()
				return nil // crashed mid-handler: no ack; redelivered after AckWait
			}
			if herr != nil {
				_ = msg.Nak()
				continue
			}
			if err := msg.Ack(); err != nil {
				cancel()
				return fmt.Errorf("bench: nats ack: %w", err)
			}
		}
		cancel()
		if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) &&
			!errors.Is(err, context.Canceled) && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			return fmt.Errorf("bench: nats fetch: %w", err)
		}
	}
	return nil
}

// natsStall bounds how long a windowed publisher's PublishAsync waits for
// room among its max pending; the publisher keeps its own window within
// that bound, so it never waits.
const natsStall = 10 * time.Second

// NewWindowPublisher implements windowQueue: a connection of its own and
// js.PublishAsync with max pending window (NATS's way of publishing
// without a round trip each); a future's answer frees its place.
func (q *natsQueue) NewWindowPublisher(ctx context.Context, window int) (Publisher, error) {
	nc, err := nats.Connect(q.addr, nats.MaxReconnects(0))
	if err != nil {
		return nil, fmt.Errorf("bench: nats: %w", err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(window))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bench: nats: %w", err)
	}
	p := &natsWindowPublisher{nc: nc, js: js, subject: q.subject, w: newWindow[jetstream.PubAckFuture](window)}
	go p.w.confirm(func(f jetstream.PubAckFuture) error {
		select {
		case <-f.Ok():
			return nil
		case err := <-f.Err():
			return err
		}
	})
	return p, nil
}

type natsWindowPublisher struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	subject string
	w       *window[jetstream.PubAckFuture]
}

func (p *natsWindowPublisher) Publish(ctx context.Context, m Message) error {
	if err := p.w.take(ctx); err != nil {
		return err
	}
	f, err := p.js.PublishAsync(p.subject, m.Body, jetstream.WithStallWait(natsStall))
	if err != nil {
		p.w.give()
		return err
	}
	p.w.pending <- f
	return nil
}

func (p *natsWindowPublisher) Close() error {
	err := p.w.close()
	p.nc.Close()
	return err
}

// WorkSlots implements slotQueue: a connection of its own and slots
// handlers, fed by fetches from the shared pull consumer of as many
// messages as there are free slots (up to slots, so batches of 16 at
// prefetch 16), each message acked by its handler.
func (q *natsQueue) WorkSlots(ctx context.Context, _ int, slots int, ready func(), h Handler) error {
	nc, err := nats.Connect(q.addr, nats.MaxReconnects(0))
	if err != nil {
		return fmt.Errorf("bench: nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("bench: nats: %w", err)
	}
	cons, err := js.Consumer(ctx, q.subject, "workers")
	if err != nil {
		return fmt.Errorf("bench: nats consumer: %w", err)
	}
	if ready != nil {
		ready()
	}
	busy := make(chan struct{}, slots) // a token per slot at work
	msgs := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(msgs)
	for range slots {
		wg.Go(func() {
			for msg := range msgs {
				herr := h(ctx, msg.Data())
				if ctx.Err() == nil { // crashed mid-handler: no ack; redelivered after AckWait
					if herr != nil {
						_ = msg.Nak()
					} else {
						_ = msg.Ack()
					}
				}
				<-busy
			}
		})
	}
	for ctx.Err() == nil {
		// One free slot, waited for, and every other free one.
		select {
		case busy <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		n := 1
		for n < slots {
			select {
			case busy <- struct{}{}:
				n++
				continue
			default:
			}
			break
		}
		fctx, cancel := context.WithTimeout(ctx, natsFetchWait)
		batch, err := cons.Fetch(n, jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("bench: nats fetch: %w", err)
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			msgs <- msg
		}
		cancel()
		for ; got < n; got++ {
			<-busy // slots the fetch did not fill
		}
		if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) &&
			!errors.Is(err, context.Canceled) && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			return fmt.Errorf("bench: nats fetch: %w", err)
		}
	}
	return nil
}
