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
