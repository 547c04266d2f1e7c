package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// actionBody is what an action may carry, as a form or as JSON.
type actionBody struct {
	IDs     []string `json:"ids"`
	Confirm string   `json:"confirm"`
}

const maxActionBody = 1 << 20

func readBody(r *http.Request) (actionBody, error) {
	var b actionBody
	r.Body = http.MaxBytesReader(nil, r.Body, maxActionBody)
	if isForm(r) {
		if err := r.ParseForm(); err != nil {
			return b, badRequest("reading the form: %v", err)
		}
		for _, id := range r.PostForm["id"] {
			if id = strings.TrimSpace(id); id != "" {
				b.IDs = append(b.IDs, id)
			}
		}
		b.Confirm = r.PostForm.Get("confirm")
		return b, nil
	}
	if r.ContentLength == 0 {
		return b, nil
	}
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		return b, badRequest("reading the JSON body: %v", err)
	}
	return b, nil
}

func (s *Server) pause(paused bool) func(r *http.Request, name string) (string, error) {
	return func(r *http.Request, name string) (string, error) {
		if err := s.b.Pause(name, paused); err != nil {
			return "", err
		}
		if paused {
			return "paused " + name, nil
		}
		return "resumed " + name, nil
	}
}

// purge asks for the queue's name as confirmation: a purge cannot be undone.
func (s *Server) purge(r *http.Request, name string) (string, error) {
	b, err := readBody(r)
	if err != nil {
		return "", err
	}
	if b.Confirm != name {
		return "", badRequest("not purged: type the queue's name, %q, to confirm", name)
	}
	n, err := s.b.Purge(name)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("purged %d waiting jobs from %s", n, name), nil
}

// requeue and deleteDead act on the dead letters listed by id, or on all of
// them when the body says {"confirm": "all"} (a form: confirm=all).
func (s *Server) requeue(r *http.Request, name string) (string, error) {
	ids, err := deadIDs(r)
	if err != nil {
		return "", err
	}
	n, err := s.b.RequeueDeadLetters(name, ids)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("requeued %d dead letters of %s", n, name), nil
}

func (s *Server) deleteDead(r *http.Request, name string) (string, error) {
	ids, err := deadIDs(r)
	if err != nil {
		return "", err
	}
	n, err := s.b.DeleteDeadLetters(name, ids)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("deleted %d dead letters of %s", n, name), nil
}

// cancel ends the waiting, delayed or running jobs listed by id.
func (s *Server) cancel(r *http.Request, name string) (string, error) {
	b, err := readBody(r)
	if err != nil {
		return "", err
	}
	if len(b.IDs) == 0 {
		return "", badRequest("name the jobs to cancel by id")
	}
	var done []string
	for _, id := range b.IDs {
		st, err := s.b.Cancel(name, id)
		if err != nil {
			return strings.Join(done, "; "), err
		}
		done = append(done, fmt.Sprintf("cancelled %s (%s)", id, st))
	}
	return strings.Join(done, "; "), nil
}

func deadIDs(r *http.Request) ([]string, error) {
	b, err := readBody(r)
	if err != nil {
		return nil, err
	}
	switch {
	case len(b.IDs) > 0:
		return b.IDs, nil
	case b.Confirm == "all":
		return nil, nil // the broker's "every dead letter"
	default:
		return nil, badRequest(`name the dead letters by id, or confirm "all"`)
	}
}
