package sim

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/harbinger-mq/harbinger/internal/stats"
)

// TenantRow is one producer's figures under one arm: each the median over
// seeds of the per-seed figure.
type TenantRow struct {
	Arm      string  `json:"arm"`
	Producer string  `json:"producer"`
	Jobs     int     `json:"jobs"`   // completed, summed over seeds
	MeanS    float64 `json:"mean_s"` // latency, publish to done
	P99S     float64 `json:"p99_s"`
	// WorkShare is the producer's share of the worker time spent, and
	// WindowShare its share of the worker time spent inside the window
	// (Options.Window), when one is given.
	WorkShare   float64 `json:"work_share"`
	WindowShare float64 `json:"window_share,omitempty"`
}

// TenantArm is one arm's totals.
type TenantArm struct {
	Arm string `json:"arm"`
	// ThroughputPerS is completed jobs per second from the first publish
	// to the last done; MakespanS that span; BusyShare the share of the
	// worker time inside the window spent on jobs (the rest idle).
	ThroughputPerS float64 `json:"throughput_per_s"`
	MakespanS      float64 `json:"makespan_s"`
	BusyShare      float64 `json:"busy_share,omitempty"`
}

// TenantReport is the noisy-neighbour view of a run: latency per
// producer (the simulator's tenants) per arm.
type TenantReport struct {
	Workload string      `json:"workload"`
	Workers  int         `json:"workers"`
	Seeds    []uint64    `json:"seeds"`
	Window   [2]float64  `json:"window_s,omitempty"`
	Rows     []TenantRow `json:"rows"`
	Arms     []TenantArm `json:"arms"`
}

// Tenants replays every seed through every arm and reports latency per
// producer. A window of [0, 0] measures no window.
func Tenants(src Source, arms []Arm, o Options, window [2]time.Duration) (*TenantReport, error) {
	seeds := o.Seeds
	if len(seeds) == 0 {
		seeds = src.Seeds()
	}
	workers := o.Workers
	if workers == 0 {
		workers = src.Workers()
	}
	types := src.Types()
	rep := &TenantReport{Workload: src.Name(), Workers: workers, Seeds: seeds, Window: [2]float64{window[0].Seconds(), window[1].Seconds()}}
	for _, arm := range arms {
		if o.Overhead > 0 && arm.Overhead == 0 {
			arm.Overhead = o.Overhead
		}
		type acc struct {
			mean, p99, share, wshare []float64
			jobs                     int
		}
		per := map[string]*acc{}
		var thr, span, busy []float64
		for _, seed := range seeds {
			jobs := src.Generate(seed)
			_, recs, err := RunSeed(types, jobs, workers, arm, seed)
			if err != nil {
				return nil, fmt.Errorf("sim: arm %s seed %d: %w", arm.Name, seed, err)
			}
			lat := map[string][]float64{}
			work, wwork := map[string]float64{}, map[string]float64{}
			var total, wtotal float64
			first, last := time.Duration(-1), time.Duration(0)
			for _, r := range recs {
				p := types[jobs[r.Job].Type].Producer
				lat[p] = append(lat[p], (r.Done - r.Sent).Seconds())
				w := (r.Done - r.Started).Seconds()
				work[p] += w
				total += w
				if window[1] > window[0] {
					in := (min(r.Done, window[1]) - max(r.Started, window[0])).Seconds()
					if in > 0 {
						wwork[p] += in
						wtotal += in
					}
				}
				if first < 0 || r.Sent < first {
					first = r.Sent
				}
				last = max(last, r.Done)
			}
			for p, l := range lat {
				a := per[p]
				if a == nil {
					a = &acc{}
					per[p] = a
				}
				slices.Sort(l)
				a.mean = append(a.mean, stats.Mean(l))
				a.p99 = append(a.p99, stats.QuantileSorted(l, 0.99))
				a.share = append(a.share, work[p]/max(total, 1e-12))
				a.wshare = append(a.wshare, wwork[p]/max(wtotal, 1e-12))
				a.jobs += len(l)
			}
			s := (last - first).Seconds()
			span = append(span, s)
			thr = append(thr, float64(len(recs))/max(s, 1e-12))
			if window[1] > window[0] {
				busy = append(busy, wtotal/(float64(workers)*(window[1]-window[0]).Seconds()))
			}
		}
		for _, p := range slices.Sorted(maps.Keys(per)) {
			a := per[p]
			row := TenantRow{Arm: arm.Name, Producer: p, Jobs: a.jobs, MeanS: stats.Median(a.mean), P99S: stats.Median(a.p99), WorkShare: stats.Median(a.share)}
			if window[1] > window[0] {
				row.WindowShare = stats.Median(a.wshare)
			}
			rep.Rows = append(rep.Rows, row)
		}
		ta := TenantArm{Arm: arm.Name, ThroughputPerS: stats.Median(thr), MakespanS: stats.Median(span)}
		if len(busy) > 0 {
			ta.BusyShare = stats.Median(busy)
		}
		rep.Arms = append(rep.Arms, ta)
	}
	return rep, nil
}

// Write prints the report as tables: per producer, each arm's mean and
// P99 side by side, then each arm's totals.
func (r *TenantReport) Write(w io.Writer) {
	fmt.Fprintf(w, "%s: %d workers, seeds %v (medians over seeds)\n\n", r.Workload, r.Workers, r.Seeds)
	win := r.Window[1] > r.Window[0]
	fmt.Fprintf(w, "%-24s %-16s %8s %10s %10s %8s", "arm", "producer", "jobs", "mean", "p99", "work")
	if win {
		fmt.Fprintf(w, " %8s", fmt.Sprintf("%g-%gs", r.Window[0], r.Window[1]))
	}
	fmt.Fprintln(w)
	rows := slices.Clone(r.Rows)
	slices.SortStableFunc(rows, func(a, b TenantRow) int { return cmp.Compare(a.Producer, b.Producer) })
	for _, row := range rows {
		fmt.Fprintf(w, "%-24s %-16s %8d %10s %10s %7.1f%%", row.Arm, row.Producer, row.Jobs, secs(row.MeanS), secs(row.P99S), 100*row.WorkShare)
		if win {
			fmt.Fprintf(w, " %7.1f%%", 100*row.WindowShare)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\n%-24s %12s %10s", "arm", "throughput/s", "makespan")
	if win {
		fmt.Fprintf(w, " %10s", "busy in window")
	}
	fmt.Fprintln(w)
	for _, a := range r.Arms {
		fmt.Fprintf(w, "%-24s %12.1f %10s", a.Arm, a.ThroughputPerS, secs(a.MakespanS))
		if win {
			fmt.Fprintf(w, " %9.1f%%", 100*a.BusyShare)
		}
		fmt.Fprintln(w)
	}
}

func secs(s float64) string {
	switch {
	case s < 1:
		return fmt.Sprintf("%.1fms", s*1000)
	default:
		return fmt.Sprintf("%.2fs", s)
	}
}
