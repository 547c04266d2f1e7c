package sim

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/harbinger-mq/harbinger/internal/workload"
)

func loadProductionFlow(t *testing.T) Source {
	t.Helper()
	w, err := workload.Load(filepath.Join("..", "..", "workloads", "production-flow.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return FromWorkload(w)
}

func TestAtLoad(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(filepath.Join("..", "..", "workloads", "production-flow.yaml")); err != nil {
		t.Skip("workload file not present")
	}
	src := loadProductionFlow(t)
	seed := src.Seeds()[0]
	orig := src.Generate(seed)
	for _, target := range []float64{0.5, 0.8, 0.95, 1.1} {
		scaled, err := AtLoad(src, target)
		if err != nil {
			t.Fatal(err)
		}
		if scaled.Workers() != src.Workers() {
			t.Errorf("load %v: workers %d, want %d", target, scaled.Workers(), src.Workers())
		}
		if want := src.Name() + " at load " + strconv.FormatFloat(target, 'g', -1, 64); scaled.Name() != want {
			t.Errorf("load %v: name %q", target, scaled.Name())
		}
		jobs := scaled.Generate(seed)
		got, err := OfferedLoad(jobs, scaled.Workers())
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(got/target-1) > 0.02 {
			t.Errorf("load %v: offered load %.4f, more than 2%% off", target, got)
		}
		if len(jobs) != len(orig) {
			t.Fatalf("load %v: %d jobs, want %d", target, len(jobs), len(orig))
		}
		for i := range jobs {
			if i > 0 && jobs[i].Arrival < jobs[i-1].Arrival {
				t.Fatalf("load %v: arrival %d (%v) before arrival %d (%v)", target, i, jobs[i].Arrival, i-1, jobs[i-1].Arrival)
			}
			if jobs[i].Duration != orig[i].Duration || jobs[i].Type != orig[i].Type || jobs[i].Size != orig[i].Size {
				t.Fatalf("load %v: job %d changed beyond its arrival: %+v, was %+v", target, i, jobs[i], orig[i])
			}
		}
		// The other seeds differ only in their random draws, so they land near the target too.
		for _, s := range src.Seeds()[1:] {
			l, err := OfferedLoad(scaled.Generate(s), scaled.Workers())
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(l/target-1) > 0.1 {
				t.Errorf("load %v seed %d: offered load %.4f", target, s, l)
			}
		}
	}
}

func TestAtLoadRejects(t *testing.T) {
	t.Parallel()
	src := FromWorkload(&workload.Workload{Name: "empty", Workers: 1, Seeds: []uint64{1}})
	for _, target := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if _, err := AtLoad(src, target); err == nil {
			t.Errorf("AtLoad(%v) accepted", target)
		}
	}
	if _, err := AtLoad(src, 0.9); err == nil {
		t.Error("AtLoad on a source without jobs accepted")
	}
}
