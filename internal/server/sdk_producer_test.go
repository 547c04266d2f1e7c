package server

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// Producer.Publish honours its ctx while the producer's buffer is full:
// with the broker unreachable and more callers than the buffer holds,
// cancelling their ctx returns every one of them with ctx's error.
// Before, the callers beyond the buffer stayed blocked until Close.
func TestProducerPublishHonoursCtxWhileFull(t *testing.T) {
	t.Parallel()
	dialer, dialed := dialSignal()
	cl, _ := dialRecorded(t, closedAddr(t), client.WithDialOptions(dialer))
	p := cl.NewProducer(client.ProducerConfig{MaxBatch: 1, CloseTimeout: 50 * time.Millisecond}) // a buffer of 2
	defer p.Close()
	const callers = 10
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, callers)
	for i := range callers {
		go func() {
			_, err := p.Publish(ctx, &client.Message{Queue: "bestellungen", JobType: "zahlung", Payload: bytes.Repeat([]byte{byte(i)}, 4<<10)})
			errs <- err
		}()
	}
	within(t, dialed, "the producer to try the broker")
	cancel()
	for range callers {
		if err := within(t, errs, "Publish to return after its ctx ended"); !errors.Is(err, context.Canceled) {
			t.Fatalf("Publish = %v, want context.Canceled", err)
		}
	}
}

// A Publish whose ctx has already ended publishes nothing: it reports
// ctx's error, and a caller that publishes again creates no duplicate.
// Before, the message was queued and stored all the same.
func TestProducerPublishWithEndedCtx(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	p := tb.cl.NewProducer(client.ProducerConfig{})
	ended, cancel := context.WithCancel(tb.ctx)
	cancel()
	for range 20 {
		if _, err := p.PublishResult(ended, &client.Message{Queue: "rechnungen", JobType: "pdf", Payload: make([]byte, 8<<10)}); !errors.Is(err, context.Canceled) {
			t.Fatalf("PublishResult with an ended ctx = %v", err)
		}
		if _, err := p.Publish(ended, &client.Message{Queue: "rechnungen", JobType: "pdf"}); !errors.Is(err, context.Canceled) {
			t.Fatalf("Publish with an ended ctx = %v", err)
		}
	}
	id, err := p.Publish(tb.ctx, &client.Message{Queue: "rechnungen", JobType: "pdf", Payload: []byte("die eine")})
	if err != nil || id == "" {
		t.Fatalf("Publish = %q, %v", id, err)
	}
	if err := p.Close(); err != nil { // every queued message answered
		t.Fatal(err)
	}
	if in := tb.info(t, "rechnungen"); in.Published != 1 {
		t.Fatalf("published %d, want only the one whose ctx was live", in.Published)
	}
}
