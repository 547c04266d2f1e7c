package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
)

// ServerTLS is a listener's TLS: a certificate and key from files, and
// optionally a CA whose client certificates are required (mutual TLS).
// Reload reads the certificate again, so a renewed one is served without a
// restart.
type ServerTLS struct {
	CertFile, KeyFile string
	ClientCAFile      string // when set, clients must present a certificate it signed

	cert atomic.Pointer[tls.Certificate]
}

// LoadServerTLS reads the files; certFile and keyFile are required.
func LoadServerTLS(certFile, keyFile, clientCAFile string) (*ServerTLS, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("auth: TLS needs both a certificate and a key file")
	}
	s := &ServerTLS{CertFile: certFile, KeyFile: keyFile, ClientCAFile: clientCAFile}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	if clientCAFile != "" {
		if _, err := loadPool(clientCAFile); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Reload reads the certificate and key again; on an error the one in
// force stays.
func (s *ServerTLS) Reload() error {
	c, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
	if err != nil {
		return fmt.Errorf("auth: TLS certificate %s and key %s: %w", s.CertFile, s.KeyFile, err)
	}
	s.cert.Store(&c)
	return nil
}

// Config is the tls.Config to serve with; nextProtos are the ALPN
// protocols ("h2" for gRPC, "h2", "http/1.1" for HTTP).
func (s *ServerTLS) Config(nextProtos ...string) (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.cert.Load(), nil
		},
	}
	if s.ClientCAFile != "" {
		pool, err := loadPool(s.ClientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ClientTLS is what a client of the broker (the sidecar, a tool, the SDK
// through client.WithDialOptions) needs to connect over TLS.
type ClientTLS struct {
	CAFile     string // trusted roots; empty uses the system's
	CertFile   string // a client certificate, for a broker that asks for one
	KeyFile    string
	ServerName string // overrides the name checked against the certificate
}

// Config builds the tls.Config.
func (c ClientTLS) Config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pool, err := loadPool(c.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, errors.New("auth: a client certificate needs both its certificate and key files")
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("auth: client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("auth: CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// Bearer sends a token with every RPC as "authorization: Bearer TOKEN". It
// is a grpc credentials.PerRPCCredentials: pass it with
// grpc.WithPerRPCCredentials (for the SDK, through client.WithDialOptions).
type Bearer struct {
	Token string
	// Insecure lets the token go over a connection without TLS, which
	// gRPC otherwise refuses; for loopback and tests only.
	Insecure bool
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b Bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.Token}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (b Bearer) RequireTransportSecurity() bool { return !b.Insecure }

// Loopback reports whether a listen address (host:port) binds only the
// loopback interface: localhost, 127.0.0.0/8 or ::1. An empty host, 0.0.0.0
// or :: binds every interface and is not.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
