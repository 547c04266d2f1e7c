package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/harbinger-mq/harbinger/internal/stats"
	"github.com/harbinger-mq/harbinger/rabbitmq"
)

// SidecarsPerRun is how many `harbinger sidecar` processes the
// rabbitmq-sidecars arm runs: its producers and workers alternate between
// them, so each sidecar sees half of the queue's publishes and completions
// and holds only through the fleet's combined backlog.
const SidecarsPerRun = 2

// SidecarCacheFor is how long the arm's clients answer a key from the
// sidecar's latest answer for it (rabbitmq.RemoteOptions.CacheFor): three
// of the sidecars' backlog report intervals.
const SidecarCacheFor = 600 * time.Millisecond

// SidecarDriver runs rabbitmq-predictive through sidecar processes instead
// of an in-process predictor: per run, SidecarsPerRun fresh `harbinger
// sidecar --hold` processes sharing through the driver's RabbitMQ on an
// exchange of the run's own, the package's default layout (x-max-priority
// 5 and a hold queue), and every publisher and worker a rabbitmq.Remote of
// one of them. On a cluster, sidecar i connects to node i mod N, and the
// producers and workers spread over the nodes as RabbitDriver's do.
type SidecarDriver struct {
	rabbit *RabbitDriver
	bin    string
	urls   []string // one per node
}

// DialRabbitSidecars connects to the RabbitMQ at url; bin is the harbinger
// executable the runs start as sidecars.
func DialRabbitSidecars(url, bin string) (*SidecarDriver, error) {
	return dialRabbitSidecars([]string{url}, bin)
}

// DialRabbitSidecarsCluster connects to every node of a RabbitMQ cluster,
// urls in node order; bin is the harbinger executable the runs start as
// sidecars, each connected to a node of its own.
func DialRabbitSidecarsCluster(urls []string, bin string) (*SidecarDriver, error) {
	return dialRabbitSidecars(urls, bin)
}

func dialRabbitSidecars(urls []string, bin string) (*SidecarDriver, error) {
	rd, err := dialRabbit(urls, RabbitSidecars, false)
	if err != nil {
		return nil, err
	}
	return &SidecarDriver{rabbit: rd, bin: bin, urls: urls}, nil
}

// Broker implements Driver.
func (d *SidecarDriver) Broker() string { return RabbitSidecars }

// Version implements Driver.
func (d *SidecarDriver) Version(ctx context.Context) string {
	v := d.rabbit.Version(ctx) + fmt.Sprintf(" through %d harbinger sidecar --hold processes (clients caching each key's answer for %v, reports in batches every %v at most)", SidecarsPerRun, SidecarCacheFor, rabbitmq.DefaultReportEvery)
	if n := len(d.urls); n > 1 {
		v += fmt.Sprintf(", sidecar i connected to node i mod %d", n)
	}
	return v
}

// Close implements Driver.
func (d *SidecarDriver) Close() error { return d.rabbit.Close() }

// Setup implements Driver for the predictive policy only.
func (d *SidecarDriver) Setup(ctx context.Context, spec QueueSpec) (Queue, error) {
	if spec.Policy != PolicyPredictive {
		return nil, fmt.Errorf("%w: %s %s", ErrPolicy, RabbitSidecars, spec.Policy)
	}
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	exchange := "harbinger.bench." + hex.EncodeToString(id)
	q := &sidecarQueue{rabbitQueue: &rabbitQueue{d: d.rabbit, name: spec.Name, policy: spec.Policy}}
	for i := range SidecarsPerRun {
		p, err := StartProcess(ctx, fmt.Sprintf("harbinger sidecar %d", i), d.bin,
			[]string{"sidecar", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--amqp-url", nodesFrom(d.urls, i),
				"--exchange", exchange, "--hold", "--log-level", "warn"},
			sidecarReady, nil)
		if err != nil {
			q.stopSidecars()
			return nil, err
		}
		grpcAddr, httpAddr, _ := strings.Cut(p.Addr(), " ")
		q.procs = append(q.procs, p)
		q.metrics = append(q.metrics, "http://"+httpAddr+"/metrics")
		r, err := rabbitmq.DialSidecarOptions(ctx, grpcAddr, rabbitmq.RemoteOptions{CacheFor: SidecarCacheFor})
		if err != nil {
			q.stopSidecars()
			return nil, err
		}
		q.remotes = append(q.remotes, r)
	}
	// Each sidecar must share through RabbitMQ, or it would hold from its
	// own half of the counts.
	for _, m := range q.metrics {
		if err := waitMetric(ctx, m, "harbinger_sidecar_amqp_connected", 1); err != nil {
			q.stopSidecars()
			return nil, err
		}
	}
	q.holdQueue = q.name + ".hold"
	q.pred = &rabbitRemotes{remotes: q.remotes, queue: q.name, holdQueue: q.holdQueue}
	if err := q.declare(amqp.Table{"x-queue-type": "classic", "x-max-priority": int32(rabbitmq.DefaultMaxPriority)}); err != nil {
		q.stopSidecars()
		return nil, err
	}
	if err := q.declareNamed(q.holdQueue, rabbitmq.HoldQueueArgs(q.name)); err != nil {
		q.stopSidecars()
		return nil, err
	}
	return q, nil
}

var sidecarListening = regexp.MustCompile(`harbinger sidecar: gRPC on (\S+), metrics on (\S+),`)

// sidecarReady finds the sidecar's addresses in its first line: gRPC and
// metrics, space-separated.
func sidecarReady(line string) (string, bool) {
	m := sidecarListening.FindStringSubmatch(line)
	if m == nil {
		return "", false
	}
	return m[1] + " " + m[2], true
}

// sidecarQueue is the predictive layout on RabbitMQ with the run's
// sidecars.
type sidecarQueue struct {
	*rabbitQueue
	procs   []*BrokerProcess
	remotes []*rabbitmq.Remote
	metrics []string
}

// Teardown implements Queue: the queues, then the sidecars.
func (q *sidecarQueue) Teardown(ctx context.Context) error {
	err := q.rabbitQueue.Teardown(ctx)
	return errors.Join(err, q.stopSidecars())
}

func (q *sidecarQueue) stopSidecars() error {
	var errs []error
	for _, r := range q.remotes {
		_ = r.Close()
	}
	for _, p := range q.procs {
		errs = append(errs, p.Stop())
	}
	q.remotes, q.procs = nil, nil
	return errors.Join(errs...)
}

// PredictorStats implements predictorStats: the mean of the sidecars'
// own scores (each scores the completions its workers report, half of
// them).
func (q *sidecarQueue) PredictorStats(context.Context) (maeMS, tierAccuracy float64) {
	var mae, acc []float64
	for _, m := range q.metrics {
		vals, err := scrape(m)
		if err != nil {
			continue
		}
		if v, ok := vals["harbinger_predictor_mae_seconds"]; ok {
			mae = append(mae, v*1000)
		}
		if v, ok := vals["harbinger_predictor_tier_accuracy"]; ok {
			acc = append(acc, v)
		}
	}
	return stats.Mean(mae), stats.Mean(acc)
}

// rabbitRemotes publishes and consumes through the rabbitmq package with
// the run's sidecars, producers and workers taking them in turn.
type rabbitRemotes struct {
	remotes          []*rabbitmq.Remote
	queue, holdQueue string
	pubs, workers    atomic.Int64
}

func (r *rabbitRemotes) publisher(ch *amqp.Channel) func(ctx context.Context, m Message, p amqp.Publishing) error {
	rem := r.remotes[int(r.pubs.Add(1)-1)%len(r.remotes)]
	pub := rabbitmq.NewPublisher(ch, rem, rabbitmq.PublisherOptions{HoldQueue: r.holdQueue})
	return func(ctx context.Context, m Message, p amqp.Publishing) error {
		k := rabbitmq.Key{Queue: r.queue, Producer: m.Key.Producer, JobType: m.Key.JobType, Size: m.Key.Size}
		return pub.Publish(ctx, "", r.queue, k, p)
	}
}

func (r *rabbitRemotes) consume(ctx context.Context, ch *amqp.Channel, queue string, h Handler) error {
	rem := r.remotes[int(r.workers.Add(1)-1)%len(r.remotes)]
	err := rabbitmq.Consume(ctx, ch, queue, rem, rabbitmq.ConsumerOptions{Prefetch: 1},
		func(ctx context.Context, d amqp.Delivery) error { return h(ctx, d.Body) })
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// waitMetric polls a Prometheus endpoint until the unlabelled metric has
// value want, or ctx (bounded by ProcessStartTimeout) ends.
func waitMetric(ctx context.Context, url, name string, want float64) error {
	ctx, cancel := context.WithTimeout(ctx, ProcessStartTimeout)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if vals, err := scrape(url); err == nil && vals[name] == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: %s never reached %s %g", url, name, want)
		case <-t.C:
		}
	}
}

// scrape reads the unlabelled samples of a Prometheus text endpoint.
func scrape(url string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: %s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || strings.ContainsRune(line, '{') {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// nodesFrom lists urls starting at the i-th (mod their number), comma-separated:
// a sidecar's --amqp-url, its own node first and the others to move to.
func nodesFrom(urls []string, i int) string {
	i %= len(urls)
	return strings.Join(append(slices.Clone(urls[i:]), urls[:i]...), ",")
}
