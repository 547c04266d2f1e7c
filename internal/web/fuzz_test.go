package web

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/harbinger-mq/harbinger/internal/broker"
)

// FuzzDashboard sends the dashboard requests of any shape, straight to its
// handler: none may panic or fail with a 500, a JSON answer must be JSON,
// a page that renders valid UTF-8, and a redirect must stay on the dashboard as a
// browser reads it (browsers drop tabs and newlines from a URL, so
// "/\t/evil.example" is another site).
//
// Half the inputs go to a dashboard that asks for tokens, where "{token}"
// in the target or body stands for an admin token it knows.
func FuzzDashboard(f *testing.F) {
	open, guarded := setup(f, nil), setup(f, map[string][]string{"admin": {"admin"}})
	for _, tb := range []*testBundle{open, guarded} {
		tb.publish(f, &broker.Message{Queue: "q", Producer: "p", JobType: "é\u2028", Payload: []byte("x")},
			&broker.Message{Queue: "q", JobType: "t", Payload: make([]byte, 4096)})
	}
	token := guarded.tokens["admin"]
	for _, s := range []struct{ method, target, body, ct string }{
		{"GET", "/", "", ""},
		{"GET", "/queues/q?limit=5", "", ""},
		{"GET", "/queues/q/jobs?state=waiting&limit=-1", "", ""},
		{"GET", "/api/v1/queues/q/keys?sort=cost&q=%FF", "", ""},
		{"GET", "/api/v1/queues/q/series?window=1h", "", ""},
		{"GET", "/schedules", "", ""},
		{"POST", "/api/v1/queues/q/pause", "back=/queues/q", "application/x-www-form-urlencoded"},
		{"POST", "/api/v1/queues/q/purge", "confirm=q&back=/%09/evil.example", "application/x-www-form-urlencoded"},
		{"POST", "/api/v1/queues/q/dead-letters/delete", `{"ids":["\ud800"]}`, "application/json"},
		{"POST", "/api/v1/queues/q/delete", "confirm=q&back=/%09/evil.example", "application/x-www-form-urlencoded"},
		{"POST", "/api/v1/queues/q/delete", `{"confirm":"q","force":"yes"}`, "application/json"},
		{"POST", "/api/v1/queues/q/jobs/cancel", "id=" + strings.Repeat("x", 300), "application/x-www-form-urlencoded"},
		{"POST", "/api/v1/queues/q/schedules/nope/pause", "", ""},
		{"GET", "/login?next=/%09/evil.example", "", ""},
		{"POST", "/login", "token={token}&next=/%09/evil.example", "application/x-www-form-urlencoded"},
		{"POST", "/login", "token={token}&next=/%5Cevil.example", "application/x-www-form-urlencoded"},
		{"POST", "/login", "token=wrong&next=/queues/q?limit=5", "application/x-www-form-urlencoded"},
		{"GET", "/queues/q", "", ""},
		{"GET", "/queues/q/jobs/%FF%3Cscript%3E", "", ""},
		{"GET", "/api/v1/queues/q/jobs/nope%2F..", "", ""},
		{"GET", "/queues/q/job?id=..", "", ""},
		{"GET", "/queues/q/job?id=%09/evil.example", "", ""},
	} {
		f.Add(s.method, s.target, s.body, s.ct, false)
		f.Add(s.method, s.target, s.body, s.ct, true)
	}
	f.Fuzz(func(t *testing.T, method, target, body, ct string, withTokens bool) {
		tb := open
		if withTokens {
			tb = guarded
			target = strings.ReplaceAll(target, "{token}", token)
			body = strings.ReplaceAll(body, "{token}", token)
		}
		if method != "GET" && method != "POST" {
			method = "GET"
		}
		if !strings.HasPrefix(target, "/") || strings.ContainsAny(target, " \r\n\t") {
			return // not a request line a server would read
		}
		req, err := http.NewRequest(method, "http://dashboard.test"+target, strings.NewReader(body))
		if err != nil {
			return
		}
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		rec := httptest.NewRecorder()
		tb.web.ServeHTTP(rec, req)
		res := rec.Result()
		if res.StatusCode >= 500 {
			t.Fatalf("%s %q: %d %s", method, target, res.StatusCode, rec.Body.String())
		}
		switch {
		case strings.HasPrefix(res.Header.Get("Content-Type"), "application/json"):
			if !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("%s %q: the answer is not JSON: %q", method, target, rec.Body.String())
			}
		case res.StatusCode == http.StatusOK && !utf8.Valid(rec.Body.Bytes()):
			// (The ServeMux's own redirects, such as /. to /, echo the
			// request's bytes as they came: only the dashboard's pages.)
			t.Fatalf("%s %q: the answer is not UTF-8", method, target)
		}
		if loc := res.Header.Get("Location"); loc != "" {
			seen := strings.Map(func(r rune) rune {
				if r == '\t' || r == '\n' || r == '\r' {
					return -1
				}
				return r
			}, loc)
			if !strings.HasPrefix(seen, "/") || strings.HasPrefix(seen, "//") || strings.HasPrefix(seen, "/\\") {
				t.Fatalf("%s %q with %q redirects off the dashboard: %q", method, target, body, loc)
			}
		}
	})
}
