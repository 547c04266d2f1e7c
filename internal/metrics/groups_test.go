package metrics

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/fair"
)

// A queue grouped by tenant with a limit per tenant exports each group's
// running, waiting, limit, share and throttled jobs.
func TestCollectorGroups(t *testing.T) {
	t.Parallel()
	b, err := broker.New(broker.Config{
		Clock:  clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	if _, err := b.Declare("reports", broker.QueueConfig{GroupBy: "tenant", Limits: broker.Rules{"tenant=1"}}); err != nil {
		t.Fatal(err)
	}
	for _, tn := range []string{"acme", "acme", "acme", "globex"} {
		m := &broker.Message{Queue: "reports", Producer: "p", JobType: "pdf", Headers: map[string]string{fair.TenantHeader: tn}}
		if _, err := b.Publish(m); err != nil {
			t.Fatal(err)
		}
	}
	c, err := b.Subscribe("reports", "w", 4)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 2 {
		if _, err := c.Next(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(New(b))
	want := `
# HELP harbinger_group_limit The concurrency limit on a group's own key, where one is declared.
# TYPE harbinger_group_limit gauge
harbinger_group_limit{group="acme",queue="reports"} 1
harbinger_group_limit{group="globex",queue="reports"} 1
# HELP harbinger_group_running Jobs running per group of a queue with limits or fair shares (the busiest 100 groups).
# TYPE harbinger_group_running gauge
harbinger_group_running{group="acme",queue="reports"} 1
harbinger_group_running{group="globex",queue="reports"} 1
# HELP harbinger_group_waiting Jobs waiting per group of a queue with limits or fair shares.
# TYPE harbinger_group_waiting gauge
harbinger_group_waiting{group="acme",queue="reports"} 2
harbinger_group_waiting{group="globex",queue="reports"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "harbinger_group_limit", "harbinger_group_running", "harbinger_group_waiting"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "harbinger_group_throttled_total", "harbinger_group_work_share_ratio", "harbinger_fair_reserved_total"); err != nil || n != 5 {
		t.Fatalf("%d group counter series, %v; want 5", n, err)
	}
}
