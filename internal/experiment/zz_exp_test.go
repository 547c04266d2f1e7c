package experiment

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/harbinger-mq/harbinger/internal/sim"
	"github.com/harbinger-mq/harbinger/internal/trace"
	"github.com/harbinger-mq/harbinger/internal/workload"
)

func TestZZExperiment(t *testing.T) {
	arms := strings.Split(os.Getenv("EXP_ARMS"), ",")
	if arms[0] == "" {
		t.Skip("EXP_ARMS")
	}
	matrixArms = append([]string{ArmFIFO, ArmOracleSJF, ArmDefault}, arms...)
	w, err := workload.Load("../../workloads/production-flow.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trace.Load("../../traces/azure-functions-2019", trace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	scs, err := DefaultMatrix([]Scenario{{Label: w.Name, Src: sim.FromWorkload(w)}, {Label: "trace", Src: tr}})
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Scenarios: scs, Seeds: seedsFromEnv(), Progress: os.Stderr}.WithDefaults()
	m, err := runMatrix(scs, c.MatrixLoads, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range matrixArms[2:] {
		pass, cells := m.Passes(a)
		var exp, p99, mean int
		for si := range m.Scenarios {
			for _, l := range m.Loads {
				v := m.Verdict(si, l, a)
				if v.ExportOK {
					exp++
				}
				if v.P99OK {
					p99++
				}
				if v.MeanOK {
					mean++
				}
			}
		}
		fmt.Printf("%-10s pass %d/%d  export %d  p99 %d  mean %d\n", a, pass, cells, exp, p99, mean)
	}
	for si, sc := range m.Scenarios {
		for _, l := range m.Loads {
			line := fmt.Sprintf("%-18s %4.2f", sc.Label, l)
			for _, a := range matrixArms[2:] {
				v := m.Verdict(si, l, a)
				p := " "
				if v.Pass {
					p = "P"
				}
				line += fmt.Sprintf(" | %s e%.3f p%.3f m%.3f c%.0f%%", p, v.Export, v.P99, v.Mean, 100*v.Captured)
			}
			fmt.Println(line)
		}
	}
}

func seedsFromEnv() []uint64 {
	if os.Getenv("EXP_HOLDOUT") != "" {
		return []uint64{6, 7, 8, 9, 10}
	}
	return []uint64{1, 2, 3, 4, 5}
}
