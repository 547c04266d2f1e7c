package harness

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/fair"
)

func harbingerForTest(t *testing.T) Driver {
	t.Helper()
	d := NewHarbinger(HarbingerOptions{})
	t.Cleanup(func() { d.Close() })
	return d
}

// The predictor figures read through ListKeys (a serve process's) add up
// to the broker's own (an in-process broker's), on many keys with
// non-ASCII names, routed and cold predictions, and one key that never
// completes anything.
func TestKeysStatsMatchBroker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, err := harbingerForTest(t).Setup(ctx, QueueSpec{Name: "keys-stats", Policy: PolicyPredictive})
	if err != nil {
		t.Fatal(err)
	}
	hq := q.(*HarbingerQueue)
	b := hq.s.b
	types := []string{"thumbnail", "rapport.pdf", "メール", "größe", "export"}
	c, err := b.Subscribe("keys-stats", "w", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Rounds of publishes, each consumed before the next is published, so
	// that later rounds are predicted from what earlier ones taught.
	for round := range 20 {
		var msgs []*broker.Message
		for i := range 200 {
			msgs = append(msgs, &broker.Message{Queue: "keys-stats", Producer: fmt.Sprint("web-", i%3), JobType: types[i%len(types)],
				Payload: make([]byte, 1+(i*37)%4096)})
		}
		if round == 10 {
			msgs = append(msgs, &broker.Message{Queue: "keys-stats", Producer: "never", JobType: "acked", Payload: []byte("x")})
		}
		if _, err := b.Publish(msgs...); err != nil {
			t.Fatal(err)
		}
		for i := range msgs {
			d, err := c.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			c.AddCredit(1) // the credit an ack's answer grants, as the server does
			if d.Producer == "never" {
				continue // left in flight: predicted, never scored
			}
			// Each type's cost differs, with some noise, so tiers and errors vary.
			cost := time.Duration(len(d.JobType)*len(d.JobType))*time.Millisecond + time.Duration((round+i)%7)*time.Millisecond
			if err := c.Ack(d.ID, cost); err != nil {
				t.Fatal(err)
			}
		}
	}
	wantMAE, wantAcc := hq.PredictorStats(ctx)
	gotMAE, gotAcc := hq.keysStats(ctx)
	if math.IsNaN(wantMAE) || math.IsNaN(wantAcc) {
		t.Fatalf("the broker scored nothing: MAE %v, accuracy %v", wantMAE, wantAcc)
	}
	if math.Abs(gotMAE-wantMAE) > 1e-3*wantMAE || math.Abs(gotAcc-wantAcc) > 1e-9 {
		t.Errorf("through ListKeys: MAE %.6f ms, accuracy %.6f; the broker's own: %.6f ms, %.6f", gotMAE, gotAcc, wantMAE, wantAcc)
	}
}

// The log's figures come from two scrapes of a durable broker's /metrics:
// the text exposition is parsed as Prometheus does, and the window's
// differences give fsyncs, publishes and records per fsync.
func TestLogFigures(t *testing.T) {
	t.Parallel()
	page := func(records, syncs, slow, syncSec, waits, waitSec float64) string {
		return fmt.Sprintf(`# HELP harbinger_log_records_total Records appended.
# TYPE harbinger_log_records_total counter
harbinger_log_records_total %v
# HELP harbinger_log_fsync_duration_seconds Fsyncs.
# TYPE harbinger_log_fsync_duration_seconds histogram
harbinger_log_fsync_duration_seconds_bucket{le="0.001"} %v
harbinger_log_fsync_duration_seconds_bucket{le="0.01"} %v
harbinger_log_fsync_duration_seconds_bucket{le="+Inf"} %v
harbinger_log_fsync_duration_seconds_sum %v
harbinger_log_fsync_duration_seconds_count %v
# HELP harbinger_log_publish_wait_seconds Waits.
# TYPE harbinger_log_publish_wait_seconds histogram
harbinger_log_publish_wait_seconds_bucket{le="+Inf"} %v
harbinger_log_publish_wait_seconds_sum %v
harbinger_log_publish_wait_seconds_count %v
# HELP harbinger_published_total Jobs published.
# TYPE harbinger_published_total counter
harbinger_published_total{queue="q"} 7
`, records, syncs-slow, syncs-slow, syncs, syncSec, syncs, waits, waitSec, waits)
	}
	pages := []string{page(100, 10, 1, 0.002, 30, 0.009), page(1300, 110, 4, 0.032, 430, 0.329)}
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, pages[min(n.Add(1)-1, 1)])
	}))
	defer srv.Close()
	a, okA := scrapeLog(t.Context(), srv.URL)
	b, okB := scrapeLog(t.Context(), srv.URL)
	f := LogFiguresBetween(a, b, okA, okB, time.Second)
	if f == nil {
		t.Fatalf("no figures from %+v, %+v", a, b)
	}
	if a.SlowSyncs != 1 || b.SlowSyncs != 4 {
		t.Errorf("fsyncs over 10 ms: %v and %v, want 1 and 4", a.SlowSyncs, b.SlowSyncs)
	}
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-6*math.Max(1, want) }
	if !near(f.PublishesPerSync, 4) || !near(f.RecordsPerSync, 12) || !near(f.SyncUS, 300) || !near(f.WaitUS, 800) || !near(f.SyncShare, 0.03) {
		t.Errorf("figures %+v, want 4 publishes and 12 records per fsync, fsync 300 µs, wait 800 µs, 3%% in fsync", f)
	}
	// A broker without a log (memory mode) has none of the series.
	none := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "# TYPE harbinger_published_total counter\nharbinger_published_total{queue=\"q\"} 7\n")
	}))
	defer none.Close()
	if _, ok := scrapeLog(t.Context(), none.URL); ok {
		t.Error("a page without the log's series gave a sample")
	}
	if LogFiguresBetween(a, b, okA, false, time.Second) != nil || LogFiguresBetween(a, a, true, true, time.Second) != nil {
		t.Error("figures from a missing sample or a window without fsyncs")
	}
}

// Each policy declares what it names: PolicyFair is the broker's default
// policy with fair shares between producers and the default reservation;
// the others declare no grouping.
func TestSetupPolicies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := harbingerForTest(t)
	policies := map[string]string{}
	for _, tc := range []struct {
		policy, groupBy string
	}{
		{PolicyPredictive, ""},
		{PolicyFair, "producer"},
		{PolicyFIFO, ""},
	} {
		q, err := d.Setup(ctx, QueueSpec{Name: "policy-" + tc.policy, Policy: tc.policy})
		if err != nil {
			t.Fatal(err)
		}
		info, err := q.(*HarbingerQueue).Client().Queue(ctx, "policy-"+tc.policy)
		if err != nil {
			t.Fatal(err)
		}
		cfg := info.GetConfig()
		if cfg.GetGroupBy() != tc.groupBy || cfg.GetNoReserve() {
			t.Errorf("%s: group_by %q, no_reserve %v; want %q and the reservation on", tc.policy, cfg.GetGroupBy(), cfg.GetNoReserve(), tc.groupBy)
		}
		policies[tc.policy] = cfg.GetPolicy()
		if err := q.Teardown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if policies[PolicyFair] != policies[PolicyPredictive] {
		t.Errorf("fair runs policy %q, predictive %q: want the same", policies[PolicyFair], policies[PolicyPredictive])
	}

	// QueueSpec.Fair's settings are what the fair queue is declared with;
	// the others keep the broker's defaults.
	q, err := d.Setup(ctx, QueueSpec{Name: "policy-fair-set", Policy: PolicyFair, Fair: FairSettings{Reserve: 1, ReserveAbove: 1.5}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := q.(*HarbingerQueue).Client().Queue(ctx, "policy-fair-set")
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.GetConfig()
	if cfg.GetReserve() != 1 || cfg.GetReserveAbove() != 1.5 || cfg.GetReserveWindow().AsDuration() != fair.DefaultReserveWindow || cfg.GetGroupBy() != "producer" {
		t.Errorf("declared with %v", cfg)
	}
	if err := q.Teardown(ctx); err != nil {
		t.Fatal(err)
	}
}

// recordingDriver notes the queue RunArm asks for and refuses it.
type recordingDriver struct {
	Driver
	spec QueueSpec
}

func (d *recordingDriver) Setup(_ context.Context, spec QueueSpec) (Queue, error) {
	d.spec = spec
	return nil, ErrPolicy
}

// RunArm declares its queue with the run's fair settings.
func TestRunArmPassesFairSettings(t *testing.T) {
	t.Parallel()
	d := &recordingDriver{}
	want := FairSettings{Reserve: 3, ReserveAbove: 2}
	_, err := RunArm(t.Context(), d, RunSpec{Arm: Arm{Name: "fair", Policy: PolicyFair}, Workers: 1, TimeScale: 1, Fair: want}, nil)
	if !errors.Is(err, ErrPolicy) || d.spec.Fair != want || d.spec.Policy != PolicyFair {
		t.Fatalf("RunArm = %v, declared %+v; want %+v", err, d.spec, want)
	}
	if got := want.String(); got != "reserve 3, reserve_above 2" {
		t.Errorf("settings described as %q", got)
	}
	if got := (FairSettings{}).String(); got != "" {
		t.Errorf("the defaults described as %q", got)
	}
}
