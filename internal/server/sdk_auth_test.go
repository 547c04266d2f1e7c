package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/auth"
	"github.com/harbinger-mq/harbinger/internal/auth/authtest"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// The SDK's WithToken reaches a broker that asks for tokens; without it, or
// with a token scoped elsewhere, calls are refused.
func TestSDKWithToken(t *testing.T) {
	t.Parallel()
	ab := authSetup(t)
	for _, c := range []struct {
		token string
		want  codes.Code
	}{
		{"", codes.Unauthenticated},
		{"not-a-token", codes.Unauthenticated},
		{ab.tokens["others"], codes.PermissionDenied},
		{ab.tokens["orders"], codes.OK},
	} {
		var opts []client.Option
		if c.token != "" {
			opts = append(opts, client.WithToken(c.token))
		}
		cl, err := client.Dial(context.Background(), ab.addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.Publish(t.Context(), &client.Message{Queue: "orders.new", Payload: []byte("x")})
		_ = cl.Close()
		if got := status.Code(err); got != c.want {
			t.Errorf("token %q: %v, want %v", c.token, err, c.want)
		}
	}
}

// WithTLS (and WithToken over it) reach a broker serving TLS.
func TestSDKWithTLS(t *testing.T) {
	t.Parallel()
	tb := tlsSetup(t)
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(tb.ca)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(pem)
	cl, err := client.Dial(context.Background(), tb.addr, client.WithTLS(&tls.Config{RootCAs: pool, ServerName: "localhost"}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if ids, err := cl.Publish(t.Context(), &client.Message{Queue: "q"}); err != nil || len(ids) != 1 {
		t.Fatalf("publish over TLS: %v, %v", ids, err)
	}
}

type tlsBundle struct{ addr, ca string }

// tlsSetup serves a broker over TLS with a fresh test CA.
func tlsSetup(t *testing.T) tlsBundle {
	t.Helper()
	certs := authtest.NewCerts(t)
	st, err := auth.LoadServerTLS(certs.ServerCert, certs.ServerKey, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := st.Config("h2")
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(broker.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(append(ServerOptions(broker.Config{}), grpc.Creds(credentials.NewTLS(cfg)))...)
	New(b, quiet).Register(gs)
	done := make(chan struct{})
	go func() { _ = gs.Serve(lis); close(done) }()
	t.Cleanup(func() {
		_ = b.Shutdown(context.Background())
		gs.Stop()
		<-done
	})
	return tlsBundle{addr: lis.Addr().String(), ca: certs.CA}
}
