package web

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/broker"
)

// The jobs page and its API list every state: delayed and retry-pending
// jobs with their due times, and the ended jobs a queue keeps; "Run now"
// puts a delayed one in line; a job is found by id from any page.
func TestJobsListEveryStateAndRunNow(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	if _, err := tb.b.Declare("q", broker.QueueConfig{KeepDone: 10}); err != nil {
		t.Fatal(err)
	}
	later := tb.publish(t, &broker.Message{Queue: "q", Producer: "p", JobType: "report", Delay: 10 * time.Minute})
	tb.publish(t, &broker.Message{Queue: "q", Producer: "p", JobType: "flaky"})
	c, d := tb.take(t, "q")
	if err := c.Nack(d.ID, broker.NackRequeueAfter, time.Minute, "busy"); err != nil {
		t.Fatal(err)
	}
	tb.publish(t, &broker.Message{Queue: "q", Producer: "p", JobType: "quick"})
	c.AddCredit(1)
	q, err := c.Next(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(q.ID, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}

	var v JobsView
	getJSON(t, tb, "/api/v1/queues/q/jobs", &v)
	if v.Totals.Delayed != 2 || len(v.Delayed) != 2 || v.Totals.Done != 1 || len(v.Done) != 1 {
		t.Fatalf("jobs %+v: want 2 delayed and 1 done", v)
	}
	if r := v.Delayed[0]; r.ID != d.ID || !r.Retry || r.Attempts != 1 || !r.DueAt.Equal(tb.clk.Now().Add(time.Minute)) {
		t.Errorf("first delayed %+v: want the retry-pending job, due in a minute", r)
	}
	if s := v.Delayed[1]; s.ID != later[0] || s.Retry {
		t.Errorf("second delayed %+v: want the scheduled job", s)
	}
	if dn := v.Done[0]; dn.ID != q.ID || dn.State != "done" || dn.TookMS == nil || *dn.TookMS != 200 {
		t.Errorf("done %+v", dn)
	}
	_, body, _ := tb.do(t, "GET", "/queues/q/jobs", "", "", "")
	for _, want := range []string{`data-run-now="` + later[0], `data-kind="retry"`, `data-kind="delayed"`, `data-kind="done"`, `id="done-jobs"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the jobs page lacks %s", want)
		}
	}
	if code, body, _ := tb.do(t, "GET", "/api/v1/queues/q/jobs?offset=-1", "", "", ""); code != 400 {
		t.Errorf("offset -1: %d %s", code, body)
	}
	var page JobsView
	getJSON(t, tb, "/api/v1/queues/q/jobs?offset=1&limit=1", &page)
	if len(page.Delayed) != 1 || page.Delayed[0].ID != later[0] || page.Totals.Delayed != 2 {
		t.Errorf("the second page of one: %+v", page.Delayed)
	}

	code, body, _ := tb.do(t, "POST", "/api/v1/queues/q/jobs/run-now", "", `{"ids": ["`+later[0]+`"]}`, "application/json")
	if code != 200 || !strings.Contains(body, "1 delayed jobs of q run now") {
		t.Fatalf("run-now: %d %s", code, body)
	}
	if j, err := tb.b.GetJob("q", later[0]); err != nil || j.State != broker.JobWaiting {
		t.Errorf("after run-now: %+v, %v", j, err)
	}
	// A form selection too, coming back to the page.
	code, _, h := tb.do(t, "POST", "/api/v1/queues/q/jobs/run-now", "", url.Values{"id": {d.ID}, "back": {"/queues/q/jobs"}}.Encode(), "application/x-www-form-urlencoded")
	if code != 303 || !strings.HasPrefix(h.Get("Location"), "/queues/q/jobs?done=") {
		t.Errorf("run-now form: %d %s", code, h.Get("Location"))
	}

	// Found by id without naming its queue.
	var jv JobView
	getJSON(t, tb, "/api/v1/jobs/"+later[0], &jv)
	if jv.Queue != "q" || jv.State != "waiting" {
		t.Errorf("found %+v", jv)
	}
	if code, _, h := tb.do(t, "GET", "/job?id="+url.QueryEscape(later[0]), "", "", ""); code != 303 || h.Get("Location") != "/queues/q/jobs/"+url.PathEscape(later[0]) {
		t.Errorf("/job?id=: %d %s", code, h.Get("Location"))
	}
	if code, _, _ := tb.do(t, "GET", "/api/v1/jobs/nope", "", "", ""); code != 404 {
		t.Errorf("an unknown id: %d", code)
	}
}

// A JSON payload is shown indented; text as text.
func TestPayloadPreviewKinds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, kind, text string }{
		{`{"a":1,"b":[2]}`, "json", "{\n  \"a\": 1,\n  \"b\": [\n    2\n  ]\n}"},
		{"hello\nworld", "text", "hello\nworld"},
		{"\xff\x00", "bytes", `\xff\x00`},
	} {
		p := preview([]byte(c.in), PreviewBytes)
		if p.Kind != c.kind || p.Text != c.text {
			t.Errorf("preview(%q) = %q %q, want %q %q", c.in, p.Kind, p.Text, c.kind, c.text)
		}
	}
}

// An unknown sort column is a bad request, as docs/dashboard.md says.
func TestKeysUnknownSortIs400(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.publish(t, &broker.Message{Queue: "q", Producer: "p", JobType: "a"})
	if code, body, _ := tb.do(t, "GET", "/api/v1/queues/q/keys?sort=bogus", "", "", ""); code != 400 || !strings.Contains(body, "bogus") {
		t.Errorf("sort=bogus: %d %s", code, body)
	}
	if code, _, _ := tb.do(t, "GET", "/api/v1/queues/q/keys?sort=p99", "", "", ""); code != 200 {
		t.Errorf("sort=p99: %d", code)
	}
}
