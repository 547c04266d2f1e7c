package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/harbinger-mq/harbinger/internal/auth"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// PreviewBytes is how much of a job's payload its page shows. A payload
// may be megabytes of anything; the page shows its start, and the read
// API only its size.
const PreviewBytes = 4 << 10

// JobView is one job, as the broker's GetJob finds it: the fields every
// job has, then those of its state, which are null (or "") in the others.
// The payload is left out, as for dead letters: PayloadSize is its size.
type JobView struct {
	Queue       string            `json:"queue"`
	ID          string            `json:"id"`
	State       string            `json:"state"` // waiting, delayed, running or dead
	Producer    string            `json:"producer"`
	JobType     string            `json:"job_type"`
	Attempts    int               `json:"attempts"` // deliveries so far, the current one included
	MaxAttempts int               `json:"max_attempts"`
	PublishedAt time.Time         `json:"published_at"`
	Tier        int               `json:"tier"` // the tier it was given
	CostMS      float64           `json:"predicted_ms"`
	Long        bool              `json:"long"`
	Cold        bool              `json:"cold"`
	Headers     map[string]string `json:"headers"`
	PayloadSize int               `json:"payload_bytes"`

	EnqueuedAt *time.Time `json:"enqueued_at"` // waiting: when it took its place in line
	WaitedMS   *float64   `json:"waited_ms"`   // waiting
	ExpiresAt  *time.Time `json:"expires_at"`  // when its TTL runs out once due; null is never
	DueAt      *time.Time `json:"due_at"`      // delayed: when it takes its place in line
	Consumer   string     `json:"consumer"`    // running: the consumer's name
	Cancelled  bool       `json:"cancelled"`   // running: its worker was told to stop
	LeasedAt   *time.Time `json:"leased_at"`   // running: when this delivery started
	ElapsedMS  *float64   `json:"elapsed_ms"`  // running
	LeaseEnds  *time.Time `json:"lease_ends"`  // running
	// Overrunning is a running job that has run longer than predicted.
	Overrunning bool       `json:"overrunning"`
	Reason      string     `json:"reason"`  // dead: why
	DeadAt      *time.Time `json:"dead_at"` // dead
	// Ended: "done" or "cancelled", kept by a queue with keep_done; only
	// these, the names and attempts are kept of it.
	Ended   bool       `json:"ended"`
	EndedAt *time.Time `json:"ended_at"`
	TookMS  *float64   `json:"took_ms"` // done: the time its worker reported
}

func jobView(now time.Time, j broker.JobInfo) JobView {
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	v := JobView{
		Queue: j.Queue, ID: j.ID, State: string(j.State), Producer: j.Producer, JobType: j.JobType,
		Attempts: j.Attempts, MaxAttempts: j.MaxAttempts, PublishedAt: j.PublishedAt,
		Tier: j.Tier, CostMS: ms(j.Cost), Long: j.Long, Cold: j.Cold,
		Headers: j.Headers, PayloadSize: len(j.Payload), ExpiresAt: at(j.Expires),
	}
	if v.Headers == nil {
		v.Headers = map[string]string{}
	}
	switch j.State {
	case broker.JobWaiting:
		waited := ms(now.Sub(j.Enqueued))
		v.EnqueuedAt, v.WaitedMS = at(j.Enqueued), &waited
	case broker.JobDelayed:
		v.DueAt = at(j.Due)
	case broker.JobRunning:
		el := now.Sub(j.Leased)
		elapsed := ms(el)
		v.Consumer, v.LeasedAt, v.ElapsedMS, v.LeaseEnds, v.Cancelled = j.Consumer, at(j.Leased), &elapsed, at(j.Deadline), j.Cancelled
		v.Overrunning = j.Cost > 0 && el > j.Cost
	case broker.JobDead:
		v.Reason, v.DeadAt = j.Reason, at(j.DeadAt)
	case broker.JobDone, broker.JobCancelled:
		v.Ended, v.EndedAt = true, at(j.EndedAt)
		if j.State == broker.JobDone {
			took := ms(j.Took)
			v.TookMS = &took
		}
	}
	return v
}

// job finds the job the request names, for a token that may read its
// queue. The check comes first, so a token that may not read the queue
// learns nothing of what it holds.
func (s *Server) job(g *auth.Grant, queue, id string) (broker.JobInfo, error) {
	if err := g.Check(auth.Read, queue); err != nil {
		return broker.JobInfo{}, err
	}
	return s.b.GetJob(queue, id)
}

func (s *Server) apiJob(r *http.Request, g *auth.Grant) (any, error) {
	j, err := s.job(g, r.PathValue("name"), r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	return jobView(s.cfg.Clock.Now(), j), nil
}

// jobPageView is what the job page renders: the job, or, when the queue
// does not hold it, the queue and id asked for.
type jobPageView struct {
	Queue, ID string
	// Path is the job page's path, escaped, for its forms' way back: the
	// lookup form shows the page at its own path.
	Path    string
	Job     *JobView // nil: not found
	Headers [][2]string
	Payload payloadPreview
}

func (s *Server) jobPage(w http.ResponseWriter, r *http.Request, g *auth.Grant) error {
	return s.showJob(w, r, g, r.PathValue("id"))
}

func (s *Server) showJob(w http.ResponseWriter, r *http.Request, g *auth.Grant, id string) error {
	name := r.PathValue("name")
	j, err := s.job(g, name, id)
	v := jobPageView{Queue: name, ID: id, Path: jobPath(name, id)}
	code := http.StatusOK
	switch {
	case errors.Is(err, broker.ErrUnknownMessage):
		code = http.StatusNotFound
	case err != nil:
		return err
	default:
		jv := jobView(s.cfg.Clock.Now(), j)
		v.Job, v.Payload = &jv, preview(j.Payload, PreviewBytes)
		for _, k := range slices.Sorted(maps.Keys(j.Headers)) {
			v.Headers = append(v.Headers, [2]string{show(k), show(j.Headers[k])})
		}
	}
	title := "Job " + show(id)
	if code == http.StatusNotFound {
		title = "No job " + show(id)
	}
	d := s.data(r, g, title+" · "+name, v)
	d.Tab = "jobs"
	s.renderStatus(w, code, "job", d)
	return nil
}

// lookupJob answers the queue page's lookup form (?id=ID) with the job's
// page.
func (s *Server) lookupJob(w http.ResponseWriter, r *http.Request, g *auth.Grant) error {
	name := r.PathValue("name")
	id := strings.TrimSpace(r.URL.Query().Get("id"))
	switch id {
	case "":
		http.Redirect(w, r, "/queues/"+url.PathEscape(name)+"?error="+url.QueryEscape("type a job's id to look it up"), http.StatusSeeOther)
		return nil
	case ".", "..":
		// A path cannot carry these as a segment (a browser resolves
		// them), and no job has such an id: say so here.
		return s.showJob(w, r, g, id)
	}
	http.Redirect(w, r, jobPath(name, id), http.StatusSeeOther)
	return nil
}

// findJob answers the lookup form of every page (/job?id=ID): the job's
// page in the first queue the token may read that holds it.
func (s *Server) findJob(w http.ResponseWriter, r *http.Request, g *auth.Grant) error {
	id := strings.TrimSpace(r.URL.Query().Get("id"))
	if id == "" {
		http.Redirect(w, r, "/?error="+url.QueryEscape("type a job's id to look it up"), http.StatusSeeOther)
		return nil
	}
	j, err := s.b.FindJob(id, func(q string) bool { return g.Allows(auth.Read, q) })
	if err != nil {
		return err
	}
	http.Redirect(w, r, jobPath(j.Queue, j.ID), http.StatusSeeOther)
	return nil
}

func (s *Server) apiFindJob(r *http.Request, g *auth.Grant) (any, error) {
	j, err := s.b.FindJob(r.PathValue("id"), func(q string) bool { return g.Allows(auth.Read, q) })
	if err != nil {
		return nil, err
	}
	return jobView(s.cfg.Clock.Now(), j), nil
}

// jobPath is the path of a job's page.
func jobPath(queue, id string) string {
	return "/queues/" + url.PathEscape(queue) + "/jobs/" + url.PathEscape(id)
}

// payloadPreview is the start of a payload as a page shows it.
type payloadPreview struct {
	// Kind is "json" (shown indented), "text" (UTF-8) or "bytes".
	Kind    string
	Text    string // escaped (see escape)
	Shown   int    // how many of the payload's bytes Text shows
	Cut     bool   // the payload goes on past them
	Escaped int    // how many escapes Text holds
}

// preview escapes the payload's first bytes, at most limit of them and
// never half a character.
func preview(p []byte, limit int) payloadPreview {
	kind := "bytes"
	switch {
	case len(p) <= maxPrettyJSON && json.Valid(p) && len(bytes.TrimSpace(p)) > 0:
		var buf bytes.Buffer
		if json.Indent(&buf, p, "", "  ") == nil {
			text, shown, escaped := escape(buf.String(), limit, true)
			return payloadPreview{Kind: "json", Text: text, Shown: min(shown, len(p)), Cut: shown < buf.Len(), Escaped: escaped}
		}
	case utf8.Valid(p[:min(len(p), limit)]) || utf8.Valid(p):
		kind = "text"
	}
	// The character at the limit may run a few bytes past it: look at
	// enough to tell.
	text, shown, escaped := escape(string(p[:min(len(p), limit+utf8.UTFMax)]), limit, true)
	return payloadPreview{Kind: kind, Text: text, Shown: shown, Cut: shown < len(p), Escaped: escaped}
}

// maxPrettyJSON is the largest payload checked for JSON to indent.
const maxPrettyJSON = 1 << 20

// show is text a job carries (a header, a producer, an id someone typed)
// as a page shows it: escaped, on one line.
func show(s string) string {
	text, _, _ := escape(s, len(s), false)
	return text
}

// escape writes the characters of s that fit in its first limit bytes
// as they are, but for what a page must not show raw: a byte that is not
// UTF-8 becomes \xff, a character that is not printable (a control, an
// escape sequence's ESC, a bidirectional override, which reorders what
// follows) its Go escape (\x1b, \u202e). Newlines and tabs stay when
// lines is set (a payload), and are escaped too when not (a table cell).
// The page's template escapes what is left for HTML. It returns the text,
// how many bytes of s it covers and how many escapes it wrote.
func escape(s string, limit int, lines bool) (text string, n, escaped int) {
	var b strings.Builder
	for n < len(s) {
		r, size := utf8.DecodeRuneInString(s[n:])
		if n+size > limit {
			break
		}
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[n])
			escaped++
		case lines && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r != ' ' && !unicode.IsPrint(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			escaped++
		default:
			b.WriteString(s[n : n+size])
		}
		n += size
	}
	return b.String(), n, escaped
}

// fromNow says when t is against now, the way a person reads it: "in 3
// s", "2.5 min ago".
func fromNow(now, t time.Time) string {
	switch d := t.Sub(now); {
	case d > 0:
		return "in " + fmtMS(ms(d))
	case d == 0:
		return "now"
	default:
		return fmtMS(ms(-d)) + " ago"
	}
}
