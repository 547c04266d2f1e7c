package experiment

import (
	"fmt"
	"io"
)

// CompareArms runs the default matrix (DefaultMatrix over scenarios, at
// its loads) for FIFO, the SJF oracle, the default policy and the named
// arms, then prints, for each arm after FIFO and the oracle, how many cells
// it passes and how many of the export, P99 and mean goals it meets, and
// then each cell's verdicts. It is the quick look at a candidate arm before
// it earns a place in the registered matrix (`harbinger-lab matrix`).
func CompareArms(w io.Writer, scenarios []Scenario, arms []string, seeds []uint64, progress io.Writer) error {
	names := append([]string{ArmFIFO, ArmOracleSJF, ArmDefault}, arms...)
	scs, err := DefaultMatrix(scenarios)
	if err != nil {
		return err
	}
	c := Config{Scenarios: scs, Seeds: seeds, Progress: progress}.WithDefaults()
	m, err := runMatrixArms(scs, c.MatrixLoads, c, names)
	if err != nil {
		return err
	}
	for _, a := range names[2:] {
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
		fmt.Fprintf(w, "%-10s pass %d/%d  export %d  p99 %d  mean %d\n", a, pass, cells, exp, p99, mean)
	}
	for si, sc := range m.Scenarios {
		for _, l := range m.Loads {
			line := fmt.Sprintf("%-18s %4.2f", sc.Label, l)
			for _, a := range names[2:] {
				v := m.Verdict(si, l, a)
				p := " "
				if v.Pass {
					p = "P"
				}
				line += fmt.Sprintf(" | %s e%.3f p%.3f m%.3f c%.0f%%", p, v.Export, v.P99, v.Mean, 100*v.Captured)
			}
			fmt.Fprintln(w, line)
		}
	}
	return nil
}
