package experiment

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/internal/sim"
	"github.com/harbinger-mq/harbinger/internal/trace"
	"github.com/harbinger-mq/harbinger/internal/workload"
)

// tiny is a two-worker workload of short, mid and export jobs, small enough
// to run every arm in well under a second.
func tiny() *workload.Workload {
	jt := func(name string, rate, ms float64, tier int, class string) workload.JobType {
		return workload.JobType{Name: name, Producer: "p-" + name, RatePerS: rate,
			Duration:   workload.DurationSpec{Dist: "lognormal", MeanMS: ms, Sigma: 0.3},
			Size:       workload.SizeSpec{Dist: "fixed", Mean: 1024},
			StaticTier: tier, Class: class}
	}
	return &workload.Workload{Name: "tiny", ArrivalsS: 20, Workers: 2, Seeds: []uint64{1, 2},
		JobTypes: []workload.JobType{
			jt("short", 40, 5, 0, "short"),
			jt("mid", 5, 60, 1, "mid"),
			jt("export", 0.3, 1500, 2, "export"),
		}}
}

func setup(t *testing.T) *Results {
	t.Helper()
	w := tiny()
	r, err := Run(Config{
		Scenarios: []Scenario{{"tiny", sim.FromWorkload(w)}, {"tiny again", sim.FromWorkload(w)}},
		Loads:     []float64{0.7, 0.95},
		Seeds:     []uint64{1, 2},
		// The matrix on the tiny workload alone: the stress workloads and
		// the trace windows take tens of seconds.
		Matrix:      []Scenario{{"tiny", sim.FromWorkload(w)}},
		MatrixLoads: []float64{0.7, 1.2},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestMarkdownTables(t *testing.T) {
	t.Parallel()
	r := setup(t)
	var b bytes.Buffer
	if err := r.Markdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, s := range studies() {
		if !strings.Contains(md, "## "+s.title) {
			t.Errorf("missing study %q", s.title)
		}
		if !strings.Contains(md, "("+ChartDir+"/"+s.slug+".svg)") {
			t.Errorf("study %q does not link its chart", s.slug)
		}
		// Each table has a header, a rule, and one row per load and arm.
		header := "| load | arm |"
		for _, c := range s.columns {
			header += " " + c.head() + " |"
		}
		if got := strings.Count(md, header); got < 2 {
			t.Errorf("study %q: %d tables, want one per scenario", s.slug, got)
		}
	}
	if !strings.Contains(md, "## 5. The evaluation matrix") || !strings.Contains(md, "(experiments/matrix.svg)") || !strings.Contains(md, "| tiny | 2 | 1.2 |") {
		t.Error("missing the matrix section, its heat map or a row")
	}
	if !strings.Contains(md, "| 0.95 | default |") || !strings.Contains(md, "Does the default policy follow from this?") {
		t.Error("missing rows or the conclusion")
	}
	if i := strings.Index(md, "%!"); i >= 0 {
		t.Errorf("a findings template has a formatting error: %q", md[max(i-80, 0):min(i+40, len(md))])
	}
	// FIFO against itself is exactly 1.
	if v := r.ratio(0, 0.95, ArmFIFO, ArmFIFO, mMean); v != 1 {
		t.Errorf("fifo vs fifo = %v", v)
	}
	for _, a := range []string{ArmDefault, ArmTree, ArmOracle, ArmSJF} {
		if v := r.value(0, 0.7, a, mMean); math.IsNaN(v) || v <= 0 {
			t.Errorf("%s mean = %v", a, v)
		}
	}
	if v := r.value(0, 0.7, ArmTree, mMAE); math.IsNaN(v) {
		t.Error("tree arm reports no MAE")
	}
}

func TestShareArmsNameTheirShare(t *testing.T) {
	t.Parallel()
	for arm, share := range map[string]float64{ArmShare40: shareWide, ArmShare60: shareWider} {
		if !strings.Contains(arm, sharePct(share)) {
			t.Errorf("arm %q does not say its long share %v", arm, share)
		}
	}
	for arm, stretch := range map[string]float64{ArmOthers1: othersTight, ArmOthers3: othersLoose} {
		if !strings.Contains(arm, fmt.Sprintf("%gx FIFO", 1+stretch)) {
			t.Errorf("arm %q does not say its bound 1 + %v", arm, stretch)
		}
	}
}

func TestFindingsWords(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		vs   []float64
		want string
	}{
		{[]float64{0.9, 0.5}, "below"},
		{[]float64{0.9, 1.001}, "at or below"},
		{[]float64{1.2, 1.0}, "at or above"},
		{[]float64{1.2, 0.8}, "on both sides of"},
		{[]float64{1.0004}, "level with"},
		{[]float64{math.NaN()}, "level with"},
	} {
		if got := side(c.vs...); got != c.want {
			t.Errorf("side(%v) = %q, want %q", c.vs, got, c.want)
		}
	}
	if got := slightly(1.047); got != "slightly above" {
		t.Errorf("slightly(1.047) = %q", got)
	}
	if got, want := pct(1.193), "20%"; got != want {
		t.Errorf("pct(1.193) = %q, want %q", got, want)
	}
	if got, want := pctRound(1.047), "5%"; got != want {
		t.Errorf("pctRound(1.047) = %q, want %q", got, want)
	}
}

func TestChartsAreWellFormedXML(t *testing.T) {
	t.Parallel()
	r := setup(t)
	charts, err := r.Charts()
	if err != nil {
		t.Fatal(err)
	}
	if len(charts) != len(studies()) {
		t.Fatalf("%d charts, want %d", len(charts), len(studies()))
	}
	for name, svg := range charts {
		wellFormed(t, name, svg)
		for _, want := range []string{"<svg", "offered load", "<rect", "<title>"} {
			if !bytes.Contains(svg, []byte(want)) {
				t.Errorf("%s: no %q", name, want)
			}
		}
	}
}

func TestChartEscapesAndSurvivesGaps(t *testing.T) {
	t.Parallel()
	c := Chart{Title: `a < b & "c"`, Series: []string{"x<y", "z"}, Panels: []Panel{
		{Title: "log", Groups: []string{"1", "2"}, Values: [][]float64{{0.5, math.NaN()}, {3, 0}}, Log: true},
		{Title: "linear", Groups: []string{"1"}, Values: [][]float64{{math.NaN()}, {math.Inf(1)}}},
	}}
	var b bytes.Buffer
	if err := c.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	wellFormed(t, "escape", b.Bytes())
	if bytes.Contains(b.Bytes(), []byte("NaN")) || bytes.Contains(b.Bytes(), []byte("Inf")) {
		t.Error("chart drew a NaN or infinite coordinate")
	}
}

func TestWrite(t *testing.T) {
	t.Parallel()
	r := setup(t)
	dir := t.TempDir()
	if err := Write(r, dir); err != nil {
		t.Fatal(err)
	}
	for _, s := range studies() {
		if _, err := os.Stat(filepath.Join(dir, ChartDir, s.slug+".svg")); err != nil {
			t.Error(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "experiments.md")); err != nil {
		t.Error(err)
	}
	svg, err := os.ReadFile(filepath.Join(dir, ChartDir, "matrix.svg"))
	if err != nil {
		t.Fatal(err)
	}
	wellFormed(t, "matrix.svg", svg)
}

// The verdict applies the goal's thresholds to the medians of per-seed
// ratios, and judges the mean only where oracle SJF gains enough.
func TestVerdict(t *testing.T) {
	t.Parallel()
	seed := func(mean, p99, export float64) report.SeedResult {
		return report.SeedResult{MeanS: report.Num(mean), P99S: report.Num(p99), ExportMaxWaitS: report.Num(export)}
	}
	cell := func(s ...report.SeedResult) *Cell { return &Cell{ArmResult: &report.ArmResult{PerSeed: s}} }
	m := &MatrixResults{Loads: []float64{1}, Scenarios: []ScenarioInfo{{Label: "x"}, {Label: "y"}},
		Cells: []map[float64]map[string]*Cell{
			{1: {
				ArmFIFO:      cell(seed(10, 20, 5), seed(10, 20, 5)),
				ArmOracleSJF: cell(seed(2, 5, 50), seed(2, 5, 50)),
				ArmDefault:   cell(seed(4, 22, 5), seed(4.8, 22, 5)), // captures (1-0.44)/(1-0.2) = 70%
				ArmPrevious:  cell(seed(3, 23, 4), seed(3, 23, 4)),   // P99 1.15x
			}},
			{1: {
				ArmFIFO:      cell(seed(10, 20, 5)),
				ArmOracleSJF: cell(seed(9.8, 20, 5)), // gains 2%: the mean is not judged
				ArmDefault:   cell(seed(10, 20, 5.1)),
			}},
		}}
	v := m.Verdict(0, 1, ArmDefault)
	if !v.Pass || math.Abs(v.Captured-0.7) > 1e-9 || v.P99 != 1.1 {
		t.Errorf("default at x: %+v, want a pass at 70%% captured and P99 1.1x", v)
	}
	if v := m.Verdict(0, 1, ArmPrevious); v.Pass || v.P99OK || !v.MeanOK {
		t.Errorf("previous at x: %+v, want a P99 miss", v)
	}
	if v := m.Verdict(1, 1, ArmDefault); v.Pass || v.ExportOK || !math.IsNaN(v.Captured) || !v.MeanOK {
		t.Errorf("default at y: %+v, want the mean unjudged and a miss on the longest class's wait", v)
	}
	if pass, cells := m.Passes(ArmDefault); pass != 1 || cells != 2 {
		t.Errorf("Passes = %d of %d, want 1 of 2", pass, cells)
	}
	wellFormed(t, "heat map", m.HeatMap())
}

// Every stress workload parses, has the classes the matrix reports on, and
// generates a stream with a measurable load.
func TestStressWorkloads(t *testing.T) {
	t.Parallel()
	ws, err := StressWorkloads()
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) < 4 {
		t.Fatalf("%d stress workloads, the matrix needs at least four", len(ws))
	}
	for _, w := range ws {
		classes := map[string]bool{}
		for _, jt := range w.JobTypes {
			classes[jt.Class] = true
		}
		if !classes["export"] || !classes["short"] {
			t.Errorf("%s: classes %v, want short and export", w.Name, classes)
		}
		if l, err := sim.OfferedLoad(w.Generate(1), w.Workers); err != nil || !(l > 0.3 && l < 3) {
			t.Errorf("%s: offered load %v (%v)", w.Name, l, err)
		}
	}
}

// The default matrix keeps a workload scenario and replays each trace at
// every window, then adds the stress workloads.
func TestDefaultMatrix(t *testing.T) {
	t.Parallel()
	tr, err := trace.Load("../../../traces/azure-functions-2019", trace.Options{})
	if err != nil {
		t.Skip("the shipped trace is not at hand:", err)
	}
	scs, err := DefaultMatrix([]Scenario{{"w", sim.FromWorkload(tiny())}, {"t", tr}})
	if err != nil {
		t.Fatal(err)
	}
	ws, _ := StressWorkloads()
	if want := 1 + len(DefaultTraceWindows) + len(ws); len(scs) != want {
		t.Fatalf("%d scenarios, want %d", len(scs), want)
	}
	if scs[1].Label != "trace 00:00-01:00" || scs[3].Label != "trace 12:00-13:00" {
		t.Errorf("trace labels %q, %q", scs[1].Label, scs[3].Label)
	}
}

func TestTreeLearnsTypes(t *testing.T) {
	t.Parallel()
	m := newTreeModel()
	short, long := &workload.JobType{Name: "s", Producer: "a"}, &workload.JobType{Name: "l", Producer: "b"}
	for i := range 600 {
		m.observe(m.features(short, 0), time.Duration(10+i%3)*time.Millisecond)
		m.observe(m.features(long, 1<<20), time.Duration(500+i%7)*time.Millisecond)
	}
	s, ok1 := m.predict(m.features(short, 0))
	l, ok2 := m.predict(m.features(long, 1<<20))
	if !ok1 || !ok2 || math.Abs(s-11) > 1 || math.Abs(l-503) > 5 {
		t.Errorf("tree predicts %v ms and %v ms, want about 11 and 503", s, l)
	}
}

func TestRunRejects(t *testing.T) {
	t.Parallel()
	if _, err := Run(Config{}); err == nil {
		t.Error("ran without scenarios")
	}
	if _, err := Run(Config{Scenarios: []Scenario{{"tiny", sim.FromWorkload(tiny())}}, Loads: []float64{-1}}); err == nil {
		t.Error("accepted a negative load")
	}
}

func wellFormed(t *testing.T, name string, doc []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", name, err)
		}
	}
}
