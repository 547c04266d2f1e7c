// Command producer publishes a mix of short and long jobs to a RabbitMQ
// priority queue with priorities from a Harbinger sidecar: the example of
// docs/sidecar.md. Run the worker beside it (see README.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/signal"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/harbinger-mq/harbinger/rabbitmq"
)

func main() {
	amqpURL := flag.String("amqp-url", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ URL")
	sidecar := flag.String("sidecar", "127.0.0.1:7072", "address of `harbinger sidecar`")
	queue := flag.String("queue", "example.jobs", "queue to publish to (declared with its hold queue, QUEUE.hold)")
	n := flag.Int("n", 200, "jobs to publish")
	rate := flag.Float64("rate", 50, "jobs per second")
	flag.Parse()
	if *n < 1 || *rate <= 0 {
		log.Fatalf("producer: -n must be at least 1 and -rate positive, got %d and %v", *n, *rate)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *amqpURL, *sidecar, *queue, *n, *rate); err != nil {
		log.Fatal(err)
	}
}

// jobTypes are the example's jobs: mostly quick emails, and reports that
// take a hundred times as long.
var jobTypes = []struct {
	name   string
	weight int
}{{"email", 9}, {"report", 1}}

func run(ctx context.Context, amqpURL, sidecar, queue string, n int, rate float64) error {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		return fmt.Errorf("producer: connect to RabbitMQ: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := rabbitmq.DeclarePriorityQueue(ch, queue, rabbitmq.DefaultMaxPriority); err != nil {
		return err
	}
	if err := rabbitmq.DeclareHoldQueue(ch, queue+".hold", queue); err != nil {
		return err
	}
	// Confirms: a publish counts once RabbitMQ has taken the message.
	if err := ch.Confirm(false); err != nil {
		return err
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, n))
	p, err := rabbitmq.DialSidecar(ctx, sidecar)
	if err != nil {
		return err
	}
	defer p.Close()
	pub := rabbitmq.NewPublisher(ch, p, rabbitmq.PublisherOptions{HoldQueue: queue + ".hold"})
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	counts := map[string]int{}
	for i := range n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		jt := pick()
		k := rabbitmq.Key{Queue: queue, Producer: "example", JobType: jt}
		body := fmt.Appendf(nil, "%s #%d", jt, i)
		if err := pub.Publish(ctx, "", queue, k, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body}); err != nil {
			return err
		}
		counts[jt]++
	}
	for range n {
		if c := <-confirms; !c.Ack {
			return fmt.Errorf("producer: RabbitMQ refused message %d", c.DeliveryTag)
		}
	}
	fmt.Printf("published %d jobs (%v), confirmed; %d went through the hold queue, %d took the default priority (sidecar unreachable)\n",
		n, counts, pub.Held(), p.Fallbacks())
	return nil
}

func pick() string {
	total := 0
	for _, jt := range jobTypes {
		total += jt.weight
	}
	r := rand.IntN(total)
	for _, jt := range jobTypes {
		if r -= jt.weight; r < 0 {
			return jt.name
		}
	}
	return jobTypes[0].name
}
