package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisAddr is the Redis the harness dials when HARBINGER_REDIS_ADDR
// is unset.
const DefaultRedisAddr = "127.0.0.1:6379"

// RedisAddr returns HARBINGER_REDIS_ADDR or DefaultRedisAddr.
func RedisAddr() string {
	if a := os.Getenv("HARBINGER_REDIS_ADDR"); a != "" {
		return a
	}
	return DefaultRedisAddr
}

// redisPoll bounds each blocking BLMOVE so a worker notices its context
// ending; a message arriving meanwhile is delivered at once. One second is
// the shortest block the client accepts.
const redisPoll = time.Second

// redisKeyPrefix namespaces every key the harness writes, so setup and
// teardown delete only the harness's own keys and never flush the database.
const redisKeyPrefix = "harbinger-bench:"

// RedisDriver runs the redis-fifo arm: the reliable list queue pattern.
// Producers LPUSH onto the queue; each worker BLMOVEs the oldest message
// into its own processing list, runs it and LREMs it from there (the ack).
// A worker that starts pushes anything left in its processing list back
// onto the queue first, so a crashed worker's message is redelivered.
//
// The driver either dials a Redis the user runs (DialRedis) or, for the
// durable arm, starts a fresh redis-server of its own for every queue
// (StartRedisAOF) with every write appended to its log and fsynced before
// the reply.
type RedisDriver struct {
	rdb  *redis.Client // the dialled Redis; nil for a driver that starts its own
	name string
	pid  int // the dialled server's process, when it runs on this machine

	aof *RedisAOFOptions
}

// RedisAOFOptions configures StartRedisAOF.
type RedisAOFOptions struct {
	// Name is what Broker reports; default RedisAOF.
	Name string
	// Binary is the redis-server executable; default "redis-server" on PATH.
	Binary string
	// DataDir is where each server gets its fresh directory; default
	// os.TempDir(). It must be on the disk under test.
	DataDir string
}

// DialRedis connects to the Redis at addr and checks it answers.
func DialRedis(ctx context.Context, addr string) (*RedisDriver, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("bench: redis: %w", err)
	}
	d := &RedisDriver{rdb: rdb, name: Redis}
	if info, err := rdb.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
				if n, err := strconv.Atoi(v); err == nil && IsProcess(n, "redis-server") {
					d.pid = n
				}
			}
		}
	}
	return d, nil
}

// StartRedisAOF returns a driver whose every queue runs on a redis-server
// it starts for that queue on a free loopback port, in a fresh directory,
// with appendonly yes and appendfsync always (each write is fsynced before
// the reply; writes of one event-loop pass share an fsync) and no RDB
// snapshots.
func StartRedisAOF(ctx context.Context, o RedisAOFOptions) (*RedisDriver, error) {
	if o.Name == "" {
		o.Name = RedisAOF
	}
	if o.Binary == "" {
		bin, err := exec.LookPath("redis-server")
		if err != nil {
			return nil, fmt.Errorf("bench: redis-server not found on PATH (install Redis, or leave the %s arm out with --arms): %w", o.Name, err)
		}
		o.Binary = bin
	}
	return &RedisDriver{name: o.Name, aof: &o}, nil
}

// Broker implements Driver.
func (d *RedisDriver) Broker() string { return d.name }

// Version implements Driver from INFO server.
func (d *RedisDriver) Version(ctx context.Context) string {
	if d.aof != nil {
		// "Redis server v=7.0.15 sha=... malloc=..." -> "redis-server 7.0.15"
		out, err := exec.CommandContext(ctx, d.aof.Binary, "--version").Output()
		v := "redis-server (version unknown)"
		if err == nil {
			for _, f := range strings.Fields(string(out)) {
				if n, ok := strings.CutPrefix(f, "v="); ok {
					v = "redis-server " + n
				}
			}
		}
		return v + " (its own process per run, appendonly yes, appendfsync always, no RDB snapshots, data on " + FSType(d.aofDir()) + ")"
	}
	info, err := d.rdb.Info(ctx, "server").Result()
	if err != nil {
		return "redis (version unknown: " + err.Error() + ")"
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return "redis " + v
		}
	}
	return "redis (version unknown)"
}

func (d *RedisDriver) aofDir() string {
	if d.aof.DataDir != "" {
		return d.aof.DataDir
	}
	return os.TempDir()
}

// Close implements Driver.
func (d *RedisDriver) Close() error {
	if d.rdb == nil {
		return nil
	}
	return d.rdb.Close()
}

// Setup implements Driver: deletes any keys of the queue's name, or starts
// the queue's own server.
func (d *RedisDriver) Setup(ctx context.Context, spec QueueSpec) (Queue, error) {
	if spec.Policy != PolicyFIFO {
		return nil, fmt.Errorf("%w: redis %s", ErrPolicy, spec.Policy)
	}
	q := &RedisQueue{rdb: d.rdb, pid: d.pid, prefix: redisKeyPrefix + spec.Name + ":"}
	if d.aof != nil {
		if err := d.startAOF(ctx, q); err != nil {
			return nil, err
		}
		return q, nil // a fresh server holds nothing
	}
	if err := q.Teardown(ctx); err != nil {
		return nil, fmt.Errorf("bench: redis setup: %w", err)
	}
	return q, nil
}

// startAOF starts q's own redis-server. A port another process took
// between FreePort and the server's bind is tried again, a few times.
func (d *RedisDriver) startAOF(ctx context.Context, q *RedisQueue) error {
	dir, err := os.MkdirTemp(d.aof.DataDir, "harbinger-bench-redis-")
	if err != nil {
		return err
	}
	var lastErr error
	for range 3 {
		port, err := FreePort()
		if err != nil {
			os.RemoveAll(dir)
			return err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
		args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir, "--appendonly", "yes",
			"--appendfsync", "always", "--save", "", "--daemonize", "no", "--loglevel", "warning"}
		probe := func(ctx context.Context) (string, error) { return addr, rdb.Ping(ctx).Err() }
		p, err := StartProcess(ctx, d.name, d.aof.Binary, args, nil, probe)
		if err != nil {
			rdb.Close()
			lastErr = err
			continue
		}
		q.rdb, q.proc, q.pid, q.dir = rdb, p, p.PID(), dir
		return nil
	}
	os.RemoveAll(dir)
	return lastErr
}

// RedisQueue is one run's reliable list queue.
type RedisQueue struct {
	rdb    *redis.Client
	prefix string
	pid    int
	// A queue on its own server: the server and its directory.
	proc *BrokerProcess
	dir  string
}

// BrokerPID implements brokerPID.
func (q *RedisQueue) BrokerPID() int { return q.pid }

func (q *RedisQueue) queueKey() string           { return q.prefix + "queue" }
func (q *RedisQueue) processingKey(w int) string { return fmt.Sprintf("%sprocessing:%d", q.prefix, w) }

// Teardown implements Queue: deletes the queue and every processing list,
// or stops the queue's own server and removes its directory.
func (q *RedisQueue) Teardown(ctx context.Context) error {
	if q.proc != nil {
		q.rdb.Close()
		err := q.proc.Stop()
		os.RemoveAll(q.dir)
		return err
	}
	var keys []string
	iter := q.rdb.Scan(ctx, 0, q.prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	return q.rdb.Del(ctx, keys...).Err()
}

// Len is the number of messages waiting on the queue.
func (q *RedisQueue) Len(ctx context.Context) (int64, error) {
	return q.rdb.LLen(ctx, q.queueKey()).Result()
}

// Processing is the number of messages in worker w's processing list.
func (q *RedisQueue) Processing(ctx context.Context, w int) (int64, error) {
	return q.rdb.LLen(ctx, q.processingKey(w)).Result()
}

// Recover pushes worker w's processing list back onto the consuming end of
// the queue, oldest message served first, and returns how many it moved.
func (q *RedisQueue) Recover(ctx context.Context, w int) (int, error) {
	n := 0
	for {
		// The processing list holds the newest message at its left; moving
		// newest first to the queue's right leaves the oldest rightmost,
		// where BLMOVE takes from.
		err := q.rdb.LMove(ctx, q.processingKey(w), q.queueKey(), "LEFT", "RIGHT").Err()
		if errors.Is(err, redis.Nil) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

// NewPublisher implements Queue. The client's pool is shared; each LPUSH is
// one round trip, as an ordinary producer does.
func (q *RedisQueue) NewPublisher(context.Context) (Publisher, error) {
	return redisPublisher{q}, nil
}

type redisPublisher struct{ q *RedisQueue }

func (p redisPublisher) Publish(ctx context.Context, m Message) error {
	return p.q.rdb.LPush(ctx, p.q.queueKey(), m.Body).Err()
}

func (redisPublisher) Close() error { return nil }

// Work implements Queue: recover this worker's processing list, then
// BLMOVE one message at a time (prefetch 1), run it, LREM it.
func (q *RedisQueue) Work(ctx context.Context, worker int, ready func(), h Handler) error {
	if _, err := q.Recover(ctx, worker); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("bench: redis recover: %w", err)
	}
	if ready != nil {
		ready()
	}
	return q.serve(ctx, q.rdb, q.processingKey(worker), h)
}

// serve runs one handler slot with processing list pk on rdb: BLMOVE one
// message, run it, LREM it, until ctx ends.
func (q *RedisQueue) serve(ctx context.Context, rdb *redis.Client, pk string, h Handler) error {
	for ctx.Err() == nil {
		body, err := rdb.BLMove(ctx, q.queueKey(), pk, "RIGHT", "LEFT", redisPoll).Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("bench: redis blmove: %w", err)
		}
		herr := h(ctx, body)
		if ctx.Err() != nil {
			return nil // crashed mid-handler: the message stays in the processing list
		}
		if herr != nil {
			// The reliable queue's retry: back onto the queue's consuming end.
			if err := rdb.LMove(ctx, pk, q.queueKey(), "LEFT", "RIGHT").Err(); err != nil {
				return fmt.Errorf("bench: redis requeue: %w", err)
			}
			continue
		}
		if err := rdb.LRem(ctx, pk, 1, body).Err(); err != nil {
			return fmt.Errorf("bench: redis lrem: %w", err)
		}
	}
	return nil
}

// slotKey is the processing list of slot s of worker w.
func (q *RedisQueue) slotKey(w, s int) string {
	return fmt.Sprintf("%sprocessing:%d:%d", q.prefix, w, s)
}

// own is a client of its own on q's server, with pool connections for n
// callers at once.
func (q *RedisQueue) own(n int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: q.rdb.Options().Addr, PoolSize: n})
}

// WorkSlots implements slotQueue: a client of its own and slots handler
// goroutines, each the reliable queue's consumer with a processing list
// of its own (one BLMOVE per job), recovering its list first.
func (q *RedisQueue) WorkSlots(ctx context.Context, worker, slots int, ready func(), h Handler) error {
	rdb := q.own(slots)
	defer rdb.Close()
	for s := range slots {
		pk := q.slotKey(worker, s)
		for {
			err := rdb.LMove(ctx, pk, q.queueKey(), "LEFT", "RIGHT").Err()
			if errors.Is(err, redis.Nil) {
				break
			}
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("bench: redis recover: %w", err)
			}
		}
	}
	if ready != nil {
		ready()
	}
	errc := make(chan error, slots)
	var wg sync.WaitGroup
	for s := range slots {
		wg.Go(func() {
			if err := q.serve(ctx, rdb, q.slotKey(worker, s), h); err != nil {
				errc <- err
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// NewWindowPublisher implements windowQueue: a client of its own, and up
// to window publishes unconfirmed, sent as one pipeline of LPUSHes of
// whatever has queued while the last pipeline's replies were awaited.
func (q *RedisQueue) NewWindowPublisher(_ context.Context, window int) (Publisher, error) {
	p := &redisWindowPublisher{q: q, rdb: q.own(1), places: make(chan struct{}, window), in: make(chan []byte, window),
		done: make(chan struct{}), max: window}
	go p.run()
	return p, nil
}

type redisWindowPublisher struct {
	q      *RedisQueue
	rdb    *redis.Client
	places chan struct{} // a token per publish not yet confirmed
	in     chan []byte
	done   chan struct{}
	max    int
	mu     sync.Mutex
	err    error
}

func (p *redisWindowPublisher) firstErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *redisWindowPublisher) Publish(ctx context.Context, m Message) error {
	if err := p.firstErr(); err != nil {
		return err
	}
	select {
	case p.places <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.in <- m.Body
	return nil
}

// run sends pipelines until Close.
func (p *redisWindowPublisher) run() {
	defer close(p.done)
	ctx := context.Background()
	bodies := make([][]byte, 0, p.max)
	for body := range p.in {
		bodies = append(bodies[:0], body)
	more:
		for len(bodies) < p.max {
			select {
			case b, ok := <-p.in:
				if !ok {
					break more
				}
				bodies = append(bodies, b)
			default:
				break more
			}
		}
		_, err := p.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, b := range bodies {
				pipe.LPush(ctx, p.q.queueKey(), b)
			}
			return nil
		})
		if err != nil {
			p.mu.Lock()
			if p.err == nil {
				p.err = fmt.Errorf("bench: redis pipeline: %w", err)
			}
			p.mu.Unlock()
		}
		for range bodies {
			<-p.places
		}
	}
}

func (p *redisWindowPublisher) Close() error {
	close(p.in)
	<-p.done
	p.rdb.Close()
	return p.firstErr()
}
