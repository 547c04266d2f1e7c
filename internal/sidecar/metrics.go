package sidecar

import (
	"math"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exports a sidecar's figures to Prometheus, reading Stats at
// scrape time so that nothing else in the sidecar knows about Prometheus.
type collector struct {
	stats func() Stats

	keys, observations, rejected, evicted, mae, accuracy, boundary, predictions, cold                 *prometheus.Desc
	shared, sharedPredictions, batches, snapshots, caughtUp, connected, node, connects, held, backlog *prometheus.Desc
	reportCalls, reportItems                                                                          *prometheus.Desc
}

func newCollector(stats func() Stats) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &collector{
		stats:             stats,
		keys:              d("harbinger_predictor_keys", "Keys the predictor tracks."),
		observations:      d("harbinger_predictor_observations_total", "Durations folded into the predictor (local and shared)."),
		rejected:          d("harbinger_predictor_rejected_total", "Durations the predictor refused."),
		evicted:           d("harbinger_predictor_evicted_total", "Keys evicted to stay under the key limit."),
		mae:               d("harbinger_predictor_mae_seconds", "Mean absolute error of routed predictions."),
		accuracy:          d("harbinger_predictor_tier_accuracy", "Fraction of observed messages predicted into the right tier."),
		boundary:          d("harbinger_predictor_tier_boundary_seconds", "Upper duration bound of each tier but the last.", "tier"),
		predictions:       d("harbinger_predictor_predictions_total", "Predictions made, by tier.", "tier"),
		cold:              d("harbinger_predictor_cold_predictions_total", "Predictions that took the middle tier because the key was cold or too spread."),
		shared:            d("harbinger_sidecar_shared_observations_total", "Observations shared through RabbitMQ.", "direction"),
		sharedPredictions: d("harbinger_sidecar_shared_predictions_total", "Warm predictions shared through RabbitMQ for the fleet's tier windows.", "direction"),
		batches:           d("harbinger_sidecar_shared_batches_total", "Messages of observations and predictions sent through RabbitMQ."),
		snapshots:         d("harbinger_sidecar_snapshots_total", "Snapshots shared through RabbitMQ.", "direction"),
		caughtUp:          d("harbinger_sidecar_caught_up_keys_total", "Keys replayed from another sidecar's snapshot."),
		connected:         d("harbinger_sidecar_amqp_connected", "1 while the sidecar shares learning through RabbitMQ."),
		node:              d("harbinger_sidecar_amqp_node", "1 for the RabbitMQ node (host:port of --amqp-url) the sidecar shares through; absent while disconnected.", "node"),
		connects:          d("harbinger_sidecar_amqp_connections_total", "Connections made to RabbitMQ: one more after each reconnect, to the same node or another of --amqp-url's."),
		held:              d("harbinger_sidecar_held_total", "Long messages given a hold (--hold)."),
		reportCalls:       d("harbinger_sidecar_report_calls_total", "Report calls from clients, each a batch of completions and publishes."),
		reportItems:       d("harbinger_sidecar_report_items_total", "Completions and publishes the Report calls carried."),
		backlog:           d("harbinger_sidecar_backlog_seconds", "Predicted work published and not yet completed, for queues with attached handlers (--hold).", "queue"),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	p := s.Predictor
	gauge(c.keys, float64(p.Keys))
	counter(c.observations, p.Observations)
	counter(c.rejected, p.Rejected)
	counter(c.evicted, p.Evicted)
	if p.MAESamples > 0 {
		gauge(c.mae, p.MAE.Seconds())
	}
	if !math.IsNaN(p.TierAccuracy) {
		gauge(c.accuracy, p.TierAccuracy)
	}
	for i, b := range p.Boundaries {
		gauge(c.boundary, b.Seconds(), strconv.Itoa(i))
	}
	for i, n := range p.Predictions {
		counter(c.predictions, n, strconv.Itoa(i))
	}
	counter(c.cold, p.Cold)
	counter(c.shared, s.Share.Sent, "sent")
	counter(c.shared, s.Share.Received, "received")
	counter(c.shared, s.Share.SendErrors, "send_error")
	counter(c.sharedPredictions, s.Share.PredictionsSent, "sent")
	counter(c.sharedPredictions, s.Share.PredictionsRead, "received")
	counter(c.batches, s.Share.Batches)
	counter(c.snapshots, s.Share.SnapshotsSent, "sent")
	counter(c.snapshots, s.Share.SnapshotsRead, "received")
	counter(c.caughtUp, s.Share.CaughtUp)
	connected := 0.0
	if s.Connected {
		connected = 1
	}
	gauge(c.connected, connected)
	if s.Connected {
		gauge(c.node, 1, s.Node)
	}
	counter(c.connects, s.Connects)
	counter(c.held, p.Held)
	counter(c.reportCalls, s.Reports.ReportCalls)
	counter(c.reportItems, s.Reports.ReportItems)
	for q, w := range p.Backlog {
		gauge(c.backlog, w.Seconds(), q)
	}
}
