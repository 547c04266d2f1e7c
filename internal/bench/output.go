package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/internal/workload"
)

// Files a flow run writes with --out.
const (
	FileReport   = "report.md"
	FileResults  = "results.jsonl"
	FileSummary  = "summary.json"
	FileMeanSVG  = "latency-mean.svg"
	FileCDFSVG   = "latency-cdf.svg"
	FileCostSVG  = "cost-throughput.svg"
	fifoGroup    = "FIFO (one level)"
	orderedGroup = "priority or predictive"
)

// resultLine is one line of results.jsonl: one completed message, times
// in workload seconds from the run's start.
type resultLine struct {
	Arm     string  `json:"arm"`
	Seed    uint64  `json:"seed"`
	Type    string  `json:"type"`
	Class   string  `json:"class"`
	Sent    float64 `json:"sent"`
	Started float64 `json:"started"`
	Done    float64 `json:"done"`
}

// WriteFlowFiles writes a flow result into dir: report.md, results.jsonl,
// summary.json and the latency charts.
func WriteFlowFiles(dir string, res *FlowResult, types []workload.JobType) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, FileResults), func(w io.Writer) error { return writeResults(w, res, types) }); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, FileSummary), func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res.Report)
	}); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, FileMeanSVG), func(w io.Writer) error { return MeanChart(w, res.Report) }); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, FileCDFSVG), func(w io.Writer) error { return LatencyCDF(w, res) }); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, FileReport), func(w io.Writer) error { return FlowMarkdown(w, res.Report, true) })
}

func writeFile(path string, f func(io.Writer) error) error {
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(fh)
	if err := f(bw); err != nil {
		fh.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

func writeResults(w io.Writer, res *FlowResult, types []workload.JobType) error {
	enc := json.NewEncoder(w)
	for _, run := range res.Runs {
		for _, r := range run.Records {
			if err := enc.Encode(resultLine{Arm: run.Arm, Seed: run.Seed, Type: types[r.Type].Name, Class: r.Class,
				Sent: r.Sent.Seconds(), Started: r.Started.Seconds(), Done: r.Done.Seconds()}); err != nil {
				return err
			}
		}
	}
	return nil
}

// isFIFO reports whether an arm serves in arrival order.
func isFIFO(arm string) bool { return strings.HasSuffix(arm, "-fifo") || arm == "fifo" }

// MeanChart draws each arm's mean latency (median across seeds), FIFO arms
// in their own colour.
func MeanChart(w io.Writer, r *report.Report) error {
	var bars []Bar
	for _, name := range r.ArmOrder {
		a := r.Arms[name]
		if a == nil {
			continue
		}
		g := orderedGroup
		if isFIFO(name) {
			g = fifoGroup
		}
		lo, hi := math.NaN(), math.NaN()
		if len(a.PerSeed) > 1 {
			lo, hi = math.Inf(1), math.Inf(-1)
			for _, s := range a.PerSeed {
				lo, hi = math.Min(lo, float64(s.MeanS)), math.Max(hi, float64(s.MeanS))
			}
		}
		bars = append(bars, Bar{Label: name, Value: float64(a.MeanS), Lo: lo, Hi: hi, Group: g})
	}
	title := fmt.Sprintf("Mean latency per arm, %s (median of %s; whiskers: seed range)", r.Workload, plural(len(r.Seeds), "seed"))
	return BarChart(w, title, "mean latency, send to ack (workload s)", bars,
		[]string{fifoGroup, orderedGroup}, map[string]string{fifoGroup: "#999999", orderedGroup: "#0072B2"})
}

// LatencyCDF draws each arm's latency distribution, all seeds pooled.
func LatencyCDF(w io.Writer, res *FlowResult) error {
	by := map[string][]float64{}
	for _, run := range res.Runs {
		for _, r := range run.Records {
			by[run.Arm] = append(by[run.Arm], (r.Done - r.Sent).Seconds())
		}
	}
	var series []Series
	for _, name := range res.Report.ArmOrder {
		series = append(series, Series{Name: name, Values: by[name]})
	}
	title := fmt.Sprintf("Latency CDF per arm, %s (all seeds pooled)", res.Report.Workload)
	return CDFChart(w, title, "latency, send to ack (workload s, log scale)", series)
}

// FlowMarkdown writes the report as Markdown: per-arm table, gate with the
// reason for each failing row, secondary rows and the method. charts links
// the SVGs written beside it.
func FlowMarkdown(w io.Writer, r *report.Report, charts bool) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Harbinger live comparison: %s\n\n", r.Workload)
	passed := 0
	for _, g := range r.Gate {
		if g.Pass {
			passed++
		}
	}
	missing := 0
	for _, g := range r.Gate {
		if g.Note != "" {
			missing++
		}
	}
	fmt.Fprintf(&b, "Seeds %v. Gate: **%d of %d rows pass**", r.Seeds, passed, len(r.Gate))
	if missing > 0 {
		fmt.Fprintf(&b, " (%d without a result: not every arm was run)", missing)
	}
	b.WriteString(".\n\n")
	b.WriteString("## Per arm\n\nEach figure is the median across seeds, in workload seconds; lost is the worst seed.\n\n")
	b.WriteString("| arm | mean s | P99 s | short median s | export max wait s | lost | throughput/s | MAE ms | tier accuracy |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, name := range r.ArmOrder {
		a := r.Arms[name]
		if a == nil {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d | %s | %s | %s |\n", name, md(a.MeanS, 3), md(a.P99S, 3),
			md(a.ShortMedianS, 3), md(a.ExportMaxWaitS, 3), a.Lost, md(a.ThroughputPerS, 1), md(a.MAEms, 1), md(a.TierAccuracy, 3))
	}
	if charts {
		fmt.Fprintf(&b, "\n![mean latency per arm](%s)\n\n![latency CDF per arm](%s)\n", FileMeanSVG, FileCDFSVG)
	}
	b.WriteString("\n## Gate (primary arm harbinger-predictive)\n\nPaired by seed: estimate = median of per-seed differences, 95% bootstrap interval.\n\n")
	b.WriteString("| id | criterion | estimate | 95% CI | threshold | result | reason |\n|---|---|---:|---|---|---|---|\n")
	for _, g := range r.Gate {
		res, why := "pass", ""
		switch {
		case g.Note == "not run":
			res, why = "no result", "an arm it compares was not run"
		case g.Note != "":
			res, why = "no result", g.Note
		case !g.Pass:
			res, why = "fail", failReason(g)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", g.ID, g.Criterion, report.FormatValue(g.Kind, g.Estimate), ci(g),
			threshold(g), res, why)
	}
	if len(r.Secondary) > 0 {
		b.WriteString("\n## Secondary (reported, not gated)\n\n| id | criterion | estimate | 95% CI |\n|---|---|---:|---|\n")
		for _, g := range r.Secondary {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", g.ID, g.Criterion, report.FormatValue(g.Kind, g.Estimate), ci(g))
		}
	}
	if r.Method != "" {
		fmt.Fprintf(&b, "\n## Method\n\n%s\n", r.Method)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// failReason states plainly why a gate row failed.
func failReason(g report.Row) string {
	if math.IsNaN(float64(g.Estimate)) {
		return "no estimate"
	}
	if g.Kind == "count" {
		return fmt.Sprintf("%s messages were lost in the worst run; the gate allows none", report.FormatValue(g.Kind, g.Estimate))
	}
	if g.AtLeast {
		return fmt.Sprintf("the estimate %s is below the required %s", report.FormatValue(g.Kind, g.Estimate), report.FormatValue(g.Kind, g.Threshold))
	}
	return fmt.Sprintf("the estimate %s is above the allowed %s", report.FormatValue(g.Kind, g.Estimate), report.FormatValue(g.Kind, g.Threshold))
}

func threshold(g report.Row) string {
	if g.Kind == "count" {
		return "0"
	}
	if g.AtLeast {
		return ">= " + report.FormatValue(g.Kind, g.Threshold)
	}
	return "<= " + report.FormatValue(g.Kind, g.Threshold)
}

func ci(g report.Row) string {
	if math.IsNaN(float64(g.CI[0])) {
		return "-"
	}
	return "[" + report.FormatValue(g.Kind, g.CI[0]) + ", " + report.FormatValue(g.Kind, g.CI[1]) + "]"
}

func md(v report.Num, prec int) string {
	f := float64(v)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, f)
}

// WriteCostText prints the cost comparison for a terminal.
func WriteCostText(w io.Writer, r *CostResult) error {
	var b bytes.Buffer
	costTable(&b, r, false)
	fmt.Fprintf(&b, "\nMethod: %s\n", r.Method)
	_, err := w.Write(b.Bytes())
	return err
}

func costTable(b *bytes.Buffer, r *CostResult, markdown bool) {
	row := func(cells ...string) {
		if markdown {
			fmt.Fprintf(b, "| %s |\n", strings.Join(cells, " | "))
		} else {
			fmt.Fprintf(b, "%-10s %12s %22s %10s %9s %9s\n", toAny(cells)...)
		}
	}
	row("arm", "peak msg/s", "range", "kept up", "P50 ms", "P99 ms")
	if markdown {
		b.WriteString("|---|---:|---|---:|---:|---:|\n")
	}
	for _, name := range r.ArmOrder {
		a := r.Arms[name]
		kept, p50, p99 := "-", "-", "-"
		if f := a.FixedRate; f != nil {
			kept = fmt.Sprintf("%d of %d", f.KeptUp, f.Runs)
			p50, p99 = fmt.Sprintf("%.2f", f.P50ms), fmt.Sprintf("%.2f", f.P99ms)
		}
		row(name, fmt.Sprintf("%.0f", a.PeakPerS), fmt.Sprintf("%.0f-%.0f", a.PeakMin, a.PeakMax), kept, p50, p99)
	}
	ratio := func(v *float64) string {
		if v == nil {
			return "n/a"
		}
		return fmt.Sprintf("%.2fx", *v)
	}
	offered := ""
	for _, a := range r.Arms {
		if a.FixedRate != nil {
			offered = fmt.Sprintf(" (fixed rate: %.0f msg/s offered)", a.FixedRate.OfferedPerS)
			break
		}
	}
	fmt.Fprintf(b, "\nPeak-rate ratios, same repetition%s: harbinger/redis %s, harbinger/rabbitmq %s\n", offered,
		ratio(r.Ratios.HarbingerVsRedis), ratio(r.Ratios.HarbingerVsRabbitMQ))
	for _, name := range r.ArmOrder {
		for i, run := range r.Arms[name].Runs {
			if !run.KeptUp {
				fmt.Fprintf(b, "\n%s fixed-rate run %d did not keep up: %s", name, i+1, run.Why)
			}
		}
	}
	b.WriteString("\n")
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// WriteCostFiles writes report.md, summary.json and the throughput chart.
func WriteCostFiles(dir string, r *CostResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, FileSummary), func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, FileCostSVG), func(w io.Writer) error { return CostChart(w, r) }); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, FileReport), func(w io.Writer) error {
		var b bytes.Buffer
		b.WriteString("# Harbinger broker cost\n\n")
		costTable(&b, r, true)
		fmt.Fprintf(&b, "\n![peak delivery rate per broker](%s)\n\n## Method\n\n%s\n", FileCostSVG, r.Method)
		_, err := w.Write(b.Bytes())
		return err
	})
}

// CostChart draws each broker's peak delivery rate, median with range.
func CostChart(w io.Writer, r *CostResult) error {
	var bars []Bar
	for _, name := range r.ArmOrder {
		a := r.Arms[name]
		bars = append(bars, Bar{Label: name, Value: a.PeakPerS, Lo: a.PeakMin, Hi: a.PeakMax, Group: name})
	}
	colours := map[string]string{}
	for i, n := range r.ArmOrder {
		colours[n] = palette[i%len(palette)]
	}
	return BarChart(w, fmt.Sprintf("Peak sustained delivery rate (median of %s; whiskers: range)", plural(len(firstRuns(r)), "run")),
		"acked messages per second", bars, r.ArmOrder, colours)
}

func firstRuns(r *CostResult) []float64 {
	for _, n := range r.ArmOrder {
		return r.Arms[n].PeakRuns
	}
	return nil
}

// plural writes n and the noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
