package rabbitmq

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DeclarePriorityQueue declares a durable classic queue with x-max-priority,
// the layout for Publisher and Consume. RabbitMQ serves a higher priority
// first and never ages a waiting message; see TierQueues for a bound on
// long-job waits.
func DeclarePriorityQueue(ch *amqp.Channel, name string, maxPriority uint8) error {
	if maxPriority == 0 {
		return fmt.Errorf("rabbitmq: queue %q: max priority must be 1 to 255, got 0", name)
	}
	_, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{
		"x-queue-type":   "classic",
		"x-max-priority": int32(maxPriority),
	})
	if err != nil {
		return fmt.Errorf("rabbitmq: declare queue %q: %w", name, err)
	}
	return nil
}
