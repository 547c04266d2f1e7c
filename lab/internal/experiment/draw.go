package experiment

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/harbinger-mq/harbinger/internal/sim"
)

// Draw is how the goal's verdicts move with the seeds: several arms, each
// judged on the same cells with several sets of seeds. A verdict that
// holds on one set and not on another was decided by the draw, not by the
// rule; a cell where no arm holds on every set has no rule in the family
// that a cell's verdict alone could single out.
type Draw struct {
	Arms  []string    `json:"arms"`
	Sets  []string    `json:"seed_sets"`
	Cells []DrawCell  `json:"cells"`
	Goal  goalSummary `json:"goal"`
	// Command reproduces the draw; the caller sets it.
	Command string `json:"command,omitempty"`
}

// DrawCell is one cell's verdicts, Pass[arm][set], and the reference R
// of the goal's M on each set of seeds.
type DrawCell struct {
	Scenario string    `json:"scenario"`
	Load     float64   `json:"load"`
	Pass     [][]bool  `json:"pass"`
	R        []float64 `json:"r"`
}

// goalSummary is the goal's thresholds, as the report states them.
type goalSummary struct {
	LongShare float64 `json:"long_share"`
	LongRatio float64 `json:"long_ratio"`
	LongCap   float64 `json:"long_cap"`
	P99Ratio  float64 `json:"p99_ratio"`
	Capture   float64 `json:"capture"`
	MinCut    float64 `json:"min_cut"`
}

// NewDraw gathers matrices of the same cells into a Draw. Every arm must
// have been judged on every set of seeds exactly once, over the same
// cells, and the runs must agree on R, which depends only on the cell and
// the seeds: runs of different builds are refused.
func NewDraw(ms []*GoalMatrix) (*Draw, error) {
	if len(ms) == 0 {
		return nil, fmt.Errorf("experiment: no goal runs to compare")
	}
	d := &Draw{Goal: goalSummary{sim.GoalLongShare, sim.GoalLongRatio, sim.GoalLongCap, sim.GoalP99Ratio, sim.GoalCapture, sim.GoalMinCut}}
	type key struct{ arm, set string }
	runs := map[key]*GoalMatrix{}
	for i, m := range ms {
		if len(m.Cells) == 0 {
			return nil, fmt.Errorf("experiment: goal run %d (%s) has no cells", i+1, m.Arm)
		}
		set, err := seedSetOf(m)
		if err != nil {
			return nil, fmt.Errorf("experiment: goal run %d (%s): %w", i+1, m.Arm, err)
		}
		k := key{m.Arm, set}
		if runs[k] != nil {
			return nil, fmt.Errorf("experiment: arm %s on seeds %s is given twice", m.Arm, set)
		}
		runs[k] = m
		if !slices.Contains(d.Arms, m.Arm) {
			d.Arms = append(d.Arms, m.Arm)
		}
		if !slices.Contains(d.Sets, set) {
			d.Sets = append(d.Sets, set)
		}
	}
	for _, a := range d.Arms {
		for _, s := range d.Sets {
			if runs[key{a, s}] == nil {
				return nil, fmt.Errorf("experiment: arm %s has no run on seeds %s: every arm needs every set", a, s)
			}
		}
	}
	first := runs[key{d.Arms[0], d.Sets[0]}]
	for _, c := range first.Cells {
		dc := DrawCell{Scenario: c.Scenario, Load: c.Load, Pass: make([][]bool, len(d.Arms)), R: make([]float64, len(d.Sets))}
		for ai, a := range d.Arms {
			dc.Pass[ai] = make([]bool, len(d.Sets))
			for si, s := range d.Sets {
				m := runs[key{a, s}]
				p, g, ok := m.cell(c.Scenario, c.Load)
				if !ok {
					return nil, fmt.Errorf("experiment: arm %s on seeds %s has no cell %s at %g", a, s, c.Scenario, c.Load)
				}
				dc.Pass[ai][si] = p.Pass()
				r := float64(g.R)
				if ai == 0 {
					dc.R[si] = r
				} else if !sameR(dc.R[si], r) {
					return nil, fmt.Errorf("experiment: %s at %g on seeds %s: R is %.4f in the run of %s and %.4f in that of %s: runs of different builds?",
						c.Scenario, c.Load, s, dc.R[si], d.Arms[0], r, a)
				}
			}
		}
		d.Cells = append(d.Cells, dc)
	}
	for _, m := range runs {
		if len(m.Cells) != len(first.Cells) {
			return nil, fmt.Errorf("experiment: arm %s has %d cells, arm %s %d: every run needs the same cells", m.Arm, len(m.Cells), first.Arm, len(first.Cells))
		}
	}
	return d, nil
}

func sameR(a, b float64) bool {
	return a == b || (math.IsNaN(a) && math.IsNaN(b)) || math.Abs(a-b) < 1e-9
}

// seedSetOf names the seeds every cell of m was run with.
func seedSetOf(m *GoalMatrix) (string, error) {
	var set string
	for i, c := range m.Cells {
		if c.Goal == nil {
			return "", fmt.Errorf("cell %s at %g has no figures", c.Scenario, c.Load)
		}
		s := SeedSetName(c.Goal.Seeds)
		if i == 0 {
			set = s
		} else if s != set {
			return "", fmt.Errorf("cells ran on different seeds (%s and %s)", set, s)
		}
	}
	return set, nil
}

// SeedSetName writes seeds compactly: "1-5" for a run of consecutive
// seeds, "1,3,8" otherwise.
func SeedSetName(seeds []uint64) string {
	if len(seeds) > 2 {
		run := true
		for i := 1; i < len(seeds); i++ {
			run = run && seeds[i] == seeds[i-1]+1
		}
		if run {
			return fmt.Sprintf("%d-%d", seeds[0], seeds[len(seeds)-1])
		}
	}
	parts := make([]string, len(seeds))
	for i, s := range seeds {
		parts[i] = strconv.FormatUint(s, 10)
	}
	return strings.Join(parts, ",")
}

// Met counts the cells arm ai meets on each set of seeds.
func (d *Draw) Met(ai int) []int {
	n := make([]int, len(d.Sets))
	for _, c := range d.Cells {
		for si, ok := range c.Pass[ai] {
			if ok {
				n[si]++
			}
		}
	}
	return n
}

// Steady counts the cells arm ai meets on every set and on none.
func (d *Draw) Steady(ai int) (every, none int) {
	for _, c := range d.Cells {
		switch n := count(c.Pass[ai]); n {
		case len(d.Sets):
			every++
		case 0:
			none++
		}
	}
	return every, none
}

// Hindsight counts, per set of seeds, the cells some arm meets on it: what
// a choice of arm per cell and per draw would reach.
func (d *Draw) Hindsight() []int {
	n := make([]int, len(d.Sets))
	for _, c := range d.Cells {
		for si := range d.Sets {
			for ai := range d.Arms {
				if c.Pass[ai][si] {
					n[si]++
					break
				}
			}
		}
	}
	return n
}

// OneForAll reports whether some arm meets cell c on every set of seeds:
// whether a choice of arm per cell, made once for every draw, meets it.
func (d *Draw) OneForAll(c DrawCell) bool {
	for ai := range d.Arms {
		if count(c.Pass[ai]) == len(d.Sets) {
			return true
		}
	}
	return false
}

// OneForAllCount counts the cells OneForAll holds for.
func (d *Draw) OneForAllCount() int {
	n := 0
	for _, c := range d.Cells {
		if d.OneForAll(c) {
			n++
		}
	}
	return n
}

// RRange is the lowest and highest R of a cell across the sets of seeds.
func (c DrawCell) RRange() (lo, hi float64) {
	return slices.Min(c.R), slices.Max(c.R)
}

func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// DrawRMove is how far R must move between sets of seeds, in points of
// mean cut, for the report to list the cell.
const DrawRMove = 0.10

// Markdown writes the draw: each arm's count per set and how many of its
// verdicts hold on every set, what a choice per cell would reach, the
// cells no arm holds on every set, and the cells whose R moves.
func (d *Draw) Markdown(w io.Writer) {
	fmt.Fprintf(w, "# How the goal's verdicts move with the seeds\n\n")
	fmt.Fprintf(w, "%d arms, each judged on the same %d cells with %d sets of seeds (%s).\n\n", len(d.Arms), len(d.Cells), len(d.Sets), strings.Join(d.Sets, "; "))
	if d.Command != "" {
		fmt.Fprintf(w, "Reproduce: `%s`\n\n", d.Command)
	}
	var cols []string
	for _, s := range d.Sets {
		cols = append(cols, "seeds "+s)
	}
	mdHeader(w, "arm", append(cols, "met on every set", "on none", "on some, not all"), "---:")
	for ai, a := range d.Arms {
		fmt.Fprintf(w, "| `%s` |", a)
		for _, n := range d.Met(ai) {
			fmt.Fprintf(w, " %d |", n)
		}
		every, none := d.Steady(ai)
		fmt.Fprintf(w, " %d | %d | %d |\n", every, none, len(d.Cells)-every-none)
	}
	one := d.OneForAllCount()
	fmt.Fprintf(w, "| **the best arm per cell and per set, with hindsight** |")
	for _, n := range d.Hindsight() {
		fmt.Fprintf(w, " %d |", n)
	}
	fmt.Fprintf(w, " %d (one arm per cell for every set) | | |\n\n", one)

	fmt.Fprintf(w, "## Cells no arm meets on every set\n\n%d of %d. Each entry is the arm's verdict on each set in order (P: met, .: missed).\n\n", len(d.Cells)-one, len(d.Cells))
	cols = cols[:0]
	for _, a := range d.Arms {
		cols = append(cols, "`"+a+"`")
	}
	mdHeader(w, "cell", cols, "---")
	for _, c := range d.Cells {
		if d.OneForAll(c) {
			continue
		}
		fmt.Fprintf(w, "| %s at %.2f |", c.Scenario, c.Load)
		for ai := range d.Arms {
			var b strings.Builder
			for _, ok := range c.Pass[ai] {
				b.WriteByte(".P"[boolInt(ok)])
			}
			fmt.Fprintf(w, " %s |", b.String())
		}
		fmt.Fprintln(w)
	}

	moved := slices.Clone(d.Cells)
	moved = slices.DeleteFunc(moved, func(c DrawCell) bool { lo, hi := c.RRange(); return !(hi-lo >= DrawRMove) })
	slices.SortStableFunc(moved, func(a, b DrawCell) int {
		alo, ahi := a.RRange()
		blo, bhi := b.RRange()
		return cmp.Compare(bhi-blo, ahi-alo)
	})
	fmt.Fprintf(w, "\n## Where the reference R moves\n\nR counts only the key oracle settings that meet T1 and T2 in the cell, so a setting that passes T2 on one draw and not on another moves R wholesale. %d of %d cells move by %.0f points or more:\n\n",
		len(moved), len(d.Cells), DrawRMove*100)
	if len(moved) > 0 {
		cols = cols[:0]
		for _, s := range d.Sets {
			cols = append(cols, "R, seeds "+s)
		}
		mdHeader(w, "cell", cols, "---:")
		for _, c := range moved {
			fmt.Fprintf(w, "| %s at %.2f |", c.Scenario, c.Load)
			for _, r := range c.R {
				fmt.Fprintf(w, " %s |", pctOf(r))
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintf(w, "\nMethod: each arm's verdicts come from `harbinger-lab goal` (the simulator, every arm on identical jobs, pooled over the set's seeds; "+
		"T1: at most %.0f%% of long jobs over %.2fx FIFO's latency and none over %.2gx; T2: P99 at most %.2fx FIFO's; M: at least %.0f%% of R, judged where R >= %.0f%%).\n",
		d.Goal.LongShare*100, d.Goal.LongRatio, d.Goal.LongCap, d.Goal.P99Ratio, d.Goal.Capture*100, d.Goal.MinCut*100)
}

// mdHeader writes a Markdown table's header: the first column left
// aligned, the others with align ("---" or "---:").
func mdHeader(w io.Writer, first string, cols []string, align string) {
	fmt.Fprintf(w, "| %s |", first)
	for _, c := range cols {
		fmt.Fprintf(w, " %s |", c)
	}
	fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat(align+"|", len(cols)))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// JSON is the draw as indented JSON.
func (d *Draw) JSON() ([]byte, error) { return json.MarshalIndent(d, "", "  ") }
