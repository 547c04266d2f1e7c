// Package metrics exports the broker's state to Prometheus. The Collector
// reads the broker's inspector at scrape time, so the broker never imports
// Prometheus and nothing is counted twice.
package metrics

import (
	"math"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// Inspector is the part of the broker the collector reads.
type Inspector interface {
	Queues() []broker.QueueInfo
	Stats() broker.Stats
}

// Collector is a prometheus.Collector over a broker's inspector.
type Collector struct {
	in Inspector

	published, delivered, acked, nacked, redelivered *prometheus.Desc
	deadLettered, expired, badDurations              *prometheus.Desc
	ready, inFlight, delayed, deadLetters, consumers *prometheus.Desc
	oldestWait                                       *prometheus.Desc
	duration, tierAccuracy, mae, keys, observations  *prometheus.Desc
	runTime                                          *prometheus.Desc
	groupRunning, groupWaiting, groupLimit           *prometheus.Desc
	groupShare, groupThrottled, reserved             *prometheus.Desc
	brokerConsumers, brokerInFlight, draining        *prometheus.Desc
	logRecords, logBytes, logSize, logSync, logWait  *prometheus.Desc
}

// New returns a Collector reading in.
func New(in Inspector) *Collector {
	q := []string{"queue"}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("harbinger_"+name, help, labels, nil)
	}
	return &Collector{
		in:              in,
		published:       d("published_total", "Jobs published.", q...),
		delivered:       d("deliveries_total", "Jobs delivered to consumers, redeliveries included.", q...),
		acked:           d("acks_total", "Jobs acked.", q...),
		nacked:          d("nacks_total", "Jobs nacked.", q...),
		redelivered:     d("redeliveries_total", "Deliveries after a job's first.", q...),
		deadLettered:    d("dead_letters_total", "Jobs moved to the dead-letter list.", q...),
		expired:         d("expired_total", "Jobs whose TTL passed while waiting.", q...),
		badDurations:    d("bad_durations_total", "Acks whose duration the predictor refused.", q...),
		ready:           d("ready", "Jobs waiting, per tier.", "queue", "tier"),
		inFlight:        d("in_flight", "Jobs delivered and not yet settled.", q...),
		oldestWait:      d("oldest_wait_seconds", "How long the job that has waited longest has waited so far (to the millisecond), 0 when none waits: a shortest-first broker's starvation signal and a stalled consumer's.", q...),
		delayed:         d("delayed", "Nacked jobs waiting out their delay.", q...),
		deadLetters:     d("dead_letters", "Jobs in the dead-letter list.", q...),
		consumers:       d("consumers", "Open consumers.", q...),
		duration:        d("job_duration_seconds", "Predicted and actual durations of acked jobs.", "queue", "kind"),
		runTime:         d("job_run_seconds", "Run time of jobs acked since the broker started: median and 99th percentile, measured by a DDSketch within 1% relative error (the buckets of job_duration_seconds are coarser).", q...),
		tierAccuracy:    d("tier_accuracy_ratio", "Fraction of routed predictions (warm keys, not spread-gated) whose tier matched the tier their job's duration earned; absent until there is one.", q...),
		mae:             d("prediction_mae_seconds", "Mean absolute error of routed predictions.", q...),
		keys:            d("predictor_keys", "Predictor keys tracked.", q...),
		observations:    d("predictor_observations_total", "Durations the predictor learned from.", q...),
		brokerConsumers: d("broker_consumers", "Open consumers across all queues."),
		brokerInFlight:  d("broker_in_flight", "Jobs in flight across all queues."),
		draining:        d("broker_draining", "1 while the broker shuts down."),
		logRecords:      d("log_records_total", "Records appended to the write-ahead log (absent with --memory)."),
		logBytes:        d("log_appended_bytes_total", "Bytes appended to the write-ahead log, as encoded."),
		logSize:         d("log_size_bytes", "Bytes the write-ahead log takes on disk now."),
		logSync:         d("log_fsync_duration_seconds", "Durations of the fsyncs that make the log's records durable; one fsync covers every record appended while the one before ran."),
		groupRunning:    d("group_running", "Jobs running per group of a queue with limits or fair shares (the busiest 100 groups).", "queue", "group"),
		groupWaiting:    d("group_waiting", "Jobs waiting per group of a queue with limits or fair shares.", "queue", "group"),
		groupLimit:      d("group_limit", "The concurrency limit on a group's own key, where one is declared.", "queue", "group"),
		groupShare:      d("group_work_share_ratio", "A group's share of the worker time spent on its queue's jobs that ended in the last minute.", "queue", "group"),
		groupThrottled:  d("group_throttled_total", "Jobs of a group that found a key of theirs at its limit or out of tokens.", "queue", "group"),
		reserved:        d("fair_reserved_total", "Times a worker was left free for a queue's fair-share reservation.", q...),
		logWait:         d("log_publish_wait_seconds", "How long publishes (and checkpoints) waited for their records to be durable, for those that had to wait."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.published, c.delivered, c.acked, c.nacked, c.redelivered, c.deadLettered, c.expired,
		c.badDurations, c.ready, c.inFlight, c.delayed, c.deadLetters, c.consumers, c.duration,
		c.tierAccuracy, c.mae, c.keys, c.observations, c.brokerConsumers, c.brokerInFlight, c.draining,
		c.logRecords, c.logBytes, c.logSize, c.logSync, c.logWait, c.oldestWait, c.runTime,
		c.groupRunning, c.groupWaiting, c.groupLimit, c.groupShare, c.groupThrottled, c.reserved,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.in.Stats()
	ch <- prometheus.MustNewConstMetric(c.brokerConsumers, prometheus.GaugeValue, float64(st.Consumers))
	ch <- prometheus.MustNewConstMetric(c.brokerInFlight, prometheus.GaugeValue, float64(st.InFlight))
	drain := 0.0
	if st.Draining {
		drain = 1
	}
	ch <- prometheus.MustNewConstMetric(c.draining, prometheus.GaugeValue, drain)
	if l := st.Log; l != nil {
		ch <- prometheus.MustNewConstMetric(c.logRecords, prometheus.CounterValue, float64(l.Records))
		ch <- prometheus.MustNewConstMetric(c.logBytes, prometheus.CounterValue, float64(l.Bytes))
		ch <- prometheus.MustNewConstMetric(c.logSize, prometheus.GaugeValue, float64(l.Size))
		ch <- prometheus.MustNewConstHistogram(c.logSync, l.Syncs, l.SyncTime.Seconds(), latencyBuckets(&l.SyncHist))
		ch <- prometheus.MustNewConstHistogram(c.logWait, l.Waits, l.WaitTime.Seconds(), latencyBuckets(&l.WaitHist))
	}
	for _, q := range c.in.Queues() {
		counter := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), q.Name)
		}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, q.Name)
		}
		counter(c.published, q.Published)
		counter(c.delivered, q.Delivered)
		counter(c.acked, q.Acked)
		counter(c.nacked, q.Nacked)
		counter(c.redelivered, q.Redelivered)
		counter(c.deadLettered, q.DeadLettered)
		counter(c.expired, q.Expired)
		counter(c.badDurations, q.BadDurations)
		counter(c.observations, q.Predictor.Observations)
		for tier, n := range q.DepthPerTier {
			ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, float64(n), q.Name, strconv.Itoa(tier))
		}
		if q.Groups != nil {
			counter(c.reserved, q.Reserved)
		}
		for _, g := range q.Groups {
			gg := func(d *prometheus.Desc, t prometheus.ValueType, v float64) {
				ch <- prometheus.MustNewConstMetric(d, t, v, q.Name, strings.ToValidUTF8(g.Name, "\uFFFD"))
			}
			gg(c.groupRunning, prometheus.GaugeValue, float64(g.Running))
			gg(c.groupWaiting, prometheus.GaugeValue, float64(g.Waiting))
			if g.Limit > 0 {
				gg(c.groupLimit, prometheus.GaugeValue, float64(g.Limit))
			}
			gg(c.groupShare, prometheus.GaugeValue, g.WorkShare)
			gg(c.groupThrottled, prometheus.CounterValue, float64(g.Throttled))
		}
		gauge(c.inFlight, float64(q.InFlight))
		gauge(c.oldestWait, q.OldestWait.Seconds())
		gauge(c.delayed, float64(q.Delayed))
		gauge(c.deadLetters, float64(q.DeadLetters))
		gauge(c.consumers, float64(q.Consumers))
		gauge(c.keys, float64(q.Predictor.Keys))
		// Absent, not NaN or 1, until a routed prediction has been scored:
		// a cold key's default tier says nothing of the predictor, and an
		// absent series is what alerting rules and dashboards handle best.
		if q.Predictor.TierSamples > 0 && !math.IsNaN(q.Predictor.TierAccuracy) {
			gauge(c.tierAccuracy, q.Predictor.TierAccuracy)
		}
		if q.Predictor.MAESamples > 0 {
			gauge(c.mae, q.Predictor.MAE.Seconds())
		}
		h := q.Durations
		if r := q.RunTime; r.Count > 0 {
			ch <- prometheus.MustNewConstSummary(c.runTime, r.Count, h.ActualSum,
				map[float64]float64{0.5: r.P50.Seconds(), 0.99: r.P99.Seconds()}, q.Name)
		}
		ch <- prometheus.MustNewConstHistogram(c.duration, h.Count, h.PredictedSum, cumulative(h.Predicted), q.Name, "predicted")
		ch <- prometheus.MustNewConstHistogram(c.duration, h.Count, h.ActualSum, cumulative(h.Actual), q.Name, "actual")
	}
}

// latencyBuckets turns a store's latency histogram into Prometheus's
// cumulative buckets, in seconds.
func latencyBuckets(h *store.LatencyHist) map[float64]uint64 {
	out := make(map[float64]uint64, len(store.LatencyBounds))
	var sum uint64
	for i, ub := range store.LatencyBounds {
		sum += h[i]
		out[ub.Seconds()] = sum
	}
	return out
}

// cumulative turns per-bucket counts into Prometheus's cumulative buckets.
func cumulative(counts []uint64) map[float64]uint64 {
	out := make(map[float64]uint64, len(broker.HistogramBounds))
	var sum uint64
	for i, ub := range broker.HistogramBounds {
		if i < len(counts) {
			sum += counts[i]
		}
		out[ub] = sum
	}
	return out
}
