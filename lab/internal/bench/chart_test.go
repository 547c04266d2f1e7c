package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/report"
)

// validXML decodes every token of b and fails the test on the first error.
func validXML(t *testing.T, name string, b []byte) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("%s is not valid XML: %v", name, err)
		}
	}
}

func fakeFlow() *FlowResult {
	recs := func(base float64) []report.Record {
		var out []report.Record
		for i := range 50 {
			s := time.Duration(i) * 100 * time.Millisecond
			out = append(out, report.Record{Type: 0, Class: report.ClassShort, Sent: s,
				Started: s + time.Duration(base*float64(time.Millisecond)),
				Done:    s + time.Duration(base*float64(i+1)*float64(time.Millisecond))})
		}
		return out
	}
	arms := []string{"harbinger-predictive", "rabbitmq-fifo", "redis-fifo", "a<b&c"}
	res := &FlowResult{}
	per := map[string][]report.SeedResult{}
	for i, a := range arms {
		for _, seed := range []uint64{1, 2} {
			run := RunResult{Arm: a, Seed: seed, Sent: 50, Records: recs(float64(i+1) * float64(seed))}
			res.Runs = append(res.Runs, run)
			per[a] = append(per[a], report.Summarize(seed, 50, run.Records))
		}
	}
	r := &report.Report{Workload: "test & <flow>", Seeds: []uint64{1, 2}, Arms: map[string]*report.ArmResult{}, ArmOrder: arms}
	for _, a := range arms {
		r.Arms[a] = report.Combine(per[a])
	}
	r.Arms["a<b&c"].MeanS = report.Num(math.NaN())
	r.Gate = report.Gate(r.Arms, report.LiveBaselines)
	r.Secondary = report.Secondary(r.Arms, report.LiveBaselines, true)
	r.Method = "method"
	res.Report = r
	return res
}

func TestChartsAreValidXML(t *testing.T) {
	t.Parallel()
	res := fakeFlow()
	var mean, cdf, cost, cpu bytes.Buffer
	if err := MeanChart(&mean, res.Report); err != nil {
		t.Fatal(err)
	}
	if err := LatencyCDF(&cdf, res); err != nil {
		t.Fatal(err)
	}
	us := 12.5
	cr := &CostResult{ArmOrder: []string{"harbinger", "redis"}, Ratios: []Ratio{{ID: "harbinger_vs_redis", Median: 2.5}},
		Arms: map[string]*CostArm{"harbinger": {PeakPerS: 20000, PeakMin: 19000, PeakMax: 21000, PeakRuns: []float64{20000},
			PeakCPU: CPUPerMsg{BrokerUS: &us}, PeakCPUs: []CPUPerMsg{{BrokerUS: &us}}},
			"redis": {PeakPerS: 8000, PeakMin: 8000, PeakMax: 8000, PeakRuns: []float64{8000}}}}
	if err := CostChart(&cost, cr); err != nil {
		t.Fatal(err)
	}
	if err := CostCPUChart(&cpu, cr); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]*bytes.Buffer{"mean": &mean, "cdf": &cdf, "cost": &cost, "cpu": &cpu} {
		validXML(t, name, b.Bytes())
		s := b.String()
		if !strings.Contains(s, "<svg") || !strings.Contains(s, "<title>") {
			t.Errorf("%s: no svg element or title", name)
		}
	}
	for _, want := range []string{"FIFO (one level)", "a&lt;b&amp;c", "workload s"} {
		if !strings.Contains(mean.String(), want) {
			t.Errorf("mean chart lacks %q", want)
		}
	}
	if !strings.Contains(cdf.String(), "redis-fifo") || !strings.Contains(cdf.String(), "log scale") {
		t.Errorf("CDF chart lacks its legend or axis label")
	}
}

func TestChartsEmptyInput(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := CDFChart(&b, "empty", "x", []Series{{Name: "none"}}); err != nil {
		t.Fatal(err)
	}
	validXML(t, "empty cdf", b.Bytes())
	b.Reset()
	if err := BarChart(&b, "empty", "y", nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	validXML(t, "empty bars", b.Bytes())
}

func TestFlowMarkdownStatesFailReasons(t *testing.T) {
	t.Parallel()
	res := fakeFlow()
	var b bytes.Buffer
	if err := FlowMarkdown(&b, res.Report, true); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	for _, want := range []string{"## Gate", "| P5 |", "no result", "is above the allowed", "## Method", FileMeanSVG} {
		if !strings.Contains(s, want) {
			t.Errorf("report.md lacks %q:\n%s", want, s)
		}
	}
}

func TestFailReason(t *testing.T) {
	t.Parallel()
	tests := []struct {
		row  report.Row
		want string
	}{
		{report.Row{Kind: "percent", Estimate: -0.3, Threshold: -0.5}, "the estimate -30.0% is above the allowed -50.0%"},
		{report.Row{Kind: "ratio", Estimate: 0.9, Threshold: 0.98, AtLeast: true}, "the estimate 0.900x is below the required 0.980x"},
		{report.Row{Kind: "count", Estimate: 3}, "3 messages were lost in the worst run; the gate allows none"},
		{report.Row{Kind: "ratio", Estimate: report.Num(math.NaN())}, "no estimate"},
	}
	for _, tt := range tests {
		if got := failReason(tt.row); got != tt.want {
			t.Errorf("failReason(%+v) = %q, want %q", tt.row, got, tt.want)
		}
	}
}
