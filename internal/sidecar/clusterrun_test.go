package sidecar

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/harbinger-mq/harbinger/rabbitmq"
)

// The cluster test's scaled-down workload: three kinds of job, a burst
// above the workers' capacity that builds a backlog of about a second, then
// a lull that drains it.
var clusterTypes = []struct {
	name  string
	took  time.Duration
	share float64
}{
	{"email", 10 * time.Millisecond, 0.7},
	{"thumbnail", 40 * time.Millisecond, 0.2},
	{"report", 200 * time.Millisecond, 0.1}, // the longest class: 57% of the work
}

const (
	clusterProducers = 3 // one per node, each with its node's sidecar
	clusterWorkers   = 6 // two per node
	clusterTiers     = 3
	// clusterLongBound is how much longer than under FIFO the longest
	// class may wait at most; see TestClusterFleet.
	clusterLongBound = 1.5
)

type clusterJob struct {
	typ     int
	arrival time.Duration
}

// clusterJobs returns the workload, deterministically: 4 s at 225 jobs/s
// (1.3 times what 6 workers complete at 35 ms of work per job), then 4 s at
// 75 jobs/s.
func clusterJobs() []clusterJob {
	rng := mrand.New(mrand.NewPCG(1, 15))
	var jobs []clusterJob
	at := time.Duration(0)
	for _, phase := range []struct {
		rate float64
		for_ time.Duration
	}{{225, 4 * time.Second}, {75, 4 * time.Second}} {
		end := at + phase.for_
		for at < end {
			u, typ := rng.Float64(), 0
			for typ < len(clusterTypes)-1 && u >= clusterTypes[typ].share {
				u -= clusterTypes[typ].share
				typ++
			}
			jobs = append(jobs, clusterJob{typ: typ, arrival: at})
			at += time.Duration(rng.ExpFloat64() / phase.rate * float64(time.Second))
		}
	}
	return jobs
}

// TestClusterFleet runs the workload on a three-node RabbitMQ cluster
// twice at once, on quorum queues: through one FIFO queue, and through the
// tier-queue layout with a `harbinger sidecar` process per node giving
// every producer and worker its tiers. Producers publish with confirms and
// workers consume from every node. Midway one RabbitMQ node is killed
// (SIGKILL), which both runs suffer alike, and then one sidecar, which is
// restarted later. At the end every confirmed message must have been
// handled, and the longest class's max wait through the sidecars must stay
// within clusterLongBound of its max wait under FIFO.
//
// Quorum queues, because they are what survives a node: RabbitMQ 3.10's
// quorum queues ignore priorities, so the package's priority-and-hold
// layout (classic queues only) cannot run on them; the tier-queue layout
// is what the rabbitmq package offers there, with its bound on long waits
// on the consumer side (weighted service, so the long tier always gets a
// share).
func TestClusterFleet(t *testing.T) {
	c := clusterForTest(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := buildHarbinger(t)
	id := randomID()
	exchange := "harbinger.cluster-test." + id
	urls := c.URLs()
	// Each sidecar is given every node, its own first, so that the one on
	// the node killed below moves to another.
	nodesFrom := func(i int) string { return strings.Join(append(slices.Clone(urls[i:]), urls[:i]...), ",") }
	sidecars := make([]*sidecarProc, len(urls))
	for i := range sidecars {
		sidecars[i] = startSidecarProc(t, bin, nodesFrom(i), exchange, "127.0.0.1:0")
	}
	for _, s := range sidecars {
		s.waitConnected(t, ctx)
	}

	jobs := clusterJobs()
	fifo := newClusterRun("fifo", jobs, urls)
	tiered := newClusterRun("sidecars", jobs, urls)
	tq := rabbitmq.TierQueues{Name: "jobs-" + id, Tiers: clusterTiers, Quorum: true}
	fifoQueue := "fifo-" + id
	if err := declareOn(urls[0], func(ch *amqp.Channel) error {
		if _, err := ch.QueueDeclare(fifoQueue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
			return err
		}
		return tq.Declare(ch)
	}); err != nil {
		t.Fatal(err)
	}
	remotes := make([]*rabbitmq.Remote, len(sidecars))
	for i, s := range sidecars {
		r, err := rabbitmq.DialSidecarOptions(ctx, s.addr, rabbitmq.RemoteOptions{Tiers: clusterTiers})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		remotes[i] = r
	}

	fifo.publish = func(ctx context.Context, ch *amqp.Channel, _ int, _ clusterJob, m amqp.Publishing) error {
		return ch.PublishWithContext(ctx, "", fifoQueue, false, false, m)
	}
	fifo.consume = func(ctx context.Context, ch *amqp.Channel, _ int, h rabbitmq.Handler) error {
		return rabbitmq.Consume(ctx, ch, fifoQueue, plain{}, rabbitmq.ConsumerOptions{Prefetch: 1}, h)
	}
	var tierPubs sync.Map // *amqp.Channel -> *rabbitmq.TierPublisher
	tiered.publish = func(ctx context.Context, ch *amqp.Channel, p int, j clusterJob, m amqp.Publishing) error {
		tp, ok := tierPubs.Load(ch)
		if !ok {
			tp, _ = tierPubs.LoadOrStore(ch, rabbitmq.NewTierPublisher(ch, remotes[p%len(remotes)], tq, rabbitmq.PublisherOptions{}))
		}
		k := rabbitmq.Key{Queue: tq.Name, Producer: fmt.Sprintf("p%d", p), JobType: clusterTypes[j.typ].name}
		return tp.(*rabbitmq.TierPublisher).Publish(ctx, k, m)
	}
	tiered.consume = func(ctx context.Context, ch *amqp.Channel, w int, h rabbitmq.Handler) error {
		return rabbitmq.ConsumeTiers(ctx, ch, tq, remotes[w%len(remotes)], rabbitmq.TierConsumerOptions{}, h)
	}

	// The kills: a RabbitMQ node once the sidecar run has 40% of its
	// messages confirmed; a sidecar at 60%, restarted at 80%.
	const deadNode, deadSidecar = 2, 1
	events := make(chan string, 8)
	go func() {
		for _, step := range []struct {
			at float64
			do func()
		}{
			{0.4, func() {
				if err := c.Kill(deadNode); err != nil {
					t.Error(err)
				}
				events <- "killed RabbitMQ node " + c.Nodes()[deadNode].Name
				// The sidecar that was on it shares through another.
				node, err := sidecars[deadNode].reconnected(ctx, 2)
				if err != nil {
					t.Error(err)
					return
				}
				if node == nodeOf(urls[deadNode]) {
					t.Errorf("the sidecar on the killed node %s reconnected to it", node)
				}
				events <- "the sidecar on the killed node moved to " + node
			}},
			{0.6, func() { sidecars[deadSidecar].kill(); events <- "killed sidecar " + sidecars[deadSidecar].addr }},
			{0.8, func() {
				sidecars[deadSidecar] = startSidecarProc(t, bin, nodesFrom(deadSidecar), exchange, sidecars[deadSidecar].addr)
				events <- "restarted sidecar on " + sidecars[deadSidecar].addr
			}},
		} {
			if !tiered.waitConfirmed(ctx, int(step.at*float64(len(jobs)))) {
				return
			}
			step.do()
		}
		close(events)
	}()

	var wg sync.WaitGroup
	for _, r := range []*clusterRun{fifo, tiered} {
		wg.Go(func() { r.run(ctx, t) })
	}
	wg.Wait()
	for e := range events {
		t.Log(e)
	}
	t.Logf("predictions that fell back to the middle tier, per sidecar's clients: %d, %d, %d",
		remotes[0].Fallbacks(), remotes[1].Fallbacks(), remotes[2].Fallbacks())
	// The restarted sidecar serves its old clients again, without their
	// reconnecting by hand.
	back := time.NewTimer(10 * time.Second)
	defer back.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		before := remotes[deadSidecar].Fallbacks()
		_, _ = remotes[deadSidecar].Predict(ctx, rabbitmq.Key{Queue: tq.Name, JobType: "email"})
		if remotes[deadSidecar].Fallbacks() == before {
			break
		}
		select {
		case <-tick.C:
		case <-back.C:
			t.Fatalf("the restarted sidecar on %s did not answer its old clients within 10 s: %v", sidecars[deadSidecar].addr, remotes[deadSidecar].Stats().LastError)
		}
	}

	for _, r := range []*clusterRun{fifo, tiered} {
		confirmed, missing := r.missing()
		t.Logf("%s: %d of %d published with a confirm, %d handled, %d redelivered, %d republished; %s",
			r.name, confirmed, len(jobs), r.handledCount(), r.dups.Load(), r.republished.Load(), r.waits())
		if len(missing) > 0 {
			t.Errorf("%s: %d confirmed messages never handled, first %v", r.name, len(missing), missing[:min(10, len(missing))])
		}
		if confirmed < len(jobs)*9/10 {
			t.Errorf("%s: only %d of %d publishes confirmed", r.name, confirmed, len(jobs))
		}
	}
	long := len(clusterTypes) - 1
	fw, tw := fifo.maxWait(long), tiered.maxWait(long)
	t.Logf("%s max wait: FIFO %v, through the sidecars %v (%.2fx; bound %.2fx); mean wait of all: FIFO %v, sidecars %v",
		clusterTypes[long].name, fw, tw, float64(tw)/float64(fw), clusterLongBound, fifo.meanWait(), tiered.meanWait())
	if float64(tw) > clusterLongBound*float64(fw) {
		t.Errorf("the long-job bound did not hold: %s waited up to %v through the sidecars, %.2fx its FIFO max wait %v (bound %.2fx)",
			clusterTypes[long].name, tw, float64(tw)/float64(fw), fw, clusterLongBound)
	}
}

// plain is a predictor that predicts nothing and learns nothing, for the
// FIFO run's consumers.
type plain struct{}

func (plain) Predict(context.Context, rabbitmq.Key) (rabbitmq.Priority, error) {
	return rabbitmq.Priority{}, nil
}
func (plain) Observe(context.Context, rabbitmq.Key, time.Duration) error { return nil }

// clusterRun is one layout's run of the workload: producers with
// confirms and workers, each on a node of its own, moving to the next
// node when theirs goes away.
type clusterRun struct {
	name    string
	jobs    []clusterJob
	urls    []string
	publish func(ctx context.Context, ch *amqp.Channel, producer int, j clusterJob, m amqp.Publishing) error
	consume func(ctx context.Context, ch *amqp.Channel, worker int, h rabbitmq.Handler) error

	t0          time.Time
	mu          sync.Mutex
	sent        []time.Time // first publish attempt
	confirmed   []bool
	started     []time.Time // first delivery to a handler
	handled     []bool
	nConfirmed  atomic.Int64
	nHandled    atomic.Int64
	dups        atomic.Int64
	republished atomic.Int64
	progress    chan struct{} // closed and replaced on every confirm
}

func newClusterRun(name string, jobs []clusterJob, urls []string) *clusterRun {
	n := len(jobs)
	return &clusterRun{name: name, jobs: jobs, urls: urls, sent: make([]time.Time, n), confirmed: make([]bool, n),
		started: make([]time.Time, n), handled: make([]bool, n), progress: make(chan struct{})}
}

// waitConfirmed waits until n messages are confirmed; false if ctx ended.
func (r *clusterRun) waitConfirmed(ctx context.Context, n int) bool {
	for {
		r.mu.Lock()
		ch, got := r.progress, int(r.nConfirmed.Load())
		r.mu.Unlock()
		if got >= n {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

func (r *clusterRun) run(ctx context.Context, t *testing.T) {
	r.t0 = time.Now()
	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	var workers, producers sync.WaitGroup
	for w := range clusterWorkers {
		workers.Go(func() { r.work(wctx, t, w) })
	}
	for p := range clusterProducers {
		producers.Go(func() { r.produce(ctx, t, p) })
	}
	producers.Wait()
	// Done when every confirmed message has been handled.
	deadline := time.NewTimer(90 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for r.nHandled.Load() < r.nConfirmed.Load() || !r.allConfirmedHandled() {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Errorf("%s: backlog not drained in 90 s", r.name)
			stopWorkers()
			workers.Wait()
			return
		case <-ctx.Done():
			return
		}
	}
	stopWorkers()
	workers.Wait()
}

func (r *clusterRun) allConfirmedHandled() bool {
	_, missing := r.missing()
	return len(missing) == 0
}

// produce publishes producer p's share of the jobs (every third) at their
// arrival times, each with a confirm, republishing on another node when a
// publish is not confirmed.
func (r *clusterRun) produce(ctx context.Context, t *testing.T, p int) {
	var conn *amqp.Connection
	var ch *amqp.Channel
	var confirms chan amqp.Confirmation
	node := p
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for seq := p; seq < len(r.jobs); seq += clusterProducers {
		j := r.jobs[seq]
		if d := time.Until(r.t0.Add(j.arrival)); d > 0 {
			select {
			case <-time.After(d): // the job's arrival time
			case <-ctx.Done():
				return
			}
		}
		sent := time.Now()
		r.mu.Lock()
		r.sent[seq] = sent
		r.mu.Unlock()
		for attempt := 0; ; attempt++ {
			if ctx.Err() != nil {
				return
			}
			if attempt > 0 {
				r.republished.Add(1)
			}
			if ch == nil || ch.IsClosed() {
				if conn != nil {
					conn.Close()
				}
				var err error
				conn, node, err = dialFrom(ctx, r.urls, node)
				if err != nil {
					t.Errorf("%s producer %d: %v", r.name, p, err)
					return
				}
				if ch, err = conn.Channel(); err == nil {
					err = ch.Confirm(false)
				}
				if err != nil {
					ch = nil
					continue
				}
				confirms = ch.NotifyPublish(make(chan amqp.Confirmation, 1))
			}
			body := make([]byte, 16)
			binary.BigEndian.PutUint64(body, uint64(seq))
			binary.BigEndian.PutUint64(body[8:], uint64(sent.UnixNano()))
			m := amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body}
			if err := r.publish(ctx, ch, p, j, m); err != nil {
				ch.Close()
				continue
			}
			select {
			case cf, ok := <-confirms:
				if ok && cf.Ack {
					r.mu.Lock()
					r.confirmed[seq] = true
					r.nConfirmed.Add(1)
					close(r.progress)
					r.progress = make(chan struct{})
					r.mu.Unlock()
					attempt = -1
				} else {
					ch.Close()
				}
			case <-time.After(10 * time.Second):
				ch.Close() // not confirmed: publish again elsewhere
			}
			if attempt == -1 {
				break
			}
		}
	}
}

// work runs worker w until ctx ends, on its node and then the next one
// whenever its channel closes.
func (r *clusterRun) work(ctx context.Context, t *testing.T, w int) {
	node := w % len(r.urls)
	h := func(hctx context.Context, d amqp.Delivery) error {
		now := time.Now()
		if len(d.Body) != 16 {
			return nil
		}
		seq := int(binary.BigEndian.Uint64(d.Body))
		if seq < 0 || seq >= len(r.jobs) {
			return nil
		}
		r.mu.Lock()
		if r.started[seq].IsZero() {
			r.started[seq] = now
		}
		r.mu.Unlock()
		select {
		case <-time.After(clusterTypes[r.jobs[seq].typ].took): // the job's work
		case <-hctx.Done():
			return hctx.Err()
		}
		r.mu.Lock()
		if r.handled[seq] {
			r.dups.Add(1)
		} else {
			r.handled[seq] = true
			r.nHandled.Add(1)
		}
		r.mu.Unlock()
		return nil
	}
	for ctx.Err() == nil {
		conn, n, err := dialFrom(ctx, r.urls, node)
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("%s worker %d: %v", r.name, w, err)
			}
			return
		}
		node = n
		ch, err := conn.Channel()
		if err == nil {
			err = r.consume(ctx, ch, w, h)
		}
		conn.Close()
		if err != nil && !errors.Is(err, rabbitmq.ErrChannelClosed) && ctx.Err() == nil {
			t.Logf("%s worker %d on node %d: %v; moving on", r.name, w, node, err)
		}
		node++
	}
}

// dialFrom connects to the first node, from the i'th round, that takes
// the connection.
func dialFrom(ctx context.Context, urls []string, i int) (*amqp.Connection, int, error) {
	var last error
	for round := 0; round < 3*len(urls) && ctx.Err() == nil; round++ {
		n := (i + round) % len(urls)
		conn, err := amqp.DialConfig(urls[n], amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
		if err == nil {
			return conn, n, nil
		}
		last = err
	}
	return nil, 0, fmt.Errorf("no node took a connection: %v", last)
}

// missing returns how many messages were confirmed and which confirmed
// ones no handler ran.
func (r *clusterRun) missing() (confirmed int, missing []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.jobs {
		if r.confirmed[i] {
			confirmed++
			if !r.handled[i] {
				missing = append(missing, i)
			}
		}
	}
	return confirmed, missing
}

func (r *clusterRun) handledCount() int { return int(r.nHandled.Load()) }

// maxWait is the longest a handled message of type typ waited from its
// first publish attempt to its first delivery.
func (r *clusterRun) maxWait(typ int) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var m time.Duration
	for i, j := range r.jobs {
		if j.typ == typ && r.handled[i] {
			m = max(m, r.started[i].Sub(r.sent[i]))
		}
	}
	return m
}

func (r *clusterRun) meanWait() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var sum time.Duration
	n := 0
	for i := range r.jobs {
		if r.handled[i] {
			sum += r.started[i].Sub(r.sent[i])
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / time.Duration(n)
}

// waits describes each type's median and max wait.
func (r *clusterRun) waits() string {
	var parts []string
	for typ, ct := range clusterTypes {
		r.mu.Lock()
		var ws []time.Duration
		for i, j := range r.jobs {
			if j.typ == typ && r.handled[i] {
				ws = append(ws, r.started[i].Sub(r.sent[i]))
			}
		}
		r.mu.Unlock()
		if len(ws) == 0 {
			continue
		}
		sort.Slice(ws, func(a, b int) bool { return ws[a] < ws[b] })
		parts = append(parts, fmt.Sprintf("%s wait median %v max %v", ct.name, ws[len(ws)/2].Round(time.Millisecond), ws[len(ws)-1].Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}

func declareOn(url string, f func(ch *amqp.Channel) error) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	return f(ch)
}

func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// buildHarbinger builds the harbinger command into a temporary directory.
func buildHarbinger(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "harbinger")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/harbinger-mq/harbinger/cmd/harbinger")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// sidecarProc is a `harbinger sidecar` process.
type sidecarProc struct {
	cmd      *exec.Cmd
	addr     string // gRPC
	httpAddr string
	exited   chan struct{}
}

var sidecarListening = regexp.MustCompile(`gRPC on (\S+), metrics on (\S+),`)

// startSidecarProc starts a sidecar sharing on exchange through urls (one
// or several, comma-separated),
// serving gRPC on grpcAddr (port 0 picks one), and waits for it to listen.
// It is killed in t.Cleanup if still running.
func startSidecarProc(t *testing.T, bin, urls, exchange, grpcAddr string) *sidecarProc {
	t.Helper()
	cmd := exec.Command(bin, "sidecar", "--grpc-addr", grpcAddr, "--http-addr", "127.0.0.1:0",
		"--amqp-url", urls, "--exchange", exchange, "--tiers", fmt.Sprint(clusterTiers), "--log-level", "warn")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &sidecarProc{cmd: cmd, exited: make(chan struct{})}
	t.Cleanup(s.kill)
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		t.Fatalf("sidecar printed nothing: %v", lines.Err())
	}
	m := sidecarListening.FindStringSubmatch(lines.Text())
	if m == nil {
		t.Fatalf("sidecar's first line %q names no addresses", lines.Text())
	}
	s.addr, s.httpAddr = m[1], m[2]
	go func() {
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(s.exited)
	}()
	return s
}

// kill kills the sidecar with SIGKILL and waits for it.
func (s *sidecarProc) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

// waitConnected polls the sidecar's metrics until it shares through
// RabbitMQ.
func (s *sidecarProc) waitConnected(t *testing.T, ctx context.Context) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := http.Get("http://" + s.httpAddr + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), "harbinger_sidecar_amqp_connected 1") {
				return
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("sidecar %s did not connect to RabbitMQ", s.addr)
		}
	}
}

var amqpNodeMetric = regexp.MustCompile(`harbinger_sidecar_amqp_node\{node="([^"]+)"\} 1`)

// reconnected polls the sidecar's metrics until it has made connects
// connections to RabbitMQ and is connected, and returns the node it is
// connected to; it gives up after 15 s.
func (s *sidecarProc) reconnected(ctx context.Context, connects int) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	want := fmt.Sprintf("harbinger_sidecar_amqp_connections_total %d", connects)
	for {
		resp, err := http.Get("http://" + s.httpAddr + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if m := amqpNodeMetric.FindStringSubmatch(string(b)); m != nil && strings.Contains(string(b), want) {
				return m[1], nil
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return "", fmt.Errorf("sidecar %s did not make its connection number %d to RabbitMQ within 15 s", s.addr, connects)
		}
	}
}
