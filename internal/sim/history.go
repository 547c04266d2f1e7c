package sim

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/harbinger-mq/harbinger/internal/history"
	"github.com/harbinger-mq/harbinger/internal/workload"
)

// HistorySource is a queue's recorded history (internal/history) as a job
// stream: every settled delivery arrives when it took its place in line
// and runs for the duration its worker measured. A nack carries no
// duration; it runs for its time from delivery to settle. Each attempt
// of a retried job is a job of its own at its recorded arrival, so a
// replay does not move retries with their first attempt's finish.
type HistorySource struct {
	h     history.Header
	types []workload.JobType
	jobs  []workload.Job
	live  []time.Duration // each job's recorded latency, by job
}

// FromHistory makes a Source of a decoded history file.
func FromHistory(h history.Header, es []history.Entry) (*HistorySource, error) {
	if len(es) == 0 {
		return nil, fmt.Errorf("sim: the history of %q holds no settled delivery", h.Queue)
	}
	type pk struct{ producer, key string }
	idx := map[pk]int{}
	var names []pk
	for i := range es {
		k := pk{es[i].Producer, es[i].Key}
		if _, ok := idx[k]; !ok {
			idx[k] = 0
			names = append(names, k)
		}
	}
	slices.SortFunc(names, func(a, b pk) int {
		if c := cmp.Compare(a.key, b.key); c != 0 {
			return c
		}
		return cmp.Compare(a.producer, b.producer)
	})
	s := &HistorySource{h: h}
	for i, k := range names {
		idx[k] = i
		s.types = append(s.types, workload.JobType{Name: k.key, Producer: k.producer})
	}
	order := make([]int, len(es))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return es[a].Arrived.Compare(es[b].Arrived) })
	first := es[order[0]].Arrived
	for seq, i := range order {
		e := &es[i]
		d := e.Duration
		if e.Outcome != history.Ack || d <= 0 {
			d = max(e.Done.Sub(e.Started), time.Nanosecond)
		}
		s.jobs = append(s.jobs, workload.Job{Seq: seq, Type: idx[pk{e.Producer, e.Key}], Arrival: e.Arrived.Sub(first), Size: int64(min(e.Size, 1<<62)), Duration: d})
		s.live = append(s.live, e.Latency())
	}
	return s, nil
}

// Name says which queue and window the history is of.
func (s *HistorySource) Name() string {
	return fmt.Sprintf("history of %s, %s to %s", s.h.Queue, s.h.Since.Format(time.RFC3339), s.h.Until.Format(time.RFC3339))
}

// Workers is the worker count the record saw, at least one.
func (s *HistorySource) Workers() int { return max(s.h.WorkersSeen, 1) }

// Seeds is one seed: a history is one run. The replay is deterministic.
func (s *HistorySource) Seeds() []uint64 { return []uint64{1} }

// Types are the history's keys, one job type per producer and job type.
func (s *HistorySource) Types() []workload.JobType { return s.types }

// Generate returns the recorded jobs in arrival order, whatever the seed.
func (s *HistorySource) Generate(uint64) []workload.Job { return slices.Clone(s.jobs) }

// Header is the history file's header.
func (s *HistorySource) Header() history.Header { return s.h }

// Live is each job's latency as recorded, by job.
func (s *HistorySource) Live() []time.Duration { return s.live }
