package metrics

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/clock"
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
