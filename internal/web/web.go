// Package web owns the dashboard: server-rendered pages of the queues, what
// the broker learned per key, the jobs waiting, running and dead, and live
// charts of the last minutes, plus the JSON read API the pages use
// (docs/dashboard.md). Everything it shows comes from the broker's
// inspector methods, the same ones the gRPC Admin service and the metrics
// read; it keeps nothing of its own but a ring of recent samples. Its assets
// are embedded, so the binary is all it needs.
package web

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/harbinger-mq/harbinger/internal/auth"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/clock"
)

// Defaults for Config.
const (
	DefaultSampleEvery = 2 * time.Second
	DefaultHistory     = 10 * time.Minute
	// DefaultListLimit is how many keys, jobs or dead letters a page or an
	// API call lists unless asked for another number.
	DefaultListLimit = 100
	// MaxListLimit bounds what one call may ask for.
	MaxListLimit = broker.MaxJobsListed
)

// Config is the dashboard's configuration.
type Config struct {
	// Broker is the broker shown; required.
	Broker *broker.Broker
	// Tokens, when set, makes every page and API call ask for a token:
	// read on a queue to see it, admin to act on it. Nil lets everyone do
	// everything (a loopback-only broker).
	Tokens *auth.Tokens
	// SecureCookies marks the sign-in cookie Secure: set it when the
	// dashboard is served over TLS.
	SecureCookies bool
	// Clock drives the sampler; default the wall clock.
	Clock clock.Clock
	// SampleEvery is the live charts' interval; default DefaultSampleEvery.
	SampleEvery time.Duration
	// History is how far back the live charts reach; default
	// DefaultHistory.
	History time.Duration
	// PrometheusURL, when set, is linked from the pages for longer history.
	PrometheusURL string
	// Logger gets the actions taken through the dashboard; default
	// slog.Default().
	Logger *slog.Logger
	// AnyHost lets a dashboard without Tokens answer requests for any
	// host name. Without it such a dashboard answers only to IP addresses
	// and localhost: another site's page can point a name of its own at
	// 127.0.0.1 (DNS rebinding), and its requests then carry that name as
	// both Host and Origin, so no origin check tells them apart.
	AnyHost bool
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.SampleEvery == 0 {
		c.SampleEvery = DefaultSampleEvery
	}
	if c.History == 0 {
		c.History = DefaultHistory
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if c.Broker == nil {
		return errors.New("web: a broker is required")
	}
	if c.SampleEvery < 100*time.Millisecond {
		return fmt.Errorf("web: sample interval must be at least 100ms, got %v", c.SampleEvery)
	}
	if c.History < 2*c.SampleEvery {
		return fmt.Errorf("web: history (%v) must cover at least two sample intervals (%v)", c.History, c.SampleEvery)
	}
	if c.History/c.SampleEvery > 100_000 {
		return fmt.Errorf("web: history %v at one sample per %v is too many samples to keep; sample less often", c.History, c.SampleEvery)
	}
	return nil
}

//go:embed assets
var assets embed.FS

// Server is the dashboard. Close stops its sampler.
type Server struct {
	cfg    Config
	b      *broker.Broker
	series *series
	// whatIfs runs the "what if" panel's replays (whatif.go).
	whatIfs *whatIfs
	pages   map[string]*template.Template
	mux     *http.ServeMux
}

// New starts the dashboard's sampler and returns the dashboard.
func New(cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, b: cfg.Broker, pages: map[string]*template.Template{}}
	if err := s.parseTemplates(); err != nil {
		return nil, err
	}
	s.routes()
	s.series = newSeries(cfg.Broker, cfg.Clock, cfg.SampleEvery, cfg.History)
	s.series.start()
	s.whatIfs = newWhatIfs(cfg.Broker, cfg.Clock.Now)
	return s, nil
}

// Close stops the sampler and waits for the replays under way.
func (s *Server) Close() {
	s.series.close()
	s.whatIfs.wait()
}

// ServeHTTP serves the pages, the API and the assets.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	if s.cfg.Tokens == nil && !s.cfg.AnyHost && !loopbackName(r.Host) {
		http.Error(w, fmt.Sprintf("refused: a dashboard without tokens answers only to localhost and IP addresses, not %q (a name another site may have pointed here); use the address, or give the broker tokens", r.Host), http.StatusMisdirectedRequest)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// loopbackName reports whether host (a Host header, with or without a
// port) is an IP address or localhost: names no other site can point at
// this machine.
func loopbackName(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	return net.ParseIP(host) != nil || host == "localhost" || strings.HasSuffix(host, ".localhost")
}

func (s *Server) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets/static")
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /login", s.loginPage)
	m.HandleFunc("POST /login", s.login)
	m.HandleFunc("POST /logout", s.logout)

	m.HandleFunc("GET /{$}", s.page(s.queuesPage))
	m.HandleFunc("GET /queues/{name}", s.page(s.queuePage))
	m.HandleFunc("GET /queues/{name}/keys", s.page(s.keysPage))
	m.HandleFunc("GET /queues/{name}/jobs", s.page(s.jobsPage))
	m.HandleFunc("GET /queues/{name}/jobs/{id}", s.page(s.jobPage))
	m.HandleFunc("GET /queues/{name}/job", s.page(s.lookupJob))
	m.HandleFunc("GET /schedules", s.page(s.schedulesPage))
	m.HandleFunc("GET /job", s.page(s.findJob))

	m.HandleFunc("GET /api/v1/queues", s.api(s.apiQueues))
	m.HandleFunc("GET /api/v1/queues/{name}", s.api(s.apiQueue))
	m.HandleFunc("GET /api/v1/queues/{name}/keys", s.api(s.apiKeys))
	m.HandleFunc("GET /api/v1/queues/{name}/jobs", s.api(s.apiJobs))
	m.HandleFunc("GET /api/v1/queues/{name}/jobs/{id}", s.api(s.apiJob))
	m.HandleFunc("GET /api/v1/queues/{name}/series", s.api(s.apiSeries))
	m.HandleFunc("GET /api/v1/queues/{name}/whatif", s.api(s.apiWhatIf))
	m.HandleFunc("GET /api/v1/schedules", s.api(s.apiSchedules))
	m.HandleFunc("GET /api/v1/series", s.api(s.apiTotalSeries))
	m.HandleFunc("GET /api/v1/jobs/{id}", s.api(s.apiFindJob))

	// Actions answer a form with a redirect back and JSON with JSON.
	m.HandleFunc("POST /api/v1/queues/{name}/pause", s.action(s.pause(true)))
	m.HandleFunc("POST /api/v1/queues/{name}/resume", s.action(s.pause(false)))
	m.HandleFunc("POST /api/v1/queues/{name}/purge", s.action(s.purge))
	m.HandleFunc("POST /api/v1/queues/{name}/delete", s.act(s.deleteQueue))
	m.HandleFunc("POST /api/v1/queues/{name}/dead-letters/requeue", s.action(s.requeue))
	m.HandleFunc("POST /api/v1/queues/{name}/dead-letters/delete", s.action(s.deleteDead))
	m.HandleFunc("POST /api/v1/queues/{name}/jobs/cancel", s.action(s.cancel))
	m.HandleFunc("POST /api/v1/queues/{name}/jobs/run-now", s.action(s.runNow))
	for _, what := range []string{"pause", "resume", "delete"} {
		m.HandleFunc("POST /api/v1/queues/{name}/schedules/{schedule}/"+what, s.action(s.scheduleAction(what)))
	}
	s.mux = m
}

// everything is the grant of a dashboard without tokens.
var everything = &auth.Grant{Scopes: []auth.Scope{{Perm: auth.Admin}}}

// grant is what the request's token may do.
func (s *Server) grant(r *http.Request) (*auth.Grant, error) {
	if s.cfg.Tokens == nil {
		return everything, nil
	}
	return s.cfg.Tokens.Lookup(auth.HTTPToken(r))
}

// httpError carries a status code for the handlers' errors.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// status maps an error to an HTTP status and a message a person can act on.
func status(err error) (int, string) {
	var he *httpError
	var de *auth.DeniedError
	var nf *broker.QueueNotFoundError
	switch {
	case errors.As(err, &he):
		return he.code, he.msg
	case errors.Is(err, auth.ErrNoToken):
		return http.StatusUnauthorized, "sign in with a token (or send Authorization: Bearer TOKEN)"
	case errors.Is(err, auth.ErrBadToken):
		return http.StatusUnauthorized, "that token is not recognised; it may have been revoked"
	case errors.As(err, &de):
		return http.StatusForbidden, strings.TrimPrefix(de.Error(), "auth: ")
	case errors.As(err, &nf):
		return http.StatusNotFound, strings.TrimPrefix(err.Error(), "broker: ")
	case errors.Is(err, broker.ErrUnknownMessage):
		// A job the queue does not hold: its message says it may have
		// ended or never existed.
		return http.StatusNotFound, strings.TrimPrefix(err.Error(), "broker: ")
	case errors.Is(err, broker.ErrQueueInUse):
		// Its message says what the queue holds, or which schedules
		// publish to it.
		return http.StatusConflict, strings.TrimPrefix(err.Error(), "broker: ")
	case errors.Is(err, broker.ErrShuttingDown):
		return http.StatusServiceUnavailable, "the broker is shutting down"
	case errors.Is(err, broker.ErrNotDurable):
		return http.StatusServiceUnavailable, strings.TrimPrefix(err.Error(), "broker: ")
	default:
		return http.StatusInternalServerError, strings.TrimPrefix(err.Error(), "broker: ")
	}
}

// page wraps a page handler: it finds the grant, sends a browser without
// one to sign in, and renders errors as a page.
func (s *Server) page(h func(w http.ResponseWriter, r *http.Request, g *auth.Grant) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		g, err := s.grant(r)
		if err != nil {
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if err := h(w, r, g); err != nil {
			code, msg := status(err)
			s.renderStatus(w, code, "error", pageData{Title: http.StatusText(code), Signed: s.cfg.Tokens != nil, Grant: g, Data: msg})
		}
	}
}

// api wraps a JSON read handler.
func (s *Server) api(h func(r *http.Request, g *auth.Grant) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		g, err := s.grant(r)
		var v any
		if err == nil {
			v, err = h(r, g)
		}
		if err != nil {
			code, msg := status(err)
			writeJSON(w, code, map[string]string{"error": msg})
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

// action wraps a POST that changes something and says what it did in a
// sentence; see act.
func (s *Server) action(h func(r *http.Request, name string) (string, error)) http.HandlerFunc {
	return s.act(func(r *http.Request, name string) (outcome, error) {
		done, err := h(r, name)
		return outcome{done: done}, err
	})
}

// outcome is what an action did.
type outcome struct {
	done string // a sentence, for the log and the page's message
	// answer is the JSON a script gets on success; {"done": done} when nil.
	answer any
	// next, when set, is the page a form goes to afterwards, success or
	// not, instead of the one it came from (which may be gone).
	next string
}

// act wraps a POST that changes something. It refuses requests from
// another site (a page elsewhere posting to a dashboard on localhost), asks
// for admin on the queue, logs what was done, and answers a form with a
// redirect back to the page it came from.
func (s *Server) act(h func(r *http.Request, name string) (outcome, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// Bounded before anything reads it: a form's way back is read
		// from the body even when the request is refused.
		r.Body = http.MaxBytesReader(w, r.Body, maxActionBody)
		name := r.PathValue("name")
		g, err := s.grant(r)
		if err == nil {
			err = sameOrigin(r)
		}
		if err == nil {
			err = g.Check(auth.Admin, name)
		}
		var out outcome
		if err == nil {
			out, err = h(r, name)
		}
		form := isForm(r)
		next := func() string {
			if out.next != "" {
				return out.next
			}
			return back(r, name)
		}
		if err != nil {
			code, msg := status(err)
			if out.done != "" {
				// Part of it was done before the error (the first ids
				// of several): log that, and say it.
				s.cfg.Logger.Info("web: "+out.done, "queue", name, "token", g.Name)
				msg = out.done + "; then " + msg
			}
			if form {
				http.Redirect(w, r, next()+"?error="+url.QueryEscape(msg), http.StatusSeeOther)
				return
			}
			writeJSON(w, code, map[string]string{"error": msg})
			return
		}
		s.cfg.Logger.Info("web: "+out.done, "queue", name, "token", g.Name)
		if form {
			http.Redirect(w, r, next()+"?done="+url.QueryEscape(out.done), http.StatusSeeOther)
			return
		}
		if out.answer == nil {
			out.answer = map[string]string{"done": out.done}
		}
		writeJSON(w, http.StatusOK, out.answer)
	}
}

func isForm(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return strings.HasPrefix(ct, "application/x-www-form-urlencoded") || strings.HasPrefix(ct, "multipart/form-data")
}

// back is the page an action's form came from: a path on this dashboard
// (the form's "back" field, without a query, since one is added), else
// the queue's page.
func back(r *http.Request, name string) string {
	if p := r.FormValue("back"); localPath(p) && !strings.ContainsAny(p, "?#") {
		return p
	}
	return "/queues/" + url.PathEscape(name)
}

// localPath reports whether p, as a redirect's target, stays on this
// dashboard. Browsers drop tabs and newlines from a URL and read a
// backslash as a slash, so "/\t/evil.example" and "/\\evil.example" name
// another site: a path with a backslash, a space or a control character is
// refused, as is one that starts with two slashes. So is one that is not
// UTF-8: no page of the dashboard has such a path, and the sign-in page
// would echo it into its form.
func localPath(p string) bool {
	return strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "//") && utf8.ValidString(p) &&
		strings.IndexFunc(p, func(c rune) bool { return c <= ' ' || c == 0x7f || c == '\\' }) < 0
}

// sameOrigin refuses a POST that a browser says came from another site.
// "Origin: null" names no site: a browser sends it from a sandboxed frame
// or a page under a no-referrer policy, on any site, so it passes only
// when the browser also says the request is same-origin.
func sameOrigin(r *http.Request) error {
	site := r.Header.Get("Sec-Fetch-Site")
	if site == "cross-site" {
		return &httpError{http.StatusForbidden, "refused: the request came from another site"}
	}
	if o := r.Header.Get("Origin"); o != "" && (o != "null" || site != "same-origin") {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return &httpError{http.StatusForbidden, "refused: the request came from another origin (" + o + ")"}
		}
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// offset reads the "offset" query parameter: how many of each list to
// skip, for the next page.
func offset(r *http.Request) (int, error) {
	v := r.URL.Query().Get("offset")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > broker.MaxJobsOffset {
		return 0, badRequest("offset must be a whole number from 0 to %d, got %q", broker.MaxJobsOffset, v)
	}
	return n, nil
}

// limit reads the "limit" query parameter.
func limit(r *http.Request) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return DefaultListLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxListLimit {
		return 0, badRequest("limit must be a whole number from 1 to %d, got %q", MaxListLimit, v)
	}
	return n, nil
}
