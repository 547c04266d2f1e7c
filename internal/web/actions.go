package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/harbinger-mq/harbinger/internal/broker"
)

// actionBody is what an action may carry, as a form or as JSON.
type actionBody struct {
	IDs     []string `json:"ids"`
	Confirm string   `json:"confirm"`
	Force   bool     `json:"force"`
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
		// A checkbox without a value sends "on".
		switch f := r.PostForm.Get("force"); f {
		case "":
		case "on":
			b.Force = true
		default:
			force, err := strconv.ParseBool(f)
			if err != nil {
				return b, badRequest("force must be true or false, got %q", f)
			}
			b.Force = force
		}
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

// QueueDeletedView answers a queue's deletion: what it dropped.
type QueueDeletedView struct {
	Done        string `json:"done"`
	Queue       string `json:"queue"`
	Waiting     int    `json:"waiting"`
	Delayed     int    `json:"delayed"`
	InFlight    int    `json:"in_flight"`
	DeadLetters int    `json:"dead_letters"`
	// Consumers is how many subscriptions to the queue were ended.
	Consumers int `json:"consumers"`
}

// deleteQueue asks for the queue's name as confirmation, as purge does, and
// drops the queue's jobs only when told to (force). A form goes on to the
// queues list once the queue is gone, and back to its page when it stays.
func (s *Server) deleteQueue(r *http.Request, name string) (outcome, error) {
	b, err := readBody(r)
	if err != nil {
		return outcome{}, err
	}
	if b.Confirm != name {
		return outcome{}, badRequest("not deleted: type the queue's name, %q, to confirm", name)
	}
	d, err := s.b.DeleteQueue(name, b.Force)
	if err != nil {
		// A durable broker may have deleted the queue and then failed
		// to make that stick: its page is gone either way.
		if _, qerr := s.b.Queue(name); errors.Is(qerr, broker.ErrQueueNotFound) {
			return outcome{next: "/"}, err
		}
		return outcome{}, err
	}
	done := fmt.Sprintf("deleted %s: dropped %d waiting, %d delayed, %d running and %d dead-lettered jobs; %d consumers stopped",
		name, d.Waiting, d.Delayed, d.Running, d.Dead, d.Consumers)
	return outcome{
		done: done,
		answer: QueueDeletedView{Done: done, Queue: name, Waiting: d.Waiting, Delayed: d.Delayed,
			InFlight: d.Running, DeadLetters: d.Dead, Consumers: d.Consumers},
		next: "/",
	}, nil
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

// runNow makes the named delayed jobs due at once.
func (s *Server) runNow(r *http.Request, name string) (string, error) {
	b, err := readBody(r)
	if err != nil {
		return "", err
	}
	if len(b.IDs) == 0 {
		return "", badRequest("name the delayed jobs to run now by id")
	}
	n, err := s.b.RunNow(name, b.IDs)
	if err != nil {
		return "", err
	}
	msg := fmt.Sprintf("%d delayed jobs of %s run now", n, name)
	if skipped := len(b.IDs) - n; skipped > 0 {
		msg += fmt.Sprintf(" (%d of the ids named were not delayed)", skipped)
	}
	return msg, nil
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
