package sim

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/harbinger-mq/harbinger/internal/workload"
)

// AtLoad wraps src so that its offered load is target: the worker count and
// every job's duration stay as they are, and arrival times are stretched (or
// compressed) by the factor current load / target. The current load is the
// total work of the first seed's jobs divided by workers x that seed's
// arrival span, so the first seed hits target exactly and the others come
// as close as their work differs from the first seed's.
func AtLoad(src Source, target float64) (Source, error) {
	if math.IsNaN(target) || math.IsInf(target, 0) || target <= 0 {
		return nil, fmt.Errorf("sim: target load %v must be a positive number", target)
	}
	seeds := src.Seeds()
	if len(seeds) == 0 {
		return nil, fmt.Errorf("sim: %s has no seeds to measure its load on", src.Name())
	}
	cur, err := OfferedLoad(src.Generate(seeds[0]), src.Workers())
	if err != nil {
		return nil, fmt.Errorf("sim: %s: %w", src.Name(), err)
	}
	return scaled{Source: src, factor: cur / target, target: target}, nil
}

// OfferedLoad is the total work of jobs divided by the capacity of workers
// over the jobs' arrival span (first to last arrival): the mean share of
// workers the jobs keep busy while they arrive.
func OfferedLoad(jobs []workload.Job, workers int) (float64, error) {
	if workers < 1 {
		return 0, fmt.Errorf("need at least one worker, got %d", workers)
	}
	if len(jobs) < 2 {
		return 0, fmt.Errorf("need at least two jobs to measure a load, got %d", len(jobs))
	}
	first, last := jobs[0].Arrival, jobs[0].Arrival
	var work time.Duration
	for _, j := range jobs {
		first, last = min(first, j.Arrival), max(last, j.Arrival)
		work += j.Duration
	}
	span := last - first
	if span <= 0 {
		return 0, fmt.Errorf("every job arrives at the same instant")
	}
	return work.Seconds() / (float64(workers) * span.Seconds()), nil
}

// scaled is a Source whose arrival times are multiplied by factor.
type scaled struct {
	Source
	factor float64
	target float64
}

func (s scaled) Name() string {
	return s.Source.Name() + " at load " + strconv.FormatFloat(s.target, 'g', -1, 64)
}

func (s scaled) Generate(seed uint64) []workload.Job {
	jobs := s.Source.Generate(seed)
	for i := range jobs {
		// Multiplying by a positive factor keeps the order; rounding can
		// only make neighbours equal, never swap them.
		jobs[i].Arrival = time.Duration(math.Round(float64(jobs[i].Arrival) * s.factor))
	}
	return jobs
}
