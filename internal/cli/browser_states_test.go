package cli

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// within checks that text, a figure as a page or table writes it ("200
// ms", "0.2", "201.3"), is want within the run-time sketch's relative
// error; scale turns its number into milliseconds.
func within(t *testing.T, what, text string, scale, want float64) {
	t.Helper()
	m := regexp.MustCompile(`[0-9]+(\.[0-9]+)?`).FindString(text)
	v, err := strconv.ParseFloat(m, 64)
	if err != nil {
		t.Errorf("%s: no figure in %q", what, text)
		return
	}
	if e := math.Abs(v*scale-want) / want; e > broker.QuantileAccuracy {
		t.Errorf("%s reads %q: %v ms, want %v ms within %.0f%%", what, text, v*scale, want, 100*broker.QuantileAccuracy)
	}
}

// Every state of a job on the dashboard, in a real browser against a real
// serve: a delayed job, a retry-pending one and completed ones are listed;
// one delayed job is run now; the depth chart has labelled axes; jobs that
// always take 200 ms show p50 and p99 of 200 ms (within the sketch's 1%)
// on the page, in `admin keys` and in /metrics. The screenshots are taken
// at 1400x1000 and at a phone's width.
func TestDashboardEveryStateInBrowser(t *testing.T) {
	t.Parallel()
	br := newBrowser(t)
	l := startLive(t, ServeConfig{})
	conn := dialRaw(t, l.grpc, "", nil)
	ctx := t.Context()
	admin, bc := pb.NewAdminClient(conn), pb.NewBrokerClient(conn)
	base := "http://" + l.http
	if _, err := admin.DeclareQueue(ctx, &pb.DeclareQueueRequest{Name: "reports", Config: &pb.QueueConfig{KeepDone: 50}}); err != nil {
		t.Fatal(err)
	}
	publish := func(msgs ...*pb.Message) []string {
		t.Helper()
		resp, err := bc.Publish(ctx, &pb.PublishRequest{Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range resp.Results {
			if r.Error != "" {
				t.Fatal(r.Error)
			}
			ids = append(ids, r.Id)
		}
		return ids
	}
	const runs = 40
	var msgs []*pb.Message
	for i := range runs + 1 {
		msgs = append(msgs, &pb.Message{Queue: "reports", Producer: "billing", JobType: "render", Payload: fmt.Appendf(nil, `{"invoice": %d}`, i)})
	}
	publish(msgs...)
	st, err := bc.Consume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Subscribe{Subscribe: &pb.Subscribe{Queue: "reports", Prefetch: 10, ConsumerName: "renderer"}}}); err != nil {
		t.Fatal(err)
	}
	var retrying string
	for got := 0; got < runs+1; {
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		d := resp.GetDelivery()
		if d == nil {
			continue
		}
		got++
		req := &pb.ConsumeRequest{Request: &pb.ConsumeRequest_Ack{Ack: &pb.Ack{Id: d.Id, Duration: durationpb.New(200 * time.Millisecond), Credit: 1}}}
		if retrying == "" {
			retrying = d.Id
			req = &pb.ConsumeRequest{Request: &pb.ConsumeRequest_Nack{Nack: &pb.Nack{Id: d.Id, Action: pb.NackAction_NACK_ACTION_REQUEUE_AFTER,
				Delay: durationpb.New(20 * time.Minute), Reason: "printer offline", Credit: 1}}}
		}
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := st.Recv(); err != nil {
			break
		}
	}
	delayed := publish(
		&pb.Message{Queue: "reports", Producer: "billing", JobType: "month-end", Delay: durationpb.New(10 * time.Minute)},
		&pb.Message{Queue: "reports", Producer: "billing", JobType: "month-end", Delay: durationpb.New(15 * time.Minute)},
	)
	publish(&pb.Message{Queue: "emails", Producer: "web", JobType: "welcome"}, &pb.Message{Queue: "emails", Producer: "web", JobType: "welcome"})

	br.run(t, "a wide window", chromedp.EmulateViewport(1400, 1000))
	// Every state on the jobs page.
	br.run(t, "jobs",
		chromedp.Navigate(base+"/queues/reports/jobs"),
		chromedp.WaitVisible(css(fmt.Sprintf(`#delayed-jobs tr[data-id=%q] [data-kind="retry"]`, retrying))),
		chromedp.WaitVisible(css(fmt.Sprintf(`#delayed-jobs tr[data-id=%q] [data-kind="delayed"]`, delayed[0]))),
		chromedp.WaitVisible(css(`#done-jobs [data-kind="done"]`)),
	)
	if done := get(t, br, "done rows", chromedp.Nodes(chromedp.CSSAll(`#done-jobs tbody tr[data-id]`))); len(done) != runs {
		t.Errorf("%d completed jobs listed, want %d", len(done), runs)
	}
	if txt := get(t, br, "the retry row", chromedp.Text(css(fmt.Sprintf(`#delayed-jobs tr[data-id=%q]`, retrying)))); !strings.Contains(txt, "1 of 5") || !strings.Contains(txt, "in 20") {
		t.Errorf("the retry-pending row reads %q: want attempt 1 of 5, due in 20 min", txt)
	}
	br.shot(t, "dashboard-jobs-states")
	br.run(t, "run a delayed job now",
		chromedp.Click(css(fmt.Sprintf(`button[data-run-now=%q]`, delayed[0]))),
		chromedp.WaitVisible(css(`.flash.ok`)),
		chromedp.WaitVisible(css(fmt.Sprintf(`#waiting-jobs tr[data-id=%q]`, delayed[0]))),
	)
	if j, err := admin.GetJob(ctx, &pb.GetJobRequest{Queue: "reports", Id: delayed[0]}); err != nil || j.State != "waiting" {
		t.Errorf("after Run now the broker says %v, %v", j.GetState(), err)
	}

	// The queue page: measured quantiles, and charts with labelled axes.
	br.run(t, "the queue's page",
		chromedp.Navigate(base+"/queues/reports"),
		chromedp.WaitVisible(css(`#chart-depth polyline`)),
	)
	p50, p99, _ := strings.Cut(get(t, br, "run p50 / p99", chromedp.Text(css(`#run-quantiles`))), "/")
	within(t, "run p50 on the page", p50, 1, 200)
	within(t, "run p99 on the page", p99, 1, 200)
	axes := get(t, br, "depth axes", chromedp.TextContent(css(`#chart-depth`)))
	for _, want := range []string{"jobs", "time (UTC)"} {
		if !strings.Contains(axes, want) {
			t.Errorf("the depth chart's axes read %q, want %q", axes, want)
		}
	}
	if ticks := get(t, br, "time ticks", chromedp.Nodes(chromedp.CSSAll(`#chart-depth text.tick.x`))); len(ticks) != 4 {
		t.Errorf("the depth chart has %d time ticks, want 4", len(ticks))
	}
	if ticks := get(t, br, "depth ticks", chromedp.Nodes(chromedp.CSSAll(`#chart-depth text.tick.y`))); len(ticks) != 3 {
		t.Errorf("the depth chart has %d depth ticks, want 3", len(ticks))
	}
	br.shot(t, "dashboard-queue-charts")

	// The home page: totals and charts across queues.
	br.run(t, "the queues page", chromedp.Navigate(base+"/"), chromedp.WaitVisible(css(`#chart-total-depth polyline`)))
	if got := get(t, br, "total delayed", chromedp.Text(css(`#total-delayed`))); got != "2" {
		t.Errorf("the home page's delayed total reads %q, want 2", got)
	}
	br.shot(t, "dashboard-home")

	// A phone's width: nothing wider than the screen but the tables,
	// which scroll in their own box.
	br.run(t, "a narrow window", chromedp.EmulateViewport(400, 900), chromedp.Navigate(base+"/queues/reports"), chromedp.WaitVisible(css(`#chart-depth polyline`)))
	if w := get(t, br, "page width", chromedp.Evaluate[int](`document.documentElement.scrollWidth`)); w > 400 {
		t.Errorf("at 400 px wide the page is %d px wide", w)
	}
	br.shot(t, "dashboard-narrow")

	// The same figures in `admin keys` and /metrics.
	keys := mustAdmin(t, l.grpc, "keys", "reports")
	r := row(t, keys, "billing")
	within(t, "admin keys p50", r[5], 1, 200)
	within(t, "admin keys p99", r[6], 1, 200)
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, q := range []string{"0.5", "0.99"} {
		m := regexp.MustCompile(`harbinger_job_run_seconds\{queue="reports",quantile="` + regexp.QuoteMeta(q) + `"\} (\S+)`).FindSubmatch(body)
		if m == nil {
			t.Errorf("/metrics has no run-time quantile %s for reports", q)
			continue
		}
		within(t, "/metrics quantile "+q, string(m[1]), 1000, 200)
	}
	br.noErrors(t)
}
