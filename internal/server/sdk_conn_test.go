package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// connLog is a slog.Handler that passes on the client's reports about its
// connection to the broker, each as its message and attributes in one
// line, and drops everything else.
type connLog chan string

func (c connLog) Enabled(context.Context, slog.Level) bool { return true }
func (c connLog) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c connLog) WithGroup(string) slog.Handler            { return c }

func (c connLog) Handle(_ context.Context, rec slog.Record) error {
	if !strings.HasSuffix(rec.Message, "the broker") && !strings.Contains(rec.Message, "cannot reach the broker") {
		return nil
	}
	var b strings.Builder
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%q", a.Key, a.Value.String())
		return true
	})
	select {
	case c <- b.String():
	default:
		panic("connLog: more than its buffer of reports")
	}
	return nil
}

// publishUntil publishes one job through cl in the background until the
// returned cancel, returning Publish's error on the channel.
func publishUntil(cl *client.Client) (context.CancelFunc, <-chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cl.Publish(ctx, &client.Message{Queue: "q", Payload: []byte("ünïcode job")})
		done <- err
	}()
	return cancel, done
}

// wantReport fails unless line has every one of want.
func wantReport(t *testing.T, line string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(line, w) {
			t.Fatalf("the client reported %s; want it to say %q", line, w)
		}
	}
}

// A client that disagrees with the broker on TLS waits, as every call
// waits for the broker, but says why instead of waiting in silence: the
// cause gRPC saw and what usually fixes it.
func TestSDKSaysWhyItCannotConnect(t *testing.T) {
	t.Parallel()
	tb := tlsSetup(t)
	pem, err := os.ReadFile(tb.ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	plainAddr, _ := serveAt(t)

	for _, c := range []struct {
		name, addr string
		opts       []client.Option
		want       []string
	}{
		{"plaintext to a TLS broker", tb.addr, nil, []string{"server preface", "if it serves TLS, dial it WithTLS"}},
		{"TLS to a plaintext broker", plainAddr, []client.Option{client.WithTLS(&tls.Config{RootCAs: pool, ServerName: "localhost"})},
			[]string{"first record does not look like a TLS handshake", "does not serve TLS: dial it without WithTLS"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			logs := make(connLog, 16)
			cl, err := client.Dial(context.Background(), c.addr, append(c.opts, client.WithLogger(slog.New(logs)))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			cancel, done := publishUntil(cl)
			wantReport(t, within(t, logs, "the client's report"), append([]string{"cannot reach the broker", c.addr}, c.want...)...)
			cancel()
			if err := within(t, done, "Publish to return"); status.Code(err) != codes.Canceled {
				t.Fatalf("Publish returned %v, want Canceled: the job cannot have been taken", err)
			}
		})
	}
}

// A client started before its broker says once that it cannot reach it,
// however often it tries again, and says when it gets through; the call
// that waited then goes through.
func TestSDKReportsBrokerDownOnceThenUp(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	dialed, attempts := dialSignal()
	logs := make(connLog, 16)
	fast := grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: time.Millisecond, Multiplier: 1, MaxDelay: time.Millisecond},
		MinConnectTimeout: time.Second,
	})
	cl, err := client.Dial(context.Background(), addr, client.WithLogger(slog.New(logs)), client.WithDialOptions(dialed, fast))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cancel, done := publishUntil(cl)
	defer cancel()
	wantReport(t, within(t, logs, "the first report"), "cannot reach the broker", "connection refused", addr)
	for range 20 {
		within(t, attempts, "another connection attempt")
	}
	select {
	case line := <-logs:
		t.Fatalf("a failing connection was reported again with the same cause: %s", line)
	default:
	}

	stop := serveOn(t, addr)
	defer stop()
	if err := within(t, done, "the waiting Publish"); err != nil {
		t.Fatalf("Publish once the broker is up: %v", err)
	}
	wantReport(t, within(t, logs, "the recovery report"), "connected to the broker", addr)
}

// serveAt runs a plaintext broker on a loopback port until the test ends.
func serveAt(t *testing.T) (string, *broker.Broker) {
	t.Helper()
	addr, _, b := serveStoppable(t, broker.Config{})
	return addr, b
}
