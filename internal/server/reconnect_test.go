package server

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// serveOn runs a fresh broker on addr and returns a stop function.
func serveOn(t *testing.T, addr string) func() {
	t.Helper()
	b, err := broker.New(broker.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	New(b, quiet).Register(gs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	return func() {
		_ = b.Shutdown(context.Background())
		gs.Stop()
		<-done
	}
}

// A worker survives a broker restart: it reconnects with backoff and takes
// jobs from the new broker.
func TestWorkerReconnectsAfterRestart(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	stop := serveOn(t, addr)

	cl, err := client.Dial(context.Background(), addr, client.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := make(chan string, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- cl.RunWorker(ctx, client.WorkerConfig{Queue: "q", MaxReconnectDelay: 100 * time.Millisecond}, func(_ context.Context, d *client.Delivery) error {
			got <- string(d.Payload)
			return nil
		})
	}()
	if _, err := cl.Publish(ctx, &client.Message{Queue: "q", Payload: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	if p := <-got; p != "before" {
		t.Fatalf("got %q", p)
	}
	stop()
	stop = serveOn(t, addr)
	defer stop()
	pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
	defer pcancel()
	if _, err := cl.Publish(pctx, &client.Message{Queue: "q", Payload: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	if p := <-got; p != "after" {
		t.Fatalf("got %q", p)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
