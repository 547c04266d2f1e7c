package tracing

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// DefaultServiceName is the service.name of the broker's spans unless
// OTEL_SERVICE_NAME says otherwise.
const DefaultServiceName = "harbinger"

// Endpoint is where an OTLP/gRPC collector listens, as serve's
// -otlp-endpoint takes it: host:port, or a URL whose scheme says whether
// to use TLS (http:// without, https:// with). A bare host:port is sent to
// without TLS only on loopback, as a collector beside the broker usually
// listens; beyond it, with TLS (OTEL_EXPORTER_OTLP_INSECURE=true turns
// that off, as it does for any OTLP exporter).
type Endpoint struct {
	HostPort  string
	Plaintext bool
}

// ParseEndpoint reads an -otlp-endpoint value.
func ParseEndpoint(s string) (Endpoint, error) {
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return Endpoint{}, fmt.Errorf("otlp endpoint %q: %v", s, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return Endpoint{}, fmt.Errorf("otlp endpoint %q: the scheme must be http (no TLS) or https", s)
		}
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "4317")
		}
		return Endpoint{HostPort: host, Plaintext: u.Scheme == "http"}, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || port == "" {
		return Endpoint{}, fmt.Errorf("otlp endpoint %q: want host:port (the collector's OTLP/gRPC port, usually 4317) or an http:// or https:// URL", s)
	}
	return Endpoint{HostPort: s, Plaintext: loopback(host)}, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Start sets up a tracer provider that batches spans and exports them by
// OTLP/gRPC to e. It does not connect yet: a collector that is down costs
// the spans it misses, reported through the OpenTelemetry error handler,
// never a publish. The OTEL_EXPORTER_OTLP_* variables (headers,
// certificates, timeout, compression), OTEL_TRACES_SAMPLER and
// OTEL_RESOURCE_ATTRIBUTES apply as for any OpenTelemetry SDK; the
// endpoint given here wins over the environment's. Shutdown flushes.
func Start(ctx context.Context, e Endpoint, version string) (*sdktrace.TracerProvider, error) {
	if e.HostPort == "" {
		return nil, errors.New("tracing: no OTLP endpoint")
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(e.HostPort)}
	if e.Plaintext {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", DefaultServiceName)}
	if version != "" {
		attrs = append(attrs, attribute.String("service.version", version))
	}
	// The environment's attributes come last, so OTEL_SERVICE_NAME wins.
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}
