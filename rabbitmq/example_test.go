package rabbitmq_test

import (
	"context"
	"log"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/harbinger-mq/harbinger/rabbitmq"
)

// One process publishes and consumes "thumbnails" with the in-process
// predictor: five tiers under x-max-priority 5, long messages held in
// thumbnails.hold for 95% of their predicted FIFO wait, then served first.
func Example() {
	ctx := context.Background()
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	if err := rabbitmq.DeclarePriorityQueue(ch, "thumbnails", rabbitmq.DefaultMaxPriority); err != nil {
		log.Fatal(err)
	}
	if err := rabbitmq.DeclareHoldQueue(ch, "thumbnails.hold", "thumbnails"); err != nil {
		log.Fatal(err)
	}
	p, err := rabbitmq.NewLocal(rabbitmq.LocalConfig{})
	if err != nil {
		log.Fatal(err)
	}

	// Workers: each Consume call is one handler with prefetch 1. The
	// predictor learns from their measured durations.
	wch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		err := rabbitmq.Consume(ctx, wch, "thumbnails", p, rabbitmq.ConsumerOptions{},
			func(ctx context.Context, d amqp.Delivery) error {
				return resize(d.Body) // an error requeues the message and is not learned
			})
		log.Print(err)
	}()

	pub := rabbitmq.NewPublisher(ch, p, rabbitmq.PublisherOptions{HoldQueue: "thumbnails.hold"})
	for _, img := range [][]byte{[]byte("small"), make([]byte, 1<<20)} {
		k := rabbitmq.Key{Queue: "thumbnails", Producer: "web", JobType: "resize", Size: uint64(len(img))}
		if err := pub.Publish(ctx, "", "thumbnails", k, amqp.Publishing{Body: img}); err != nil {
			log.Fatal(err)
		}
	}
}

func resize([]byte) error { return nil }
