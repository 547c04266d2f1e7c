package cli

import (
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/auth"
	"github.com/harbinger-mq/harbinger/internal/auth/authtest"
)

// serve refuses to listen beyond loopback without TLS and auth, says why,
// and -insecure overrides it.
func TestServeRefusesExposureWithoutAuthAndTLS(t *testing.T) {
	t.Parallel()
	env := func(string) string { return "" }
	tests := []struct {
		args []string
		want string // in the error; "" means accepted
	}{
		{[]string{"-grpc-addr", "0.0.0.0:7070"}, "without TLS (-tls-cert and -tls-key) or auth"},
		{[]string{"-http-addr", ":7071"}, "-http-addr"},
		{[]string{"-grpc-addr", "0.0.0.0:7070", "-tls-cert", "c", "-tls-key", "k"}, "without auth"},
		{[]string{"-grpc-addr", "0.0.0.0:7070", "-tokens", "t"}, "without TLS"},
		{[]string{"-grpc-addr", "0.0.0.0:7070", "-http-addr", "off", "-tokens", "t", "-tls-cert", "c", "-tls-key", "k"}, ""},
		{[]string{"-grpc-addr", "0.0.0.0:7070", "-http-addr", "off", "-tls-client-ca", "ca", "-tls-cert", "c", "-tls-key", "k"}, ""},
		{[]string{"-grpc-addr", "0.0.0.0:7070", "-http-addr", "0.0.0.0:7071", "-insecure"}, ""},
		{[]string{"-grpc-addr", "[::1]:7070", "-http-addr", "localhost:7071"}, ""},
		{[]string{"-tls-cert", "c"}, "both -tls-cert and -tls-key"},
		{[]string{"-tls-client-ca", "ca"}, "needs -tls-cert"},
	}
	for _, tt := range tests {
		_, err := loadServeConfig(tt.args, env, io.Discard)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%v: %v", tt.args, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%v: error %v, want one saying %q", tt.args, err, tt.want)
		}
	}
	if _, err := loadServeConfig(nil, func(k string) string {
		return map[string]string{"HARBINGER_GRPC_ADDR": "0.0.0.0:1", "HARBINGER_INSECURE": "true"}[k]
	}, io.Discard); err != nil {
		t.Errorf("HARBINGER_INSECURE=true: %v", err)
	}
}

// serve with TLS and client certificates on both ports, and tokens: a
// client with the CA and a certificate gets in, one without is turned away,
// and SIGHUP reloads the token file.
func TestServeTLSAndTokens(t *testing.T) {
	certs := authtest.NewCerts(t)
	path, toks := authtest.TokenFile(t, map[string][]string{"ops": {"admin"}})
	l := startLive(t, ServeConfig{TLSCert: certs.ServerCert, TLSKey: certs.ServerKey, TLSClientCA: certs.CA, Tokens: path})
	good, err := auth.ClientTLS{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}.Config()
	if err != nil {
		t.Fatal(err)
	}
	noCert, err := auth.ClientTLS{CAFile: certs.CA}.Config()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	admin := pb.NewAdminClient(dialRaw(t, l.grpc, toks["ops"], good))
	if _, err := admin.ListQueues(ctx, &pb.ListQueuesRequest{}); err != nil {
		t.Fatalf("TLS client with a certificate and a token: %v", err)
	}
	if _, err := pb.NewAdminClient(dialRaw(t, l.grpc, "", good)).ListQueues(ctx, &pb.ListQueuesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("TLS without a token: %v, want Unauthenticated", err)
	}
	if _, err := pb.NewAdminClient(dialRaw(t, l.grpc, toks["ops"], noCert)).ListQueues(ctx, &pb.ListQueuesRequest{}); err == nil {
		t.Error("a client without a certificate got in")
	}
	if _, err := pb.NewAdminClient(dialRaw(t, l.grpc, toks["ops"], nil)).ListQueues(ctx, &pb.ListQueuesRequest{}); err == nil {
		t.Error("a plaintext client got in")
	}

	https := &http.Client{Transport: &http.Transport{TLSClientConfig: good}}
	get := func(cl *http.Client, token string) (int, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+l.http+"/api/v1/queues", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := cl.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := get(https, toks["ops"]); err != nil || code != 200 {
		t.Errorf("dashboard API over TLS: %d, %v", code, err)
	}
	if code, _ := get(https, ""); code != 401 {
		t.Errorf("dashboard API without a token: %d, want 401", code)
	}
	bare := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: noCert.RootCAs}}}
	if _, err := get(bare, toks["ops"]); err == nil {
		t.Error("an HTTPS client without a certificate got in")
	}

	// SIGHUP: a new file replaces the tokens.
	tok, _ := auth.NewToken()
	if err := os.WriteFile(path, []byte("tokens:\n"+auth.FileEntry("new", tok, []auth.Scope{{Perm: auth.Read}})), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	fresh := pb.NewAdminClient(dialRaw(t, l.grpc, tok, good))
	// The reload happens in serve's goroutine: wait for it by asking until
	// the new token is known (each answer is a signal, not a sleep).
	for {
		_, err := fresh.ListQueues(ctx, &pb.ListQueuesRequest{})
		if err == nil {
			break
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Fatal(err)
		}
	}
	if _, err := admin.ListQueues(ctx, &pb.ListQueuesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a token removed from the file still works after SIGHUP: %v", err)
	}
}
