package web

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/broker"
)

// settle runs a workload through the broker on the fake clock, as workers
// would: jobs of keys short and long arrive at random, workers consumers
// take the next job whenever they are free and ack it after its time.
// The queue's history then holds what a live run's would.
func settle(t *testing.T, tb *testBundle, queue string, workers int, span time.Duration) int {
	t.Helper()
	type key struct {
		name string
		rate float64
		mean time.Duration
	}
	// Load 0.8 on two workers: 0.3 + 0.1 + 1.0 + 0.2 busy workers.
	keys := []key{{"send-email", 60, 5 * time.Millisecond}, {"発送.通知", 10, 10 * time.Millisecond},
		{"image.resize", 6.5, 150 * time.Millisecond}, {"report.export", 0.1, 2 * time.Second}}
	rng := rand.New(rand.NewPCG(7, 7))
	type arrival struct {
		at  time.Duration
		key int
		dur time.Duration
	}
	var arrivals []arrival
	for k, kk := range keys {
		for at := 0.0; ; {
			at += rng.ExpFloat64() / kk.rate
			if at >= span.Seconds() {
				break
			}
			arrivals = append(arrivals, arrival{time.Duration(at * 1e9), k, time.Duration(float64(kk.mean) * (0.5 + rng.Float64()))})
		}
	}
	slices.SortFunc(arrivals, func(a, b arrival) int { return int(a.at - b.at) })
	cs := make([]*broker.Consumer, workers)
	for i := range cs {
		c, err := tb.b.Subscribe(queue, fmt.Sprint("w", i), 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		cs[i] = c
	}
	type running struct {
		id   string
		done time.Time
		dur  time.Duration
	}
	busy := make([]*running, workers)
	durs := map[string]time.Duration{}
	start := tb.clk.Now()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Next then takes only a job that is ready

	next := 0
	for next < len(arrivals) || slices.ContainsFunc(busy, func(r *running) bool { return r != nil }) {
		// The next event: an arrival or a handler finishing.
		at := time.Time{}
		if next < len(arrivals) {
			at = start.Add(arrivals[next].at)
		}
		for _, r := range busy {
			if r != nil && (at.IsZero() || r.done.Before(at)) {
				at = r.done
			}
		}
		if d := at.Sub(tb.clk.Now()); d > 0 {
			tb.clk.Advance(d)
		}
		for i, r := range busy {
			if r != nil && !r.done.After(tb.clk.Now()) {
				if err := cs[i].Ack(r.id, r.dur); err != nil {
					t.Fatal(err)
				}
				cs[i].AddCredit(1)
				busy[i] = nil
			}
		}
		for next < len(arrivals) && !start.Add(arrivals[next].at).After(tb.clk.Now()) {
			a := arrivals[next]
			ids := tb.publish(t, &broker.Message{Queue: queue, Producer: "app", JobType: keys[a.key].name, Payload: []byte("x")})
			durs[ids[0]] = a.dur
			next++
		}
		for i := range busy {
			if busy[i] != nil {
				continue
			}
			d, err := cs[i].Next(ctx)
			if err != nil {
				break // nothing ready
			}
			busy[i] = &running{id: d.ID, done: tb.clk.Now().Add(durs[d.ID]), dur: durs[d.ID]}
		}
	}
	return len(arrivals)
}

// TestWhatIfPanel: a FIFO queue's last minutes replayed from the queue
// page: the first look starts the replay in the background, the next
// shows each key in words, the chart and how to switch, and the API has
// the same figures; a bad window is refused.
func TestWhatIfPanel(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	if _, err := tb.b.Declare("mail", broker.QueueConfig{Policy: "fifo"}); err != nil {
		t.Fatal(err)
	}
	n := settle(t, tb, "mail", 2, 5*time.Minute)
	code, body, _ := tb.do(t, "GET", "/queues/mail?whatif=15m", "", "", "")
	if code != http.StatusOK || !strings.Contains(body, `id="whatif-running"`) {
		t.Fatalf("first look: %d\n%s", code, body)
	}
	tb.web.whatIfs.wait()
	code, body, _ = tb.do(t, "GET", "/queues/mail?whatif=15m", "", "", "")
	if code != http.StatusOK {
		t.Fatalf("second look: %d", code)
	}
	for _, want := range []string{`id="whatif-summary"`, "send-email: mean -", "発送.通知", `id="chart-whatif"`, `data-arm="predictive"`, `data-arm="fifo"`,
		`data-arm="live"`, "harbinger admin declare-queue mail policy=bounded shadow=false", fmt.Sprintf("%d jobs, 2 workers", n)} {
		if !strings.Contains(body, want) {
			i := strings.Index(body, `id="whatif"`)
			t.Errorf("the panel lacks %q:\n%s", want, body[i:min(len(body), i+3000)])
		}
	}
	if testing.Verbose() {
		i := strings.Index(body, `id="whatif-summary"`)
		t.Logf("%s", body[i:strings.Index(body, `id="chart-whatif"`)])
	}
	if strings.Contains(body, `id="whatif-running"`) {
		t.Error("a fresh result started another replay")
	}
	if strings.Contains(body, `id="whatif-limits"`) {
		t.Error("a queue without limits is told the replay leaves its limits out")
	}
	code, body, _ = tb.do(t, "GET", "/api/v1/queues/mail/whatif?window=15m", "", "", "")
	var v WhatIfView
	if err := json.Unmarshal([]byte(body), &v); code != http.StatusOK || err != nil {
		t.Fatalf("API: %d %v\n%s", code, err, body)
	}
	if v.Jobs != n || v.Workers != 2 || !v.FIFOLike || len(v.Keys) != 4 || v.Result == nil {
		t.Fatalf("API: %+v", v)
	}
	for _, k := range v.Keys {
		if k.Key == "send-email" && !(k.MeanCut > 0) {
			t.Errorf("send-email's mean cut %v", k.MeanCut)
		}
	}
	for _, bad := range []string{"1s", "x", "1000h", "61m"} {
		if code, _, _ := tb.do(t, "GET", "/api/v1/queues/mail/whatif?window="+bad, "", "", ""); code != http.StatusBadRequest {
			t.Errorf("window %q: %d", bad, code)
		}
	}
	if code, _, _ := tb.do(t, "GET", "/api/v1/queues/nope/whatif", "", "", ""); code != http.StatusNotFound {
		t.Errorf("unknown queue: %d", code)
	}
	// A queue with limits is told the replay does not apply them.
	if _, err := tb.b.Declare("mail", broker.QueueConfig{Policy: "fifo", Limits: broker.Rules{"producer=100"}}); err != nil {
		t.Fatal(err)
	}
	tb.do(t, "GET", "/queues/mail?whatif=15m", "", "", "")
	tb.web.whatIfs.wait()
	if _, body, _ = tb.do(t, "GET", "/queues/mail?whatif=15m", "", "", ""); !strings.Contains(body, `id="whatif-limits"`) || !strings.Contains(body, `id="whatif-keys"`) {
		t.Error("a queue with limits is not told the replay leaves them out")
	}
	// Five minutes on, the result is stale: a look starts another replay
	// and shows the last meanwhile.
	tb.clk.Advance(6 * time.Minute)
	_, body, _ = tb.do(t, "GET", "/queues/mail?whatif=15m", "", "", "")
	if !strings.Contains(body, `id="whatif-running"`) || !strings.Contains(body, `id="whatif-summary"`) {
		t.Fatalf("stale result: no new replay shown beside the last")
	}
	tb.web.whatIfs.wait()
}

// TestWhatIfTooLittle: a queue with a few jobs says the history is too
// short rather than show figures.
func TestWhatIfTooLittle(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.teach(t, "q", 5, map[string]time.Duration{"a": 10 * time.Millisecond, "b": time.Second})
	tb.web.whatIf("q", time.Hour, broker.QueueConfig{Policy: "bounded"})
	tb.web.whatIfs.wait()
	v := tb.web.whatIf("q", time.Hour, broker.QueueConfig{Policy: "bounded"})
	if v.TooLittle == "" || len(v.Keys) != 0 {
		t.Fatalf("%+v", v)
	}
}
