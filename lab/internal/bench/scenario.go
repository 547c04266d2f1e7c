package bench

import (
	"context"
	"fmt"
	"slices"

	"github.com/harbinger-mq/harbinger/internal/stats"
)

// slotQueue is a queue whose workers can run several handlers at once.
type slotQueue interface {
	// WorkSlots is Work with slots handlers, on a connection of the
	// worker's own, holding at most slots messages (its prefetch): as a
	// worker process with that many handler threads would.
	WorkSlots(ctx context.Context, worker, slots int, ready func(), h Handler) error
}

// windowQueue is a queue whose publishers can keep several publishes
// unconfirmed.
type windowQueue interface {
	// NewWindowPublisher returns a publisher on a connection of its own
	// whose Publish returns once the message is on its way, waiting only
	// while window publishes await the broker's confirmation. An error a
	// confirmation brings is returned by a later Publish or by Close,
	// which waits for every confirmation.
	NewWindowPublisher(ctx context.Context, window int) (Publisher, error)
}

// work runs one worker of arm a on q: with one handler slot, the
// driver's Work (prefetch 1); with more, its WorkSlots.
func work(ctx context.Context, q Queue, a Arm, slots, worker int, ready func(), h Handler) error {
	if slots <= 1 {
		return q.Work(ctx, worker, ready, h)
	}
	sq, ok := q.(slotQueue)
	if !ok {
		return fmt.Errorf("bench: arm %s has no worker with several handler slots", a.Name)
	}
	return sq.WorkSlots(ctx, worker, slots, ready, h)
}

// newWindowPublisher is the arm's publisher on q for a window of
// unconfirmed publishes; window 0 is newPublisher's, one publish at a
// time.
func newWindowPublisher(ctx context.Context, q Queue, a Arm, window int) (Publisher, error) {
	if window <= 0 {
		return newPublisher(ctx, q, a)
	}
	wq, ok := q.(windowQueue)
	if !ok {
		return nil, fmt.Errorf("bench: arm %s has no publisher with a window of unconfirmed publishes", a.Name)
	}
	return wq.NewWindowPublisher(ctx, window)
}

// scenarioRatio is a ratio of a scenario's report: one arm's peak over
// the best peak among others in the same repetition, or its broker CPU
// per message over that best arm's.
type scenarioRatio struct {
	id, label string
	num       string
	den       []string
	cpu       bool // broker CPU per message of num over that of the arm of den with the best peak
}

// Ratios of the busy-workers and durable-bulk reports.
var (
	busyRatios = []scenarioRatio{
		{id: "busy_vs_best_peer", label: "harbinger / best of rabbitmq, redis, nats-jetstream-memory (peak)", num: "harbinger",
			den: []string{"rabbitmq", "redis", "nats-jetstream-memory"}},
		{id: "busy_cpu_vs_best_peer", label: "harbinger broker CPU per message / that of the peer with the best peak", num: "harbinger",
			den: []string{"rabbitmq", "redis", "nats-jetstream-memory"}, cpu: true},
		{id: "busy_vs_redis", label: "harbinger / redis (peak)", num: "harbinger", den: []string{"redis"}},
		{id: "busy_vs_rabbitmq", label: "harbinger / rabbitmq (peak)", num: "harbinger", den: []string{"rabbitmq"}},
		{id: "busy_vs_nats", label: "harbinger / nats-jetstream-memory (peak)", num: "harbinger", den: []string{"nats-jetstream-memory"}},
	}
	bulkRatios = []scenarioRatio{
		{id: "bulk_vs_best_durable", label: "harbinger-durable / best of nats-jetstream, rabbitmq-quorum, redis-aof (peak)", num: "harbinger-durable",
			den: []string{"nats-jetstream", "rabbitmq-quorum", "redis-aof"}},
		{id: "bulk_vs_memory", label: "harbinger-durable / harbinger (durable over memory mode, same load)", num: "harbinger-durable",
			den: []string{"harbinger"}},
		{id: "bulk_cpu_vs_best_durable", label: "harbinger-durable broker CPU per message / that of the durable peer with the best peak", num: "harbinger-durable",
			den: []string{"nats-jetstream", "rabbitmq-quorum", "redis-aof"}, cpu: true},
	}
)

// scenarioRatios computes every ratio of specs whose arms all ran (and,
// for a CPU ratio, have broker CPU figures), each within a repetition.
func scenarioRatios(specs []scenarioRatio, peaksByRep []map[string]float64, cpusByRep []map[string]CPUPerMsg) []Ratio {
	var out []Ratio
	for _, spec := range specs {
		var runs []float64
		for rep, peaks := range peaksByRep {
			num, ok := peaks[spec.num]
			if !ok {
				break
			}
			best, bestArm := -1.0, ""
			for _, d := range spec.den {
				if v, ok := peaks[d]; ok && v > best {
					best, bestArm = v, d
				}
			}
			if bestArm == "" || best <= 0 {
				break
			}
			if !spec.cpu {
				runs = append(runs, num/best)
				continue
			}
			n, d := cpusByRep[rep][spec.num].BrokerUS, cpusByRep[rep][bestArm].BrokerUS
			if n == nil || d == nil || *d <= 0 {
				break
			}
			runs = append(runs, *n / *d)
		}
		if len(runs) == len(peaksByRep) && len(runs) > 0 {
			out = append(out, Ratio{ID: spec.id, Label: spec.label, Median: stats.Median(runs),
				Min: slices.Min(runs), Max: slices.Max(runs), Runs: runs})
		}
	}
	return out
}

// Goals of the batching issue (#47): benchmarks, not tests; reported as
// reached or missed.
const (
	GoalBusyVsBest    = 2.0 // harbinger peak over the best peer's, busy workers
	GoalBusyCPUVsBest = 0.5 // harbinger broker CPU per message over the best peer's, at most
	GoalBulkVsBest    = 4.0 // harbinger-durable peak over the best durable peer's, durable bulk
	GoalBulkVsMemory  = 0.9 // harbinger-durable peak over its memory mode's, same load
)

// CheckBusyGoals checks the busy-workers goals where their arms ran.
func CheckBusyGoals(res *CostResult) []Goal {
	var out []Goal
	if r := res.ratio("busy_vs_best_peer"); r != nil {
		out = append(out, Goal{ID: "B1", Criterion: "harbinger peak / best peer's peak, busy workers (same repetition)",
			Estimate: r.Median, Threshold: fmt.Sprintf(">= %.1fx", GoalBusyVsBest), Met: r.Median >= GoalBusyVsBest})
	}
	if r := res.ratio("busy_cpu_vs_best_peer"); r != nil {
		out = append(out, Goal{ID: "B2", Criterion: "harbinger broker CPU per message / that of the peer with the best peak (same repetition)",
			Estimate: r.Median, Threshold: fmt.Sprintf("<= %.1fx", GoalBusyCPUVsBest), Met: r.Median <= GoalBusyCPUVsBest})
	}
	return out
}

// CheckBulkGoals checks the durable-bulk goals where their arms ran.
func CheckBulkGoals(res *CostResult) []Goal {
	var out []Goal
	if r := res.ratio("bulk_vs_best_durable"); r != nil {
		out = append(out, Goal{ID: "U1", Criterion: "harbinger-durable peak / best durable peer's peak, durable bulk (same repetition)",
			Estimate: r.Median, Threshold: fmt.Sprintf(">= %.1fx", GoalBulkVsBest), Met: r.Median >= GoalBulkVsBest})
	}
	if r := res.ratio("bulk_vs_memory"); r != nil {
		out = append(out, Goal{ID: "U2", Criterion: "harbinger-durable peak / harbinger memory mode's peak, same load (same repetition)",
			Estimate: r.Median, Threshold: fmt.Sprintf(">= %.1fx", GoalBulkVsMemory), Met: r.Median >= GoalBulkVsMemory})
	}
	return out
}
