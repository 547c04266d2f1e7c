package metrics

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/sched"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// TestCollector drives a broker through a publish, a delivery, an ack and a
// dead letter and checks what the collector exports, and that the metrics
// pass Prometheus's own lint.
func TestCollector(t *testing.T) {
	t.Parallel()
	b, err := broker.New(broker.Config{
		Clock:  clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	if _, err := b.Publish(
		&broker.Message{Queue: "jobs", Producer: "p", JobType: "a", Payload: []byte("x")},
		&broker.Message{Queue: "jobs", Producer: "p", JobType: "b", Payload: []byte("y")},
		&broker.Message{Queue: "jobs", Producer: "p", JobType: "c", Payload: []byte("z")},
	); err != nil {
		t.Fatal(err)
	}
	c, err := b.Subscribe("jobs", "w", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	d1, err := c.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(d1.ID, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	d2, err := c.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Nack(d2.ID, broker.NackDeadLetter, 0, "poison"); err != nil {
		t.Fatal(err)
	}

	col := New(b)
	want := `
# HELP harbinger_published_total Jobs published.
# TYPE harbinger_published_total counter
harbinger_published_total{queue="jobs"} 3
# HELP harbinger_acks_total Jobs acked.
# TYPE harbinger_acks_total counter
harbinger_acks_total{queue="jobs"} 1
# HELP harbinger_dead_letters Jobs in the dead-letter list.
# TYPE harbinger_dead_letters gauge
harbinger_dead_letters{queue="jobs"} 1
# HELP harbinger_consumers Open consumers.
# TYPE harbinger_consumers gauge
harbinger_consumers{queue="jobs"} 1
# HELP harbinger_predictor_observations_total Durations the predictor learned from.
# TYPE harbinger_predictor_observations_total counter
harbinger_predictor_observations_total{queue="jobs"} 1
# HELP harbinger_broker_draining 1 while the broker shuts down.
# TYPE harbinger_broker_draining gauge
harbinger_broker_draining 0
`
	if err := testutil.CollectAndCompare(col, strings.NewReader(want),
		"harbinger_published_total", "harbinger_acks_total", "harbinger_dead_letters",
		"harbinger_consumers", "harbinger_predictor_observations_total", "harbinger_broker_draining"); err != nil {
		t.Error(err)
	}
	// One job is still ready, at whatever tier it took.
	if n := testutil.CollectAndCount(col, "harbinger_ready"); n < 1 {
		t.Errorf("harbinger_ready has %d series, want one per tier", n)
	}
	problems, err := testutil.CollectAndLint(col)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func newBroker(t *testing.T) *broker.Broker {
	t.Helper()
	b, err := broker.New(broker.Config{
		Clock:  clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	return b
}

// work publishes one job per job type, in order, then takes each in turn
// (without waiting: it must be ready), checks it is the next one published,
// and acks it with the duration took returns for it.
func work(t *testing.T, b *broker.Broker, c *broker.Consumer, jobTypes []string, took func(i int, jobType string) time.Duration) {
	t.Helper()
	for _, jt := range jobTypes {
		if _, err := b.Publish(&broker.Message{Queue: "jobs", Producer: "p", JobType: jt}); err != nil {
			t.Fatal(err)
		}
	}
	ready, cancel := context.WithCancel(context.Background())
	cancel()
	for i, jt := range jobTypes {
		d, err := c.Next(ready)
		if err != nil {
			t.Fatalf("job %d not ready: %v", i, err)
		}
		if d.JobType != jt {
			t.Fatalf("job %d is %q, want %q (FIFO)", i, d.JobType, jt)
		}
		if err := c.Ack(d.ID, took(i, jt)); err != nil {
			t.Fatal(err)
		}
		c.AddCredit(1)
	}
}

// With only cold predictions scored there is no tier accuracy or MAE to
// report, so the series are absent rather than a perfect 1.
func TestTierAccuracyAbsentWhenCold(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	c, err := b.Subscribe("jobs", "w", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	work(t, b, c, []string{"a", "b", "c", "a"}, func(int, string) time.Duration { return 20 * time.Millisecond })
	col := New(b)
	for _, name := range []string{"harbinger_tier_accuracy_ratio", "harbinger_prediction_mae_seconds"} {
		if n := testutil.CollectAndCount(col, name); n != 0 {
			t.Errorf("%s has %d series after cold predictions only, want none", name, n)
		}
	}
	if n := testutil.CollectAndCount(col, "harbinger_predictor_observations_total"); n != 1 {
		t.Errorf("harbinger_predictor_observations_total has %d series, want 1", n)
	}
}

// A shadow queue serves FIFO from one level but predicts the configured
// three tiers and reports their accuracy. Two keys, of 1 ms and 500 ms
// jobs: once warm, their predictions take tiers 0 and 2 (worked by hand in
// sched.TestShadowPredictsTiers), and 3 of 16 durations are off.
func TestShadowTierAccuracy(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	if _, err := b.Declare("jobs", broker.QueueConfig{Policy: sched.Shadow}); err != nil {
		t.Fatal(err)
	}
	c, err := b.Subscribe("jobs", "w", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cost := map[string]time.Duration{"fast": time.Millisecond, "slow": 500 * time.Millisecond}
	var jobTypes []string
	for range 8 {
		jobTypes = append(jobTypes, "fast", "slow")
	}
	work(t, b, c, jobTypes[:6], func(_ int, jt string) time.Duration { return cost[jt] }) // cold: not scored
	work(t, b, c, jobTypes, func(i int, jt string) time.Duration {
		switch i {
		case 2, 6: // fast jobs that ran long: tier 2, predicted 0
			return 500 * time.Millisecond
		case 9: // a slow job that ran 5 ms: tier 1, predicted 2
			return 5 * time.Millisecond
		}
		return cost[jt]
	})
	// MAE: |1-500| ms twice and |500-5| ms once, over 16.
	want := `
# HELP harbinger_tier_accuracy_ratio Fraction of routed predictions (warm keys, not spread-gated) whose tier matched the tier their job's duration earned; absent until there is one.
# TYPE harbinger_tier_accuracy_ratio gauge
harbinger_tier_accuracy_ratio{queue="jobs"} 0.8125
# HELP harbinger_prediction_mae_seconds Mean absolute error of routed predictions.
# TYPE harbinger_prediction_mae_seconds gauge
harbinger_prediction_mae_seconds{queue="jobs"} 0.0933125
`
	col := New(b)
	if err := testutil.CollectAndCompare(col, strings.NewReader(want),
		"harbinger_tier_accuracy_ratio", "harbinger_prediction_mae_seconds"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(col, "harbinger_ready"); n != 1 {
		t.Errorf("harbinger_ready has %d series, want 1 (shadow routes on one level)", n)
	}
	problems, err := testutil.CollectAndLint(col)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// A durable broker exports its log's counters and fsync and wait
// histograms; a memory-mode one exports none of them.
func TestLogMetrics(t *testing.T) {
	t.Parallel()
	st, err := store.OpenFile(t.TempDir(), store.FileOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(broker.Config{
		Clock:  clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Store:  st,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()); _ = st.Close() })
	const n = 20
	for i := range n {
		// One publish at a time: each waits for its own fsync.
		if _, err := b.Publish(&broker.Message{Queue: "jobs", Producer: "p", JobType: "a", Payload: make([]byte, 1<<10+i)}); err != nil {
			t.Fatal(err)
		}
	}
	col := New(b)
	got := b.Stats().Log
	if got == nil || got.Records < n || got.Syncs == 0 || got.Syncs > got.Records {
		t.Fatalf("log stats after %d confirmed publishes: %+v", n, got)
	}
	want := fmt.Sprintf(`
# HELP harbinger_log_records_total Records appended to the write-ahead log (absent with --memory).
# TYPE harbinger_log_records_total counter
harbinger_log_records_total %d
`, got.Records)
	if err := testutil.CollectAndCompare(col, strings.NewReader(want), "harbinger_log_records_total"); err != nil {
		t.Error(err)
	}
	for _, name := range []string{"harbinger_log_appended_bytes_total", "harbinger_log_size_bytes", "harbinger_log_fsync_duration_seconds", "harbinger_log_publish_wait_seconds"} {
		if k := testutil.CollectAndCount(col, name); k != 1 {
			t.Errorf("%s: %d series, want 1", name, k)
		}
	}
	problems, err := testutil.CollectAndLint(col)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	if k := testutil.CollectAndCount(New(newBroker(t)), "harbinger_log_records_total", "harbinger_log_fsync_duration_seconds"); k != 0 {
		t.Errorf("a memory-mode broker exports %d log series, want none", k)
	}
}

// harbinger_oldest_wait_seconds follows the job that has waited longest on
// the broker's clock, whichever job the policy runs first, and is 0 once
// none waits.
func TestOldestWait(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b, err := broker.New(broker.Config{Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	col := New(b)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	oldest := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "harbinger_oldest_wait_seconds" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if l := m.GetLabel(); len(l) == 1 && l[0].GetValue() == "jobs" {
					return m.GetGauge().GetValue()
				}
			}
		}
		t.Fatal("no harbinger_oldest_wait_seconds series for the queue")
		return 0
	}
	publish := func(jt string) string {
		t.Helper()
		res, err := b.Publish(&broker.Message{Queue: "jobs", Producer: "p", JobType: jt, Payload: []byte("ü\xff")})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	first := publish("report")
	clk.Advance(90 * time.Second)
	publish("email")
	clk.Advance(30*time.Second + 250*time.Millisecond)
	if got := oldest(); got != 120.25 {
		t.Fatalf("oldest wait %v s, want 120.25 (the report's)", got)
	}
	c, err := b.Subscribe("jobs", "w", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d, err := c.Next(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := 120.25 // the email went first: the report still waits
	if d.ID == first {
		want = 30.25
	}
	if got := oldest(); got != want {
		t.Fatalf("after %s was delivered: oldest wait %v s, want %v", d.JobType, got, want)
	}
	if err := c.Ack(d.ID, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	c.AddCredit(1)
	if _, err := c.Next(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := oldest(); got != 0 {
		t.Fatalf("with nothing waiting: oldest wait %v s, want 0", got)
	}
}
