package web

import (
	"fmt"
	"net/http"
	"time"

	"github.com/harbinger-mq/harbinger/internal/auth"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// ScheduleView is one periodic schedule as the dashboard and the read API
// show it.
type ScheduleView struct {
	Name     string     `json:"name"`
	Queue    string     `json:"queue"`
	When     string     `json:"when"` // the cron expression with its zone, or "every D"
	JobType  string     `json:"job_type"`
	Paused   bool       `json:"paused"`
	LastTick *time.Time `json:"last_tick"` // null before its first tick
	NextTick *time.Time `json:"next_tick"` // null while paused
	Fired    uint64     `json:"fired"`
}

// SchedulesView is the schedules page.
type SchedulesView struct {
	Schedules []ScheduleView `json:"schedules"`
}

// schedules lists the schedules whose queue the token may read.
func (s *Server) schedules(g *auth.Grant) SchedulesView {
	v := SchedulesView{Schedules: []ScheduleView{}}
	for _, sc := range s.b.Schedules() {
		if g != nil && !g.Allows(auth.Read, sc.Queue) {
			continue
		}
		sv := ScheduleView{Name: sc.Name, Queue: sc.Queue, JobType: sc.JobType, Paused: sc.Paused, Fired: sc.Fired}
		if sc.Cron != "" {
			zone := sc.TimeZone
			if zone == "" {
				zone = "UTC"
			}
			sv.When = sc.Cron + " (" + zone + ")"
		} else {
			sv.When = "every " + sc.Every.String()
		}
		if !sc.LastTick.IsZero() {
			t := sc.LastTick
			sv.LastTick = &t
		}
		if !sc.Paused && !sc.NextTick.IsZero() {
			t := sc.NextTick
			sv.NextTick = &t
		}
		v.Schedules = append(v.Schedules, sv)
	}
	return v
}

func (s *Server) schedulesPage(w http.ResponseWriter, r *http.Request, g *auth.Grant) error {
	d := s.data(r, g, "Schedules", s.schedules(g))
	d.Tab = "schedules"
	s.render(w, "schedules", d)
	return nil
}

func (s *Server) apiSchedules(_ *http.Request, g *auth.Grant) (any, error) {
	return s.schedules(g), nil
}

// scheduleAction pauses, resumes or deletes the schedule named in the path;
// the action wrapper has checked admin on its queue.
func (s *Server) scheduleAction(what string) func(r *http.Request, queue string) (string, error) {
	return func(r *http.Request, queue string) (string, error) {
		name := r.PathValue("schedule")
		var found *broker.Schedule
		for _, sc := range s.b.Schedules() {
			if sc.Name == name && sc.Queue == queue {
				found = &sc
			}
		}
		if found == nil {
			return "", &httpError{http.StatusNotFound, fmt.Sprintf("no schedule %q publishes to queue %q", name, queue)}
		}
		var err error
		switch what {
		case "pause":
			_, err = s.b.PauseSchedule(name, true)
		case "resume":
			_, err = s.b.PauseSchedule(name, false)
		case "delete":
			err = s.b.DeleteSchedule(name)
		}
		if err != nil {
			return "", err
		}
		return what + "d schedule " + name, nil
	}
}
