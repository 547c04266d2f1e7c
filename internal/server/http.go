package server

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/metrics"
)

// HTTPHandler serves /metrics (Prometheus, read from the broker's inspector
// at scrape time, plus Go runtime metrics) and /healthz (200 while the
// broker takes work, 503 once it drains).
func HTTPHandler(b *broker.Broker) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.New(b), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if b.Draining() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("draining\n"))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}
