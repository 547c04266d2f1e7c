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
	"unicode/utf8"

	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/internal/workload"
)

// Files a flow run writes with --out.
const (
	FileReport  = "report.md"
	FileResults = "results.jsonl"
	FileSummary = "summary.json"
	FileMeanSVG = "latency-mean.svg"
	FileCDFSVG  = "latency-cdf.svg"
	FileCostSVG = "cost-throughput.svg"
	// FileCostCPUSVG is the broker-CPU-per-message chart of a cost run.
	FileCostCPUSVG = "cost-cpu.svg"
	fifoGroup      = "FIFO (one level)"
	orderedGroup   = "priority or predictive"
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
	for _, warn := range r.Warnings {
		fmt.Fprintf(&b, "**Warning.** %s\n\n", warn)
	}
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
	costTables(&b, r, false)
	fmt.Fprintf(&b, "\nMethod: %s\n", r.Method)
	_, err := w.Write(b.Bytes())
	return err
}

// table writes rows under a header, as Markdown or as aligned text. align
// holds 'l' or 'r' per column.
func table(b *bytes.Buffer, markdown bool, align string, header []string, rows [][]string) {
	if markdown {
		fmt.Fprintf(b, "| %s |\n|", strings.Join(header, " | "))
		for i := range header {
			if align[i] == 'r' {
				b.WriteString("---:|")
			} else {
				b.WriteString("---|")
			}
		}
		b.WriteString("\n")
		for _, row := range rows {
			fmt.Fprintf(b, "| %s |\n", strings.Join(row, " | "))
		}
		return
	}
	width := make([]int, len(header))
	for _, row := range append([][]string{header}, rows...) {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for _, row := range append([][]string{header}, rows...) {
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i > 0 {
				b.WriteString("  ")
			}
			if align[i] == 'r' {
				b.WriteString(pad + c)
			} else {
				b.WriteString(c + pad)
			}
		}
		b.WriteString("\n")
	}
}

func usOrDash(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", *v)
}

func costTables(b *bytes.Buffer, r *CostResult, markdown bool) {
	offered := ""
	for _, a := range r.Arms {
		if a.FixedRate != nil {
			offered = fmt.Sprintf("%.0f", a.FixedRate.OfferedPerS)
			break
		}
	}
	header := []string{"arm", "peak msg/s", "range", "broker CPU µs/msg", "harness CPU µs/msg"}
	align := "lrlrr"
	if offered != "" {
		header = append(header, "kept up at "+offered+"/s", "P50 ms", "P99 ms", "broker CPU µs/msg at "+offered+"/s")
		align += "rrrr"
	}
	var rows [][]string
	for _, name := range r.ArmOrder {
		a := r.Arms[name]
		row := []string{name, fmt.Sprintf("%.0f", a.PeakPerS), fmt.Sprintf("%.0f-%.0f", a.PeakMin, a.PeakMax),
			usOrDash(a.PeakCPU.BrokerUS), fmt.Sprintf("%.1f", a.PeakCPU.HarnessUS)}
		if offered != "" {
			if f := a.FixedRate; f != nil {
				row = append(row, fmt.Sprintf("%d of %d", f.KeptUp, f.Runs), fmt.Sprintf("%.2f", f.P50ms), fmt.Sprintf("%.2f", f.P99ms), usOrDash(f.CPU.BrokerUS))
			} else {
				row = append(row, "-", "-", "-", "-")
			}
		}
		rows = append(rows, row)
	}
	if len(rows) > 0 { // none in a --memory-only run
		table(b, markdown, align, header, rows)
	}
	var logRows [][]string
	for _, name := range r.ArmOrder {
		if l := r.Arms[name].PeakLog; l != nil {
			logRows = append(logRows, []string{name, fmt.Sprintf("%.2f", l.PublishesPerSync), fmt.Sprintf("%.1f", l.RecordsPerSync),
				fmt.Sprintf("%.0f", l.SyncUS), fmt.Sprintf("%.0f", l.WaitUS), fmt.Sprintf("%.0f%%", 100*l.SyncShare)})
		}
	}
	if len(logRows) > 0 {
		b.WriteString("\nWhere a durable Harbinger's publishes waited, at peak (its write-ahead log's own counters from /metrics over the median repetition's timed window):\n\n")
		table(b, markdown, "lrrrrr", []string{"arm", "publishes per fsync", "records per fsync", "fsync µs", "publish wait µs", "time in fsync"}, logRows)
	}
	if len(r.Ratios) > 0 {
		b.WriteString("\nRatios, each taken within one repetition (median, range over repetitions):\n\n")
		var rr [][]string
		for _, x := range r.Ratios {
			rr = append(rr, []string{x.Label, fmt.Sprintf("%.2fx", x.Median), fmt.Sprintf("%.2f-%.2f", x.Min, x.Max)})
		}
		table(b, markdown, "lrl", []string{"ratio", "median", "range"}, rr)
	}
	if len(r.Goals) > 0 {
		switch r.Scenario {
		case ScenarioBusy, ScenarioBulk:
			b.WriteString("\nGoals of the batching issue (#47; benchmarks, not pre-registered; reported as reached or missed):\n\n")
		default:
			b.WriteString("\nGoals of the durable-queues issue (not pre-registered; reported as reached or missed):\n\n")
		}
		var gr [][]string
		for _, g := range r.Goals {
			est := fmt.Sprintf("%.2fx", g.Estimate)
			if g.ID == "D3" {
				est = fmt.Sprintf("%.2f ms", g.Estimate)
			}
			res := "missed"
			if g.Met {
				res = "reached"
			}
			if g.Note != "" {
				res += " (" + g.Note + ")"
			}
			gr = append(gr, []string{g.ID, g.Criterion, est, g.Threshold, res})
		}
		table(b, markdown, "llrll", []string{"id", "goal", "estimate", "target", "result"}, gr)
	}
	if len(r.Memory) > 0 {
		b.WriteString("\nMemory per waiting job (64-byte jobs published through the Producer, no worker):\n\n")
		var mr [][]string
		for _, m := range r.Memory {
			disk := "-"
			if m.DiskBytesPerJob != nil {
				disk = fmt.Sprintf("%.0f", *m.DiskBytesPerJob)
			}
			mr = append(mr, []string{m.Arm, fmt.Sprintf("%d", m.Jobs), fmt.Sprintf("%.1f", mib(m.RSSBeforeBytes)), fmt.Sprintf("%.1f", mib(m.RSSAfterBytes)),
				fmt.Sprintf("%.1f", mib(m.PeakRSSBytes)), fmt.Sprintf("%.0f", m.BytesPerJob), disk, fmt.Sprintf("%.1f", m.PublishSeconds)})
		}
		table(b, markdown, "lrrrrrrr", []string{"broker", "waiting jobs", "RSS empty MiB", "RSS after MiB", "peak RSS MiB", "RSS bytes/job", "disk bytes/job", "publish s"}, mr)
	}
	for _, name := range r.ArmOrder {
		for i, run := range r.Arms[name].Runs {
			if !run.KeptUp {
				fmt.Fprintf(b, "\n%s fixed-rate run %d did not keep up: %s", name, i+1, run.Why)
			}
		}
	}
	b.WriteString("\n")
}

// WriteCostFiles writes report.md, summary.json and the charts.
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
	if len(r.ArmOrder) > 0 {
		if err := writeFile(filepath.Join(dir, FileCostSVG), func(w io.Writer) error { return CostChart(w, r) }); err != nil {
			return err
		}
	}
	cpuChart := hasBrokerCPU(r)
	if cpuChart {
		if err := writeFile(filepath.Join(dir, FileCostCPUSVG), func(w io.Writer) error { return CostCPUChart(w, r) }); err != nil {
			return err
		}
	}
	return writeFile(filepath.Join(dir, FileReport), func(w io.Writer) error {
		var b bytes.Buffer
		b.WriteString("# Harbinger broker cost\n\n")
		if r.Scenario != "" && r.Scenario != ScenarioPrefetch1 {
			fmt.Fprintf(&b, "Scenario: %s.\n\n", r.Scenario)
		}
		costTables(&b, r, true)
		if len(r.ArmOrder) > 0 {
			fmt.Fprintf(&b, "\n![peak delivery rate per broker](%s)\n", FileCostSVG)
		}
		if cpuChart {
			fmt.Fprintf(&b, "\n![broker CPU per message at peak](%s)\n", FileCostCPUSVG)
		}
		b.WriteString("\n## Arms\n\n")
		for _, name := range r.ArmOrder {
			fmt.Fprintf(&b, "- %s: %s\n", name, r.Arms[name].Broker)
		}
		fmt.Fprintf(&b, "\n## Method\n\n%s\n", r.Method)
		_, err := w.Write(b.Bytes())
		return err
	})
}

func hasBrokerCPU(r *CostResult) bool {
	for _, a := range r.Arms {
		if a.PeakCPU.BrokerUS != nil {
			return true
		}
	}
	return false
}

// CostCPUChart draws each broker's CPU per message at peak, from its own
// process accounting; arms without a broker process are left out.
func CostCPUChart(w io.Writer, r *CostResult) error {
	var bars []Bar
	var groups []string
	colours := map[string]string{}
	for i, name := range r.ArmOrder {
		a := r.Arms[name]
		if a.PeakCPU.BrokerUS == nil {
			continue
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, c := range a.PeakCPUs {
			if c.BrokerUS != nil {
				lo, hi = math.Min(lo, *c.BrokerUS), math.Max(hi, *c.BrokerUS)
			}
		}
		bars = append(bars, Bar{Label: name, Value: *a.PeakCPU.BrokerUS, Lo: lo, Hi: hi, Group: name})
		groups = append(groups, name)
		colours[name] = palette[i%len(palette)]
	}
	return BarChart(w, fmt.Sprintf("Broker CPU per message at peak (median of %s; whiskers: range)", plural(len(firstRuns(r)), "run")),
		"broker process CPU µs per acked message", bars, groups, colours)
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
