package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/auth/authtest"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

var screenshots = flag.String("screenshots", "", "directory to write the dashboard's screenshots to (docs/ in the repository)")

// chromium finds a Chromium to drive, or skips the test; with
// HARBINGER_REQUIRE_SERVICES=1 a missing one fails it instead.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "no Chromium on PATH (Debian: apt-get install -y chromium); the dashboard's browser tests need one"
	if os.Getenv("HARBINGER_REQUIRE_SERVICES") == "1" {
		t.Fatal(msg + ", and HARBINGER_REQUIRE_SERVICES=1")
	}
	t.Skip(msg)
	return ""
}

// browser is a headless Chromium tab that records every console error and
// uncaught exception of the pages it shows.
type browser struct {
	ctx context.Context

	mu     sync.Mutex
	errors []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root
		chromedp.WindowSize(1280, 860),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	b := &browser{ctx: ctx}
	// Starting the browser is the first Run, on a context without a
	// deadline of its own (its deadline would end the browser).
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.errors = append(b.errors, m.String()+" ("+m.URL+")")
				b.mu.Unlock()
			}
		}
	}()
	return b
}

func (b *browser) run(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// get runs one action that returns a value.
func get[T any](t *testing.T, b *browser, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

type css = chromedp.CSS

// noErrors fails the test if any page so far logged an error.
func (b *browser) noErrors(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errors {
		t.Errorf("the page logged an error: %s", e)
	}
}

// shot saves a screenshot of the viewport as docs/NAME.png when
// -screenshots is given.
func (b *browser) shot(t *testing.T, name string) {
	t.Helper()
	if *screenshots == "" {
		return
	}
	png := get(t, b, "screenshot "+name, chromedp.CaptureScreenshot())
	if err := os.WriteFile(filepath.Join(*screenshots, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The dashboard in a real browser against a live broker with tokens: sign
// in, see the queues and what was learned, pause and resume a queue, and
// requeue a dead letter, with no console error on any page.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	br := newBrowser(t)
	tokens, toks := authtest.TokenFile(t, map[string][]string{"ops": {"admin"}})
	l := startLive(t, ServeConfig{Tokens: tokens})
	conn := dialRaw(t, l.grpc, toks["ops"], nil)
	p := populate(t, conn)
	admin := pb.NewAdminClient(conn)
	base := "http://" + l.http

	// Signing in.
	br.run(t, "open the dashboard", chromedp.Navigate(base+"/"), chromedp.WaitVisible(css(`#token`)))
	if url := get(t, br, "location", chromedp.Location()); !strings.Contains(url, "/login") {
		t.Fatalf("without a token the dashboard showed %s, not the sign-in page", url)
	}
	br.shot(t, "dashboard-login")
	br.run(t, "sign in with a wrong token",
		chromedp.SendKeys(css(`#token`), "hbr_not-a-token"),
		chromedp.Click(css(`#signin`)),
		chromedp.WaitVisible(css(`.flash.err`)),
	)
	br.run(t, "sign in",
		chromedp.SendKeys(css(`#token`), toks["ops"]),
		chromedp.Click(css(`#signin`)),
		chromedp.WaitVisible(css(`tr[data-queue="media"]`)),
		chromedp.WaitVisible(css(`tr[data-queue="emails"]`)),
	)
	if row := get(t, br, "read the queues", chromedp.Text(css(`tr[data-queue="media"]`))); !strings.Contains(row, broker.DefaultPolicy) || !strings.Contains(row, "running") {
		t.Errorf("media's row: %q", row)
	}
	inFlight := fmt.Sprintf("%d/%d", p.inflight, p.maxInFlight)
	if got := get(t, br, "read media's in flight", chromedp.Text(css(`tr[data-queue="media"] td[data-col="in-flight"]`))); got != inFlight {
		t.Errorf("media's in flight reads %q, want %q (of its max_in_flight)", got, inFlight)
	}
	br.shot(t, "dashboard-queues")

	// What it learned, searched and sorted.
	br.run(t, "what it learned",
		chromedp.Navigate(base+"/queues/media/keys?sort=ewma&desc=1"),
		chromedp.WaitVisible(css(`tr[data-key="monthly-export"]`)),
	)
	keys := get(t, br, "read the keys", chromedp.Text(css(`#keys tbody`)))
	for _, j := range demoJobs {
		if !strings.Contains(keys, j.jobType) {
			t.Errorf("the keys page does not list %s: %q", j.jobType, keys)
		}
	}
	if f := strings.Fields(keys); len(f) < 2 || f[1] != "monthly-export" {
		t.Errorf("sorted by EWMA, descending, the keys read %q, want monthly-export first", keys)
	}
	br.shot(t, "dashboard-keys")
	br.run(t, "search the keys",
		chromedp.SetValue(css(`#search`), "thumb"),
		chromedp.Submit(css(`#search`)),
		chromedp.WaitNotPresent(css(`tr[data-key="monthly-export"]`)),
		chromedp.WaitVisible(css(`tr[data-key="thumbnail"]`)),
	)

	// Pausing and resuming through the queue's page.
	br.run(t, "pause",
		chromedp.Navigate(base+"/queues/media"),
		chromedp.WaitVisible(css(`#pause[data-action="pause"]`)),
		chromedp.Click(css(`#pause`)),
		chromedp.WaitVisible(css(`#pause[data-action="resume"]`)),
	)
	state := get(t, br, "read the state", chromedp.Text(css(`#state`)))
	if got := get(t, br, "read the in flight card", chromedp.Text(css(`#in-flight`))); got != inFlight {
		t.Errorf("media's page shows %q in flight, want %q", got, inFlight)
	}
	if q := queueInfo(t, admin, "media"); !q.Paused || state != "paused" {
		t.Fatalf("after Pause: broker says paused=%v, the page %q", q.Paused, state)
	}
	if *screenshots != "" {
		// The charts need two samples: wait for their lines.
		br.run(t, "charts", chromedp.WaitVisible(css(`svg.chart polyline`)))
	}
	br.shot(t, "dashboard-queue")
	br.run(t, "resume", chromedp.Click(css(`#pause`)), chromedp.WaitVisible(css(`#pause[data-action="pause"]`)))
	if q := queueInfo(t, admin, "media"); q.Paused {
		t.Fatal("after Resume the broker still says paused")
	}

	// The jobs, and requeueing the dead letter.
	requeue := css(fmt.Sprintf(`button[data-requeue=%q]`, p.dead))
	br.run(t, "jobs", chromedp.Navigate(base+"/queues/media/jobs"), chromedp.WaitVisible(requeue))
	if inflight := get(t, br, "in flight", chromedp.Text(css(`#inflight-jobs tbody`))); !strings.Contains(inflight, "worker-1") {
		t.Errorf("in flight: %q, want worker-1's jobs", inflight)
	}
	if rows := get(t, br, "waiting", chromedp.Nodes(chromedp.CSSAll(`#waiting-jobs tbody tr[data-id]`))); len(rows) != p.waiting {
		t.Errorf("%d waiting jobs listed, want %d", len(rows), p.waiting)
	}
	br.shot(t, "dashboard-jobs")
	br.run(t, "requeue the dead letter",
		chromedp.Click(requeue),
		chromedp.WaitVisible(css(`.flash.ok`)),
		chromedp.WaitNotPresent(requeue),
		chromedp.WaitVisible(css(fmt.Sprintf(`#waiting-jobs tr[data-id=%q]`, p.dead))),
	)
	dl, err := admin.ListDeadLetters(t.Context(), &pb.ListDeadLettersRequest{Queue: "media"})
	if err != nil || len(dl.DeadLetters) != 0 {
		t.Fatalf("after a requeue the broker lists %v dead letters (%v)", dl.GetDeadLetters(), err)
	}
	if q := queueInfo(t, admin, "media"); q.Ready != uint64(p.waiting+1) {
		t.Errorf("ready after the requeue = %d, want %d", q.Ready, p.waiting+1)
	}
	br.noErrors(t)
}

func queueInfo(t *testing.T, admin pb.AdminClient, name string) *pb.QueueInfo {
	t.Helper()
	resp, err := admin.ListQueues(t.Context(), &pb.ListQueuesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range resp.Queues {
		if q.Name == name {
			return q
		}
	}
	t.Fatalf("queue %s is not listed", name)
	return nil
}
