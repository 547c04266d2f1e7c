package bench

import (
	"context"
	"testing"
	"time"
)

// sidecarsForTest is the rabbitmq-sidecars driver on the test's RabbitMQ,
// with a harbinger binary built for the test.
func sidecarsForTest(t *testing.T) *SidecarDriver {
	t.Helper()
	rabbitForTest(t) // skips or fails as the other RabbitMQ tests do
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin, err := HarbingerBinary(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d, err := DialRabbitSidecars(AMQPURL(), bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestSidecarReady(t *testing.T) {
	t.Parallel()
	got, ok := sidecarReady("harbinger sidecar: gRPC on 127.0.0.1:4000, metrics on 127.0.0.1:4001, id ab12, holding long messages on")
	if !ok || got != "127.0.0.1:4000 127.0.0.1:4001" {
		t.Errorf("sidecarReady = %q, %v", got, ok)
	}
	if _, ok := sidecarReady("harbinger sidecar: serving"); ok {
		t.Error("sidecarReady took a line without addresses")
	}
}
