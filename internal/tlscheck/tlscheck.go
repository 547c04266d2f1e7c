// Package tlscheck tells from a failed gRPC connection's cause whether the
// client and the server disagree on TLS, the commonest reason a client
// that dials the right address never gets through. The admin CLI words
// its own advice from it; the SDK, which imports nothing internal, keeps a
// copy of the rule that its tests hold to this one.
package tlscheck

import "strings"

// Mismatch reports whether cause, the message of a connection's failure,
// says the client (using TLS or not, as clientTLS says) and the server
// disagree on TLS: a plaintext client whose server closes the connection
// before its HTTP/2 preface (it waited for a handshake), or a TLS client
// whose server answered in plaintext.
func Mismatch(cause string, clientTLS bool) bool {
	if clientTLS {
		return strings.Contains(cause, "first record does not look like a TLS handshake")
	}
	return strings.Contains(cause, "server preface")
}
