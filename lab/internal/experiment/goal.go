package experiment

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/harbinger-mq/harbinger/internal/sim"
)

// GoalCell is the policy goal's figures for one scenario at one load.
type GoalCell struct {
	Scenario string          `json:"scenario"`
	Load     float64         `json:"load"`
	Goal     *sim.GoalResult `json:"goal"`
}

// GoalMatrix is the goal measured on every scenario at every load.
type GoalMatrix struct {
	Arm     string     `json:"arm"`
	Loads   []float64  `json:"loads"`
	Labels  []string   `json:"scenarios"`
	Cells   []GoalCell `json:"cells"`
	Command string     `json:"command"`
}

// RunGoalMatrix measures arm against the goal (sim.Goal) on each scenario
// rescaled to each load, with seeds, one line of progress per cell.
func RunGoalMatrix(scenarios []Scenario, loads []float64, seeds []uint64, arm sim.Arm, progress io.Writer) (*GoalMatrix, error) {
	m := &GoalMatrix{Arm: arm.Name, Loads: loads}
	for _, sc := range scenarios {
		m.Labels = append(m.Labels, sc.Label)
		for _, load := range loads {
			start := time.Now()
			src, err := sim.AtLoad(sc.Src, load)
			if err != nil {
				return nil, fmt.Errorf("experiment: %s at %g: %w", sc.Label, load, err)
			}
			g, err := sim.Goal(src, []sim.Arm{arm}, sim.Options{Seeds: seeds})
			if err != nil {
				return nil, fmt.Errorf("experiment: %s at %g: %w", sc.Label, load, err)
			}
			m.Cells = append(m.Cells, GoalCell{Scenario: sc.Label, Load: load, Goal: g})
			if progress != nil {
				p := g.Arms[0]
				fmt.Fprintf(progress, "goal: %-26s load %.2f: T1 %v T2 %v M %v (%.1f s)\n", sc.Label, load, p.T1, p.T2, p.M, time.Since(start).Seconds())
			}
		}
	}
	return m, nil
}

// cell returns the arm's figures in one cell.
func (m *GoalMatrix) cell(label string, load float64) (sim.Paired, *sim.GoalResult, bool) {
	for _, c := range m.Cells {
		if c.Scenario == label && c.Load == load {
			return c.Goal.Arms[0], c.Goal, true
		}
	}
	return sim.Paired{}, nil, false
}

// Passes counts the cells where the arm meets T1, T2, M and all three.
func (m *GoalMatrix) Passes() (t1, t2, mm, all, cells int) {
	for _, c := range m.Cells {
		p := c.Goal.Arms[0]
		cells++
		if p.T1 {
			t1++
		}
		if p.T2 {
			t2++
		}
		if p.M {
			mm++
		}
		if p.Pass() {
			all++
		}
	}
	return
}

// Markdown writes the matrix: the verdicts per cell, then each cell's
// figures, then the method.
func (m *GoalMatrix) Markdown(w io.Writer) {
	t1, t2, mm, all, n := m.Passes()
	fmt.Fprintf(w, "# The policy goal, cell by cell\n\n")
	fmt.Fprintf(w, "Arm `%s`: meets all three in **%d of %d** cells (T1 in %d, T2 in %d, M in %d).\n\n", m.Arm, all, n, t1, t2, mm)
	fmt.Fprintf(w, "Reproduce: `%s`\n\n", m.Command)
	fmt.Fprintf(w, "T1: at most %.0f%% of the long jobs later than %.2fx their FIFO latency, none later than %.2gx. "+
		"T2: all-message P99 at most %.2fx FIFO's. M: a mean cut of at least %.0f%% of R (the best key oracle setting meeting T1 and T2; "+
		"cells with R under %.0f%% are not judged on M).\n\n",
		sim.GoalLongShare*100, sim.GoalLongRatio, sim.GoalLongCap, sim.GoalP99Ratio, sim.GoalCapture*100, sim.GoalMinCut*100)
	var cols []string
	for _, l := range m.Loads {
		cols = append(cols, fmt.Sprintf("%.2f", l))
	}
	mdHeader(w, "scenario", cols, "---")
	for _, label := range m.Labels {
		fmt.Fprintf(w, "| %s |", label)
		for _, l := range m.Loads {
			p, _, ok := m.cell(label, l)
			if !ok {
				fmt.Fprintf(w, " |")
				continue
			}
			fmt.Fprintf(w, " %s |", verdictWord(p))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\n## Figures\n\n| scenario | load | long > 1.10x | long > 1.5x | worst | P99 | P99 by seed | mean cut | R | capture | verdict |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, label := range m.Labels {
		for _, l := range m.Loads {
			p, g, ok := m.cell(label, l)
			if !ok {
				continue
			}
			fmt.Fprintf(w, "| %s | %.2f | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", label, l, pctOf(p.LongOverRatio), pctOf(p.LongOverCap),
				xOf(p.LongWorst), xOf(p.P99Ratio), p.P99Spread(), pctOf(p.MeanCut), pctOf(g.R), pctOf(p.Capture), verdictWord(p))
		}
	}
	if len(m.Cells) > 0 {
		fmt.Fprintf(w, "\nMethod: %s. Each cell rescales the scenario's arrivals to the offered load, durations unchanged.\n", m.Cells[0].Goal.Method)
	}
}

func verdictWord(p sim.Paired) string {
	if p.Pass() {
		return "pass"
	}
	var miss []string
	if !p.T1 {
		miss = append(miss, "T1")
	}
	if !p.T2 {
		miss = append(miss, "T2")
	}
	if !p.M {
		miss = append(miss, "M")
	}
	return "**miss " + strings.Join(miss, ",") + "**"
}

func pctOf[T ~float64](v T) string {
	if math.IsNaN(float64(v)) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", float64(v)*100)
}

func xOf[T ~float64](v T) string {
	if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
		return "-"
	}
	return fmt.Sprintf("%.2fx", float64(v))
}

// JSON is the matrix as indented JSON, without the per-arm key oracle rows
// repeated (they are in each cell).
func (m *GoalMatrix) JSON() ([]byte, error) { return json.MarshalIndent(m, "", "  ") }

// GoalHeatMap draws the matrix as an SVG: a row per scenario, a column per
// load, each cell green where the arm meets the goal and shaded by how far
// it misses where it does not (the worst of its three margins).
func (m *GoalMatrix) GoalHeatMap() []byte {
	const cw, ch, left, top = 90, 26, 210, 50
	var b strings.Builder
	width, height := left+cw*len(m.Loads)+20, top+ch*len(m.Labels)+40
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`, width, height)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14">The policy goal per cell: %s (green: T1, T2 and M met)</text>`, 10, m.Arm)
	for i, l := range m.Loads {
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">load %.2f</text>`, left+cw*i+cw/2, top-8, l)
	}
	for r, label := range m.Labels {
		y := top + ch*r
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`, left-8, y+17, label)
		for i, l := range m.Loads {
			p, _, ok := m.cell(label, l)
			if !ok {
				continue
			}
			color, word := "#2e7d32", "pass"
			if !p.Pass() {
				color, word = "#c62828", strings.Trim(strings.TrimPrefix(verdictWord(p), "**miss "), "*")
			}
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s" stroke="#fff"/>`, left+cw*i, y, cw, ch, color)
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="#fff">%s</text>`, left+cw*i+cw/2, y+17, word)
		}
	}
	b.WriteString(`</svg>`)
	return []byte(b.String())
}
