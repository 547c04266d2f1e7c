package report

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"
)

// WriteText prints the report for a terminal: per-arm medians, the gate,
// the secondary comparisons and the method.
func WriteText(w io.Writer, r *Report) error {
	fmt.Fprintf(w, "workload: %s   seeds: %v\n\n", r.Workload, r.Seeds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "arm\tmean s\tP99 s\tshort median s\texport max wait s\tlost\tthroughput/s\tMAE ms\ttier accuracy\t")
	for _, name := range r.ArmOrder {
		a := r.Arms[name]
		if a == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t\n", name,
			f3(a.MeanS), f3(a.P99S), f3(a.ShortMedianS), f3(a.ExportMaxWaitS), a.Lost,
			f1(a.ThroughputPerS), f1(a.MAEms), f3(a.TierAccuracy))
	}
	tw.Flush()
	fmt.Fprintln(w, "\n(each figure: median across seeds; lost: the worst seed)")

	fmt.Fprintln(w, "\nGate (paired by seed; estimate = median of per-seed differences; 95% bootstrap CI):")
	writeRows(w, r.Gate, true)
	if len(r.Secondary) > 0 {
		fmt.Fprintln(w, "\nSecondary (reported, not gated):")
		writeRows(w, r.Secondary, false)
	}
	passed := 0
	for _, g := range r.Gate {
		if g.Pass {
			passed++
		}
	}
	fmt.Fprintf(w, "\nGate: %d of %d rows pass.\n", passed, len(r.Gate))
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "Warning: %s\n", warn)
	}
	if r.Method != "" {
		fmt.Fprintf(w, "\nMethod: %s\n", r.Method)
	}
	return nil
}

func writeRows(w io.Writer, rows []Row, gated bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if gated {
		fmt.Fprintln(tw, "id\tcriterion\testimate\t95% CI\tthreshold\tresult")
	} else {
		fmt.Fprintln(tw, "id\tcriterion\testimate\t95% CI\t\t")
	}
	for _, g := range rows {
		res := "fail"
		if g.Pass {
			res = "pass"
		}
		if g.Note != "" {
			res = g.Note
		}
		th := ""
		if gated {
			th = "<= "
			if g.AtLeast {
				th = ">= "
			}
			th += FormatValue(g.Kind, g.Threshold)
		} else {
			res = g.Note
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t[%s, %s]\t%s\t%s\n", g.ID, g.Criterion, FormatValue(g.Kind, g.Estimate),
			FormatValue(g.Kind, g.CI[0]), FormatValue(g.Kind, g.CI[1]), th, res)
	}
	tw.Flush()
}

// FormatValue prints a gate figure by its row's kind: a percent criterion
// as a signed percentage, a ratio as "0.812x", a count plainly, NaN as "-".
func FormatValue(kind string, v Num) string {
	f := float64(v)
	if math.IsNaN(f) {
		return "-"
	}
	switch kind {
	case "percent":
		return fmt.Sprintf("%+.1f%%", 100*f)
	case "ratio":
		return fmt.Sprintf("%.3fx", f)
	default:
		return fmt.Sprintf("%g", f)
	}
}

func f3(v Num) string {
	if math.IsNaN(float64(v)) {
		return "-"
	}
	return fmt.Sprintf("%.3f", float64(v))
}

func f1(v Num) string {
	if math.IsNaN(float64(v)) {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(v))
}
