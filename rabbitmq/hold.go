package rabbitmq

import (
	"fmt"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Holding long messages.
//
// RabbitMQ never ages a waiting message, so a long message published at a
// low priority could wait forever behind shorter ones. Publishing it at the
// top priority bounds its wait, but then long work goes ahead of everything
// else even when the queue is deep, which is what makes an overloaded queue's
// mean and P99 worse. Harbinger's broker instead lets a long message wait
// until most of the work that was ahead of it has been served, then serves it
// first. Holding does the same with RabbitMQ's own parts: the Publisher
// sends a long message to a hold queue with a per-message TTL of Hold, and
// RabbitMQ dead-letters it into its queue at the top priority when the TTL
// runs out. Hold is DefaultHold of the wait FIFO would give the message: the
// predicted work published to the queue and not yet completed, divided by
// the queue's consumers.
//
// The broker's bounded policy also guards every other message against FIFO
// (sched.Bound.Guard: once FIFO would have started a message, only much
// shorter work may still go ahead of it, and past a deadline it goes next).
// That needs a message's place in line to change after it was published,
// which RabbitMQ does not allow: a priority is fixed at publish time and a
// message cannot be moved between priorities. So the RabbitMQ side keeps the
// part RabbitMQ can express, the hold of long messages, at the broker's
// bound; the rest of the guard has no RabbitMQ equivalent (docs/policy.md).

// DefaultHold is the share of its FIFO wait a long message is held: the
// broker's bounded policy starts a long message once 90% of the work ahead
// of it has been served (1 + sched.DefaultStretch; a test keeps the two
// equal).
const DefaultHold = 0.90

// DefaultMaxHold caps a hold, so that a backlog estimate gone wrong (for
// example messages completed by consumers this predictor never hears of)
// cannot hold long messages indefinitely.
const DefaultMaxHold = 10 * time.Minute

// minHold is the shortest hold worth a detour: per-message TTLs are whole
// milliseconds.
const minHold = time.Millisecond

// HoldQueueArgs are the arguments of a hold queue for target: a classic
// queue without priorities that dead-letters expired messages to target
// through the default exchange. Every message in a hold queue carries its
// own TTL, and RabbitMQ expires messages only at a queue's head, so a
// message may stay a little past its TTL behind one published earlier with
// a longer one.
func HoldQueueArgs(target string) amqp.Table {
	return amqp.Table{
		"x-queue-type":              "classic",
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": target,
	}
}

// DeclareHoldQueue declares the durable hold queue name for the priority
// queue target (declared with DeclarePriorityQueue). Name it in
// PublisherOptions.HoldQueue.
func DeclareHoldQueue(ch *amqp.Channel, name, target string) error {
	if name == "" || name == target {
		return fmt.Errorf("rabbitmq: hold queue for %q needs a name of its own, got %q", target, name)
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, HoldQueueArgs(target)); err != nil {
		return fmt.Errorf("rabbitmq: declare hold queue %q: %w", name, err)
	}
	return nil
}

// expiration is an AMQP per-message TTL: whole milliseconds, as a string.
func expiration(d time.Duration) string {
	return strconv.FormatInt(d.Milliseconds(), 10)
}

// backlog is what Local knows of each queue's depth: the predicted work
// published to it and not yet completed, and how many handlers in this
// process consume it. Only queues with handlers are tracked, so that its
// size is bounded by the queues this process consumes (and by a cap, for a
// sidecar whose clients name the queues), not by the queue names it is
// asked to predict for. With peers (Local.SetPeers) it also keeps, for up
// to the cap of queues whether or not they have handlers here, the signed
// net work: predicted work published through this predictor minus the
// predicted work of the completions reported to it, which is negative
// where this predictor's consumers complete what others published; only
// the sum over every predictor of a queue means anything. It is not safe
// for concurrent use.
type backlog struct {
	work      map[string]time.Duration
	consumers map[string]int
	net       map[string]time.Duration // nil without peers
	maxQueues int
}

func newBacklog(maxQueues int) backlog {
	return backlog{work: make(map[string]time.Duration), consumers: make(map[string]int), maxQueues: maxQueues}
}

func (b backlog) published(queue string, cost time.Duration) {
	if b.consumers[queue] > 0 {
		b.work[queue] += max(0, cost)
	}
	b.addNet(queue, max(0, cost))
}

func (b backlog) completed(queue string, cost time.Duration) {
	if w, ok := b.work[queue]; ok {
		b.work[queue] = max(0, w-max(0, cost))
	}
	b.addNet(queue, -max(0, cost))
}

func (b backlog) addNet(queue string, d time.Duration) {
	if b.net == nil {
		return
	}
	if _, ok := b.net[queue]; ok || len(b.net) < b.maxQueues {
		b.net[queue] += d
	}
}

// attach changes queue's handler count by n. It returns false, changing
// nothing, when that would start tracking a queue past maxQueues.
func (b backlog) attach(queue string, n, maxQueues int) bool {
	c, ok := b.consumers[queue]
	if c += n; c <= 0 {
		delete(b.consumers, queue)
		delete(b.work, queue)
		return true
	}
	if !ok && len(b.consumers) >= maxQueues {
		return false
	}
	b.consumers[queue] = c
	return true
}

// hold returns share of the FIFO wait of a message published to queue now,
// capped at maxHold; zero when no consumer drains the queue, since then its
// backlog cannot be known. Without peers that is this process's own count;
// with them, the net work and handlers of every predictor of the queue.
func (b backlog) hold(queue string, share float64, maxHold time.Duration, peers Peers) time.Duration {
	if share <= 0 {
		return 0
	}
	c, work := b.consumers[queue], b.work[queue]
	if peers != nil {
		pw, pc := peers.Backlog(queue)
		c, work = c+pc, max(0, b.net[queue]+pw)
	}
	if c <= 0 {
		return 0
	}
	h := time.Duration(share * float64(work) / float64(c))
	if h < minHold {
		return 0
	}
	return min(h, maxHold)
}
