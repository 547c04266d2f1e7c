package server

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/harbinger-mq/harbinger/internal/auth"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/metrics"
)

// HTTPOptions are what the HTTP port serves beyond /metrics and /healthz.
type HTTPOptions struct {
	// Tokens, when set, makes /metrics ask for a token that may read every
	// queue (Prometheus: authorization.credentials in the scrape config).
	// /healthz stays open for load balancers.
	Tokens *auth.Tokens
	// Dashboard, when set, serves every other path (internal/web).
	Dashboard http.Handler
}

// HTTPHandler serves /metrics and /healthz with no token asked.
func HTTPHandler(b *broker.Broker) http.Handler { return NewHTTPHandler(b, HTTPOptions{}) }

// NewHTTPHandler serves /metrics (Prometheus, read from the broker's
// inspector at scrape time, plus Go runtime metrics), /healthz (200 "ok"
// while the broker takes work; 503 and the reason once it drains or its
// log refuses writes, see broker.Health) and, with opts.Dashboard, the
// dashboard at /.
func NewHTTPHandler(b *broker.Broker, opts HTTPOptions) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.New(b), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	var m http.Handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	if opts.Tokens != nil {
		m = metricsAuth(opts.Tokens, m)
	}
	mux.Handle("GET /metrics", m)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if h := b.Health(); !h.OK() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(h.Reason() + "\n"))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	if opts.Dashboard != nil {
		mux.Handle("/", opts.Dashboard)
	}
	return mux
}

// metricsAuth lets through a token that may read every queue: the metrics
// name them all.
func metricsAuth(tokens *auth.Tokens, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g, err := tokens.Lookup(auth.HTTPToken(r))
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="harbinger"`)
			http.Error(w, "this broker asks for a token: send Authorization: Bearer TOKEN", http.StatusUnauthorized)
			return
		}
		if err := g.CheckAll(auth.Read); err != nil {
			http.Error(w, err.Error()+": /metrics covers every queue", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}
