package server

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Bounds on what a connection may hold of the broker before it has made
// a call, and while it makes none: the gRPC side's counterpart of the
// HTTP server's header and read timeouts.
const (
	// DefaultHandshakeTimeout bounds a new connection's TLS and HTTP/2
	// handshake, as the HTTP port's ReadHeaderTimeout bounds a request's
	// headers. gRPC's own bound is 120 s: of 500 sockets that connected
	// and sent nothing, none was closed within 40 s.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultMaxHeaderBytes bounds the metadata of one call (its header
	// list, uncompressed), which gRPC reads whole and keeps before any
	// interceptor runs, the token check included. gRPC's own bound is
	// 16 MiB: 32 calls with 8 MiB of metadata each, held open without a
	// request body and without a token, took a broker from 20 MB resident
	// to 1.29 GB. A token is under a hundred bytes.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultMaxIdle is how long a connection may go without a call open
	// before the broker closes it (a GOAWAY first; gRPC clients, the SDKs
	// among them, connect again at their next call). A worker waiting for
	// jobs has its Consume stream open, so it is never idle.
	DefaultMaxIdle = 5 * time.Minute
	// keepaliveTime is how long a connection may be quiet before the
	// broker pings it, and keepaliveTimeout how long it then waits for
	// the answer before dropping the connection, with its consumers.
	keepaliveTime    = time.Minute
	keepaliveTimeout = 20 * time.Second
)

// ConnConfig bounds each gRPC connection. Zero fields take the defaults
// above.
type ConnConfig struct {
	// HandshakeTimeout bounds a new connection's TLS and HTTP/2 handshake.
	HandshakeTimeout time.Duration
	// MaxHeaderBytes bounds one call's metadata; a call over it is reset
	// (RST_STREAM) before any of it is looked at.
	MaxHeaderBytes uint32
	// MaxIdle closes a connection that has had no call open this long.
	MaxIdle time.Duration
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c ConnConfig) WithDefaults() ConnConfig {
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if c.MaxIdle == 0 {
		c.MaxIdle = DefaultMaxIdle
	}
	return c
}

// ConnOptions are the gRPC server options that apply c: ServerOptions
// includes them with the defaults, and the sidecar's server takes them
// too. Options given after these replace them.
func ConnOptions(c ConnConfig) []grpc.ServerOption {
	c = c.WithDefaults()
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(c.HandshakeTimeout),
		grpc.MaxHeaderListSize(c.MaxHeaderBytes),
		// The broker pings a quiet client too, and drops one that does not
		// answer, with its consumers.
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time: keepaliveTime, Timeout: keepaliveTimeout, MaxConnectionIdle: c.MaxIdle,
		}),
	}
}
