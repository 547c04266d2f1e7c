package rabbitmq_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// amqpURL is the RabbitMQ the tests use: HARBINGER_AMQP_URL or the local
// guest account.
func amqpURL() string {
	if u := os.Getenv("HARBINGER_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// dial connects to RabbitMQ, skipping the test when it is unreachable
// unless HARBINGER_REQUIRE_SERVICES=1.
func dial(t *testing.T) *amqp.Connection {
	t.Helper()
	conn, err := amqp.DialConfig(amqpURL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		if os.Getenv("HARBINGER_REQUIRE_SERVICES") == "1" {
			t.Fatalf("RabbitMQ unreachable and HARBINGER_REQUIRE_SERVICES=1: %v", err)
		}
		t.Skipf("RabbitMQ unreachable (set HARBINGER_AMQP_URL, or HARBINGER_REQUIRE_SERVICES=1 to fail): %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func channel(t *testing.T, conn *amqp.Connection) *amqp.Channel {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// unique returns a name no other test (or run) uses.
func unique(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "harbinger-test." + prefix + "." + hex.EncodeToString(b[:])
}

// deleteQueues removes queues when the test ends, on a channel of its own.
func deleteQueues(t *testing.T, conn *amqp.Connection, names ...string) {
	t.Cleanup(func() {
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		defer ch.Close()
		for _, n := range names {
			_, _ = ch.QueueDelete(n, false, false, false)
		}
	})
}

// eventually polls cond until it holds or the deadline passes. Used only
// where the event is another process's (RabbitMQ's) and has no signal.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %v waiting for %s", d, what)
		case <-tick.C:
		}
	}
}
