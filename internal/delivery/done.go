package delivery

import (
	"strings"
	"time"
)

// Ended states: a job the Line no longer holds but still reports, while it
// is among the last Config.KeepDone to end (see FindDone).
const (
	Done      State = "done"      // acked
	Cancelled State = "cancelled" // cancelled, waiting, delayed or running
)

// DoneJob is a job that ended, as FindDone reports it.
type DoneJob struct {
	ID, Producer, JobType string
	State                 State // Done or Cancelled
	At                    time.Time
	Took                  time.Duration // Done: the time its worker reported
	Attempts              int           // deliveries it had
}

// doneLog keeps the last Config.KeepDone jobs to end: a ring, oldest
// overwritten first, and an index by id. An entry is a few words (its id
// copied, its names shared with the Line's interned ones), not the job.
type doneLog struct {
	ring []doneEntry
	next int // where the next entry goes
	byID map[string]int32
}

type doneEntry struct {
	id       string
	names    *Names
	at, took int64 // Unix nanoseconds, nanoseconds
	attempts int32
	state    State
}

// add remembers j, with its names, which ended at now, dropping the
// oldest entry when the ring is full; keep is the ring's size (0 keeps
// nothing).
func (d *doneLog) add(keep int, j *Job, names *Names, state State, took time.Duration, now time.Time) {
	if keep <= 0 {
		return
	}
	if d.byID == nil {
		d.byID = map[string]int32{}
	}
	e := doneEntry{id: strings.Clone(j.ID()), names: names, at: now.UnixNano(), took: int64(took),
		attempts: int32(j.attempt), state: state}
	if len(d.ring) < keep {
		d.ring = append(d.ring, e)
		d.byID[e.id] = int32(len(d.ring) - 1)
		return
	}
	old := d.ring[d.next]
	if i, ok := d.byID[old.id]; ok && int(i) == d.next {
		delete(d.byID, old.id)
	}
	d.ring[d.next] = e
	d.byID[e.id] = int32(d.next)
	d.next = (d.next + 1) % len(d.ring)
}

// find returns the entry of id, if the log still holds it.
func (d *doneLog) find(id string) (DoneJob, bool) {
	i, ok := d.byID[id]
	if !ok {
		return DoneJob{}, false
	}
	e := d.ring[i]
	dj := DoneJob{ID: e.id, State: e.state, At: time.Unix(0, e.at).UTC(), Took: time.Duration(e.took), Attempts: int(e.attempts)}
	if e.names != nil {
		dj.Producer, dj.JobType = e.names.Producer, e.names.JobType
	}
	return dj, true
}

// resize keeps the newest keep entries, oldest first.
func (d *doneLog) resize(keep int) {
	if keep == len(d.ring) && keep > 0 || len(d.ring) == 0 {
		return
	}
	ordered := append(d.ring[d.next:len(d.ring):len(d.ring)], d.ring[:d.next]...)
	if len(ordered) > keep {
		ordered = ordered[len(ordered)-max(keep, 0):]
	}
	*d = doneLog{}
	if keep <= 0 {
		return
	}
	d.byID = make(map[string]int32, len(ordered))
	d.ring = make([]doneEntry, 0, keep)
	for _, e := range ordered {
		d.ring = append(d.ring, e)
		d.byID[e.id] = int32(len(d.ring) - 1)
	}
	d.next = 0 // the oldest, once the ring is full again
}

// list returns the entries kept, the most recent first. The oldest entry
// sits at next (at 0 while the ring fills), so the newest is just before.
func (d *doneLog) list() []DoneJob {
	out := make([]DoneJob, 0, len(d.ring))
	for k := range len(d.ring) {
		i := (d.next - 1 - k + 2*len(d.ring)) % len(d.ring)
		e := d.ring[i]
		if j, ok := d.byID[e.id]; !ok || int(j) != i {
			continue // an id that ended again later is listed once, at its latest
		}
		dj, _ := d.find(e.id)
		out = append(out, dj)
	}
	return out
}
