package rabbitmq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/harbinger-mq/harbinger/rabbitmq"
)

// fixed is a Predictor that knows each job type's tier in advance.
type fixed map[string]int

func (f fixed) Predict(_ context.Context, k rabbitmq.Key) (rabbitmq.Priority, error) {
	t := f[k.JobType]
	return rabbitmq.Priority{Tier: t, AMQP: rabbitmq.AMQPPriority(t, 3, 3)}, nil
}
func (fixed) Observe(context.Context, rabbitmq.Key, time.Duration) error { return nil }

// TestLongJobWait measures how long one long job waits behind a backlog of
// short ones (each handled in about 2 ms) in each layout: a classic priority
// queue (RabbitMQ priorities never age), tier queues served 8:3:1, and tier
// queues served 100:10:1 but with AgeAfter. It bounds each and logs the
// figures that docs/sidecar.md quotes.
func TestLongJobWait(t *testing.T) {
	t.Parallel()
	const shorts, work = 60, 2 * time.Millisecond
	pred := fixed{"short": 0, "long": 2}
	type result struct {
		position int
		wait     time.Duration
	}
	// run publishes the long job, then the shorts, then consumes with
	// consume until every message is handled.
	run := func(t *testing.T, publish func(k rabbitmq.Key) error, consume func(ctx context.Context, h func(context.Context, amqp.Delivery) error) error) result {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		if err := publish(rabbitmq.Key{Queue: "jobs", JobType: "long"}); err != nil {
			t.Fatal(err)
		}
		for range shorts {
			if err := publish(rabbitmq.Key{Queue: "jobs", JobType: "short"}); err != nil {
				t.Fatal(err)
			}
		}
		var (
			mu   sync.Mutex
			n    int
			res  result
			done = make(chan struct{})
		)
		cctx, stop := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() {
			errc <- consume(cctx, func(_ context.Context, d amqp.Delivery) error {
				time.Sleep(work) // the work
				mu.Lock()
				defer mu.Unlock()
				n++
				if d.Headers[rabbitmq.HeaderJobType] == "long" {
					at, _ := rabbitmq.PublishedAt(d)
					res = result{position: n, wait: time.Since(at)}
				}
				if n == shorts+1 {
					close(done)
				}
				return nil
			})
		}()
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("backlog not drained")
		}
		stop()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		return res
	}
	conn := dial(t)

	t.Run("classic priority queue", func(t *testing.T) {
		t.Parallel()
		ch := channel(t, conn)
		q := unique("wait.prio")
		deleteQueues(t, conn, q)
		if err := rabbitmq.DeclarePriorityQueue(ch, q, 3); err != nil {
			t.Fatal(err)
		}
		pub := rabbitmq.NewPublisher(ch, pred, rabbitmq.PublisherOptions{})
		r := run(t, func(k rabbitmq.Key) error { return pub.Publish(context.Background(), "", q, k, amqp.Publishing{}) },
			func(ctx context.Context, h func(context.Context, amqp.Delivery) error) error {
				return rabbitmq.Consume(ctx, channel(t, conn), q, pred, rabbitmq.ConsumerOptions{}, h)
			})
		t.Logf("classic x-max-priority: long job served %d of %d, waited %v", r.position, shorts+1, r.wait.Round(time.Millisecond))
		if r.position != shorts+1 {
			t.Errorf("long job served %d of %d; a priority queue should serve it last", r.position, shorts+1)
		}
	})
	for _, arm := range []struct {
		name    string
		opts    rabbitmq.TierConsumerOptions
		maxPos  int
		maxWait time.Duration
		quorum  bool
	}{
		{"tier queues 8:3:1", rabbitmq.TierConsumerOptions{}, 12, 0, true},
		{"tier queues 100:10:1 age-after 40ms", rabbitmq.TierConsumerOptions{Weights: []int{100, 10, 1}, AgeAfter: 40 * time.Millisecond}, shorts, 40*time.Millisecond + 80*time.Millisecond, true},
		{"tier queues 100:10:1", rabbitmq.TierConsumerOptions{Weights: []int{100, 10, 1}}, shorts + 1, 0, false},
	} {
		t.Run(arm.name, func(t *testing.T) {
			t.Parallel()
			ch := channel(t, conn)
			tq := rabbitmq.TierQueues{Name: unique("wait.tiers"), Quorum: arm.quorum}
			deleteQueues(t, conn, tq.Queue(0), tq.Queue(1), tq.Queue(2))
			if err := tq.Declare(ch); err != nil {
				t.Fatal(err)
			}
			pub := rabbitmq.NewTierPublisher(ch, pred, tq, rabbitmq.PublisherOptions{})
			r := run(t, func(k rabbitmq.Key) error { return pub.Publish(context.Background(), k, amqp.Publishing{}) },
				func(ctx context.Context, h func(context.Context, amqp.Delivery) error) error {
					// The backlog is in place before the consumer starts.
					return rabbitmq.ConsumeTiers(ctx, channel(t, conn), tq, pred, arm.opts, h)
				})
			t.Logf("%s (quorum %v): long job served %d of %d, waited %v", arm.name, arm.quorum, r.position, shorts+1, r.wait.Round(time.Millisecond))
			if r.position > arm.maxPos {
				t.Errorf("long job served %d of %d, want by %d", r.position, shorts+1, arm.maxPos)
			}
			if arm.maxWait > 0 && r.wait > arm.maxWait {
				t.Errorf("long job waited %v, want at most %v", r.wait, arm.maxWait)
			}
		})
	}
}

// holding is a Predictor that holds "long" messages for a fixed time.
type holding struct{ hold time.Duration }

func (h holding) Predict(_ context.Context, k rabbitmq.Key) (rabbitmq.Priority, error) {
	if k.JobType == "long" {
		return rabbitmq.Priority{Tier: 2, Long: true, Hold: h.hold}, nil
	}
	return rabbitmq.Priority{Tier: 4}, nil
}
func (holding) Observe(context.Context, rabbitmq.Key, time.Duration) error { return nil }

// TestHoldQueue publishes a held long message and then a backlog of
// short ones at the lowest priority: the long message must reach the queue
// only through the hold queue, at the top priority, and so be served first.
func TestHoldQueue(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	ch := channel(t, conn)
	q := unique("hold")
	hq := q + ".hold"
	deleteQueues(t, conn, q, hq)
	if err := rabbitmq.DeclarePriorityQueue(ch, q, rabbitmq.DefaultMaxPriority); err != nil {
		t.Fatal(err)
	}
	if err := rabbitmq.DeclareHoldQueue(ch, hq, q); err != nil {
		t.Fatal(err)
	}
	if err := rabbitmq.DeclareHoldQueue(ch, q, q); err == nil {
		t.Error("a hold queue that dead-letters to itself was accepted")
	}
	ctx := context.Background()
	pub := rabbitmq.NewPublisher(ch, holding{hold: 50 * time.Millisecond}, rabbitmq.PublisherOptions{HoldQueue: hq})
	if err := pub.Publish(ctx, "", q, rabbitmq.Key{Queue: q, JobType: "long"}, amqp.Publishing{}); err != nil {
		t.Fatal(err)
	}
	// A message with its own TTL is never held.
	if err := pub.Publish(ctx, "", q, rabbitmq.Key{Queue: q, JobType: "long"}, amqp.Publishing{Expiration: "600000", Body: []byte("own ttl")}); err != nil {
		t.Fatal(err)
	}
	const shorts = 20
	for range shorts {
		if err := pub.Publish(ctx, "", q, rabbitmq.Key{Queue: q, JobType: "short"}, amqp.Publishing{}); err != nil {
			t.Fatal(err)
		}
	}
	if pub.Held() != 1 {
		t.Errorf("Held = %d, want 1", pub.Held())
	}
	depth := func(name string) int {
		st, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return st.Messages
	}
	eventually(t, 5*time.Second, "the held message to reach the queue", func() bool { return depth(q) == shorts+2 })
	if n := depth(hq); n != 0 {
		t.Errorf("hold queue still has %d messages", n)
	}
	ds, err := ch.Consume(q, "", false, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var first []amqp.Delivery
	for range 2 {
		d := <-ds
		first = append(first, d)
		_ = d.Ack(false)
	}
	for _, d := range first {
		if d.Headers[rabbitmq.HeaderJobType] != "long" || d.Priority != rabbitmq.DefaultMaxPriority {
			t.Errorf("served first: %s at priority %d, want the two long messages at %d", d.Headers[rabbitmq.HeaderJobType], d.Priority, rabbitmq.DefaultMaxPriority)
		}
	}
	var held amqp.Delivery
	for _, d := range first {
		if string(d.Body) != "own ttl" {
			held = d
		}
	}
	if _, ok := held.Headers["x-death"]; !ok {
		t.Error("the held message has no x-death header: it did not go through the hold queue")
	}
}
