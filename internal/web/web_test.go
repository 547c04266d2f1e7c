package web

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/harbinger-mq/harbinger/internal/auth"
	"github.com/harbinger-mq/harbinger/internal/auth/authtest"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type testBundle struct {
	b      *broker.Broker
	clk    *clock.Fake
	web    *Server
	hs     *httptest.Server
	tokens map[string]string
	set    *auth.Tokens // the dashboard's, for tests that reload it
	path   string       // its file
}

// setup serves a dashboard over a broker on a fake clock; with grants, it
// asks for tokens.
func setup(t testing.TB, grants map[string][]string) *testBundle {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b, err := broker.New(broker.Config{Clock: clk, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	tb := &testBundle{b: b, clk: clk}
	cfg := Config{Broker: b, Clock: clk, Logger: quiet}
	if grants != nil {
		path, toks := authtest.TokenFile(t, grants)
		tokens, err := auth.LoadTokens(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Tokens, tb.tokens, tb.set, tb.path = tokens, toks, tokens, path
	}
	tb.web, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tb.hs = httptest.NewServer(tb.web)
	t.Cleanup(func() {
		tb.hs.Close()
		tb.web.Close()
		_ = b.Shutdown(context.Background())
	})
	return tb
}

// do sends a request with token (none when empty) and returns the status
// and body; redirects are not followed.
func (tb *testBundle) do(t *testing.T, method, path, token, body, contentType string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, tb.hs.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := tb.client(false).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// client is an HTTP client of tb's server alone that follows redirects or
// not. Not http.DefaultClient: httptest.Server.Close closes the idle
// connections of http.DefaultTransport, so a parallel test's server going
// away could break a request of this test that was taking one of them
// ("transport connection broken: http: CloseIdleConnections called"), a
// POST being sent again by no one.
func (tb *testBundle) client(follow bool) *http.Client {
	c := *tb.hs.Client()
	if !follow {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	return &c
}

func (tb *testBundle) publish(t testing.TB, msgs ...*broker.Message) []string {
	t.Helper()
	ids, err := tb.b.Publish(msgs...)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// take subscribes a consumer of one job at a time to queue q, closed when
// the test ends, and returns it with the first job it is given.
func (tb *testBundle) take(t *testing.T, q string) (*broker.Consumer, broker.Delivery) {
	t.Helper()
	c, err := tb.b.Subscribe(q, "w", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	d, err := c.Next(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return c, d
}

// teach acks n jobs of each job type in queue q with its duration.
func (tb *testBundle) teach(t *testing.T, q string, n int, took map[string]time.Duration) {
	t.Helper()
	c, err := tb.b.Subscribe(q, "teacher", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for jt, d := range took {
		for range n {
			tb.publish(t, &broker.Message{Queue: q, Producer: "p", JobType: jt})
			del, err := c.Next(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Ack(del.ID, d); err != nil {
				t.Fatal(err)
			}
			c.AddCredit(1)
		}
	}
}

// Every page and API call without a token, with one the broker does not
// know, with one scoped to other queues, and with a correctly scoped one;
// actions also with a read-only token.
func TestEveryPageAsksForAToken(t *testing.T) {
	t.Parallel()
	tb := setup(t, map[string][]string{"ops": {"admin:orders."}, "other": {"admin:other."}, "viewer": {"read:orders."}})
	tb.publish(t, &broker.Message{Queue: "orders.eu"}, &broker.Message{Queue: "orders.eu.purge"})
	const q = "orders.eu"
	wrong := "hbr_" + strings.Repeat("a", 32)
	reads := []string{
		"/queues/" + q, "/queues/" + q + "/keys", "/queues/" + q + "/jobs",
		"/api/v1/queues/" + q, "/api/v1/queues/" + q + "/keys", "/api/v1/queues/" + q + "/jobs", "/api/v1/queues/" + q + "/series",
	}
	for _, p := range reads {
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
		if code, body, _ := tb.do(t, "GET", p, tb.tokens["other"], "", ""); code != http.StatusForbidden {
			t.Errorf("GET %s with a token for other queues: %d, want 403: %s", p, code, body)
		}
		for _, who := range []string{"ops", "viewer"} {
			if code, body, _ := tb.do(t, "GET", p, tb.tokens[who], "", ""); code != http.StatusOK {
				t.Errorf("GET %s as %s: %d, want 200: %s", p, who, code, body)
			}
		}
	}
	// The list of queues shows what the token may read.
	tb.publish(t, &broker.Message{Queue: "other.x"})
	_, body, _ := tb.do(t, "GET", "/api/v1/queues", tb.tokens["other"], "", "")
	var qs QueuesView
	if err := json.Unmarshal([]byte(body), &qs); err != nil {
		t.Fatal(err)
	}
	if len(qs.Queues) != 1 || qs.Queues[0].Name != "other.x" || qs.Hidden != 2 {
		t.Errorf("other sees %+v", qs)
	}
	if code, _, _ := tb.do(t, "GET", "/api/v1/queues", "", "", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /api/v1/queues without a token: %d", code)
	}

	actions := []struct{ path, body string }{
		{"/api/v1/queues/" + q + "/pause", ""},
		{"/api/v1/queues/" + q + "/resume", ""},
		{"/api/v1/queues/" + q + ".purge/purge", `{"confirm":"` + q + `.purge"}`},
		{"/api/v1/queues/" + q + "/dead-letters/requeue", `{"confirm":"all"}`},
		{"/api/v1/queues/" + q + "/dead-letters/delete", `{"confirm":"all"}`},
	}
	for _, a := range actions {
		for tok, want := range map[string]int{"": 401, wrong: 401, tb.tokens["other"]: 403, tb.tokens["viewer"]: 403, tb.tokens["ops"]: 200} {
			if code, body, _ := tb.do(t, "POST", a.path, tok, a.body, "application/json"); code != want {
				t.Errorf("POST %s: %d, want %d: %s", a.path, code, want, body)
			}
		}
	}
}

// Signing in keeps the token in a cookie that scripts cannot read and
// other sites do not send; signing out drops it.
func TestSignInAndOut(t *testing.T) {
	t.Parallel()
	tb := setup(t, map[string][]string{"ops": {"admin"}})
	form := func(v url.Values) string { return v.Encode() }
	const ct = "application/x-www-form-urlencoded"
	code, _, h := tb.do(t, "POST", "/login", "", form(url.Values{"token": {"hbr_nope"}, "next": {"/queues/x"}}), ct)
	if code != http.StatusSeeOther || !strings.Contains(h.Get("Location"), "error=") || h.Get("Set-Cookie") != "" {
		t.Errorf("a wrong token: %d → %s, cookie %q", code, h.Get("Location"), h.Get("Set-Cookie"))
	}
	code, _, h = tb.do(t, "POST", "/login", "", form(url.Values{"token": {tb.tokens["ops"]}, "next": {"//evil.example/"}}), ct)
	cookie := h.Get("Set-Cookie")
	if code != http.StatusSeeOther || h.Get("Location") != "/" {
		t.Errorf("sign in: %d → %q, want / (never another site)", code, h.Get("Location"))
	}
	for _, want := range []string{auth.CookieName + "=" + tb.tokens["ops"], "HttpOnly", "SameSite=Strict"} {
		if !strings.Contains(cookie, want) {
			t.Errorf("cookie %q lacks %q", cookie, want)
		}
	}
	req, _ := http.NewRequestWithContext(t.Context(), "GET", tb.hs.URL+"/", nil)
	req.Header.Set("Cookie", auth.CookieName+"="+tb.tokens["ops"])
	resp, err := tb.client(true).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Request.URL.Path != "/" {
		t.Errorf("with the cookie: %d at %s", resp.StatusCode, resp.Request.URL.Path)
	}
	// Another site's page may not sign the user out.
	req, _ = http.NewRequestWithContext(t.Context(), "POST", tb.hs.URL+"/logout", nil)
	req.Header.Set("Origin", "https://elsewhere.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err = tb.client(false).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("a sign-out from another site: %d, Set-Cookie %q; want 403 and none", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
	if _, _, h := tb.do(t, "POST", "/logout", "", "", ""); !strings.Contains(h.Get("Set-Cookie"), "Max-Age=0") {
		t.Errorf("sign out left the cookie: %q", h.Get("Set-Cookie"))
	}
}

// The dashboard keeps no session of its own: a signed-in browser's cookie
// is the token, looked up again on every request, so a token removed from
// the file and reloaded stops working at once for a browser already
// signed in with it, on pages, the JSON API and actions alike.
func TestSignedInBrowserLosesARevokedToken(t *testing.T) {
	t.Parallel()
	tb := setup(t, map[string][]string{"ops": {"admin"}, "viewer": {"read"}})
	tb.publish(t, &broker.Message{Queue: "q"})
	get := func(path string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), "GET", tb.hs.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Cookie", auth.CookieName+"="+tb.tokens["ops"])
		resp, err := tb.client(false).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("/queues/q"); code != 200 {
		t.Fatalf("signed in: %d", code)
	}
	// The file now holds only the viewer.
	var f strings.Builder
	f.WriteString("tokens:\n")
	f.WriteString(auth.FileEntry("viewer", tb.tokens["viewer"], []auth.Scope{{Perm: auth.Read}}))
	if err := os.WriteFile(tb.path, []byte(f.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := tb.set.Reload(); err != nil {
		t.Fatal(err)
	}
	if code := get("/queues/q"); code != http.StatusSeeOther {
		t.Errorf("a page with a revoked token's cookie: %d, want 303 to the sign-in page", code)
	}
	if code := get("/api/v1/queues/q"); code != http.StatusUnauthorized {
		t.Errorf("the JSON API with a revoked token's cookie: %d, want 401", code)
	}
	req, err := http.NewRequestWithContext(t.Context(), "POST", tb.hs.URL+"/api/v1/queues/q/pause", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Cookie", auth.CookieName+"="+tb.tokens["ops"])
	resp, err := tb.client(true).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if in, _ := tb.b.Queue("q"); in.Paused || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("an action with a revoked token's cookie: %d, paused %v; want 401 and nothing done", resp.StatusCode, in.Paused)
	}
}

// A page on another site cannot make a browser act on a dashboard it is
// signed in to, or on one without tokens on localhost.
func TestActionsRefuseOtherSites(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.publish(t, &broker.Message{Queue: "q"})
	for _, hdr := range []map[string]string{{"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}} {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", tb.hs.URL+"/api/v1/queues/q/pause", nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := tb.client(true).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("POST with %v: %d, want 403", hdr, resp.StatusCode)
		}
	}
	if in, _ := tb.b.Queue("q"); in.Paused {
		t.Error("a cross-site request paused the queue")
	}
	// Same origin: fine.
	req, _ := http.NewRequestWithContext(t.Context(), "POST", tb.hs.URL+"/api/v1/queues/q/pause", nil)
	req.Header.Set("Origin", tb.hs.URL)
	resp, err := tb.client(true).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if in, _ := tb.b.Queue("q"); resp.StatusCode != 200 || !in.Paused {
		t.Errorf("same-origin pause: %d, paused %v", resp.StatusCode, in.Paused)
	}
}

// "Origin: null" is what a browser sends from a sandboxed frame, or from a
// page under a no-referrer policy, of any site; one that sends no
// Sec-Fetch-Site (Safari before 16.4, older Firefox and Chrome) says
// nothing else. Such an action or sign-in is refused unless the browser
// also says it is same-origin.
func TestActionsRefuseAnOpaqueOrigin(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.publish(t, &broker.Message{Queue: "q"}, &broker.Message{Queue: "q"})
	post := func(path, body string, hdr map[string]string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), "POST", tb.hs.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		cl := tb.client(false)
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); resp.StatusCode == http.StatusSeeOther && strings.Contains(loc, "error=refused") {
			return http.StatusForbidden
		}
		return resp.StatusCode
	}
	opaque := map[string]string{"Origin": "null"}
	if code := post("/api/v1/queues/q/purge", "confirm=q", opaque); code != http.StatusForbidden {
		t.Errorf("a purge from an opaque origin: %d, want it refused", code)
	}
	if in, _ := tb.b.Queue("q"); in.Ready != 2 {
		t.Errorf("a purge from an opaque origin left %d ready, want 2", in.Ready)
	}
	if code := post("/api/v1/queues/q/pause", "", map[string]string{"Origin": "null", "Sec-Fetch-Site": "same-site"}); code != http.StatusForbidden {
		t.Errorf("a pause from an opaque origin on the same site: %d, want it refused", code)
	}
	if in, _ := tb.b.Queue("q"); in.Paused {
		t.Error("a request from an opaque origin paused the queue")
	}
	// The browser says it is the dashboard's own page: fine.
	if code := post("/api/v1/queues/q/pause", "", map[string]string{"Origin": "null", "Sec-Fetch-Site": "same-origin"}); code != http.StatusSeeOther {
		t.Errorf("a same-origin pause with Origin: null: %d, want 303", code)
	}
	if in, _ := tb.b.Queue("q"); !in.Paused {
		t.Error("a same-origin pause with Origin: null did not pause the queue")
	}

	// Signing in another site's token (login CSRF) is refused the same way.
	guarded := setup(t, map[string][]string{"ops": {"admin"}})
	req, err := http.NewRequestWithContext(t.Context(), "POST", guarded.hs.URL+"/login", strings.NewReader(url.Values{"token": {guarded.tokens["ops"]}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "null")
	cl := guarded.client(false)
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("a sign-in from an opaque origin: %d, cookie %q, want 403 and none", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// An action's body is read no further than maxActionBody, whoever sends
// it and whatever the action: a form's way back is read from it even
// when the request is refused, so a request without a token could make
// the dashboard take in 10 MB of form, or a multipart upload of any size.
func TestActionBodyIsBounded(t *testing.T) {
	t.Parallel()
	tb := setup(t, map[string][]string{"ops": {"admin"}})
	tb.publish(t, &broker.Message{Queue: "q"})
	const big = 8 << 20
	bodies := []struct{ ct, body string }{
		{"application/x-www-form-urlencoded", "pad=" + strings.Repeat("x", big) + "&back=/queues/q/jobs"},
		{"multipart/form-data; boundary=b", "--b\r\nContent-Disposition: form-data; name=\"f\"; filename=\"f\"\r\n\r\n" +
			strings.Repeat("x", big) + "\r\n--b--\r\n"},
	}
	for _, path := range []string{"/api/v1/queues/q/pause", "/api/v1/queues/q/purge", "/api/v1/queues/q/schedules/s/pause"} {
		for _, tok := range []string{"", tb.tokens["ops"]} {
			for _, b := range bodies {
				body := &countingReader{r: strings.NewReader(b.body)}
				req := httptest.NewRequestWithContext(t.Context(), "POST", path, body)
				req.Header.Set("Content-Type", b.ct)
				if tok != "" {
					req.Header.Set("Authorization", "Bearer "+tok)
				}
				rec := httptest.NewRecorder()
				tb.web.ServeHTTP(rec, req)
				if body.n > maxActionBody+1 {
					t.Errorf("POST %s (%s, token %v): read %d bytes of the body, want at most %d", path, b.ct, tok != "", body.n, maxActionBody+1)
				}
				if rec.Code >= 500 {
					t.Errorf("POST %s (%s, token %v): %d %s", path, b.ct, tok != "", rec.Code, rec.Body)
				}
			}
		}
	}
	if in, _ := tb.b.Queue("q"); in.Ready != 1 {
		t.Errorf("after oversized purges q holds %d ready, want 1", in.Ready)
	}
}

// The read API reports what the inspector says: per-tier depths, waits,
// learned keys searched and sorted, waiting jobs in order, dead letters.
func TestReadAPI(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.teach(t, "q", 30, map[string]time.Duration{"short": 2 * time.Millisecond, "medium": 300 * time.Millisecond, "long": 3 * time.Second})
	// The default policy lets a short job overtake a medium one (its guard
	// keeps long jobs near their FIFO place), until the medium one has
	// waited half its cost.
	tb.publish(t, &broker.Message{Queue: "q", Producer: "p", JobType: "medium"}, &broker.Message{Queue: "q", Producer: "p", JobType: "short"})
	tb.clk.Advance(100 * time.Millisecond)

	var qv QueueView
	getJSON(t, tb, "/api/v1/queues/q", &qv)
	if qv.Ready != 2 || qv.OldestWaitMS != 100 || qv.Acked != 90 || qv.Predictor.Keys != 3 || qv.DurationP50MS == nil {
		t.Errorf("queue view %+v", qv)
	}
	var kv KeysView
	getJSON(t, tb, "/api/v1/queues/q/keys?sort=ewma", &kv)
	if len(kv.Keys) != 3 || kv.Keys[0].JobType != "short" || kv.Keys[1].JobType != "medium" || kv.Keys[2].JobType != "long" {
		t.Errorf("keys by EWMA: %+v", kv.Keys)
	} else if kv.Keys[0].Long || kv.Keys[1].Long || !kv.Keys[2].Long {
		t.Errorf("long keys: %v %v %v, want only the 3 s kind (the costliest of three)", kv.Keys[0].Long, kv.Keys[1].Long, kv.Keys[2].Long)
	}
	getJSON(t, tb, "/api/v1/queues/q/keys?q=LON", &kv)
	if len(kv.Keys) != 1 || kv.Keys[0].JobType != "long" || kv.Total != 3 {
		t.Errorf("keys searched for LON: %+v", kv)
	}
	var jv JobsView
	getJSON(t, tb, "/api/v1/queues/q/jobs", &jv)
	if len(jv.Waiting) != 2 || jv.Waiting[0].JobType != "short" || jv.Waiting[0].Position != 1 || jv.Waiting[1].WaitedMS != 100 {
		t.Errorf("waiting: %+v", jv.Waiting)
	}
	if code, body, _ := tb.do(t, "GET", "/api/v1/queues/nope", "", "", ""); code != 404 || !strings.Contains(body, "nope") {
		t.Errorf("a missing queue: %d %s", code, body)
	}
	if code, _, _ := tb.do(t, "GET", "/api/v1/queues/q/keys?limit=0", "", "", ""); code != 400 {
		t.Errorf("limit=0: %d, want 400", code)
	}

	// The sampler: two samples a second apart give the rates.
	tb.publish(t, &broker.Message{Queue: "q"}, &broker.Message{Queue: "q"})
	tb.clk.Advance(DefaultSampleEvery)
	tb.publish(t, &broker.Message{Queue: "q"}, &broker.Message{Queue: "q"})
	tb.clk.Advance(DefaultSampleEvery)
	var sv SeriesView
	getJSON(t, tb, "/api/v1/queues/q/series", &sv)
	if len(sv.Points) < 2 || sv.Points[len(sv.Points)-1].PublishPerS != 1 {
		t.Errorf("series: %+v", sv)
	}
	getJSON(t, tb, "/api/v1/queues/q", &qv)
	if qv.PublishPerS == nil || *qv.PublishPerS != 1 {
		t.Errorf("publish rate %v, want 1/s", qv.PublishPerS)
	}
}

// Purge asks for the queue's name; requeue and delete act on the dead
// letters named.
func TestActions(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.publish(t, &broker.Message{Queue: "q"}, &broker.Message{Queue: "q"}, &broker.Message{Queue: "q"})
	c, err := tb.b.Subscribe("q", "w", 3)
	if err != nil {
		t.Fatal(err)
	}
	var dead []string
	for range 2 {
		d, err := c.Next(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Nack(d.ID, broker.NackDeadLetter, 0, "broken"); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, d.ID)
	}
	c.Close()
	const ct = "application/x-www-form-urlencoded"
	code, _, h := tb.do(t, "POST", "/api/v1/queues/q/purge", "", "confirm=nope", ct)
	if in, _ := tb.b.Queue("q"); code != 303 || !strings.Contains(h.Get("Location"), "error=") || in.Ready != 1 {
		t.Errorf("purge without the name: %d → %s, ready %d", code, h.Get("Location"), in.Ready)
	}
	code, _, h = tb.do(t, "POST", "/api/v1/queues/q/dead-letters/requeue", "", "id="+dead[0]+"&back=/queues/q/jobs", ct)
	if code != 303 || !strings.HasPrefix(h.Get("Location"), "/queues/q/jobs?done=") {
		t.Errorf("requeue: %d → %s", code, h.Get("Location"))
	}
	if code, body, _ := tb.do(t, "POST", "/api/v1/queues/q/dead-letters/delete", "", `{"ids":["`+dead[1]+`"]}`, "application/json"); code != 200 || !strings.Contains(body, "deleted 1") {
		t.Errorf("delete: %d %s", code, body)
	}
	if code, _, _ := tb.do(t, "POST", "/api/v1/queues/q/dead-letters/delete", "", `{}`, "application/json"); code != 400 {
		t.Errorf("delete naming nothing: %d, want 400", code)
	}
	if in, _ := tb.b.Queue("q"); in.DeadLetters != 0 || in.Ready != 2 {
		t.Errorf("after requeue and delete: %d dead, %d ready", in.DeadLetters, in.Ready)
	}
	if code, body, _ := tb.do(t, "POST", "/api/v1/queues/q/purge", "", `{"confirm":"q"}`, "application/json"); code != 200 || !strings.Contains(body, "purged 2") {
		t.Errorf("purge: %d %s", code, body)
	}
}

// Every page renders, for an empty broker and a busy one.
func TestPagesRender(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	if code, body, _ := tb.do(t, "GET", "/", "", "", ""); code != 200 || !strings.Contains(body, "No queues yet") {
		t.Errorf("empty broker: %d", code)
	}
	tb.teach(t, "q", 10, map[string]time.Duration{"a": time.Millisecond})
	tb.publish(t, &broker.Message{Queue: "q", JobType: "a", TTL: time.Hour})
	for _, p := range []string{"/", "/queues/q", "/queues/q/keys", "/queues/q/keys?q=zzz", "/queues/q/jobs", "/login", "/static/app.js", "/static/style.css"} {
		code, body, _ := tb.do(t, "GET", p, "", "", "")
		if code != 200 && !(p == "/login" && code == 303) {
			t.Errorf("GET %s: %d %s", p, code, body)
		}
	}
	if code, body, _ := tb.do(t, "GET", "/queues/nope", "", "", ""); code != 404 || !strings.Contains(body, "nope") {
		t.Errorf("a missing queue's page: %d", code)
	}
}

func TestFormat(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]string{0.5: "500 µs", 12.3: "12.3 ms", 1500: "1.5 s", 90_000: "1.5 min", math.NaN(): "–"} {
		if got := fmtMS(v); got != want {
			t.Errorf("fmtMS(%v) = %q, want %q", v, got, want)
		}
	}
	if err := (Config{}).WithDefaults().validate(); err == nil {
		t.Error("a config without a broker validated")
	}
}

func getJSON(t *testing.T, tb *testBundle, path string, v any) {
	t.Helper()
	code, body, _ := tb.do(t, "GET", path, "", "", "")
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// Cancelling from the jobs page: a waiting job goes, a running one's
// consumer is told.
func TestCancelAction(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ids := tb.publish(t, &broker.Message{Queue: "q", JobType: "run"}, &broker.Message{Queue: "q", JobType: "wait"})
	c, running := tb.take(t, "q")
	if code, body, _ := tb.do(t, "GET", "/queues/q/jobs", "", "", ""); code != 200 || !strings.Contains(body, `data-cancel="`+ids[1]+`"`) || !strings.Contains(body, `data-cancel="`+running.ID+`"`) {
		t.Fatalf("jobs page without cancel buttons: %d", code)
	}
	const ct = "application/x-www-form-urlencoded"
	if code, _, h := tb.do(t, "POST", "/api/v1/queues/q/jobs/cancel", "", "id="+ids[1]+"&id="+running.ID+"&back=/queues/q/jobs", ct); code != 303 || !strings.Contains(h.Get("Location"), "done=") {
		t.Fatalf("cancel: %d → %s", code, h.Get("Location"))
	}
	if d, err := c.Next(t.Context()); err != nil || !d.Cancel || d.ID != running.ID {
		t.Fatalf("the running job's consumer was not told: %+v, %v", d, err)
	}
	if in, _ := tb.b.Queue("q"); in.Ready != 0 || in.Cancelled != 2 {
		t.Fatalf("after cancelling: %+v", in)
	}
	if code, body, _ := tb.do(t, "POST", "/api/v1/queues/q/jobs/cancel", "", `{"ids":["nope"]}`, "application/json"); code != http.StatusNotFound {
		t.Fatalf("cancelling a job that does not exist: %d %s, want 404", code, body)
	}
}

// Cancelling several jobs when one of them is not there: those before it
// are cancelled, and the answer and the log say so, not only the error.
func TestCancelSaysWhatItDidBeforeAnError(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	var log strings.Builder
	tb.web.cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	ids := tb.publish(t, &broker.Message{Queue: "q"}, &broker.Message{Queue: "q"})
	req := httptest.NewRequestWithContext(t.Context(), "POST", "/api/v1/queues/q/jobs/cancel", strings.NewReader(`{"ids":["`+ids[0]+`","nope","`+ids[1]+`"]}`))
	req.Host = "127.0.0.1:7071"
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	tb.web.ServeHTTP(rec, req) // in this goroutine: the log is written when it returns
	if in, _ := tb.b.Queue("q"); in.Ready != 1 || in.Cancelled != 1 {
		t.Fatalf("after the cancel q holds %d ready, %d cancelled; want 1 and 1", in.Ready, in.Cancelled)
	}
	var e struct{ Error string }
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != http.StatusNotFound ||
		!strings.Contains(e.Error, "cancelled "+ids[0]) || !strings.Contains(e.Error, `"nope"`) {
		t.Errorf("the answer: %d %s, want 404 naming the cancelled job and the missing one", rec.Code, rec.Body)
	}
	if !strings.Contains(log.String(), "cancelled "+ids[0]) {
		t.Errorf("the log lacks the cancel of %s:\n%s", ids[0], log.String())
	}
}

func TestSchedulesPage(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	if _, err := tb.b.DeclareSchedule(broker.Schedule{Name: "digest", Queue: "mail", Cron: "30 7 * * 1-5", TimeZone: "America/New_York", JobType: "digest"}); err != nil {
		t.Fatal(err)
	}
	code, body, _ := tb.do(t, "GET", "/schedules", "", "", "")
	if code != 200 || !strings.Contains(body, `data-schedule="digest"`) || !strings.Contains(body, "America/New_York") {
		t.Fatalf("schedules page: %d", code)
	}
	var v SchedulesView
	getJSON(t, tb, "/api/v1/schedules", &v)
	if len(v.Schedules) != 1 || v.Schedules[0].NextTick == nil {
		t.Fatalf("read API: %+v", v)
	}
	if code, body, _ := tb.do(t, "POST", "/api/v1/queues/mail/schedules/digest/pause", "", "", ""); code != 200 || !strings.Contains(body, "paused") {
		t.Fatalf("pause: %d %s", code, body)
	}
	if got := tb.b.Schedules(); !got[0].Paused {
		t.Fatal("not paused")
	}
	if code, _, _ := tb.do(t, "POST", "/api/v1/queues/other/schedules/digest/delete", "", "", ""); code != 404 {
		t.Fatalf("deleting through another queue: %d, want 404", code)
	}
	if code, _, _ := tb.do(t, "POST", "/api/v1/queues/mail/schedules/digest/delete", "", "", ""); code != 200 || len(tb.b.Schedules()) != 0 {
		t.Fatalf("delete: %d", code)
	}
}

// A schedule's ticks that do not exist yet are null, as the docs say of
// every such figure, not left out: one that never fired has no last tick,
// a paused one no next.
func TestSchedulesAPIHasNullTicks(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	if _, err := tb.b.DeclareSchedule(broker.Schedule{Name: "digest", Queue: "mail", Every: time.Hour, JobType: "digest"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.b.PauseSchedule("digest", true); err != nil {
		t.Fatal(err)
	}
	var v struct{ Schedules []map[string]json.RawMessage }
	getJSON(t, tb, "/api/v1/schedules", &v)
	if len(v.Schedules) != 1 {
		t.Fatalf("schedules: %+v", v)
	}
	for _, field := range []string{"name", "queue", "when", "job_type", "paused", "last_tick", "next_tick", "fired"} {
		if got, ok := v.Schedules[0][field]; !ok {
			t.Errorf("the schedule lacks %q", field)
		} else if (field == "last_tick" || field == "next_tick") && string(got) != "null" {
			t.Errorf("%s = %s, want null", field, got)
		}
	}
}

// The learned-keys page shows each key's own predicted against actual.
func TestKeysShowTheirAccuracy(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.teach(t, "q", 30, map[string]time.Duration{"short": 2 * time.Millisecond, "long": 3 * time.Second})
	var kv KeysView
	getJSON(t, tb, "/api/v1/queues/q/keys?sort=mae", &kv)
	if len(kv.Keys) != 2 {
		t.Fatalf("keys: %+v", kv.Keys)
	}
	for _, k := range kv.Keys {
		if k.Scored == 0 || k.MAEMS == nil || k.TierAccuracy == nil || *k.TierAccuracy < 0.9 {
			t.Errorf("key %s: scored %d, MAE %v, tier accuracy %v", k.JobType, k.Scored, k.MAEMS, k.TierAccuracy)
		}
	}
	if code, body, _ := tb.do(t, "GET", "/queues/q/keys", "", "", ""); code != 200 || !strings.Contains(body, "Tier right") || !strings.Contains(body, "of ") {
		t.Errorf("keys page: %d", code)
	}
}

// A queue with max_in_flight shows its jobs in flight against the limit,
// as `harbinger admin queues` does (1/3); one without shows the count.
func TestInFlightShowsTheLimit(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	if _, err := tb.b.Declare("limited", broker.QueueConfig{MaxInFlight: 3}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"limited", "open"} {
		tb.publish(t, &broker.Message{Queue: q}, &broker.Message{Queue: q})
		c, err := tb.b.Subscribe(q, "w", 1)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Next(t.Context()); err != nil {
			t.Fatal(err)
		}
	}

	_, list, _ := tb.do(t, "GET", "/", "", "", "")
	for q, want := range map[string]string{"limited": "1/3", "open": "1"} {
		r := element(t, list, `<tr data-queue="`+q+`">`, "</tr>")
		if cell := `<td class="num" data-col="in-flight">` + want + `</td>`; !strings.Contains(r, cell) {
			t.Errorf("%s's row on the queues page lacks %s:\n%s", q, cell, r)
		}
	}
	for q, want := range map[string][2]string{"limited": {"1/3", "3"}, "open": {"1", "no limit"}} {
		code, page, _ := tb.do(t, "GET", "/queues/"+q, "", "", "")
		if code != 200 {
			t.Fatalf("GET /queues/%s: %d", q, code)
		}
		if got := element(t, page, `<b id="in-flight">`, "</b>"); got != want[0] {
			t.Errorf("%s's page shows %q in flight, want %q", q, got, want[0])
		}
		if got := element(t, page, `<td id="max-in-flight">`, "</td>"); got != want[1] {
			t.Errorf("%s's settings show max in flight %q, want %q", q, got, want[1])
		}
	}
	var qv QueueView
	getJSON(t, tb, "/api/v1/queues/limited", &qv)
	if qv.InFlight != 1 || qv.Config.MaxInFlight != 3 {
		t.Errorf("read API: in flight %d of max %d, want 1 of 3", qv.InFlight, qv.Config.MaxInFlight)
	}
}

// element returns what body holds between the first start and the end
// after it.
func element(t *testing.T, body, start, end string) string {
	t.Helper()
	_, rest, ok := strings.Cut(body, start)
	if !ok {
		t.Fatalf("no %s in:\n%s", start, body)
	}
	in, _, ok := strings.Cut(rest, end)
	if !ok {
		t.Fatalf("no %s after %s", end, start)
	}
	return in
}

// Deleting a queue from its page or the API: the name must be typed, a
// queue that holds jobs stays unless they are dropped too, one a schedule
// publishes to stays regardless, and a deleted one leaves the list.
func TestDeleteQueueAction(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.publish(t, &broker.Message{Queue: "q"}, &broker.Message{Queue: "q"}, &broker.Message{Queue: "q"},
		&broker.Message{Queue: "q", Delay: time.Hour})
	c, err := tb.b.Subscribe("q", "w", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var running string
	for i := range 2 {
		d, err := c.Next(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := c.Nack(d.ID, broker.NackDeadLetter, 0, "broken"); err != nil {
				t.Fatal(err)
			}
			continue
		}
		running = d.ID
	}
	// q holds one job of each state.
	held := func(when string) {
		t.Helper()
		in, err := tb.b.Queue("q")
		if err != nil || in.Ready != 1 || in.Delayed != 1 || in.InFlight != 1 || in.DeadLetters != 1 {
			t.Fatalf("%s: q is %+v (%v), want it with 1 waiting, 1 delayed, 1 running and 1 dead letter", when, in, err)
		}
	}
	held("before")
	if code, page, _ := tb.do(t, "GET", "/queues/q", "", "", ""); code != 200 || !strings.Contains(page, `action="/api/v1/queues/q/delete"`) ||
		!strings.Contains(page, "holds jobs (4 now") {
		t.Fatalf("the queue's page lacks the delete form or its count of jobs: %d", code)
	}

	const form = "application/x-www-form-urlencoded"
	for _, body := range []string{"confirm=Q&force=true", "force=true", "confirm=q%20"} {
		code, _, h := tb.do(t, "POST", "/api/v1/queues/q/delete", "", body, form)
		if loc := h.Get("Location"); code != 303 || !strings.HasPrefix(loc, "/queues/q?error=") || !strings.Contains(loc, "confirm") {
			t.Errorf("form %q: %d → %s, want back to the queue's page with an error", body, code, loc)
		}
	}
	for _, body := range []string{`{"confirm":"nope","force":true}`, `{"force":true}`, ""} {
		code, msg, _ := tb.do(t, "POST", "/api/v1/queues/q/delete", "", body, "application/json")
		if code != 400 || !strings.Contains(msg, `not deleted: type the queue's name, \"q\", to confirm`) {
			t.Errorf("JSON %q: %d %s, want 400 asking for the name", body, code, msg)
		}
	}
	if code, msg, _ := tb.do(t, "POST", "/api/v1/queues/q/delete", "", "confirm=q&force=maybe", form); code != 303 {
		t.Errorf("force=maybe: %d %s", code, msg)
	}
	held("after wrong confirmations")

	// Without force the broker refuses and says what the queue holds; the
	// form's way back shows it.
	const holds = "it holds 1 waiting, 1 delayed, 1 running and 1 dead-lettered jobs"
	code, _, h := tb.do(t, "POST", "/api/v1/queues/q/delete", "", "confirm=q", form)
	loc := h.Get("Location")
	if code != 303 || !strings.HasPrefix(loc, "/queues/q?error=") {
		t.Fatalf("refused form: %d → %s, want back to the queue's page", code, loc)
	}
	if code, page, _ := tb.do(t, "GET", loc, "", "", ""); code != 200 || !strings.Contains(element(t, page, `<p class="flash err" role="alert">`, "</p>"), holds) {
		t.Errorf("the page after a refusal: %d, its error lacks %q", code, holds)
	}
	if code, msg, _ := tb.do(t, "POST", "/api/v1/queues/q/delete", "", `{"confirm":"q","force":false}`, "application/json"); code != 409 || !strings.Contains(msg, holds) {
		t.Errorf("refused JSON: %d %s, want 409 saying %q", code, msg, holds)
	}
	held("after refusals")

	// A queue a schedule publishes to stays, force or not.
	tb.publish(t, &broker.Message{Queue: "mail"})
	if _, err := tb.b.DeclareSchedule(broker.Schedule{Name: "digest", Queue: "mail", Every: time.Hour, JobType: "digest"}); err != nil {
		t.Fatal(err)
	}
	if code, msg, _ := tb.do(t, "POST", "/api/v1/queues/mail/delete", "", `{"confirm":"mail","force":true}`, "application/json"); code != 409 || !strings.Contains(msg, "digest") {
		t.Errorf("a queue a schedule publishes to: %d %s, want 409 naming the schedule", code, msg)
	}
	if _, err := tb.b.Queue("mail"); err != nil {
		t.Errorf("mail after a refused delete: %v", err)
	}

	// With force it goes, with its jobs, and the form lands on the list.
	code, _, h = tb.do(t, "POST", "/api/v1/queues/q/delete", "", "confirm=q&force=on", form)
	loc = h.Get("Location")
	if code != 303 || !strings.HasPrefix(loc, "/?done=") {
		t.Fatalf("forced delete: %d → %s, want the queues list", code, loc)
	}
	if _, err := tb.b.Queue("q"); !errors.Is(err, broker.ErrQueueNotFound) {
		t.Fatalf("after a forced delete the broker has q: %v", err)
	}
	if _, err := c.Next(t.Context()); !errors.Is(err, broker.ErrQueueDeleted) {
		t.Errorf("q's consumer after the delete: %v, want ErrQueueDeleted", err)
	}
	if err := c.Ack(running, time.Millisecond); err == nil {
		t.Error("the dropped running job was acked")
	}
	code, list, _ := tb.do(t, "GET", loc, "", "", "")
	const dropped = "deleted q: dropped 1 waiting, 1 delayed, 1 running and 1 dead-lettered jobs; 1 consumers stopped"
	if code != 200 || element(t, list, `<p class="flash ok" role="status">`, "</p>") != dropped {
		t.Errorf("the list after a delete: %d, want the message %q", code, dropped)
	}
	if strings.Contains(list, `<tr data-queue="q">`) || !strings.Contains(list, `<tr data-queue="mail">`) {
		t.Error("the list after deleting q: q is still listed, or mail is not")
	}
	var qs QueuesView
	getJSON(t, tb, "/api/v1/queues", &qs)
	if len(qs.Queues) != 1 || qs.Queues[0].Name != "mail" {
		t.Errorf("the read API after deleting q lists %+v", qs.Queues)
	}

	// An unknown queue: 404, and a form goes to the list.
	if code, msg, _ := tb.do(t, "POST", "/api/v1/queues/q/delete", "", `{"confirm":"q","force":true}`, "application/json"); code != 404 || !strings.Contains(msg, `queue \"q\" not found`) {
		t.Errorf("deleting q again: %d %s, want 404", code, msg)
	}
	if code, _, h := tb.do(t, "POST", "/api/v1/queues/q/delete", "", "confirm=q&force=true", form); code != 303 || !strings.HasPrefix(h.Get("Location"), "/?error=") {
		t.Errorf("deleting q again from a form: %d → %s, want the list with an error", code, h.Get("Location"))
	}
}

// The JSON answer counts what was dropped.
func TestDeleteQueueAnswersWithCounts(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.publish(t, &broker.Message{Queue: "q"}, &broker.Message{Queue: "q"}, &broker.Message{Queue: "q", Delay: time.Hour})
	code, body, _ := tb.do(t, "POST", "/api/v1/queues/q/delete", "", `{"confirm":"q","force":true}`, "application/json")
	if code != 200 {
		t.Fatalf("delete: %d %s", code, body)
	}
	var got QueueDeletedView
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	want := QueueDeletedView{Queue: "q", Waiting: 2, Delayed: 1,
		Done: "deleted q: dropped 2 waiting, 1 delayed, 0 running and 0 dead-lettered jobs; 0 consumers stopped"}
	if got != want {
		t.Errorf("answer %+v, want %+v", got, want)
	}
	// An empty queue needs no force.
	tb.publish(t, &broker.Message{Queue: "empty"})
	if _, err := tb.b.Purge("empty"); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := tb.do(t, "POST", "/api/v1/queues/empty/delete", "", `{"confirm":"empty"}`, "application/json"); code != 200 || !strings.Contains(body, `"waiting": 0`) {
		t.Errorf("deleting an empty queue: %d %s", code, body)
	}
	if qs := tb.b.Queues(); len(qs) != 0 {
		t.Errorf("queues left: %+v", qs)
	}
}

// Deleting takes admin on the queue, as purge does, and is refused from
// another site; a token that may only read the queue sees no delete form.
func TestDeleteQueueAsksForAdmin(t *testing.T) {
	t.Parallel()
	tb := setup(t, map[string][]string{"ops": {"admin:orders."}, "other": {"admin:other."}, "viewer": {"read:orders."}})
	tb.publish(t, &broker.Message{Queue: "orders.eu"})
	const path, body = "/api/v1/queues/orders.eu/delete", `{"confirm":"orders.eu","force":true}`
	wrong := "hbr_" + strings.Repeat("a", 32)
	for tok, want := range map[string]int{"": 401, wrong: 401, tb.tokens["other"]: 403, tb.tokens["viewer"]: 403} {
		if code, msg, _ := tb.do(t, "POST", path, tok, body, "application/json"); code != want {
			t.Errorf("POST %s with token %q: %d, want %d: %s", path, tok, code, want, msg)
		}
	}
	req, err := http.NewRequestWithContext(t.Context(), "POST", tb.hs.URL+path, strings.NewReader("confirm=orders.eu&force=true"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+tb.tokens["ops"])
	req.Header.Set("Origin", "https://evil.example")
	cl := tb.client(false)
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != 303 || !strings.Contains(loc, "error=refused") {
		t.Errorf("a cross-site delete: %d → %s, want back with the refusal", resp.StatusCode, loc)
	}
	if in, err := tb.b.Queue("orders.eu"); err != nil || in.Ready != 1 {
		t.Fatalf("after refused deletes orders.eu is %+v (%v), want it with its job", in, err)
	}
	for who, want := range map[string]bool{"viewer": false, "ops": true} {
		_, page, _ := tb.do(t, "GET", "/queues/orders.eu", tb.tokens[who], "", "")
		if got := strings.Contains(page, `id="delete-queue"`); got != want {
			t.Errorf("%s sees the delete form: %v, want %v", who, got, want)
		}
	}
	if code, msg, _ := tb.do(t, "POST", path, tb.tokens["ops"], body, "application/json"); code != 200 {
		t.Errorf("ops deleting orders.eu: %d %s", code, msg)
	}
	if _, err := tb.b.Queue("orders.eu"); !errors.Is(err, broker.ErrQueueNotFound) {
		t.Errorf("orders.eu after ops deleted it: %v", err)
	}
}

// A queue's name may hold any printable character: the page's form, the
// way back after a refusal and the action all escape it.
func TestDeleteQueueNamedInAnyScript(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	for _, name := range []string{"rapports-été", "注文/日本?x=1#2%41"} {
		tb.publish(t, &broker.Message{Queue: name})
		esc := url.PathEscape(name)
		action := "/api/v1/queues/" + esc + "/delete"
		if code, page, _ := tb.do(t, "GET", "/queues/"+esc, "", "", ""); code != 200 || !strings.Contains(page, `action="`+action+`"`) {
			t.Fatalf("%s's page: %d, its delete form does not post to %s", name, code, action)
		}
		confirm := url.Values{"confirm": {name}}
		code, _, h := tb.do(t, "POST", action, "", confirm.Encode(), "application/x-www-form-urlencoded")
		if loc := h.Get("Location"); code != 303 || !strings.HasPrefix(loc, "/queues/"+esc+"?error=") {
			t.Errorf("%s without force: %d → %s, want back to its page", name, code, loc)
		}
		if _, err := tb.b.Queue(name); err != nil {
			t.Fatalf("%s after a refused delete: %v", name, err)
		}
		confirm.Set("force", "true")
		code, _, h = tb.do(t, "POST", action, "", confirm.Encode(), "application/x-www-form-urlencoded")
		if loc := h.Get("Location"); code != 303 || loc != "/?done="+url.QueryEscape("deleted "+name+": dropped 1 waiting, 0 delayed, 0 running and 0 dead-lettered jobs; 0 consumers stopped") {
			t.Errorf("%s with force: %d → %s", name, code, loc)
		}
		if _, err := tb.b.Queue(name); !errors.Is(err, broker.ErrQueueNotFound) {
			t.Errorf("%s after a forced delete: %v", name, err)
		}
	}
}

// An action from the jobs page of a queue whose name holds "/" or "?"
// comes back to that page, not to a path its name was split into.
func TestJobsPageWayBackNamedInAnyScript(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	for _, name := range []string{"a/b", "x?y#z", "注文/日本"} {
		ids, err := tb.b.Publish(&broker.Message{Queue: name})
		if err != nil {
			t.Fatal(err)
		}
		jobs := "/queues/" + url.PathEscape(name) + "/jobs"
		_, page, _ := tb.do(t, "GET", jobs, "", "", "")
		code, loc := tb.submit(t, page, `data-cancel="`+ids[0]+`"`, nil)
		if code != http.StatusSeeOther || !strings.HasPrefix(loc, jobs+"?done=") {
			t.Errorf("cancelling from %s: %d → %q, want back to it", jobs, code, loc)
			continue
		}
		if code, _, _ := tb.do(t, "GET", loc, "", "", ""); code != 200 {
			t.Errorf("%s after the cancel: %d", jobs, code)
		}
	}
}

// A queue deleted and made again under the same name starts a new chart:
// the old queue's points are not drawn as the new one's, and its first
// interval counts from zero, even when the old queue's counters were
// lower than the new one's (where a falling counter would not show it).
func TestSeriesOfQueueMadeAgain(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	big := &broker.Message{Queue: "q", JobType: "größe", Payload: make([]byte, 8<<10)}
	tb.publish(t, big)
	for range 3 {
		tb.clk.Advance(DefaultSampleEvery)
	}
	var sv SeriesView
	getJSON(t, tb, "/api/v1/queues/q/series", &sv)
	if len(sv.Points) < 3 {
		t.Fatalf("the first queue's chart has %d points, want at least 3", len(sv.Points))
	}
	if _, err := tb.b.DeleteQueue("q", true); err != nil {
		t.Fatal(err)
	}
	tb.publish(t, big, big, big) // the new queue's Published (3) passes the old one's (1)
	tb.clk.Advance(DefaultSampleEvery)
	getJSON(t, tb, "/api/v1/queues/q/series", &sv)
	if len(sv.Points) != 1 || sv.Points[0].Ready != 3 || sv.Points[0].PublishPerS != 3/DefaultSampleEvery.Seconds() {
		t.Fatalf("the chart of the queue made again: %+v, want one point of 3 publishes", sv.Points)
	}
	var qv QueueView
	getJSON(t, tb, "/api/v1/queues/q", &qv)
	if qv.PublishPerS != nil {
		t.Errorf("the queue made again has a publish rate (%v/s) from an interval it did not live through", *qv.PublishPerS)
	}
}

// A dashboard without tokens answers only to IP addresses and localhost:
// another site's page that points a name of its own at this machine (DNS
// rebinding) sends that name as Host and as Origin, which the origin check
// cannot tell from the dashboard's own pages. Before, such a purge went
// through. AnyHost (serve -insecure) and tokens lift the rule.
func TestNoTokensAnswersOnlyLoopbackNames(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.publish(t, &broker.Message{Queue: "q", Payload: make([]byte, 2<<10)}, &broker.Message{Queue: "q"})
	purge := func(srv *Server, host string) int {
		req := httptest.NewRequestWithContext(t.Context(), "POST", "/api/v1/queues/q/purge", strings.NewReader(`{"confirm":"q"}`))
		req.Host = host
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", "http://"+host)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec.Code
	}
	for _, host := range []string{"evil.example:7071", "evil.example", "localhost.evil.example:7071", "xn--mnchen-3ya.example", "7f000001.nip.io"} {
		if code := purge(tb.web, host); code != http.StatusMisdirectedRequest {
			t.Errorf("a purge for Host %q answered %d, want 421", host, code)
		}
		req := httptest.NewRequestWithContext(t.Context(), "GET", "/api/v1/queues", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		tb.web.ServeHTTP(rec, req)
		if rec.Code != http.StatusMisdirectedRequest || strings.Contains(rec.Body.String(), `"q"`) {
			t.Errorf("a read for Host %q answered %d: %.80s", host, rec.Code, rec.Body.String())
		}
	}
	if in, _ := tb.b.Queue("q"); in.Ready != 2 {
		t.Fatalf("q holds %d ready after refused purges, want 2", in.Ready)
	}
	for _, host := range []string{"127.0.0.1:7071", "[::1]:7071", "LOCALHOST:7071", "localhost.", "app.localhost:7071", "10.0.0.7"} {
		req := httptest.NewRequestWithContext(t.Context(), "GET", "/api/v1/queues", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		tb.web.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Errorf("a read for Host %q answered %d, want 200", host, rec.Code)
		}
	}
	open, err := New(Config{Broker: tb.b, AnyHost: true, Logger: tb.web.cfg.Logger})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if code := purge(open, "broker.internal:7071"); code != http.StatusOK {
		t.Errorf("with AnyHost a purge for a named host answered %d, want 200", code)
	}
}

// A queue whose jobs were all published before their key learned enough
// scores nothing, and its pages say why instead of "– over 0".
func TestPagesSayWhyNothingWasScored(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	for range 20 {
		tb.publish(t, &broker.Message{Queue: "q", Producer: "p", JobType: "a"})
	}
	c, err := tb.b.Subscribe("q", "w", 20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 20 {
		d, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Ack(d.ID, 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	var qv QueueView
	getJSON(t, tb, "/api/v1/queues/q", &qv)
	if qv.Predictor.MAESamples != 0 || qv.Predictor.UnscoredCold != 20 || !strings.Contains(qv.Predictor.WhyUnscored, "20 were published while their key was cold") {
		t.Fatalf("predictor %+v: want nothing scored, 20 cold, and why", qv.Predictor)
	}
	for _, p := range []string{"/queues/q", "/queues/q/keys"} {
		if _, body, _ := tb.do(t, "GET", p, "", "", ""); !strings.Contains(body, `id="why-unscored"`) {
			t.Errorf("%s does not say why nothing was scored", p)
		}
	}
}
