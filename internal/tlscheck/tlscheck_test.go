package tlscheck

import "testing"

// The causes are gRPC's own words, as a plaintext client against a TLS
// server and a TLS client against a plaintext one see them
// (internal/server's TestSDKSaysWhyItCannotConnect gets them from real
// connections); anything else, or the right cause for the other side, is
// no mismatch.
func TestMismatch(t *testing.T) {
	t.Parallel()
	const (
		preface   = `connection error: desc = "error reading server preface: EOF"`
		handshake = `connection error: desc = "transport: authentication handshake failed: tls: first record does not look like a TLS handshake"`
		refused   = `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`
	)
	for _, c := range []struct {
		cause     string
		clientTLS bool
		want      bool
	}{
		{preface, false, true},
		{handshake, true, true},
		{preface, true, false},
		{handshake, false, false},
		{refused, false, false},
		{refused, true, false},
		{"", false, false},
	} {
		if got := Mismatch(c.cause, c.clientTLS); got != c.want {
			t.Errorf("Mismatch(%q, %v) = %v, want %v", c.cause, c.clientTLS, got, c.want)
		}
	}
}
