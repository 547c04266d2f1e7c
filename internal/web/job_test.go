package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/harbinger-mq/harbinger/internal/broker"
)

// jobsInEachState leaves queue q with one job of each state and returns
// their ids. The fake clock starts at 00:00:00 and ends at 00:00:07.
func jobsInEachState(t *testing.T, tb *testBundle) (waiting, delayed, running, dead string) {
	t.Helper()
	if _, err := tb.b.Declare("q", broker.QueueConfig{MaxAttempts: 5, Lease: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	c, err := tb.b.Subscribe("q", "worker-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	next := func(m *broker.Message) string {
		t.Helper()
		tb.publish(t, m)
		d, err := c.Next(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if d.ID != m.ID {
			t.Fatalf("delivered %s, want %s", d.ID, m.ID)
		}
		return d.ID
	}
	// 00:00:00: dead-lettered on its first attempt.
	dead = next(&broker.Message{Queue: "q", Producer: "shop", JobType: "doomed"})
	if err := c.Nack(dead, broker.NackDeadLetter, 0, "broken: <b>bad</b>"); err != nil {
		t.Fatal(err)
	}
	c.AddCredit(1)
	// 00:00:01: delivered, and held.
	tb.clk.Advance(time.Second)
	running = next(&broker.Message{Queue: "q", Producer: "shop", JobType: "render"})
	// 00:00:03: one in line with a TTL, one due in ten minutes.
	tb.clk.Advance(2 * time.Second)
	ids, err := tb.b.Publish(
		&broker.Message{Queue: "q", Producer: "shop", JobType: "mail", TTL: time.Hour, Payload: []byte(`{"to":"a@example.com"}`)},
		&broker.Message{Queue: "q", Producer: "shop", JobType: "later", Delay: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tb.clk.Advance(4 * time.Second)
	return ids[0], ids[1], running, dead
}

// Each state's page shows the fields of that state, and only those; the
// JSON carries them with the others null, and the payload's size only.
func TestJobShowsItsState(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	waiting, delayed, running, dead := jobsInEachState(t, tb)
	for _, c := range []struct {
		id, state string
		fields    map[string]string // the td's id: what it shows
	}{
		{waiting, "waiting", map[string]string{
			"job-type": "mail", "attempts": "0 of 5", "published": "2026-01-01 00:00:03.000 UTC (4 s ago)",
			"enqueued": "2026-01-01 00:00:03.000 UTC (waited 4 s)", "expires": "2026-01-01 01:00:03.000 UTC (in 59.9 min)",
		}},
		{delayed, "delayed", map[string]string{
			"job-type": "later", "attempts": "0 of 5", "due": "2026-01-01 00:10:03.000 UTC (in 9.9 min)",
		}},
		{running, "running", map[string]string{
			"job-type": "render", "attempts": "1 of 5", "consumer": "worker-1",
			"leased": "2026-01-01 00:00:01.000 UTC (running for 6 s)", "lease-ends": "2026-01-01 00:00:31.000 UTC (in 24 s)",
		}},
		{dead, "dead", map[string]string{
			"job-type": "doomed", "attempts": "1 of 5", "reason": "nacked: broken: &lt;b&gt;bad&lt;/b&gt;",
			"dead-at": "2026-01-01 00:00:00.000 UTC (7 s ago)",
		}},
	} {
		code, page, _ := tb.do(t, "GET", "/queues/q/jobs/"+c.id, "", "", "")
		if code != 200 {
			t.Fatalf("the %s job's page: %d %s", c.state, code, page)
		}
		if got := element(t, page, `id="state">`, "</span>"); got != c.state {
			t.Errorf("the %s job's page says it is %q", c.state, got)
		}
		if got := element(t, page, `<code id="job-id">`, "</code>"); got != c.id {
			t.Errorf("the %s job's page shows the id %q, want %q", c.state, got, c.id)
		}
		for field, want := range c.fields {
			if got := element(t, page, `id="`+field+`"`, "</td>"); !strings.Contains(got, want) {
				t.Errorf("the %s job's %s shows %q, want %q", c.state, field, got, want)
			}
		}
		// The fields of the other states are not there.
		for _, other := range []string{"enqueued", "due", "consumer", "leased", "lease-ends", "reason", "dead-at"} {
			if _, ok := c.fields[other]; !ok && strings.Contains(page, `id="`+other+`"`) {
				t.Errorf("the %s job's page shows %s", c.state, other)
			}
		}
	}

	var jv JobView
	getJSON(t, tb, "/api/v1/queues/q/jobs/"+running, &jv)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if jv.State != "running" || jv.Consumer != "worker-1" || jv.Attempts != 1 || jv.MaxAttempts != 5 ||
		jv.LeasedAt == nil || !jv.LeasedAt.Equal(t0.Add(time.Second)) || jv.ElapsedMS == nil || *jv.ElapsedMS != 6000 ||
		jv.LeaseEnds == nil || !jv.LeaseEnds.Equal(t0.Add(31*time.Second)) ||
		jv.EnqueuedAt != nil || jv.WaitedMS != nil || jv.DueAt != nil || jv.DeadAt != nil || jv.Reason != "" {
		t.Errorf("the running job's JSON: %+v", jv)
	}
	jv = JobView{}
	getJSON(t, tb, "/api/v1/queues/q/jobs/"+waiting, &jv)
	if jv.State != "waiting" || jv.JobType != "mail" || jv.Producer != "shop" || jv.PayloadSize != 22 ||
		jv.EnqueuedAt == nil || !jv.EnqueuedAt.Equal(t0.Add(3*time.Second)) || jv.WaitedMS == nil || *jv.WaitedMS != 4000 ||
		jv.ExpiresAt == nil || !jv.ExpiresAt.Equal(t0.Add(time.Hour+3*time.Second)) || jv.LeaseEnds != nil || jv.Consumer != "" {
		t.Errorf("the waiting job's JSON: %+v", jv)
	}
	jv = JobView{}
	getJSON(t, tb, "/api/v1/queues/q/jobs/"+delayed, &jv)
	if jv.State != "delayed" || jv.DueAt == nil || !jv.DueAt.Equal(t0.Add(10*time.Minute+3*time.Second)) || jv.EnqueuedAt != nil {
		t.Errorf("the delayed job's JSON: %+v", jv)
	}
	jv = JobView{}
	getJSON(t, tb, "/api/v1/queues/q/jobs/"+dead, &jv)
	if jv.State != "dead" || jv.Reason != "nacked: broken: <b>bad</b>" || jv.DeadAt == nil || !jv.DeadAt.Equal(t0) || jv.Attempts != 1 {
		t.Errorf("the dead job's JSON: %+v", jv)
	}
	// The payload is left out, as for dead letters; headers are an object.
	var raw map[string]any
	getJSON(t, tb, "/api/v1/queues/q/jobs/"+waiting, &raw)
	if _, ok := raw["payload"]; ok || raw["payload_bytes"] != 22.0 || raw["headers"] == nil || raw["expires_at"] == nil || raw["due_at"] != nil {
		t.Errorf("the waiting job's JSON: %v", raw)
	}

	// The lists of jobs link each one to its page; the queue's page and
	// the jobs page have the lookup form.
	_, list, _ := tb.do(t, "GET", "/queues/q/jobs", "", "", "")
	for _, id := range []string{waiting, running, dead} {
		if !strings.Contains(list, `<a href="/queues/q/jobs/`+id+`" data-job="`+id+`">`) {
			t.Errorf("the jobs page does not link %s to its page", id)
		}
	}
	for _, p := range []string{"/queues/q", "/queues/q/jobs"} {
		if _, page, _ := tb.do(t, "GET", p, "", "", ""); !strings.Contains(page, `<form method="get" action="/queues/q/job" class="search" id="lookup">`) {
			t.Errorf("%s has no lookup form", p)
		}
	}
	// The form goes to the job's page.
	if code, _, h := tb.do(t, "GET", "/queues/q/job?id=+"+dead+"%20", "", "", ""); code != 303 || h.Get("Location") != "/queues/q/jobs/"+dead {
		t.Errorf("looking up %s: %d → %q", dead, code, h.Get("Location"))
	}
	if code, _, h := tb.do(t, "GET", "/queues/q/job?id=", "", "", ""); code != 303 || !strings.HasPrefix(h.Get("Location"), "/queues/q?error=") {
		t.Errorf("looking up no id: %d → %q, want back to the queue's page with an error", code, h.Get("Location"))
	}
}

// A payload of a mebibyte that is not UTF-8, with characters HTML and a
// terminal act on, shows as its first bytes escaped: the page stays small
// and holds none of them raw.
func TestJobPayloadIsCutAndEscaped(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	payload := bytes.Repeat([]byte{0xff, '<', 0x1b, 0xfe}, 1<<18)
	ids, err := tb.b.Publish(&broker.Message{Queue: "q", Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	code, page, _ := tb.do(t, "GET", "/queues/q/jobs/"+ids[0], "", "", "")
	if code != 200 {
		t.Fatalf("the job's page: %d %s", code, page)
	}
	if len(page) > 64<<10 {
		t.Errorf("the page of a 1 MiB payload is %d bytes", len(page))
	}
	if !utf8.ValidString(page) || strings.ContainsAny(page, "\x1b\x00") {
		t.Error("the page holds bytes of the payload raw")
	}
	if got, want := element(t, page, `<pre class="payload" id="payload">`, "</pre>"), strings.Repeat(`\xff&lt;\x1b\xfe`, PreviewBytes/4); got != want {
		t.Errorf("the preview is %d bytes, starting %.40q; want %d, starting %.40q", len(got), got, len(want), want)
	}
	if got := element(t, page, `id="payload-size">`, "</p>"); !strings.HasPrefix(got, "1048576 bytes; the first 4096 shown, the rest cut.") ||
		!strings.Contains(got, "3072 bytes or characters that are not printable text are shown as Go escapes") {
		t.Errorf("the payload's note: %q", got)
	}
	code, body, _ := tb.do(t, "GET", "/api/v1/queues/q/jobs/"+ids[0], "", "", "")
	if code != 200 || len(body) > 4<<10 || !strings.Contains(body, `"payload_bytes": 1048576`) {
		t.Errorf("the job's JSON: %d, %d bytes: %.400s", code, len(body), body)
	}
}

func TestPreviewAndEscape(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in    string
		lines bool
		want  string
		n     int
	}{
		{"plain text, é ✓", false, "plain text, é ✓", 0},
		{"a\nb\tc", false, `a\nb\tc`, 2},
		{"a\nb\tc", true, "a\nb\tc", 0},
		{"\x1b[31mred\u202eevil\u2028\x00", true, `\x1b[31mred\u202eevil\u2028\x00`, 4},
		{"\xff\xc3(\xe2\x82", false, `\xff\xc3(\xe2\x82`, 4},
		{"<script>&", false, "<script>&", 0}, // the template escapes these
	} {
		got, n, escaped := escape(c.in, len(c.in), c.lines)
		if got != c.want || n != len(c.in) || escaped != c.n {
			t.Errorf("escape(%q, lines %v) = %q, %d bytes, %d escapes; want %q, %d, %d", c.in, c.lines, got, n, escaped, c.want, len(c.in), c.n)
		}
	}
	// A character the limit falls inside is left out whole.
	p := preview([]byte(strings.Repeat("€", 2000)), PreviewBytes)
	if p.Text != strings.Repeat("€", 1365) || p.Shown != 4095 || !p.Cut || p.Escaped != 0 {
		t.Errorf("a preview of 6000 bytes of €: %d bytes shown, cut %v, %d escapes", p.Shown, p.Cut, p.Escaped)
	}
	if p := preview([]byte("short"), PreviewBytes); p.Text != "short" || p.Cut {
		t.Errorf("a short payload's preview: %+v", p)
	}
}

// Headers, the job type and the producer are escaped: text that looks like
// markup shows as text, and a bidirectional override or a newline as its
// escape.
func TestJobHeadersAreEscaped(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	headers := map[string]string{
		"<script>alert(1)</script>": `<img src=x onerror="alert(2)">`,
		"bidi":                      "abc\u202edef",
		"multi":                     "line1\nline2",
	}
	ids, err := tb.b.Publish(&broker.Message{Queue: "q", Producer: "<i>p</i>", JobType: "<b>t</b>", Headers: headers})
	if err != nil {
		t.Fatal(err)
	}
	code, page, _ := tb.do(t, "GET", "/queues/q/jobs/"+ids[0], "", "", "")
	if code != 200 {
		t.Fatalf("the job's page: %d %s", code, page)
	}
	for _, raw := range []string{"<script>alert", "<img", "<b>t", "<i>p", "\u202e", "line1\nline2"} {
		if strings.Contains(page, raw) {
			t.Errorf("the page holds %q raw", raw)
		}
	}
	table := element(t, page, `<table class="grid" id="headers">`, "</table>")
	for _, want := range []string{
		"<tr><td><code>&lt;script&gt;alert(1)&lt;/script&gt;</code></td><td class=\"value\"><code>&lt;img src=x onerror=&#34;alert(2)&#34;&gt;</code></td></tr>",
		`<tr><td><code>bidi</code></td><td class="value"><code>abc\u202edef</code></td></tr>`,
		`<tr><td><code>multi</code></td><td class="value"><code>line1\nline2</code></td></tr>`,
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the headers lack %s:\n%s", want, table)
		}
	}
	if got := element(t, page, `<td id="job-type">`, "</td>"); got != "&lt;b&gt;t&lt;/b&gt;" {
		t.Errorf("the job type shows as %q", got)
	}
	var jv JobView
	getJSON(t, tb, "/api/v1/queues/q/jobs/"+ids[0], &jv)
	if len(jv.Headers) != 3 || jv.Headers["<script>alert(1)</script>"] != headers["<script>alert(1)</script>"] || jv.Headers["bidi"] != "abc\u202edef" {
		t.Errorf("the JSON's headers: %q", jv.Headers)
	}
}

// A job the queue does not hold, whether it ended or never was, gets the
// not-found page and a 404; so does an unknown queue.
func TestJobNotFound(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ids := tb.publish(t, &broker.Message{Queue: "q"})
	c, d := tb.take(t, "q")
	if code, _, _ := tb.do(t, "GET", "/queues/q/jobs/"+ids[0], "", "", ""); code != 200 {
		t.Fatalf("the running job's page: %d", code)
	}
	if err := c.Ack(d.ID, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{ids[0], "never-was"} {
		code, page, h := tb.do(t, "GET", "/queues/q/jobs/"+id, "", "", "")
		if code != http.StatusNotFound || !strings.HasPrefix(h.Get("Content-Type"), "text/html") || h.Get("Cache-Control") != "no-store" {
			t.Errorf("the page of %s: %d (%s, %s), want a 404 page", id, code, h.Get("Content-Type"), h.Get("Cache-Control"))
		}
		msg := element(t, page, `id="not-found">`, "</p>")
		for _, want := range []string{"has ended (acked, cancelled, purged or dropped)", "or never existed"} {
			if !strings.Contains(msg, want) {
				t.Errorf("the page of %s says %q, lacking %q", id, msg, want)
			}
		}
		if got := element(t, page, `<code id="job-id">`, "</code>"); got != id || !strings.Contains(page, `id="lookup"`) {
			t.Errorf("the page of %s names %q, or has no lookup form", id, got)
		}
		code, body, _ := tb.do(t, "GET", "/api/v1/queues/q/jobs/"+id, "", "", "")
		var e struct{ Error string }
		if err := json.Unmarshal([]byte(body), &e); err != nil || code != http.StatusNotFound ||
			!strings.Contains(e.Error, fmt.Sprintf("holds no job %q (ended and not kept, purged, dropped or never published to it)", id)) {
			t.Errorf("the JSON of %s: %d %s", id, code, body)
		}
	}
	code, page, _ := tb.do(t, "GET", "/queues/nope/jobs/"+ids[0], "", "", "")
	if code != http.StatusNotFound || !strings.Contains(element(t, page, `id="error">`, "</p>"), `queue &#34;nope&#34; not found`) {
		t.Errorf("a job of an unknown queue: %d", code)
	}
	if code, body, _ := tb.do(t, "GET", "/api/v1/queues/nope/jobs/"+ids[0], "", "", ""); code != http.StatusNotFound || !strings.Contains(body, `queue \"nope\" not found`) {
		t.Errorf("a job of an unknown queue, as JSON: %d %s", code, body)
	}
}

// A job's page and JSON take read on its queue; a token without it learns
// nothing, not even whether the job exists.
func TestJobAsksForRead(t *testing.T) {
	t.Parallel()
	tb := setup(t, map[string][]string{"other": {"admin:other."}, "viewer": {"read:orders."}})
	ids, err := tb.b.Publish(&broker.Message{Queue: "orders.eu", JobType: "secret-type", Headers: map[string]string{"k": "secret-header"}})
	if err != nil {
		t.Fatal(err)
	}
	wrong := "hbr_" + strings.Repeat("a", 32)
	for _, id := range []string{ids[0], "never-was"} {
		for _, p := range []string{"/queues/orders.eu/jobs/" + id, "/api/v1/queues/orders.eu/jobs/" + id} {
			page := !strings.HasPrefix(p, "/api/")
			for _, tok := range []string{"", wrong} {
				code, _, h := tb.do(t, "GET", p, tok, "", "")
				if page && (code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/login")) {
					t.Errorf("GET %s with token %q: %d → %q, want a redirect to /login", p, tok, code, h.Get("Location"))
				}
				if !page && code != http.StatusUnauthorized {
					t.Errorf("GET %s with token %q: %d, want 401", p, tok, code)
				}
			}
			code, body, _ := tb.do(t, "GET", p, tb.tokens["other"], "", "")
			if code != http.StatusForbidden || strings.Contains(body, "secret") || strings.Contains(body, "holds no job") {
				t.Errorf("GET %s with a token for other queues: %d, want 403 saying nothing of the job: %s", p, code, body)
			}
			want := http.StatusOK
			if id == "never-was" {
				want = http.StatusNotFound
			}
			if code, body, _ := tb.do(t, "GET", p, tb.tokens["viewer"], "", ""); code != want {
				t.Errorf("GET %s as viewer: %d, want %d: %s", p, code, want, body)
			}
		}
	}
	if code, _, h := tb.do(t, "GET", "/queues/orders.eu/job?id="+ids[0], "", "", ""); code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/login") {
		t.Errorf("the lookup without a token: %d → %q", code, h.Get("Location"))
	}
}

// A queue named in any script, and an id with characters a URL treats
// apart, reach the broker as they are.
func TestJobNamedInAnyScript(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	const odd = "a/b?c=1&d#e%41 é+;"
	for _, name := range []string{"rapports-été", "注文/日本?x=1#2%41"} {
		ids, err := tb.b.Publish(&broker.Message{Queue: name, JobType: "t"})
		if err != nil {
			t.Fatal(err)
		}
		esc := url.PathEscape(name)
		_, list, _ := tb.do(t, "GET", "/queues/"+esc+"/jobs", "", "", "")
		link := "/queues/" + esc + "/jobs/" + ids[0]
		if !strings.Contains(list, `<a href="`+link+`"`) {
			t.Fatalf("%s's jobs page does not link to %s", name, link)
		}
		code, page, _ := tb.do(t, "GET", link, "", "", "")
		if code != 200 || element(t, page, `<code id="job-id">`, "</code>") != ids[0] || !strings.Contains(page, `<a href="/queues/`+esc+`">`) {
			t.Errorf("%s's job page: %d", name, code)
		}

		// The lookup form carries any id to the job's path, and the
		// broker is asked for that id, not a piece of it.
		code, _, h := tb.do(t, "GET", "/queues/"+esc+"/job?"+url.Values{"id": {odd}}.Encode(), "", "", "")
		want := "/queues/" + esc + "/jobs/" + url.PathEscape(odd)
		if loc := h.Get("Location"); code != 303 || loc != want {
			t.Fatalf("looking up %q in %s: %d → %q, want %q", odd, name, code, loc, want)
		}
		code, page, _ = tb.do(t, "GET", want, "", "", "")
		if code != http.StatusNotFound || element(t, page, `<code id="job-id">`, "</code>") != "a/b?c=1&amp;d#e%41 é&#43;;" {
			t.Errorf("%q in %s: %d, the page names %q", odd, name, code, element(t, page, `<code id="job-id">`, "</code>"))
		}
		code, body, _ := tb.do(t, "GET", "/api/v1/queues/"+esc+"/jobs/"+url.PathEscape(odd), "", "", "")
		var e struct{ Error string }
		if err := json.Unmarshal([]byte(body), &e); err != nil || code != 404 || !strings.Contains(e.Error, fmt.Sprintf("queue %q holds no job %q", name, odd)) {
			t.Errorf("%q in %s as JSON: %d %s", odd, name, code, body)
		}
		// A path cannot carry "." or ".." as a segment: the lookup
		// answers for them itself.
		for _, id := range []string{".", ".."} {
			code, page, _ := tb.do(t, "GET", "/queues/"+esc+"/job?id="+id, "", "", "")
			if code != http.StatusNotFound || element(t, page, `<code id="job-id">`, "</code>") != id {
				t.Errorf("looking up %q in %s: %d", id, name, code)
			}
		}
		// An id that is not UTF-8 is shown escaped.
		code, page, _ = tb.do(t, "GET", "/queues/"+esc+"/jobs/%FF%3Cx", "", "", "")
		if code != http.StatusNotFound || element(t, page, `<code id="job-id">`, "</code>") != `\xff&lt;x` || !utf8.ValidString(page) {
			t.Errorf("an id that is not UTF-8 in %s: %d", name, code)
		}
	}
}

// The job page offers the actions that fit the job's state, to an admin
// of its queue only: Cancel while it waits, is delayed or runs; Requeue
// and Drop once it is dead. Each form comes back to the job's page.
func TestJobPageOffersItsActions(t *testing.T) {
	t.Parallel()
	tb := setup(t, map[string][]string{"ops": {"admin:q"}, "viewer": {"read:q"}, "elsewhere": {"read:q", "admin:r"}})
	waiting, delayed, running, dead := jobsInEachState(t, tb)
	buttons := []string{"data-cancel", "data-requeue", "data-drop"}
	for _, c := range []struct {
		id, state string
		want      []string
	}{
		{waiting, "waiting", []string{"data-cancel"}},
		{delayed, "delayed", []string{"data-cancel"}},
		{running, "running", []string{"data-cancel"}},
		{dead, "dead", []string{"data-requeue", "data-drop"}},
	} {
		code, page, _ := tb.do(t, "GET", "/queues/q/jobs/"+c.id, tb.tokens["ops"], "", "")
		if code != 200 || element(t, page, `id="state">`, "</span>") != c.state {
			t.Fatalf("the %s job's page: %d", c.state, code)
		}
		for _, b := range buttons {
			if got, want := strings.Contains(page, b+`="`+c.id+`"`), slices.Contains(c.want, b); got != want {
				t.Errorf("the %s job's page offers %s: %v, want %v", c.state, b, got, want)
			}
		}
		for _, b := range c.want {
			action, fields := pageForm(t, page, b+`="`+c.id+`"`)
			endpoint := map[string]string{"data-cancel": "jobs/cancel", "data-requeue": "dead-letters/requeue", "data-drop": "dead-letters/delete"}[b]
			if action != "/api/v1/queues/q/"+endpoint || fields.Get("id") != c.id || fields.Get("back") != "/queues/q/jobs/"+c.id {
				t.Errorf("the %s job's %s form posts %v to %s", c.state, b, fields, action)
			}
		}
		for _, who := range []string{"viewer", "elsewhere"} {
			code, page, _ := tb.do(t, "GET", "/queues/q/jobs/"+c.id, tb.tokens[who], "", "")
			if code != 200 || strings.Contains(page, `id="actions"`) || strings.Contains(page, `method="post" action="/api/`) {
				t.Errorf("%s, who may not act on q, sees actions on the %s job's page (%d)", who, c.state, code)
			}
		}
	}
	// A job the queue does not hold has nothing to act on.
	if code, page, _ := tb.do(t, "GET", "/queues/q/jobs/never-was", tb.tokens["ops"], "", ""); code != 404 || strings.Contains(page, `id="actions"`) {
		t.Errorf("the page of a job that never was: %d, with actions %v", code, strings.Contains(page, `id="actions"`))
	}
}

// Cancelling a waiting or delayed job from its page removes it: the
// browser lands back on the page, which says it did and that the queue no
// longer holds the job. A running one's worker is told to stop.
func TestJobPageCancels(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	waiting, delayed, _, _ := jobsInEachState(t, tb)
	for _, id := range []string{waiting, delayed} {
		_, page, _ := tb.do(t, "GET", "/queues/q/jobs/"+id, "", "", "")
		code, loc := tb.submit(t, page, `data-cancel="`+id+`"`, nil)
		if code != http.StatusSeeOther || !strings.HasPrefix(loc, "/queues/q/jobs/"+id+"?done=") {
			t.Fatalf("cancelling %s from its page: %d → %q, want back to its page", id, code, loc)
		}
		code, page, _ = tb.do(t, "GET", loc, "", "", "")
		if code != http.StatusNotFound || !strings.Contains(page, `id="not-found"`) {
			t.Errorf("%s's page after cancelling it: %d, want not found", id, code)
		}
		if got := element(t, page, `<p class="flash ok" role="status">`, "</p>"); !strings.HasPrefix(got, "cancelled "+id+" (") {
			t.Errorf("%s's page after cancelling it says %q", id, got)
		}
		if _, err := tb.b.GetJob("q", id); !errors.Is(err, broker.ErrUnknownMessage) {
			t.Errorf("the broker after cancelling %s: %v, want it gone", id, err)
		}
	}

	// A running job stays until its worker lets it go: the page says so.
	ids := tb.publish(t, &broker.Message{Queue: "r"})
	c, _ := tb.take(t, "r")
	_, page, _ := tb.do(t, "GET", "/queues/r/jobs/"+ids[0], "", "", "")
	if code, loc := tb.submit(t, page, `data-cancel="`+ids[0]+`"`, nil); code != http.StatusSeeOther || !strings.HasPrefix(loc, "/queues/r/jobs/"+ids[0]+"?done=") {
		t.Fatalf("cancelling the running job from its page: %d → %q", code, loc)
	}
	if d, err := c.Next(t.Context()); err != nil || !d.Cancel || d.ID != ids[0] {
		t.Fatalf("the running job's worker was not told: %+v, %v", d, err)
	}
	// Still running until its worker lets it go, now marked cancelled and
	// with nothing more to press.
	code, page, _ := tb.do(t, "GET", "/queues/r/jobs/"+ids[0], "", "", "")
	if code != http.StatusOK || !strings.Contains(page, `id="cancelled"`) || strings.Contains(page, `data-cancel="`+ids[0]+`"`) {
		t.Errorf("the cancelled running job's page (%d) does not say it was cancelled, or still offers Cancel", code)
	}
	var jv JobView
	getJSON(t, tb, "/api/v1/queues/r/jobs/"+ids[0], &jv)
	if jv.State != "running" || !jv.Cancelled {
		t.Errorf("the cancelled running job's JSON: %+v", jv)
	}
}

// Requeueing a dead letter from its page puts it back in line, and the
// page, landed on again, shows it waiting with the action that now fits;
// dropping one ends it.
func TestJobPageRequeuesAndDrops(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	_, _, _, dead := jobsInEachState(t, tb)
	_, page, _ := tb.do(t, "GET", "/queues/q/jobs/"+dead, "", "", "")
	code, loc := tb.submit(t, page, `data-requeue="`+dead+`"`, nil)
	if code != http.StatusSeeOther || !strings.HasPrefix(loc, "/queues/q/jobs/"+dead+"?done=") {
		t.Fatalf("requeueing from the page: %d → %q, want back to it", code, loc)
	}
	code, page, _ = tb.do(t, "GET", loc, "", "", "")
	if code != 200 || element(t, page, `id="state">`, "</span>") != "waiting" ||
		element(t, page, `<p class="flash ok" role="status">`, "</p>") != "requeued 1 dead letters of q" {
		t.Errorf("the page after requeueing: %d, %s", code, element(t, page, `<h1>`, "</h1>"))
	}
	if !strings.Contains(page, `data-cancel="`+dead+`"`) || strings.Contains(page, `data-requeue=`) {
		t.Error("the requeued job's page does not offer Cancel alone")
	}
	if j, err := tb.b.GetJob("q", dead); err != nil || j.State != broker.JobWaiting || j.Attempts != 0 {
		t.Errorf("the broker after the requeue: %+v, %v; want it waiting, with fresh attempts", j, err)
	}

	dropped := deadLetter(t, tb, "d")
	_, page, _ = tb.do(t, "GET", "/queues/d/jobs/"+dropped, "", "", "")
	code, loc = tb.submit(t, page, `data-drop="`+dropped+`"`, nil)
	if code != http.StatusSeeOther || !strings.HasPrefix(loc, "/queues/d/jobs/"+dropped+"?done=") {
		t.Fatalf("dropping from the page: %d → %q", code, loc)
	}
	if code, page, _ := tb.do(t, "GET", loc, "", "", ""); code != http.StatusNotFound ||
		element(t, page, `<p class="flash ok" role="status">`, "</p>") != "deleted 1 dead letters of d" {
		t.Errorf("the page after dropping: %d", code)
	}
	if in, _ := tb.b.Queue("d"); in.DeadLetters != 0 || in.Ready != 0 {
		t.Errorf("after the drop d holds %d dead letters and %d ready", in.DeadLetters, in.Ready)
	}
}

// The job page's forms, posted from another site, are refused as the
// other actions are: back to the page with the refusal, the job as it was.
func TestJobPageActionsRefuseOtherSites(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	waiting, _, _, dead := jobsInEachState(t, tb)
	for _, c := range []struct{ id, button, state string }{
		{waiting, "data-cancel", "waiting"},
		{dead, "data-requeue", "dead"},
		{dead, "data-drop", "dead"},
	} {
		for _, hdr := range []map[string]string{{"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}} {
			_, page, _ := tb.do(t, "GET", "/queues/q/jobs/"+c.id, "", "", "")
			code, loc := tb.submit(t, page, c.button+`="`+c.id+`"`, hdr)
			if code != http.StatusSeeOther || !strings.HasPrefix(loc, "/queues/q/jobs/"+c.id+"?error=refused") {
				t.Errorf("%s on %s with %v: %d → %q, want back with the refusal", c.button, c.state, hdr, code, loc)
			}
			if j, err := tb.b.GetJob("q", c.id); err != nil || string(j.State) != c.state {
				t.Fatalf("%s from another site (%v) left the %s job %q, %v", c.button, hdr, c.state, j.State, err)
			}
			_, page, _ = tb.do(t, "GET", loc, "", "", "")
			if !strings.Contains(element(t, page, `<p class="flash err" role="alert">`, "</p>"), "refused") {
				t.Errorf("the page after a refused %s does not say so", c.button)
			}
		}
	}
}

// A queue's name with a "/" or "?" in it: the way back still leads to the
// job's page.
func TestJobPageActionsNamedInAnyScript(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	const name = "注文/日本?x=1#2%41"
	ids, err := tb.b.Publish(&broker.Message{Queue: name})
	if err != nil {
		t.Fatal(err)
	}
	page := "/queues/" + url.PathEscape(name) + "/jobs/" + ids[0]
	_, body, _ := tb.do(t, "GET", page, "", "", "")
	code, loc := tb.submit(t, body, `data-cancel="`+ids[0]+`"`, nil)
	if code != http.StatusSeeOther || !strings.HasPrefix(loc, page+"?done=") {
		t.Fatalf("cancelling from %s: %d → %q, want back to it", page, code, loc)
	}
	if code, _, _ := tb.do(t, "GET", loc, "", "", ""); code != http.StatusNotFound {
		t.Errorf("the page after cancelling: %d, want 404", code)
	}
}

// deadLetter publishes a job to queue q and dead-letters it.
func deadLetter(t *testing.T, tb *testBundle, q string) string {
	t.Helper()
	c, err := tb.b.Subscribe(q, "w", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tb.publish(t, &broker.Message{Queue: q})
	d, err := c.Next(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Nack(d.ID, broker.NackDeadLetter, 0, "broken"); err != nil {
		t.Fatal(err)
	}
	return d.ID
}

var (
	formAttr    = regexp.MustCompile(`\b(action|formaction)="([^"]*)"`)
	hiddenInput = regexp.MustCompile(`<input type="hidden" name="([^"]*)" value="([^"]*)">`)
)

// pageForm finds the button of page that carries marker (an attribute
// and its value) and returns what a browser would post when it is
// pressed: to the button's formaction, else its form's action, the form's
// hidden fields.
func pageForm(t *testing.T, page, marker string) (string, url.Values) {
	t.Helper()
	at := strings.Index(page, marker)
	if at < 0 {
		t.Fatalf("no button with %s on the page", marker)
	}
	start := strings.LastIndex(page[:at], "<form ")
	end := strings.Index(page[at:], "</form>")
	if start < 0 || end < 0 || strings.Contains(page[start:at], "</form>") {
		t.Fatalf("the button with %s is in no form", marker)
	}
	form := page[start : at+end]
	var action string
	if m := formAttr.FindStringSubmatch(form[:strings.Index(form, ">")]); m != nil && m[1] == "action" {
		action = m[2]
	}
	button := page[strings.LastIndex(page[:at], "<button") : at+strings.Index(page[at:], ">")]
	if m := formAttr.FindStringSubmatch(button); m != nil && m[1] == "formaction" {
		action = m[2]
	}
	fields := url.Values{}
	for _, in := range hiddenInput.FindAllStringSubmatch(form, -1) {
		fields.Add(html.UnescapeString(in[1]), html.UnescapeString(in[2]))
	}
	return html.UnescapeString(action), fields
}

// submit presses the button of page that carries marker, as a browser
// would from the dashboard's own page unless hdr says otherwise, and
// returns the status and where it sends the browser.
func (tb *testBundle) submit(t *testing.T, page, marker string, hdr map[string]string) (int, string) {
	t.Helper()
	action, fields := pageForm(t, page, marker)
	req, err := http.NewRequestWithContext(t.Context(), "POST", tb.hs.URL+action, strings.NewReader(fields.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", tb.hs.URL)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	cl := tb.client(false)
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

// A queue that keeps its ended jobs (keep_done) shows an acked one's page:
// done, when, how long it took; no payload, headers or actions.
func TestJobPageOfAnEndedJob(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	if _, err := tb.b.Declare("kept", broker.QueueConfig{KeepDone: 10}); err != nil {
		t.Fatal(err)
	}
	ids := tb.publish(t, &broker.Message{Queue: "kept", Producer: "wéb", JobType: "<script>x</script>", Payload: []byte("secret payload")})
	c, d := tb.take(t, "kept")
	if err := c.Ack(d.ID, 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	code, page, _ := tb.do(t, "GET", "/queues/kept/jobs/"+ids[0], "", "", "")
	if code != http.StatusOK || element(t, page, `id="state">`, "</span>") != "done" || element(t, page, `<td id="took">`, "</td>") != "1.5 s" {
		t.Fatalf("the ended job's page: %d, state %q, took %q", code, element(t, page, `id="state">`, "</span>"), element(t, page, `<td id="took">`, "</td>"))
	}
	if strings.Contains(page, "<script>x</script>") || strings.Contains(page, "secret payload") || strings.Contains(page, `id="actions"`) {
		t.Error("the ended job's page shows its job type unescaped, a payload it no longer has, or actions")
	}
	var jv JobView
	getJSON(t, tb, "/api/v1/queues/kept/jobs/"+ids[0], &jv)
	if jv.State != "done" || !jv.Ended || jv.TookMS == nil || *jv.TookMS != 1500 || jv.EndedAt == nil {
		t.Errorf("the ended job's JSON: %+v", jv)
	}
}
