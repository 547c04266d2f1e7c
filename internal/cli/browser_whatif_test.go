package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/harbinger-mq/harbinger/internal/broker"
)

// whatIfKeys are a shadow queue's traffic for the what-if walkthrough:
// many short emails and notifications behind slower image resizes, with
// a few exports, 0.8 of two workers.
var whatIfKeys = []liveKey{
	{"send-email", 120, 2500 * time.Microsecond},
	{"résumé.render", 20, 5 * time.Millisecond},
	{"image.resize", 13, 75 * time.Millisecond},
	{"report.export", 1, 200 * time.Millisecond},
}

// The path docs/try-your-traffic.md walks through, in a real browser
// against a live broker: a queue in shadow mode serves ten seconds of
// traffic in arrival order; its page's what-if panel replays that history
// in the background and shows what the default would have done, per key
// and as latency before and after; the queue is switched to the default
// with the command the panel gives, and its page then says so.
func TestWhatIfInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs ten seconds of live traffic")
	}
	t.Parallel()
	br := newBrowser(t)
	l := startLive(t, ServeConfig{})
	mustAdmin(t, l.grpc, "declare-queue", "emails", "policy=shadow")
	runLive(t, l.grpc, "", "emails", 2, liveWorkload(whatIfKeys, 10*time.Second))

	base := "http://" + l.http
	br.run(t, "open the queue's what-if panel",
		chromedp.Navigate(base+"/queues/emails"),
		chromedp.WaitVisible(css(`#whatif-run`)),
		chromedp.SetValue(css(`#whatif-window`), "15m"),
		chromedp.Click(css(`#whatif-run`)),
		// The replay runs in the background; the page refreshes itself
		// until it shows the result.
		chromedp.WaitVisible(css(`#whatif-summary`)),
		chromedp.WaitVisible(css(`#chart-whatif polyline[data-arm="fifo"]`)),
	)
	summary := get(t, br, "read the summary", chromedp.Text(css(`#whatif-summary`)))
	if !strings.Contains(summary, "shadow") || !strings.Contains(summary, "every job: mean ") {
		t.Errorf("summary: %q", summary)
	}
	keys := get(t, br, "read the keys", chromedp.Text(css(`#whatif-keys tbody`)))
	for _, k := range whatIfKeys {
		if !strings.Contains(keys, k.name+": ") {
			t.Errorf("the panel does not speak of %s: %q", k.name, keys)
		}
	}
	if !strings.Contains(keys, "send-email: mean -") {
		t.Errorf("the default does not cut send-email's mean: %q", keys)
	}
	cmd := get(t, br, "read the switch", chromedp.Text(css(`#whatif-switch code`)))
	if want := "harbinger admin declare-queue emails policy=" + broker.DefaultPolicy + " shadow=false"; cmd != want {
		t.Fatalf("switch command %q, want %q", cmd, want)
	}
	br.run(t, "scroll to the panel", chromedp.ScrollIntoView(css(`#whatif`)))
	br.shot(t, "dashboard-whatif")

	// The switch, as the panel says.
	args := strings.Fields(strings.TrimPrefix(cmd, "harbinger admin "))
	mustAdmin(t, l.grpc, args...)
	br.run(t, "the queue's page after the switch",
		chromedp.Navigate(base+"/queues/emails"),
		chromedp.WaitVisible(css(`#settings`)),
	)
	if s := get(t, br, "read the settings", chromedp.Text(css(`#settings`))); !strings.Contains(s, broker.DefaultPolicy) || strings.Contains(s, "shadow") {
		t.Errorf("after the switch the settings read %q", s)
	}
	br.noErrors(t)
}
