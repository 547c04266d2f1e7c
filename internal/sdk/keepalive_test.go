package sdk_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/server"
)

// serveAt runs a broker with cfg behind a gRPC server with the options
// "harbinger serve" uses, then extra, on a loopback port, and returns its
// address; it stops when the test ends.
func serveAt(t *testing.T, cfg broker.Config, extra ...grpc.ServerOption) (string, *broker.Broker) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Logger = quiet
	b, err := broker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(append(server.ServerOptions(cfg), extra...)...)
	server.New(b, quiet).Register(gs)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-served
		_ = b.Shutdown(context.Background())
	})
	return lis.Addr().String(), b
}

// blackhole forwards TCP connections to a target until swallow is called;
// from then on it keeps the connections it has open but passes nothing on
// either way, as a NAT or firewall that dropped them would. Connections
// made after swallow are forwarded again.
type blackhole struct {
	lis    net.Listener
	target string
	mu     sync.Mutex
	gen    int // bumped by swallow: pipes of an older generation drop what they read
	conns  []net.Conn
}

// accepted is how many connections were made through bh.
func (bh *blackhole) accepted() int {
	bh.mu.Lock()
	defer bh.mu.Unlock()
	return len(bh.conns) / 2
}

func newBlackhole(t *testing.T, target string) *blackhole {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bh := &blackhole{lis: lis, target: target}
	go bh.accept()
	t.Cleanup(func() {
		_ = lis.Close()
		bh.mu.Lock()
		defer bh.mu.Unlock()
		for _, c := range bh.conns {
			_ = c.Close()
		}
	})
	return bh
}

func (bh *blackhole) accept() {
	for {
		in, err := bh.lis.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", bh.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		bh.mu.Lock()
		gen := bh.gen
		bh.conns = append(bh.conns, in, out)
		bh.mu.Unlock()
		go bh.pipe(out, in, gen)
		go bh.pipe(in, out, gen)
	}
}

// pipe copies from src to dst while its generation is current, and
// swallows everything after.
func (bh *blackhole) pipe(dst, src net.Conn, gen int) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		bh.mu.Lock()
		live := bh.gen == gen
		bh.mu.Unlock()
		if live {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
}

func (bh *blackhole) swallow() {
	bh.mu.Lock()
	bh.gen++
	bh.mu.Unlock()
}

// A worker waiting for jobs on a connection that died silently (nothing
// closed, nothing answered) finds out by its keepalive ping, reconnects and
// takes the next job. Without the ping it sent nothing, so nothing ever
// failed: it waited for ever, and the job with it. The pings are made more
// frequent here than the SDK's (gRPC's floor of 10 s) to keep the test short.
func TestWorkerNoticesASilentlyDeadConnection(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// The broker pings too, and drops the dead consumer, so that the job is
	// not handed to it.
	addr, _ := serveAt(t, broker.Config{}, grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Second, Timeout: time.Second}))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	direct, err := client.Dial(ctx, addr, client.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	bh := newBlackhole(t, addr)
	w, err := client.Dial(ctx, bh.lis.Addr().String(), client.WithLogger(quiet),
		client.WithKeepalive(10*time.Second, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	handled := make(chan string, 4)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- w.RunWorker(wctx, client.WorkerConfig{Queue: "mails-ü"}, func(_ context.Context, d *client.Delivery) error {
			handled <- string(d.Payload)
			return nil
		})
	}()
	publish := func(body string) {
		t.Helper()
		if _, err := direct.Publish(ctx, &client.Message{Queue: "mails-ü", JobType: "welcome", Payload: append([]byte(body), make([]byte, 2<<10)...)}); err != nil {
			t.Fatal(err)
		}
	}
	publish("before")
	if got := <-handled; got[:6] != "before" {
		t.Fatalf("handled %q", got[:6])
	}
	bh.swallow()
	publish("after")
	select {
	case got := <-handled:
		if got[:5] != "after" {
			t.Fatalf("handled %q", got[:5])
		}
	case <-ctx.Done():
		t.Fatal("the worker never noticed its connection had died: the job published after waited for ever")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A healthy worker that waits for jobs keeps its one connection while its
// pings go out as often as the SDK allows: the broker accepts them. gRPC's
// default is to refuse pings more often than every five minutes and, after
// a few, close the connection (GOAWAY "too_many_pings"), so every idle
// worker would reconnect about once a minute. The test spends six pings.
func TestIdleWorkerKeepsItsConnection(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	addr, _ := serveAt(t, broker.Config{})
	c, err := client.Dial(t.Context(), addr, client.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bh := newBlackhole(t, addr)
	w, err := client.Dial(t.Context(), bh.lis.Addr().String(), client.WithLogger(quiet), client.WithKeepalive(10*time.Second, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	handled := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- w.RunWorker(ctx, client.WorkerConfig{Queue: "idle"}, func(context.Context, *client.Delivery) error {
			handled <- struct{}{}
			return nil
		})
	}()
	if _, err := c.Publish(t.Context(), &client.Message{Queue: "idle", Payload: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	<-handled // connected and consuming; idle from here on
	<-ctx.Done()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := bh.accepted(); n != 1 {
		t.Errorf("an idle worker made %d connections in a minute of pings every 10 s, want 1", n)
	}
}
