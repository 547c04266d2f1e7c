package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/client"
)

func TestRatiosBestOf(t *testing.T) {
	t.Parallel()
	reps := []map[string]float64{
		{"harbinger-durable": 900, "nats-jetstream": 100, "rabbitmq-quorum": 300, "redis-aof": 200, "harbinger": 10, "redis": 5},
		{"harbinger-durable": 1200, "nats-jetstream": 100, "rabbitmq-quorum": 200, "redis-aof": 400, "harbinger": 10, "redis": 4},
	}
	got := map[string]Ratio{}
	for _, r := range ratios(reps) {
		got[r.ID] = r
	}
	if r := got["durable_vs_best_durable"]; r.Median != 3 || r.Min != 3 || r.Max != 3 {
		t.Errorf("durable / best = %+v, want 3 in both repetitions (900/300, 1200/400)", r)
	}
	if r := got["harbinger_vs_redis"]; r.Median != 2.25 {
		t.Errorf("harbinger / redis median = %v, want 2.25 (of 2 and 2.5)", r.Median)
	}
	if _, ok := got["harbinger_vs_rabbitmq"]; ok {
		t.Error("a ratio with an arm that did not run was reported")
	}
}

func TestParseCostArms(t *testing.T) {
	t.Parallel()
	got, err := ParseCostArms("registered, harbinger-inprocess")
	if err != nil {
		t.Fatal(err)
	}
	want := append(ArmNames(CostArms), InProcessArm.Name)
	if fmt.Sprint(ArmNames(got)) != fmt.Sprint(want) {
		t.Errorf("ParseCostArms = %v, want %v", ArmNames(got), want)
	}
	got, err = ParseCostArms("durable,harbinger-durable")
	if err != nil || fmt.Sprint(ArmNames(got)) != fmt.Sprint(ArmNames(DurableArms)) {
		t.Errorf("ParseCostArms(durable) = %v, %v; want %v", ArmNames(got), err, ArmNames(DurableArms))
	}
	if _, err := ParseCostArms("harbinger-fifo"); err == nil {
		t.Error("ParseCostArms accepted a flow arm")
	}
}

func TestServeReady(t *testing.T) {
	t.Parallel()
	line := `{"time":"2026-01-01T00:00:00Z","level":"INFO","msg":"harbinger: serving","grpc":"127.0.0.1:40123","http":"127.0.0.1:40124"}`
	if addr, http, ok := serveReady(line); !ok || addr != "127.0.0.1:40123" || http != "127.0.0.1:40124" {
		t.Errorf("serveReady = %q, %q, %v", addr, http, ok)
	}
	for _, l := range []string{`{"msg":"harbinger: stopped"}`, "not json", `{"msg":"harbinger: serving"}`} {
		if _, _, ok := serveReady(l); ok {
			t.Errorf("serveReady accepted %q", l)
		}
	}
}

func TestProcAccounting(t *testing.T) {
	t.Parallel()
	// Burn a little CPU so the 10 ms ticks have something to count.
	deadline := time.Now().Add(30 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	cpu, err := procCPU(os.Getpid())
	if err != nil || cpu <= 0 {
		t.Errorf("procCPU(self) = %v, %v", cpu, err)
	}
	rss, err := procRSS(os.Getpid())
	if err != nil || rss < 1<<20 {
		t.Errorf("procRSS(self) = %d, %v", rss, err)
	}
	if v, err := statusKB("Name:\tx\nVmHWM:\t  2048 kB\n", "VmHWM:"); err != nil || v != 2048<<10 {
		t.Errorf("statusKB = %d, %v", v, err)
	}
}

// TestBareQueueSDK drives the bare queue through the client SDK, as the
// bare-grpc arm does: everything published is delivered once, in order.
func TestBareQueueSDK(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addrc := make(chan string, 1)
	sctx, stopServer := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- ServeBareQueue(sctx, "127.0.0.1:0", func(a string) { addrc <- a }) }()
	defer func() {
		stopServer()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()
	c, err := client.Dial(ctx, <-addrc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.DeclareQueue(ctx, "q", nil); err != nil {
		t.Fatal(err)
	}
	const n = 200
	p := c.NewProducer(client.ProducerConfig{})
	for i := range n {
		if _, err := p.Publish(ctx, &client.Message{Queue: "q", Payload: encodeBody(uint64(i), time.Now(), 64)}); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	if info, err := c.Queue(ctx, "q"); err != nil || info.Ready != n {
		t.Fatalf("Queue = %v, %v; want %d ready", info, err, n)
	}
	var mu sync.Mutex
	var got []uint64
	all := make(chan struct{})
	wctx, stopWorker := context.WithCancel(ctx)
	werr := make(chan error, 1)
	go func() {
		werr <- c.RunWorker(wctx, client.WorkerConfig{Queue: "q", Concurrency: 1, Prefetch: 1}, func(_ context.Context, d *client.Delivery) error {
			seq, _, _ := decodeBody(d.Payload)
			mu.Lock()
			defer mu.Unlock()
			got = append(got, seq)
			if len(got) == n {
				close(all)
			}
			return nil
		})
	}()
	select {
	case <-all:
	case <-ctx.Done():
		t.Fatalf("delivered %d of %d", len(got), n)
	}
	stopWorker()
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	for i, seq := range got {
		if seq != uint64(i) {
			t.Fatalf("delivery %d was message %d: not FIFO", i, seq)
		}
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
	f := logFigures(a, b, okA, okB, time.Second)
	if f == nil {
		t.Fatalf("no figures from %+v, %+v", a, b)
	}
	if a.slowSyncs != 1 || b.slowSyncs != 4 {
		t.Errorf("fsyncs over 10 ms: %v and %v, want 1 and 4", a.slowSyncs, b.slowSyncs)
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
	if logFigures(a, b, okA, false, time.Second) != nil || logFigures(a, a, true, true, time.Second) != nil {
		t.Error("figures from a missing sample or a window without fsyncs")
	}
}
