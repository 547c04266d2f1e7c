package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/harbinger-mq/harbinger/internal/predict"
	"github.com/harbinger-mq/harbinger/rabbitmq"
)

// DefaultAMQPURL is the RabbitMQ the harness dials when HARBINGER_AMQP_URL
// is unset: a local broker with the stock guest account.
const DefaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"

// AMQPURL returns HARBINGER_AMQP_URL or DefaultAMQPURL.
func AMQPURL() string {
	if u := os.Getenv("HARBINGER_AMQP_URL"); u != "" {
		return u
	}
	return DefaultAMQPURL
}

// maxPriority is the x-max-priority of the rabbitmq-priority arm (the
// registered static map has three tiers). rabbitmq-predictive uses the
// rabbitmq package's defaults, whatever they are.
const maxPriority = 3

// RabbitDriver runs the RabbitMQ arms: classic queues, transient messages,
// no publisher confirms, manual acks, one channel per producer and per
// worker, prefetch 1 per worker. A quorum driver (DialRabbitQuorum) runs
// the durable arm instead: quorum queues, persistent messages, and each
// publish waits for the broker's confirm.
//
// On a cluster (DialRabbitCluster) the driver holds a connection to every
// node: queues are declared, purged and deleted through node 0, a queue's
// i'th publisher opens its channel on node i mod N and worker j on node
// j mod N, so that messages cross the cluster between the node a client
// is on and the node that holds the queue.
type RabbitDriver struct {
	urls   []string           // one per node, for connections of a worker's or publisher's own
	conns  []*amqp.Connection // one per node; conns[0] declares the queues
	name   string
	quorum bool
	pid    int // the server's beam.smp, when it runs on this machine
}

// DialRabbit connects to the RabbitMQ at url.
func DialRabbit(url string) (*RabbitDriver, error) {
	return dialRabbit([]string{url}, RabbitMQ, false)
}

// DialRabbitQuorum connects to the RabbitMQ at url for the durable arm.
func DialRabbitQuorum(url string) (*RabbitDriver, error) {
	return dialRabbit([]string{url}, RabbitQuorum, true)
}

// DialRabbitCluster connects to every node of a RabbitMQ cluster, urls in
// node order, for the rabbitmq arms. Its queues stay classic queues:
// RabbitMQ 3.10's quorum queues ignore priorities, which the priority and
// predictive layouts need.
func DialRabbitCluster(urls []string) (*RabbitDriver, error) {
	return dialRabbit(urls, RabbitMQ, false)
}

func dialRabbit(urls []string, name string, quorum bool) (*RabbitDriver, error) {
	if len(urls) == 0 {
		return nil, errors.New("bench: rabbitmq: no URL")
	}
	d := &RabbitDriver{name: name, quorum: quorum, urls: urls}
	for i, u := range urls {
		conn, err := amqp.Dial(u)
		if err != nil {
			d.Close()
			if len(urls) > 1 {
				return nil, fmt.Errorf("bench: rabbitmq node %d: %w", i, err)
			}
			return nil, fmt.Errorf("bench: rabbitmq: %w", err)
		}
		d.conns = append(d.conns, conn)
	}
	if len(urls) == 1 {
		// The server says nothing of its process; on this machine there is
		// normally one Erlang VM running RabbitMQ. A cluster has one per
		// node, and no CPU figure.
		d.pid = FindProcess("beam.smp", "rabbit")
	}
	return d, nil
}

// Nodes is how many RabbitMQ nodes the driver spreads its clients over.
func (d *RabbitDriver) Nodes() int { return len(d.conns) }

// channel opens a channel on the node client i (a producer or a worker)
// uses: node i mod Nodes.
func (d *RabbitDriver) channel(i int) (*amqp.Channel, error) {
	ch, err := d.conns[i%len(d.conns)].Channel()
	if err != nil {
		return nil, fmt.Errorf("bench: rabbitmq channel: %w", err)
	}
	return ch, nil
}

// Broker implements Driver.
func (d *RabbitDriver) Broker() string { return d.name }

// Version implements Driver with the server's own product and version.
func (d *RabbitDriver) Version(context.Context) string {
	p := d.conns[0].Properties
	v := fmt.Sprintf("%v %v", p["product"], p["version"])
	if d.quorum {
		v += " (quorum queues, persistent messages, a publisher confirm awaited per publish)"
	}
	if n := len(d.conns); n > 1 {
		v += fmt.Sprintf(" on a %d-node cluster the harness started for the run on this machine "+
			"(producer i connected to node i mod %d, worker j to node j mod %d; queues declared through node 0 and so held there, "+
			"classic queues, since RabbitMQ 3.10's quorum queues ignore priorities, which the priority and predictive layouts need)", n, n, n)
	}
	return v
}

// Close implements Driver.
func (d *RabbitDriver) Close() error {
	var errs []error
	for _, c := range d.conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Setup implements Driver: a fresh, purged, non-durable classic queue; with
// x-max-priority 3 for the static policy and the rabbitmq package's default
// for the predictive one.
func (d *RabbitDriver) Setup(ctx context.Context, spec QueueSpec) (Queue, error) {
	q := &rabbitQueue{d: d, name: spec.Name, policy: spec.Policy, static: spec.Static}
	args := amqp.Table{"x-queue-type": "classic"}
	if d.quorum {
		if spec.Policy != PolicyFIFO {
			return nil, fmt.Errorf("%w: %s %s", ErrPolicy, d.name, spec.Policy)
		}
		q.durable = true
		args = amqp.Table{"x-queue-type": "quorum"}
	}
	switch spec.Policy {
	case PolicyFIFO:
	case PolicyStatic:
		args["x-max-priority"] = int32(maxPriority)
	case PolicyPredictive:
		return setupRabbitPredictive(ctx, q)
	default:
		return nil, fmt.Errorf("%w: rabbitmq %s", ErrPolicy, spec.Policy)
	}
	if err := q.declare(args); err != nil {
		return nil, err
	}
	return q, nil
}

type rabbitQueue struct {
	d      *RabbitDriver
	name   string
	policy string
	static map[string]int
	// predictive arm only, set by setupRabbitPredictive
	pred      rabbitPredictive
	holdQueue string
	// durable (quorum) arm: a durable queue, persistent messages, confirms
	durable bool
	// pubs counts the publishers, the i'th of which goes to node i mod N
	pubs atomic.Int64
}

// BrokerPID implements brokerPID.
func (q *rabbitQueue) BrokerPID() int { return q.d.pid }

// rabbitPredictive is the predictive arm's hooks into the rabbitmq package.
type rabbitPredictive interface {
	publisher(ch *amqp.Channel) func(ctx context.Context, m Message, p amqp.Publishing) error
	consume(ctx context.Context, ch *amqp.Channel, queue string, h Handler) error
}

func (q *rabbitQueue) declare(args amqp.Table) error { return q.declareNamed(q.name, args) }

// declareNamed declares a queue (durable for the quorum arm, otherwise
// not) and purges it.
func (q *rabbitQueue) declareNamed(name string, args amqp.Table) error {
	ch, err := q.d.channel(0)
	if err != nil {
		return err
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(name, q.durable, false, false, false, args); err != nil {
		return fmt.Errorf("bench: rabbitmq declare %s: %w", name, err)
	}
	if _, err := ch.QueuePurge(name, false); err != nil {
		return fmt.Errorf("bench: rabbitmq purge %s: %w", name, err)
	}
	return nil
}

// Teardown implements Queue: it deletes the queue and its hold queue, if any.
func (q *rabbitQueue) Teardown(context.Context) error {
	ch, err := q.d.channel(0)
	if err != nil {
		return err
	}
	defer ch.Close()
	var errs []error
	for _, name := range []string{q.name, q.holdQueue} {
		if name == "" {
			continue
		}
		if _, err := ch.QueueDelete(name, false, false, false); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// NewPublisher implements Queue: one channel per producer, on the
// producer's node.
func (q *rabbitQueue) NewPublisher(context.Context) (Publisher, error) {
	ch, err := q.d.channel(int(q.pubs.Add(1) - 1))
	if err != nil {
		return nil, err
	}
	p := &rabbitPublisher{ch: ch, q: q}
	if q.durable {
		if err := ch.Confirm(false); err != nil {
			ch.Close()
			return nil, fmt.Errorf("bench: rabbitmq confirm mode: %w", err)
		}
	}
	if q.pred != nil {
		p.send = q.pred.publisher(ch)
	}
	return p, nil
}

type rabbitPublisher struct {
	ch   *amqp.Channel
	q    *rabbitQueue
	send func(ctx context.Context, m Message, p amqp.Publishing) error
}

func (p *rabbitPublisher) Publish(ctx context.Context, m Message) error {
	pub := amqp.Publishing{
		DeliveryMode: amqp.Transient,
		Body:         m.Body,
		Headers: amqp.Table{
			"producer": m.Key.Producer,
			"job_type": m.Key.JobType,
			"size":     int64(m.Key.Size),
		},
	}
	if p.send != nil {
		return p.send(ctx, m, pub)
	}
	if p.q.policy == PolicyStatic {
		tier, ok := p.q.static[m.Key.JobType]
		if !ok {
			tier = 1 // unknown types take the middle tier, as in Harbinger's static policy
		}
		pub.Priority = PriorityOf(tier)
	}
	if p.q.durable {
		// Persistent, and wait for the confirm: the broker has the message
		// on disk (for a quorum queue, on a quorum of its replicas) before
		// the producer sends its next.
		pub.DeliveryMode = amqp.Persistent
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, "", p.q.name, false, false, pub)
		if err != nil {
			return err
		}
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("bench: rabbitmq nacked a publish")
		}
		return nil
	}
	return p.ch.PublishWithContext(ctx, "", p.q.name, false, false, pub)
}

func (p *rabbitPublisher) Close() error { return p.ch.Close() }

// Work implements Queue: its own channel on the worker's node, basic.qos
// prefetch 1, manual ack after the handler; a failed handler's message is
// requeued.
func (q *rabbitQueue) Work(ctx context.Context, worker int, ready func(), h Handler) error {
	ch, err := q.d.channel(worker)
	if err != nil {
		return err
	}
	// Closing the channel returns any unacked message to the queue, as a
	// crashed worker's connection would.
	var closeOnce sync.Once
	closeCh := func() { closeOnce.Do(func() { ch.Close() }) }
	defer closeCh()
	if q.pred != nil {
		if ready != nil {
			ready()
		}
		return q.pred.consume(ctx, ch, q.name, h)
	}
	if err := ch.Qos(1, 0, false); err != nil {
		return fmt.Errorf("bench: rabbitmq qos: %w", err)
	}
	tag := fmt.Sprintf("%s-w%d", q.name, worker)
	// Plain Consume: ConsumeWithContext cancels from its own goroutine, which
	// can race the channel close below and leave Close waiting forever.
	deliveries, err := ch.Consume(q.name, tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("bench: rabbitmq consume: %w", err)
	}
	if ready != nil {
		ready()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case dl, ok := <-deliveries:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("bench: rabbitmq delivery channel closed")
			}
			herr := h(ctx, dl.Body)
			if ctx.Err() != nil {
				return nil // crashed mid-handler: no ack
			}
			if herr != nil {
				_ = dl.Nack(false, true)
				continue
			}
			if err := dl.Ack(false); err != nil {
				return fmt.Errorf("bench: rabbitmq ack: %w", err)
			}
		}
	}
}

// setupRabbitPredictive declares the predictive arm's queues: the layout
// rabbitmq.DeclarePriorityQueue and rabbitmq.DeclareHoldQueue make with the
// package's defaults, but not durable, since nothing is durable on any
// broker in the comparison. Publishing and consuming go through the
// rabbitmq package itself, with a fresh in-process predictor for the run,
// so the product and the benchmark cannot drift.
func setupRabbitPredictive(_ context.Context, q *rabbitQueue) (Queue, error) {
	local, err := rabbitmq.NewLocal(rabbitmq.LocalConfig{})
	if err != nil {
		return nil, err
	}
	q.holdQueue = q.name + ".hold"
	q.pred = &rabbitLocal{local: local, queue: q.name, holdQueue: q.holdQueue}
	if err := q.declare(amqp.Table{"x-queue-type": "classic", "x-max-priority": int32(rabbitmq.DefaultMaxPriority)}); err != nil {
		return nil, err
	}
	if err := q.declareNamed(q.holdQueue, rabbitmq.HoldQueueArgs(q.name)); err != nil {
		return nil, err
	}
	return q, nil
}

type rabbitLocal struct {
	local            *rabbitmq.Local
	queue, holdQueue string
}

func (r *rabbitLocal) publisher(ch *amqp.Channel) func(ctx context.Context, m Message, p amqp.Publishing) error {
	pub := rabbitmq.NewPublisher(ch, r.local, rabbitmq.PublisherOptions{HoldQueue: r.holdQueue})
	return func(ctx context.Context, m Message, p amqp.Publishing) error {
		k := rabbitmq.Key{Queue: r.queue, Producer: m.Key.Producer, JobType: m.Key.JobType, Size: m.Key.Size}
		return pub.Publish(ctx, "", r.queue, k, p)
	}
}

func (r *rabbitLocal) consume(ctx context.Context, ch *amqp.Channel, queue string, h Handler) error {
	err := rabbitmq.Consume(ctx, ch, queue, r.local, rabbitmq.ConsumerOptions{Prefetch: 1},
		func(ctx context.Context, d amqp.Delivery) error { return h(ctx, d.Body) })
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// PredictorStats implements predictorStats: the predictive arm's Local
// predictor, which scores each completion against the prediction its
// publisher stamped on the message.
func (q *rabbitQueue) PredictorStats(context.Context) (maeMS, tierAccuracy float64) {
	r, isLocal := q.pred.(*rabbitLocal)
	if !isLocal {
		return math.NaN(), math.NaN()
	}
	st := r.local.Stats()
	return SummaryStats(predict.Summary{MAE: st.MAE, MAESamples: st.MAESamples, TierAccuracy: st.TierAccuracy, TierSamples: st.TierSamples})
}

// connectRabbitCluster returns the drivers of the RabbitMQ arms among arms
// (the others are Connect's) on a cluster whose nodes' AMQP URLs are urls,
// in node order: the rabbitmq arms' driver (DialRabbitCluster) and the
// sidecar arm's (DialRabbitSidecarsCluster, with o.Binary or the
// executable HarbingerBinary finds). The durable arm does not run on a
// cluster. The caller closes the drivers with CloseAll.
func connectRabbitCluster(ctx context.Context, arms []Arm, urls []string, o ConnectOptions) (map[string]Driver, error) {
	drivers := map[string]Driver{}
	fail := func(err error) (map[string]Driver, error) {
		CloseAll(drivers)
		return nil, err
	}
	for _, a := range arms {
		if drivers[a.Broker] != nil || !isRabbitArm(a) {
			continue
		}
		switch a.Broker {
		case RabbitMQ:
			d, err := DialRabbitCluster(urls)
			if err != nil {
				return fail(err)
			}
			drivers[RabbitMQ] = d
		case RabbitSidecars:
			bin := o.Binary
			if bin == "" {
				var err error
				if bin, err = HarbingerBinary(ctx, o.BuildDir); err != nil {
					return fail(err)
				}
			}
			d, err := DialRabbitSidecarsCluster(urls, bin)
			if err != nil {
				return fail(err)
			}
			drivers[RabbitSidecars] = d
		default:
			return fail(fmt.Errorf("bench: arm %s does not run on a RabbitMQ cluster", a.Name))
		}
	}
	return drivers, nil
}

// isRabbitArm reports whether an arm runs on RabbitMQ: the arms a
// RabbitMQ cluster takes over from the machine's RabbitMQ.
func isRabbitArm(a Arm) bool {
	switch a.Broker {
	case RabbitMQ, RabbitQuorum, RabbitSidecars:
		return true
	}
	return false
}

// dialOwn opens a connection of client i's own, on node i mod Nodes, and
// a channel on it.
func (d *RabbitDriver) dialOwn(i int) (*amqp.Connection, *amqp.Channel, error) {
	conn, err := amqp.Dial(d.urls[i%len(d.urls)])
	if err != nil {
		return nil, nil, fmt.Errorf("bench: rabbitmq: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("bench: rabbitmq channel: %w", err)
	}
	return conn, ch, nil
}

// NewWindowPublisher implements windowQueue: a connection of its own, a
// channel in confirm mode, and up to window publishes awaiting their
// confirms (persistent messages on the quorum arm, transient otherwise).
func (q *rabbitQueue) NewWindowPublisher(_ context.Context, window int) (Publisher, error) {
	if q.pred != nil || q.policy != PolicyFIFO {
		return nil, fmt.Errorf("bench: rabbitmq: a windowed publisher publishes to a FIFO queue only")
	}
	conn, ch, err := q.d.dialOwn(int(q.pubs.Add(1) - 1))
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		conn.Close()
		return nil, fmt.Errorf("bench: rabbitmq confirm mode: %w", err)
	}
	p := &rabbitWindowPublisher{conn: conn, ch: ch, q: q, w: newWindow[*amqp.DeferredConfirmation](window)}
	go p.w.confirm(func(dc *amqp.DeferredConfirmation) error {
		if !dc.Wait() {
			return errors.New("bench: rabbitmq nacked a publish, or its channel closed")
		}
		return nil
	})
	return p, nil
}

type rabbitWindowPublisher struct {
	conn *amqp.Connection
	ch   *amqp.Channel
	q    *rabbitQueue
	w    *window[*amqp.DeferredConfirmation]
}

func (p *rabbitWindowPublisher) Publish(ctx context.Context, m Message) error {
	if err := p.w.take(ctx); err != nil {
		return err
	}
	mode := amqp.Transient
	if p.q.durable {
		mode = amqp.Persistent
	}
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, "", p.q.name, false, false, amqp.Publishing{DeliveryMode: mode, Body: m.Body,
		Headers: amqp.Table{"producer": m.Key.Producer, "job_type": m.Key.JobType, "size": int64(m.Key.Size)}})
	if err != nil {
		p.w.give()
		return err
	}
	p.w.pending <- dc
	return nil
}

func (p *rabbitWindowPublisher) Close() error {
	err := p.w.close()
	p.ch.Close()
	p.conn.Close()
	return err
}

// WorkSlots implements slotQueue: a connection of its own, basic.qos
// prefetch slots, and slots handler goroutines taking deliveries from the
// one consumer, each acking its own (manual acks, one per message).
func (q *rabbitQueue) WorkSlots(ctx context.Context, worker, slots int, ready func(), h Handler) error {
	if q.pred != nil || q.policy != PolicyFIFO {
		return fmt.Errorf("bench: rabbitmq: a worker with several slots consumes a FIFO queue only")
	}
	conn, ch, err := q.d.dialOwn(worker)
	if err != nil {
		return err
	}
	// Closing the connection returns any unacked message to the queue, as
	// a crashed worker's would.
	defer conn.Close()
	if err := ch.Qos(slots, 0, false); err != nil {
		return fmt.Errorf("bench: rabbitmq qos: %w", err)
	}
	deliveries, err := ch.Consume(q.name, fmt.Sprintf("%s-w%d", q.name, worker), false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("bench: rabbitmq consume: %w", err)
	}
	if ready != nil {
		ready()
	}
	errc := make(chan error, slots)
	var wg sync.WaitGroup
	for range slots {
		wg.Go(func() {
			for dl := range deliveries {
				herr := h(ctx, dl.Body)
				if ctx.Err() != nil {
					continue // crashed mid-handler: no ack
				}
				if herr != nil {
					_ = dl.Nack(false, true)
					continue
				}
				if err := dl.Ack(false); err != nil {
					errc <- fmt.Errorf("bench: rabbitmq ack: %w", err)
					return
				}
			}
		})
	}
	ended := make(chan struct{})
	go func() {
		wg.Wait()
		close(ended)
	}()
	var werr error
	select {
	case <-ctx.Done():
	case werr = <-errc:
	case <-ended:
		if ctx.Err() == nil {
			werr = errors.New("bench: rabbitmq delivery channel closed")
		}
	}
	conn.Close() // ends deliveries
	<-ended
	return werr
}
