package web

import (
	"bytes"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/harbinger-mq/harbinger/internal/auth"
	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/internal/sched"
)

// pageData is what every page template gets.
type pageData struct {
	Title      string
	Queue      string // the queue the page is about, if any
	Tab        string
	Signed     bool // the dashboard asks for tokens
	Grant      *auth.Grant
	Done, Err  string // the outcome of the last action
	Prometheus string
	// Path is this page's path, escaped, for the forms' way back: the
	// decoded one would split a queue name holding "/" or "?".
	Path string
	Data any
}

func (s *Server) data(r *http.Request, g *auth.Grant, title string, v any) pageData {
	return pageData{
		Title: title, Queue: r.PathValue("name"), Signed: s.cfg.Tokens != nil, Grant: g,
		Done: r.URL.Query().Get("done"), Err: r.URL.Query().Get("error"),
		Prometheus: s.cfg.PrometheusURL, Path: r.URL.EscapedPath(), Data: v,
	}
}

func (s *Server) queuesPage(w http.ResponseWriter, r *http.Request, g *auth.Grant) error {
	s.render(w, "queues", s.data(r, g, "Queues", s.queues(g)))
	return nil
}

func (s *Server) queuePage(w http.ResponseWriter, r *http.Request, g *auth.Grant) error {
	v, err := s.queue(r.PathValue("name"), g)
	if err != nil {
		return err
	}
	if q := r.URL.Query(); q.Has("whatif") {
		window, err := s.parseWindow(q.Get("whatif"))
		if err != nil {
			return err
		}
		in, err := s.b.Queue(v.Name)
		if err != nil {
			return err
		}
		wi := s.whatIf(v.Name, window, in.Config)
		v.WhatIf = &wi
	}
	d := s.data(r, g, v.Name, v)
	d.Tab = "queue"
	s.render(w, "queue", d)
	return nil
}

func (s *Server) keysPage(w http.ResponseWriter, r *http.Request, g *auth.Grant) error {
	v, err := s.keys(r, g)
	if err != nil {
		return err
	}
	d := s.data(r, g, v.Queue+": what it learned", v)
	d.Tab = "keys"
	s.render(w, "keys", d)
	return nil
}

func (s *Server) jobsPage(w http.ResponseWriter, r *http.Request, g *auth.Grant) error {
	v, err := s.jobs(r, g)
	if err != nil {
		return err
	}
	d := s.data(r, g, v.Queue+": jobs", v)
	d.Tab = "jobs"
	s.render(w, "jobs", d)
	return nil
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Tokens == nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	s.render(w, "login", pageData{Title: "Sign in", Signed: true, Err: r.URL.Query().Get("error"), Data: nextPath(r.URL.Query().Get("next"))})
}

// login checks the token and keeps it in a cookie the page's scripts
// cannot read and other sites' requests do not carry.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Tokens == nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	tok := strings.TrimSpace(r.PostFormValue("token"))
	next := nextPath(r.PostFormValue("next"))
	if err := sameOrigin(r); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	if _, err := s.cfg.Tokens.Lookup(tok); err != nil {
		_, msg := status(err)
		http.Redirect(w, r, "/login?next="+url.QueryEscape(next)+"&error="+url.QueryEscape(msg), http.StatusSeeOther)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: auth.CookieName, Value: tok, Path: "/", HttpOnly: true,
		Secure: s.cfg.SecureCookies, SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if err := sameOrigin(r); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden) // another site's page may not sign a user out
		return
	}
	http.SetCookie(w, &http.Cookie{Name: auth.CookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		Secure: s.cfg.SecureCookies, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// nextPath keeps a sign-in's way back on this dashboard.
func nextPath(p string) string {
	if !localPath(p) {
		return "/"
	}
	return p
}

func (s *Server) render(w http.ResponseWriter, name string, d pageData) {
	s.renderStatus(w, http.StatusOK, name, d)
}

// renderStatus renders a page with an HTTP status other than 200: an error,
// or a job that is not there.
func (s *Server) renderStatus(w http.ResponseWriter, code int, name string, d pageData) {
	t := s.pages[name]
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", d); err != nil {
		s.cfg.Logger.Error("web: rendering a page", "page", name, "err", err)
		http.Error(w, "the page could not be rendered: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = buf.WriteTo(w)
}

var pageNames = []string{"queues", "queue", "keys", "jobs", "job", "schedules", "login", "error"}

func (s *Server) parseTemplates() error {
	funcs := template.FuncMap{
		"ms":       fmtMS,
		"optms":    func(v *float64) string { return optMS(v) },
		"rate":     fmtRate,
		"pct":      fmtPct,
		"tiers":    fmtTiers,
		"inflight": fmtInFlight,
		"since":    func(t time.Time) string { return fmtMS(ms(s.cfg.Clock.Now().Sub(t))) + " ago" },
		"clock":    func(t time.Time) string { return t.UTC().Format("15:04:05") },
		"stamp":    func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000 UTC") },
		"from":     func(t time.Time) string { return fromNow(s.cfg.Clock.Now(), t) },
		"show":     func(v string) string { return show(v) },
		"path":     url.PathEscape,
		"can":      func(g *auth.Grant, p string, q string) bool { return g != nil && g.Allows(auth.Permission(p), q) },
		"sorturl":  sortURL,
		"add":      func(a, b int) int { return a + b },
		"signed":   signedPct,
		"ratio": func(v float64) string {
			if math.IsNaN(v) || v == 0 {
				return "–"
			}
			return fmt.Sprintf("%.2fx", v)
		},
		"share":     func(v float64) string { return fmt.Sprintf("%.0f%%", v*100) },
		"workshare": func(v float64) string { return fmtPct(&v) },
		"neg":       func(v float64) float64 { return -v },
		"f":         func(v report.Num) float64 { return float64(v) },
		"sub1":      func(v float64) float64 { return v - 1 },
		"whatifWindows": func() []string {
			var out []string
			for _, w := range WhatIfWindows {
				out = append(out, fmtWindow(w))
			}
			return out
		},
		"defaultPolicy": func() string { return sched.DefaultPolicy },
		"sub":           func(a, b int) int { return max(a-b, 0) },
		"cancelArgs": func(queue, id, back string) map[string]string {
			return map[string]string{"Queue": queue, "ID": id, "Back": back}
		},
	}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(assets, "assets/templates/layout.html", "assets/templates/"+name+".html")
		if err != nil {
			return fmt.Errorf("web: templates: %w", err)
		}
		s.pages[name] = t
	}
	return nil
}

// sortURL is the link of a keys table heading: sort by column, flipping
// the direction when it is already the sort.
func sortURL(v KeysView, column string) string {
	q := url.Values{}
	q.Set("sort", column)
	desc := column == "count" || column == "ewma" || column == "p50" || column == "p99"
	if v.Sort == column {
		desc = !v.Desc
	}
	if desc {
		q.Set("desc", "1")
	}
	if v.Search != "" {
		q.Set("q", v.Search)
	}
	return "?" + q.Encode()
}

// fmtMS writes a duration given in milliseconds the way a person reads it.
func fmtMS(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v == 0:
		return "0"
	case v < 1:
		return fmt.Sprintf("%.0f µs", v*1000)
	case v < 1000:
		return fmt.Sprintf("%.3g ms", v)
	case v < 60_000:
		return fmt.Sprintf("%.3g s", v/1000)
	case v < 3_600_000:
		return fmt.Sprintf("%.1f min", v/60_000)
	default:
		return fmt.Sprintf("%.1f h", v/3_600_000)
	}
}

func optMS(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmtMS(*v)
}

func fmtRate(v *float64) string {
	if v == nil {
		return "–"
	}
	if *v < 10 {
		return fmt.Sprintf("%.2g/s", *v)
	}
	return fmt.Sprintf("%.0f/s", *v)
}

func fmtPct(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", 100**v)
}

// fmtInFlight writes a queue's jobs in flight as `harbinger admin queues`
// does: "2/4" against its max_in_flight, just "2" when it has none.
func fmtInFlight(n, limit int) string {
	if limit > 0 {
		return fmt.Sprintf("%d/%d", n, limit)
	}
	return fmt.Sprint(n)
}

func fmtTiers(ts []int) string {
	parts := make([]string, len(ts))
	for i, n := range ts {
		parts[i] = fmt.Sprint(n)
	}
	return strings.Join(parts, " · ")
}
