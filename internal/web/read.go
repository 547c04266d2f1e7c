package web

import (
	"net/http"
	"slices"
	"strings"

	"github.com/harbinger-mq/harbinger/internal/auth"
)

// QueuesView is the queues a token may read.
type QueuesView struct {
	Totals   TotalsView  `json:"totals"`
	Queues   []QueueView `json:"queues"`
	Hidden   int         `json:"hidden"` // queues the token may not read
	Draining bool        `json:"draining"`
}

func (s *Server) queues(g *auth.Grant) QueuesView {
	v := QueuesView{Queues: []QueueView{}, Draining: s.b.Draining()}
	for _, in := range s.b.Queues() {
		if !g.Allows(auth.Read, in.Name) {
			v.Hidden++
			continue
		}
		w, _ := s.b.Waits(in.Name)
		qv := queueView(in, w, s.series.rates(in.Name))
		v.Queues = append(v.Queues, qv)
		t := &v.Totals
		t.Queues++
		t.Ready += qv.Ready
		t.InFlight += qv.InFlight
		t.Delayed += qv.Delayed
		t.DeadLetters += qv.DeadLetters
		t.Consumers += qv.Consumers
		t.Published += qv.Published
		t.Acked += qv.Acked
		t.OldestWaitMS = max(t.OldestWaitMS, qv.OldestWaitMS)
		if qv.PublishPerS != nil {
			t.PublishPerS += *qv.PublishPerS
		}
		if qv.AckPerS != nil {
			t.AckPerS += *qv.AckPerS
		}
	}
	return v
}

// TotalsView is every queue a token may read, together.
type TotalsView struct {
	Queues       int     `json:"queues"`
	Ready        int     `json:"ready"`
	InFlight     int     `json:"in_flight"`
	Delayed      int     `json:"delayed"`
	DeadLetters  int     `json:"dead_letters"`
	Consumers    int     `json:"consumers"`
	Published    uint64  `json:"published"`
	Acked        uint64  `json:"acked"`
	PublishPerS  float64 `json:"publish_per_s"`
	AckPerS      float64 `json:"ack_per_s"`
	OldestWaitMS float64 `json:"oldest_wait_ms"` // the longest of any queue
}

func (s *Server) queue(name string, g *auth.Grant) (QueueView, error) {
	if err := g.Check(auth.Read, name); err != nil {
		return QueueView{}, err
	}
	in, err := s.b.Queue(name)
	if err != nil {
		return QueueView{}, err
	}
	w, err := s.b.Waits(name)
	if err != nil {
		return QueueView{}, err
	}
	return queueView(in, w, s.series.rates(name)), nil
}

func (s *Server) keys(r *http.Request, g *auth.Grant) (KeysView, error) {
	name := r.PathValue("name")
	if err := g.Check(auth.Read, name); err != nil {
		return KeysView{}, err
	}
	n, err := limit(r)
	if err != nil {
		return KeysView{}, err
	}
	in, err := s.b.Queue(name)
	if err != nil {
		return KeysView{}, err
	}
	// Searched and sorted over every key, then cut to the limit: a search
	// must find a quiet key too.
	ks, err := s.b.Keys(name, 0)
	if err != nil {
		return KeysView{}, err
	}
	q := r.URL.Query()
	v := KeysView{Queue: name, Predictor: predictorView(in), Total: len(ks), Search: q.Get("q"), Sort: q.Get("sort"), Desc: q.Get("desc") == "1"}
	if v.Sort == "" {
		v.Sort, v.Desc = "count", true
	}
	if !slices.Contains(KeySorts, v.Sort) {
		return KeysView{}, badRequest("sort must be one of %s, got %q", strings.Join(KeySorts, ", "), v.Sort)
	}
	all := make([]KeyView, len(ks))
	for i, k := range ks {
		all[i] = keyView(k)
	}
	all = filterKeys(all, v.Search, v.Sort, v.Desc)
	v.Keys = all[:min(len(all), n)]
	return v, nil
}

func (s *Server) jobs(r *http.Request, g *auth.Grant) (JobsView, error) {
	name := r.PathValue("name")
	if err := g.Check(auth.Read, name); err != nil {
		return JobsView{}, err
	}
	n, err := limit(r)
	if err != nil {
		return JobsView{}, err
	}
	off, err := offset(r)
	if err != nil {
		return JobsView{}, err
	}
	now := s.cfg.Clock.Now()
	in, err := s.b.Queue(name)
	if err != nil {
		return JobsView{}, err
	}
	waiting, err := s.b.WaitingJobsFrom(name, off, n)
	if err != nil {
		return JobsView{}, err
	}
	inflight, err := s.b.InFlightJobs(name, 0)
	if err != nil {
		return JobsView{}, err
	}
	delayed, delayedTotal, err := s.b.DelayedJobs(name, off, n)
	if err != nil {
		return JobsView{}, err
	}
	dead, err := s.b.DeadLettersFrom(name, off, n)
	if err != nil {
		return JobsView{}, err
	}
	done, doneTotal, err := s.b.DoneJobs(name, off, n)
	if err != nil {
		return JobsView{}, err
	}
	v := JobsView{
		Queue: name, Offset: off, Limit: n, Waiting: waitingView(now, waiting),
		Delayed: delayedView(delayed), DeadLetters: deadLetterView(dead), Done: doneView(done),
		KeepDone: in.Config.KeepDone,
		Totals: JobTotals{Waiting: in.Ready, InFlight: len(inflight), Delayed: delayedTotal,
			DeadLetters: in.DeadLetters, Done: doneTotal},
	}
	inflight = inflight[min(off, len(inflight)):]
	v.InFlight = inFlightView(now, inflight[:min(len(inflight), n)])
	return v, nil
}

func (s *Server) apiQueues(_ *http.Request, g *auth.Grant) (any, error) { return s.queues(g), nil }

func (s *Server) apiQueue(r *http.Request, g *auth.Grant) (any, error) {
	return s.queue(r.PathValue("name"), g)
}

func (s *Server) apiKeys(r *http.Request, g *auth.Grant) (any, error) { return s.keys(r, g) }

func (s *Server) apiJobs(r *http.Request, g *auth.Grant) (any, error) { return s.jobs(r, g) }

func (s *Server) apiSeries(r *http.Request, g *auth.Grant) (any, error) {
	name := r.PathValue("name")
	if err := g.Check(auth.Read, name); err != nil {
		return nil, err
	}
	if _, err := s.b.Queue(name); err != nil {
		return nil, err
	}
	return s.series.view(name), nil
}

func (s *Server) apiTotalSeries(_ *http.Request, g *auth.Grant) (any, error) {
	return s.series.total(func(q string) bool { return g.Allows(auth.Read, q) }), nil
}
