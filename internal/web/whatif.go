package web

import (
	"fmt"
	"html/template"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/harbinger-mq/harbinger/internal/auth"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/internal/sched"
	"github.com/harbinger-mq/harbinger/internal/sim"
)

// The "what if" panel replays a queue's recorded history (the last hour,
// or a chosen window) through FIFO, the default and the other policies in
// the background, one replay at a time, and shows the per-key figures
// and the latency distributions before and after. A result is reused for
// whatIfFresh; after that a look at the panel starts a new replay while
// showing the last one.
const (
	DefaultWhatIfWindow = time.Hour
	whatIfFresh         = 5 * time.Minute
	whatIfKept          = 32 // results kept, the oldest dropped
	whatIfPending       = 8  // replays started and not finished, at most
	whatIfKeyRows       = 25 // keys the panel lists, the busiest
)

// WhatIfWindows are the windows the panel offers.
var WhatIfWindows = []time.Duration{15 * time.Minute, time.Hour, 6 * time.Hour, 24 * time.Hour}

type whatIfKey struct {
	queue  string
	window time.Duration
}

// whatIfRun is one replay, running or done.
type whatIfRun struct {
	started  time.Time
	done     chan struct{} // closed when res or err is set
	finished time.Time
	res      *sim.ReplayResult
	err      error
}

// whatIfs runs the replays and keeps their results.
type whatIfs struct {
	b   *broker.Broker
	now func() time.Time

	mu   sync.Mutex
	runs map[whatIfKey][]*whatIfRun // the last two of each: the newest last
	sem  chan struct{}              // one replay at a time
	// pending counts the replays started and not finished: past
	// whatIfPending a look starts none (the panel shows the last result).
	pending int
	wg      sync.WaitGroup
}

func newWhatIfs(b *broker.Broker, now func() time.Time) *whatIfs {
	return &whatIfs{b: b, now: now, runs: map[whatIfKey][]*whatIfRun{}, sem: make(chan struct{}, 1)}
}

// get returns the newest finished run for k (nil if none) and the run in
// progress (nil if none), starting one when the newest is stale.
func (w *whatIfs) get(k whatIfKey) (last, running *whatIfRun) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rs := w.runs[k]
	for _, r := range rs {
		select {
		case <-r.done:
			last = r
		default:
			running = r
		}
	}
	if running == nil && (last == nil || w.now().Sub(last.finished) > whatIfFresh) && w.pending < whatIfPending {
		running = w.startLocked(k)
	}
	return last, running
}

func (w *whatIfs) startLocked(k whatIfKey) *whatIfRun {
	r := &whatIfRun{started: w.now(), done: make(chan struct{})}
	rs := append(w.runs[k], r)
	if len(rs) > 2 {
		rs = rs[len(rs)-2:]
	}
	w.runs[k] = rs
	if len(w.runs) > whatIfKept {
		w.dropOldestLocked(k)
	}
	w.pending++
	w.wg.Go(func() {
		w.sem <- struct{}{}
		defer func() { <-w.sem }()
		res, err := w.replay(k)
		w.mu.Lock()
		r.res, r.err, r.finished = res, err, w.now()
		close(r.done)
		w.pending--
		w.mu.Unlock()
	})
	return r
}

// dropOldestLocked forgets the finished results started longest ago, but
// not keep's.
func (w *whatIfs) dropOldestLocked(keep whatIfKey) {
	var oldest whatIfKey
	var at time.Time
	for k, rs := range w.runs {
		last := rs[len(rs)-1]
		select {
		case <-last.done:
		default:
			continue
		}
		if k != keep && (at.IsZero() || last.started.Before(at)) {
			oldest, at = k, last.started
		}
	}
	if !at.IsZero() {
		delete(w.runs, oldest)
	}
}

// replay exports the window of the queue's history and replays it on one
// core, so the broker keeps the other.
func (w *whatIfs) replay(k whatIfKey) (*sim.ReplayResult, error) {
	h, es, err := w.b.History(k.queue, w.now().Add(-k.window))
	if err != nil {
		return nil, err
	}
	if len(es) == 0 {
		return &sim.ReplayResult{Queue: k.queue, Policy: h.Policy, Since: h.Since, Until: h.Until,
			TooLittle: "no job of this queue settled in the window"}, nil
	}
	src, err := sim.FromHistory(h, es)
	if err != nil {
		return nil, err
	}
	return sim.Replay(src, nil, sim.ReplayOptions{Overhead: sim.InferOverhead(es), Parallel: 1})
}

// wait blocks until the replays started so far have finished.
func (w *whatIfs) wait() { w.wg.Wait() }

// WhatIfView is the panel: the window asked for, the last result and
// whether a newer one is on its way.
type WhatIfView struct {
	Window  string `json:"window"`
	Running bool   `json:"running"`
	// Busy: too many replays are waiting to start another; look again.
	Busy      bool    `json:"busy,omitempty"`
	Error     string  `json:"error,omitempty"`
	Finished  string  `json:"finished,omitempty"`
	Policy    string  `json:"recorded_policy,omitempty"`
	Arm       string  `json:"arm,omitempty"` // the default's arm
	FIFOLike  bool    `json:"fifo_like"`     // the queue serves in arrival order (fifo or shadow)
	Shadow    bool    `json:"shadow"`
	Switch    string  `json:"switch,omitempty"` // the command that switches the queue to the default
	Jobs      int     `json:"jobs"`
	Workers   int     `json:"workers"`
	Load      float64 `json:"load"`
	TooLittle string  `json:"too_little,omitempty"`
	// Summary is the default against FIFO over every job, in words.
	Summary string         `json:"summary,omitempty"`
	Keys    []WhatIfKeyRow `json:"keys,omitempty"`
	// OracleNote says what the key oracle column is measured against.
	OracleNote string `json:"oracle_note,omitempty"`
	More       int    `json:"more_keys,omitempty"`
	// Chart is the latency distributions, an inline SVG.
	Chart template.HTML `json:"-"`
	// Result is the whole replay, for the API.
	Result *sim.ReplayResult `json:"result,omitempty"`
}

// WhatIfKeyRow is one key's line of the panel.
type WhatIfKeyRow struct {
	Key      string     `json:"key"`
	Jobs     int        `json:"jobs"`
	Words    string     `json:"words"`
	TooFew   bool       `json:"too_few"`
	FIFOMean report.Num `json:"fifo_mean_ms"`
	Mean     report.Num `json:"mean_ms"`
	MeanCut  report.Num `json:"mean_cut"`
	P99Ratio report.Num `json:"p99_ratio"`
	Later    report.Num `json:"later"`
	Worst    report.Num `json:"worst_ratio"`
	// Oracle is the key oracle's cut of the key's mean (null when no
	// setting of it met the goal: then FIFO is the reference).
	Oracle report.Num `json:"oracle_mean_cut"`
}

// parseWindow reads the panel's window: one of WhatIfWindows, so that
// a reader cannot queue replays of every window there is.
func (s *Server) parseWindow(v string) (time.Duration, error) {
	if v == "" {
		return DefaultWhatIfWindow, nil
	}
	d, err := time.ParseDuration(v)
	if err == nil && slices.Contains(WhatIfWindows, d) {
		return d, nil
	}
	var names []string
	for _, w := range WhatIfWindows {
		names = append(names, fmtWindow(w))
	}
	return 0, badRequest("window %q: want one of %s", v, strings.Join(names, ", "))
}

// whatIf is the panel for the queue and window, starting a replay when
// the last is stale.
func (s *Server) whatIf(name string, window time.Duration, cfg broker.QueueConfig) WhatIfView {
	v := WhatIfView{Window: fmtWindow(window), Policy: cfg.Policy, Shadow: cfg.Shadow}
	v.FIFOLike = cfg.Policy == sched.FIFO || cfg.Shadow
	if v.FIFOLike {
		v.Switch = fmt.Sprintf("harbinger admin declare-queue %s policy=%s shadow=false", shellQuote(name), sched.DefaultPolicy)
	}
	if s.b.Config().History.Off {
		v.Error = "the broker keeps no history (serve -history-off): there is nothing to replay"
		return v
	}
	last, running := s.whatIfs.get(whatIfKey{name, window})
	v.Running = running != nil
	if last == nil {
		v.Busy = running == nil
		return v
	}
	v.Finished = last.finished.UTC().Format("15:04:05 UTC")
	if last.err != nil {
		_, v.Error = status(last.err)
		return v
	}
	r := last.res
	v.Result, v.Policy, v.Jobs, v.Workers, v.TooLittle = r, r.Policy, r.Jobs, r.Workers, r.TooLittle
	if len(r.Loads) == 0 || len(r.Loads[0].Arms) == 0 {
		return v
	}
	l := r.Loads[0]
	v.Load = l.Load
	def := l.Arms[0]
	v.Arm = def.Arm
	v.Summary = fmt.Sprintf("every job: mean %s, P99 %s against FIFO", signedPct(-float64(def.MeanCut)), signedPct(float64(def.P99Ratio)-1))
	keys := slices.Clone(l.Keys)
	slices.SortStableFunc(keys, func(a, b sim.ReplayKey) int { return b.Jobs - a.Jobs })
	for i, k := range keys {
		if i == whatIfKeyRows {
			v.More = len(keys) - i
			break
		}
		row := WhatIfKeyRow{Key: k.Key, Jobs: k.Jobs, Words: k.Words(def.Arm), TooFew: k.TooFew, Oracle: report.Num(math.NaN())}
		if !k.TooFew {
			a := k.Arms[0]
			row.FIFOMean, row.Mean = k.FIFOMeanS*1000, a.MeanS*1000
			row.MeanCut, row.P99Ratio, row.Later, row.Worst = a.MeanCut, a.P99Ratio, a.Later, a.Worst
			if k.Oracle != nil {
				row.Oracle = k.Oracle.MeanCut
			}
		}
		v.Keys = append(v.Keys, row)
	}
	v.Chart = distChart(l.Dists, def.Arm)
	if l.RArm == "fifo" {
		v.OracleNote = "No setting of the key oracle (the default on each key's true mean duration) kept within the goal's bounds for long jobs and the P99 here, so FIFO itself is the reference: no order of these jobs is known to do better within those bounds."
	} else {
		v.OracleNote = "Oracle mean: the key oracle (" + l.RArm + "), the default on each key's true mean duration, the most a policy that knows only the key could cut."
	}
	return v
}

// apiWhatIf is the panel as JSON: GET starts a replay when the last is
// stale, as the page does; poll it until running is false.
func (s *Server) apiWhatIf(r *http.Request, g *auth.Grant) (any, error) {
	name := r.PathValue("name")
	if err := g.Check(auth.Read, name); err != nil {
		return nil, err
	}
	window, err := s.parseWindow(r.URL.Query().Get("window"))
	if err != nil {
		return nil, err
	}
	in, err := s.b.Queue(name)
	if err != nil {
		return nil, err
	}
	return s.whatIf(name, window, in.Config), nil
}

func fmtWindow(d time.Duration) string {
	s := d.String()
	s = strings.TrimSuffix(s, "0s")
	return strings.TrimSuffix(s, "0m")
}

func signedPct(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case math.Abs(v) < 0.005:
		return "±0%"
	}
	return fmt.Sprintf("%+.0f%%", v*100)
}

// shellQuote quotes a queue name for a command line when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/@", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// distChart draws the latency distributions of FIFO (before) and arm
// (after), and the live one when there is one, as an inline SVG: the
// share of jobs done within each latency, on a log scale of latency.
func distChart(ds []sim.ReplayDist, arm string) template.HTML {
	pick := map[string]int{"fifo": 0, arm: 1, "live": 2}
	names := map[string]string{"fifo": "FIFO (before)", arm: "the default (after)", "live": "recorded"}
	lo, hi := math.Inf(1), 0.0
	var use []sim.ReplayDist
	for _, d := range ds {
		if _, ok := pick[d.Arm]; !ok {
			continue
		}
		use = append(use, d)
		for _, q := range d.Quantiles {
			if v := float64(q); v > 0 && !math.IsNaN(v) {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	if len(use) == 0 || hi <= 0 {
		return ""
	}
	lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	const W, H, L, R, T, B = 600, 220, 48, 12, 10, 34
	w, h := float64(W-L-R), float64(H-T-B)
	x := func(v float64) float64 {
		return L + w*(math.Log10(max(v, lo))-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))
	}
	y := func(share float64) float64 { return T + h - h*share }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" id="chart-whatif" viewBox="0 0 %d %d" role="img" aria-label="share of jobs done within each latency, before and after">`, W, H)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" class="plot"></rect>`, L, T, w, h)
	for _, s := range []float64{0, 0.5, 0.9, 1} {
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" class="grid"></line><text x="%d" y="%.1f" class="tick y">%s</text>`,
			L, L+w, y(s), y(s), L-6, y(s)+4, fmt.Sprintf("%g%%", s*100))
	}
	for v := lo; v <= hi*1.0001; v *= 10 {
		cls := "tick x"
		switch {
		case v == lo:
			cls += " first"
		case v*10 > hi*1.0001:
			cls += " last"
		}
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" class="grid"></line><text x="%.1f" y="%.1f" class="%s">%s</text>`,
			x(v), x(v), T+h, T+h+4, x(v), T+h+16, cls, template.HTMLEscapeString(fmtMS(v*1000)))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="axis">latency (log scale): the share of jobs done within it</text>`, L+w/2, H-2)
	for _, d := range use {
		var pts []string
		for i, q := range d.Quantiles {
			if v := float64(q); !math.IsNaN(v) {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(v), y(float64(i)/float64(len(d.Quantiles)-1))))
			}
		}
		fmt.Fprintf(&b, `<polyline points="%s" class="s%d" data-arm="%s"><title>%s</title></polyline>`,
			strings.Join(pts, " "), pick[d.Arm], template.HTMLEscapeString(d.Arm), template.HTMLEscapeString(names[d.Arm]))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
