package workload

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const shipped = "../../workloads/production-flow.yaml"

func loadShipped(t *testing.T) *Workload {
	t.Helper()
	w, err := Load(shipped)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// The repository ships a copy of the frozen pre-registered workload so the
// README's commands work anywhere; it must never drift from the original.
func TestShippedWorkloadMatchesPreregistered(t *testing.T) {
	t.Parallel()
	orig, err := os.ReadFile(filepath.Join("..", "..", "..", "shared", "workloads", "production-flow.yaml"))
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("the shared pre-registration folder is not beside this checkout")
	}
	if err != nil {
		t.Fatal(err)
	}
	ours, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(orig, ours) {
		t.Fatal("workloads/production-flow.yaml differs from the pre-registered file; copy it again, never edit it")
	}
}

func TestParseShipped(t *testing.T) {
	t.Parallel()
	w := loadShipped(t)
	if w.Name != "production-flow" || w.Workers != 4 || w.ArrivalsS != 300 || len(w.JobTypes) != 9 || len(w.Events) != 2 {
		t.Fatalf("unexpected header: %+v", w)
	}
	if got := w.Seeds; len(got) != 5 || got[0] != 1 || got[4] != 5 {
		t.Fatalf("seeds = %v", got)
	}
	img := w.JobTypes[5]
	if img.Name != "image.resize" || !img.Duration.PerSize || img.Size.Dist != "lognormal" || img.Size.Sigma != 1 {
		t.Fatalf("image.resize = %+v", img)
	}
	cost := w.Events[1]
	if cost.Kind != EventCost || cost.MeanMS != 500 || !math.IsInf(cost.EndS, 1) {
		t.Fatalf("cost event = %+v", cost)
	}
	// 2.825 busy workers at base rates, plus the flash sale and the slowdown.
	if l := w.OfferedLoad(); l < 4.0 || l > 4.6 {
		t.Fatalf("offered load %.3f workers, want about 4.3", l)
	}
}

func TestGenerateDeterministic(t *testing.T) {
	t.Parallel()
	w := loadShipped(t)
	a, b := w.Generate(3), w.Generate(3)
	if len(a) != len(b) {
		t.Fatalf("lengths differ: %d vs %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("job %d differs: %+v vs %+v", i, a[i], b[i])
		}
	}
	c := w.Generate(4)
	if len(c) == len(a) && c[0] == a[0] {
		t.Fatal("seeds 3 and 4 generated the same stream")
	}
	// A type's stream does not depend on the other types in the file.
	solo := *w
	solo.JobTypes = w.JobTypes[8:]
	var exports []Job
	for _, j := range a {
		if j.Type == 8 {
			exports = append(exports, j)
		}
	}
	s := solo.Generate(3)
	if len(s) != len(exports) {
		t.Fatalf("export stream changed with the other types: %d vs %d", len(s), len(exports))
	}
	for i := range s {
		if s[i].Arrival != exports[i].Arrival || s[i].Duration != exports[i].Duration {
			t.Fatalf("export %d changed: %+v vs %+v", i, s[i], exports[i])
		}
	}
}

// The generated stream must have the rates, means and events the file states.
func TestGenerateStatistics(t *testing.T) {
	t.Parallel()
	w := loadShipped(t)
	type agg struct {
		n             int
		sumMS         float64
		inFlash, late int
		lateMS        float64
	}
	per := make([]agg, len(w.JobTypes))
	for _, seed := range w.Seeds {
		jobs := w.Generate(seed)
		for i, j := range jobs {
			if i > 0 && j.Arrival < jobs[i-1].Arrival {
				t.Fatal("jobs out of arrival order")
			}
			if j.Arrival < 0 || j.Arrival >= 300*time.Second || j.Duration <= 0 {
				t.Fatalf("bad job %+v", j)
			}
			a := &per[j.Type]
			a.n++
			ms := float64(j.Duration) / 1e6
			at := j.Arrival.Seconds()
			if at >= 90 && at < 180 {
				a.inFlash++
			}
			if at >= 200 {
				a.late++
				a.lateMS += ms
			} else {
				a.sumMS += ms
			}
		}
	}
	n := float64(len(w.Seeds))
	within := func(name string, got, want, tol float64) {
		t.Helper()
		if math.Abs(got-want) > tol*want {
			t.Errorf("%s = %.3f, want %.3f ±%.0f%%", name, got, want, tol*100)
		}
	}
	email := per[0]
	within("notify.email rate", float64(email.n)/n/300, 30, 0.03)
	within("notify.email mean ms", email.sumMS/float64(email.n-email.late), 8, 0.03)
	order := per[4]
	within("order.confirm flash-sale rate", float64(order.inFlash)/n/90, 48, 0.05)
	within("order.confirm rate outside the sale", float64(order.n-order.inFlash)/n/210, 8, 0.08)
	hook := per[2]
	within("webhook.deliver mean before the slowdown", hook.sumMS/float64(hook.n-hook.late), 20, 0.1)
	within("webhook.deliver mean after the slowdown", hook.lateMS/float64(hook.late), 500, 0.1)
	img := per[5]
	within("image.resize mean ms (size-scaled)", (img.sumMS+img.lateMS)/float64(img.n), 120, 0.15)
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	base, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(base)
	tests := []struct {
		name, old, new string
		want           string
	}{
		{"unknown top-level field", "workers: 4", "workers: 4\nworkerz: 5", "line 21: workerz: unknown field"},
		{"missing workers", "workers: 4\n", "", "workers: missing required field"},
		{"negative rate", "rate_per_s: 30", "rate_per_s: -30", "line 26: job_types[0].rate_per_s: must be between 0"},
		{"negative sigma", "mean_ms: 8, sigma: 0.4", "mean_ms: 8, sigma: -0.4", "line 27: job_types[0].duration.sigma"},
		{"missing sigma", "mean_ms: 8, sigma: 0.4}", "mean_ms: 8}", "job_types[0].duration.sigma: missing required field"},
		{"unknown dist", "{dist: lognormal, mean_ms: 8,", "{dist: weibull, mean_ms: 8,", "unknown distribution \"weibull\""},
		{"end before start", "start_s: 90, end_s: 180", "start_s: 90, end_s: 80", "events[0].end_s: must be after start_s"},
		{"unknown event job type", "job_type: order.confirm", "job_type: order.cancel", "events[0].job_type: unknown job type"},
		{"not a number", "arrivals_s: 300", "arrivals_s: soon", "line 19: arrivals_s: expected a finite number"},
		{"NaN", "arrivals_s: 300", "arrivals_s: .nan", "arrivals_s: expected a finite number"},
		{"zero workers", "workers: 4", "workers: 0", "workers: must be between 1"},
		{"fractional workers", "workers: 4", "workers: 4.5", "workers: must be a whole number"},
		{"duplicate type", "name: notify.push", "name: notify.email", "duplicate job type"},
		{"unknown event kind", "{kind: cost,", "{kind: costs,", "unknown event kind"},
		{"too many messages", "rate_per_s: 30", "rate_per_s: 99999", "would generate up to"},
		{"list where map", "duration: {dist: lognormal, mean_ms: 8, sigma: 0.4}", "duration: [1, 2]", "job_types[0].duration: expected a mapping"},
		{"bad yaml", "workers: 4", "workers: [4", "workload: yaml:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(doc, tt.old) {
				t.Fatalf("test setup: %q not in the shipped file", tt.old)
			}
			_, err := Parse([]byte(strings.Replace(doc, tt.old, tt.new, 1)))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestParseMinimal(t *testing.T) {
	t.Parallel()
	w, err := Parse([]byte("name: m\narrivals_s: 10\nworkers: 2\njob_types:\n  - {name: a, producer: p, rate_per_s: 1, duration: {dist: exponential, mean_ms: 5}, static_tier: 0, class: short}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Seeds) != 1 || w.JobTypes[0].Size.Dist != "" {
		t.Fatalf("defaults: %+v", w)
	}
	for _, j := range w.Generate(1) {
		if j.Size != 0 {
			t.Fatalf("size hint without size_bytes: %+v", j)
		}
	}
}

func FuzzParse(f *testing.F) {
	base, err := os.ReadFile(shipped)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(base)
	f.Add([]byte("name: x\narrivals_s: 1\nworkers: 1\njob_types: []\n"))
	f.Add([]byte("{"))
	f.Add([]byte("a: &x [*x]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := Parse(data)
		if err != nil {
			if w != nil {
				t.Fatal("workload returned with an error")
			}
			return
		}
		// Whatever parses must be generable within its stated limits.
		if w.Workers < 1 || w.ArrivalsS <= 0 || len(w.JobTypes) == 0 {
			t.Fatalf("accepted an impossible workload: %+v", w)
		}
		expected := 0.0
		for _, jt := range w.JobTypes {
			expected += jt.RatePerS * w.ArrivalsS
		}
		if expected < 2000 && len(w.Events) == 0 {
			for _, j := range w.Generate(1) {
				if j.Duration <= 0 || j.Arrival < 0 {
					t.Fatalf("bad job %+v", j)
				}
			}
		}
	})
}

// A bimodal key mixes two lognormal modes; a Pareto key has the stated mean
// and a heavy tail; both scale with cost events like any other type.
func TestBimodalAndPareto(t *testing.T) {
	t.Parallel()
	w, err := Parse([]byte(`name: m
arrivals_s: 2000
workers: 1
job_types:
  - {name: b, producer: p, rate_per_s: 10, duration: {dist: bimodal, mean_ms: 10, sigma: 0.2, high_ms: 1000, high_share: 0.1}, static_tier: 0, class: short}
  - {name: h, producer: p, rate_per_s: 10, duration: {dist: pareto, mean_ms: 50, alpha: 2.5}, static_tier: 0, class: mid}
events:
  - {kind: cost, job_type: b, start_s: 1000, mean_ms: 20}
`))
	if err != nil {
		t.Fatal(err)
	}
	var early, late, high, hn int
	var earlyMS, lateMS, hMS, hMax float64
	for _, j := range w.Generate(1) {
		ms := float64(j.Duration) / 1e6
		switch {
		case j.Type == 1:
			hn++
			hMS += ms
			hMax = max(hMax, ms)
		case j.Arrival < 1000*time.Second:
			early++
			earlyMS += ms
			if ms > 300 {
				high++
			}
		default:
			late++
			lateMS += ms
		}
	}
	within := func(name string, got, want, tol float64) {
		t.Helper()
		if math.Abs(got-want) > tol*want {
			t.Errorf("%s = %.3f, want %.3f ±%.0f%%", name, got, want, tol*100)
		}
	}
	within("bimodal mean before the cost event", earlyMS/float64(early), 0.9*10+0.1*1000, 0.1)
	within("bimodal high share", float64(high)/float64(early), 0.1, 0.1)
	within("bimodal mean after doubling", lateMS/float64(late), 2*(0.9*10+0.1*1000), 0.1)
	within("pareto mean", hMS/float64(hn), 50, 0.1)
	if hMax < 10*50 {
		t.Errorf("pareto max %.0f ms over %d jobs: no heavy tail", hMax, hn)
	}
	if l := w.OfferedLoad(); math.Abs(l-(10*0.5*(0.109+0.218)+10*0.05)) > 0.05 {
		t.Errorf("offered load %.3f counts the bimodal mean wrong", l)
	}
}

func TestParseDistributionFields(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ dur, want string }{
		{"{dist: bimodal, mean_ms: 5, sigma: 0.1, high_share: 0.1}", "high_ms: missing required field"},
		{"{dist: bimodal, mean_ms: 5, sigma: 0.1, high_ms: 50, high_share: 2}", "high_share: must be between 0 and 1"},
		{"{dist: pareto, mean_ms: 5, alpha: 1}", "alpha: must be between 1.05"},
		{"{dist: lognormal, mean_ms: 5, sigma: 0.1, alpha: 2}", "alpha: only allowed with dist pareto"},
		{"{dist: fixed, mean_ms: 5, high_ms: 9}", "high_ms: only allowed with dist bimodal"},
	} {
		_, err := Parse([]byte("name: m\narrivals_s: 10\nworkers: 1\njob_types:\n  - {name: a, producer: p, rate_per_s: 1, duration: " + c.dur + ", static_tier: 0, class: short}\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.dur, err, c.want)
		}
	}
}

// Rate events that never overlap do not multiply into each other when the
// file's size is checked.
func TestSeparateBurstsWithinLimits(t *testing.T) {
	t.Parallel()
	doc := "name: m\narrivals_s: 300\nworkers: 1\njob_types:\n  - {name: a, producer: p, rate_per_s: 100, duration: {dist: fixed, mean_ms: 1}, static_tier: 0, class: short}\nevents:\n"
	for i := range 6 {
		doc += fmt.Sprintf("  - {kind: rate, job_type: a, start_s: %d, end_s: %d, multiplier: 20}\n", 10+40*i, 15+40*i)
	}
	if _, err := Parse([]byte(doc)); err != nil {
		t.Errorf("six separate bursts: %v", err)
	}
	doc += "  - {kind: rate, job_type: a, start_s: 0, end_s: 300, multiplier: 1000}\n"
	if _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), "would generate up to") {
		t.Errorf("overlapping multipliers: error %v, want the message limit", err)
	}
}
