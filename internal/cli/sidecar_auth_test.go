package cli

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/auth"
	"github.com/harbinger-mq/harbinger/internal/auth/authtest"
	"github.com/harbinger-mq/harbinger/internal/rawproto"
	"github.com/harbinger-mq/harbinger/internal/server"
	"github.com/harbinger-mq/harbinger/internal/sidecar"
	"github.com/harbinger-mq/harbinger/rabbitmq"
)

func TestSidecarRefusesExposureWithoutAuthAndTLS(t *testing.T) {
	t.Parallel()
	var stderr strings.Builder
	err := runSidecar(t.Context(), []string{"-grpc-addr", "0.0.0.0:0", "-http-addr", "off", "-amqp-url", "-"}, &stderr, &stderr)
	if err == nil || !strings.Contains(err.Error(), "beyond loopback") {
		t.Fatalf("a sidecar on every interface without TLS or tokens: %v", err)
	}
}

// A sidecar reads HARBINGER_SIDECAR_<FLAG>, not serve's HARBINGER_<FLAG>:
// with serve's settings in the environment (every interface, serve's
// config file) it starts on its own address, and says once which of serve's
// variables it left alone; its own variable for the same flag is read
// (every interface without TLS or tokens is refused).
func TestSidecarEnvironmentIsItsOwn(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"HARBINGER_GRPC_ADDR":         "0.0.0.0:0",
		"HARBINGER_CONFIG":            "/nonexistent/serve.yaml",
		"HARBINGER_SIDECAR_GRPC_ADDR": "127.0.0.1:0",
		"HARBINGER_SIDECAR_HTTP_ADDR": "off",
		"HARBINGER_AMQP_URL":          "-",
	}
	ctx, cancel := context.WithCancel(t.Context())
	r, w := io.Pipe()
	var logs strings.Builder
	done := make(chan error, 1)
	go func() {
		done <- runSidecarEnv(ctx, nil, func(k string) string { return env[k] }, w, &logs)
		w.Close()
	}()
	line, err := bufio.NewReader(r).ReadString('\n')
	cancel()
	go io.Copy(io.Discard, r)
	if err := <-done; err != nil {
		t.Fatalf("with serve's settings in the environment: %v", err)
	}
	if err != nil || !strings.HasPrefix(line, "harbinger sidecar: gRPC on 127.0.0.1:") || !strings.Contains(line, "metrics off") {
		t.Errorf("the sidecar said %q (%v): want its own address from HARBINGER_SIDECAR_GRPC_ADDR and metrics off", line, err)
	}
	if l := logs.String(); !strings.Contains(l, "HARBINGER_CONFIG,HARBINGER_GRPC_ADDR") || strings.Contains(l, "HARBINGER_AMQP_URL") {
		t.Errorf("the log does not name exactly serve's variables it ignored: %s", l)
	}

	env["HARBINGER_SIDECAR_GRPC_ADDR"] = "0.0.0.0:0"
	err = runSidecarEnv(t.Context(), nil, func(k string) string { return env[k] }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "beyond loopback") {
		t.Fatalf("HARBINGER_SIDECAR_GRPC_ADDR on every interface without TLS or tokens: %v", err)
	}
}

// The line a sidecar prints when it is up says where it listens, and that
// its metrics are off when -http-addr is off.
func TestSidecarSaysWhereItListens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ http, want string }{
		{"off", "metrics off,"},
		{"127.0.0.1:0", "metrics on 127.0.0.1:"},
	} {
		ctx, cancel := context.WithCancel(t.Context())
		r, w := io.Pipe()
		done := make(chan error, 1)
		go func() {
			done <- runSidecar(ctx, []string{"-grpc-addr", "127.0.0.1:0", "-http-addr", tc.http, "-amqp-url", "-"}, w, io.Discard)
			w.Close()
		}()
		line, err := bufio.NewReader(r).ReadString('\n')
		cancel()
		go io.Copy(io.Discard, r)
		if err := <-done; err != nil {
			t.Fatalf("-http-addr %s: %v", tc.http, err)
		}
		if err != nil || !strings.HasPrefix(line, "harbinger sidecar: gRPC on 127.0.0.1:") || !strings.Contains(line, tc.want) {
			t.Errorf("-http-addr %s: the sidecar said %q (%v), want %q in it", tc.http, line, err, tc.want)
		}
	}
}

// A Predict whose producer is not UTF-8 (a client whose protobuf does not
// check) is answered InvalidArgument naming the field, as the broker
// answers it, not Internal.
func TestSidecarRefusesInvalidUTF8(t *testing.T) {
	t.Parallel()
	s, err := sidecar.Start(sidecar.Config{Listen: "127.0.0.1:0", HTTP: "-", AMQPURL: "-", GRPCOptions: server.UTF8Options()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := rawproto.BadUTF8(t, &pb.PredictRequest{Queue: "jobs", Producer: "wéb-@", JobType: "bild"}, map[string]string{"-@": "-\xff"})
	err = conn.Invoke(t.Context(), "/harbinger.v1.Predictor/Predict", req, new(pb.PredictResponse), rawproto.CallOption())
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "producer") {
		t.Fatalf("Predict with a producer that is not UTF-8: %v, want InvalidArgument naming the producer", err)
	}
	if _, err := pb.NewPredictorClient(conn).Predict(t.Context(), &pb.PredictRequest{Queue: "jobs", Producer: "wéb"}); err != nil {
		t.Fatalf("a valid Predict after it: %v", err)
	}
}

// A sidecar started with tokens asks every Predictor call for one.
func TestSidecarTokens(t *testing.T) {
	t.Parallel()
	path, toks := authtest.TokenFile(t, map[string][]string{"pub": {"publish:jobs"}})
	tokens, err := auth.LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sidecar.Start(sidecar.Config{Listen: "127.0.0.1:0", HTTP: "-", AMQPURL: "-", GRPCOptions: server.AuthOptions(tokens)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	call := func(token string) error {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if token != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(auth.Bearer{Token: token, Insecure: true}))
		}
		conn, err := grpc.NewClient(s.Addr(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = pb.NewPredictorClient(conn).Predict(context.Background(), &pb.PredictRequest{Queue: "jobs", Producer: "web"})
		return err
	}
	if code := status.Code(call("")); code != codes.Unauthenticated {
		t.Fatalf("no token: %v", code)
	}
	if err := call(toks["pub"]); err != nil {
		t.Fatalf("with the token: %v", err)
	}
}

// The sidecar's client (rabbitmq.DialSidecarOptions) takes a token.
func TestSidecarClientWithToken(t *testing.T) {
	t.Parallel()
	path, toks := authtest.TokenFile(t, map[string][]string{"app": {"publish:jobs", "consume:jobs"}})
	tokens, err := auth.LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sidecar.Start(sidecar.Config{Listen: "127.0.0.1:0", HTTP: "-", AMQPURL: "-", GRPCOptions: server.AuthOptions(tokens)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := rabbitmq.DialSidecarOptions(t.Context(), s.Addr(), rabbitmq.RemoteOptions{Token: toks["app"], Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Predict(t.Context(), rabbitmq.Key{Queue: "jobs", Producer: "web", JobType: "thumbnail"}); err != nil {
		t.Fatalf("predict with a token: %v", err)
	}
	if st := r.Stats(); st.Fallbacks != 0 {
		t.Fatalf("the call fell back: %+v", st)
	}
}

// -tls-client-ca without a certificate of the sidecar's own asks for
// mutual TLS that plaintext cannot give: serve refuses it, and the sidecar
// started in plaintext without a word, every caller let in.
func TestSidecarRefusesClientCAWithoutCert(t *testing.T) {
	t.Parallel()
	certs := authtest.NewCerts(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // a sidecar that starts anyway stops at once
	var stderr strings.Builder
	err := runSidecar(ctx, []string{"-grpc-addr", "127.0.0.1:0", "-http-addr", "off", "-amqp-url", "-", "-tls-client-ca", certs.CA}, io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "-tls-client-ca") {
		t.Fatalf("sidecar -tls-client-ca without -tls-cert: %v, want it refused naming -tls-client-ca", err)
	}
}
