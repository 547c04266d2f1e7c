// Command worker consumes the example queue through a Harbinger sidecar:
// it runs each job (a sleep as long as its type takes), acks it and
// reports how long it took, so the sidecar learns what each type costs.
// It prints each job's wait, type by type, when interrupted or idle.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/harbinger-mq/harbinger/rabbitmq"
)

// durations is how long each example job type takes.
var durations = map[string]time.Duration{"email": 5 * time.Millisecond, "report": 500 * time.Millisecond}

func main() {
	amqpURL := flag.String("amqp-url", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ URL")
	sidecar := flag.String("sidecar", "127.0.0.1:7072", "address of `harbinger sidecar`")
	queue := flag.String("queue", "example.jobs", "queue to consume (declared with its hold queue, QUEUE.hold)")
	workers := flag.Int("workers", 2, "handlers running at once")
	idle := flag.Duration("idle", 5*time.Second, "stop after this long without a job")
	flag.Parse()
	if *workers < 1 || *idle <= 0 {
		log.Fatalf("worker: -workers must be at least 1 and -idle positive, got %d and %v", *workers, *idle)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *amqpURL, *sidecar, *queue, *workers, *idle); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, amqpURL, sidecar, queue string, workers int, idle time.Duration) error {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		return fmt.Errorf("worker: connect to RabbitMQ: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	// Declared as the producer declares them, so either may start first.
	if err := rabbitmq.DeclarePriorityQueue(ch, queue, rabbitmq.DefaultMaxPriority); err != nil {
		return err
	}
	if err := rabbitmq.DeclareHoldQueue(ch, queue+".hold", queue); err != nil {
		return err
	}
	p, err := rabbitmq.DialSidecar(ctx, sidecar)
	if err != nil {
		return err
	}
	defer p.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	waits := map[string][]time.Duration{}
	activity := make(chan struct{}, 1)
	handle := func(hctx context.Context, d amqp.Delivery) error {
		jt, _ := d.Headers[rabbitmq.HeaderJobType].(string)
		took, known := durations[jt]
		if !known {
			// No retry makes an unknown job runnable: reject it rather
			// than have RabbitMQ redeliver it for ever.
			return fmt.Errorf("%w: unknown job type %q", rabbitmq.ErrReject, jt)
		}
		if at, ok := rabbitmq.PublishedAt(d); ok {
			mu.Lock()
			waits[jt] = append(waits[jt], time.Since(at))
			mu.Unlock()
		}
		select {
		case activity <- struct{}{}:
		default:
		}
		select {
		case <-time.After(took):
			return nil
		case <-hctx.Done():
			return hctx.Err() // requeued
		}
	}
	go func() {
		t := time.NewTimer(idle)
		defer t.Stop()
		for {
			select {
			case <-activity:
				t.Reset(idle)
			case <-t.C:
				cancel()
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	// A job that fails five times is rejected: dropped here, since the
	// example queue has no dead-letter exchange (give it one, for example
	// with a RabbitMQ policy, to keep such jobs).
	err = rabbitmq.Consume(ctx, ch, queue, p, rabbitmq.ConsumerOptions{Workers: workers, Prefetch: workers, MaxAttempts: 5}, handle)
	mu.Lock()
	defer mu.Unlock()
	types := make([]string, 0, len(waits))
	for jt := range waits {
		types = append(types, jt)
	}
	sort.Strings(types)
	for _, jt := range types {
		w := waits[jt]
		sort.Slice(w, func(i, j int) bool { return w[i] < w[j] })
		fmt.Printf("%-8s %4d jobs, wait median %v, max %v\n", jt, len(w), w[len(w)/2].Round(time.Millisecond), w[len(w)-1].Round(time.Millisecond))
	}
	if err != nil && !strings.Contains(err.Error(), "context canceled") {
		return err
	}
	return nil
}
