package experiment

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/harbinger-mq/harbinger/internal/report"
	"github.com/harbinger-mq/harbinger/internal/sim"
)

// drawRun builds a goal run of arm on seeds: verdicts maps a cell
// ("scenario@load") to "pass" or the goal parts it misses, r to R.
func drawRun(arm string, seeds []uint64, cells []string, verdicts map[string]string, r map[string]float64) *GoalMatrix {
	m := &GoalMatrix{Arm: arm}
	for _, c := range cells {
		sc, load, _ := strings.Cut(c, "@")
		v := verdicts[c]
		p := sim.Paired{Arm: arm, T1: !strings.Contains(v, "T1"), T2: !strings.Contains(v, "T2"), M: !strings.Contains(v, "M")}
		l := map[string]float64{"0.8": 0.8, "1.1": 1.1}[load]
		m.Cells = append(m.Cells, GoalCell{Scenario: sc, Load: l, Goal: &sim.GoalResult{Seeds: seeds, R: report.Num(r[c]), Arms: []sim.Paired{p}}})
	}
	return m
}

// The draw's counts, worked by hand: two arms, two sets of seeds, three
// cells.
//
//	cell        tight (set A, set B)  loose (A, B)   R (A, B)
//	flow@0.8    P P                   P P            0.60 0.62
//	bursts@1.1  P .                   . P            0.20 0.45
//	sized@1.1   . .                   P .            0.30 0.30
//
// tight: met 2 and 1, on every set 1, on none 1. loose: 2 and 2, every 1,
// none 0. With hindsight per set: 3 (A) and 2 (B). One arm for both sets:
// only flow. R moves 25 points in bursts, under DrawRMove elsewhere.
func TestDrawByHand(t *testing.T) {
	cells := []string{"flow@0.8", "bursts@1.1", "sized@1.1"}
	a, b := []uint64{1, 2, 3, 4, 5}, []uint64{6, 7, 8, 9, 10}
	rA := map[string]float64{"flow@0.8": 0.60, "bursts@1.1": 0.20, "sized@1.1": 0.30}
	rB := map[string]float64{"flow@0.8": 0.62, "bursts@1.1": 0.45, "sized@1.1": 0.30}
	runs := []*GoalMatrix{
		drawRun("tight", a, cells, map[string]string{"sized@1.1": "M"}, rA),
		drawRun("loose", b, cells, map[string]string{"sized@1.1": "T1"}, rB),
		drawRun("tight", b, cells, map[string]string{"bursts@1.1": "M", "sized@1.1": "T1,M"}, rB),
		drawRun("loose", a, cells, map[string]string{"bursts@1.1": "T2"}, rA),
	}
	d, err := NewDraw(runs)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(d.Arms, " ") + " | " + strings.Join(d.Sets, " "); got != "tight loose | 1-5 6-10" {
		t.Fatalf("arms and sets: %s", got)
	}
	check := func(what string, got, want any) {
		t.Helper()
		if g, w := strings.TrimSpace(strings.ReplaceAll(jsonOf(t, got), " ", "")), jsonOf(t, want); g != w {
			t.Errorf("%s: %s, want %s", what, g, w)
		}
	}
	check("tight met", d.Met(0), []int{2, 1})
	check("loose met", d.Met(1), []int{2, 2})
	e, n := d.Steady(0)
	check("tight steady", []int{e, n}, []int{1, 1})
	e, n = d.Steady(1)
	check("loose steady", []int{e, n}, []int{1, 0})
	check("hindsight", d.Hindsight(), []int{3, 2})
	var one []string
	for _, c := range d.Cells {
		if d.OneForAll(c) {
			one = append(one, c.Scenario)
		}
	}
	check("one arm for every set", one, []string{"flow"})
	lo, hi := d.Cells[1].RRange()
	if lo != 0.20 || hi != 0.45 {
		t.Errorf("bursts' R from %v to %v, want 0.2 to 0.45", lo, hi)
	}

	var md strings.Builder
	d.Markdown(&md)
	for _, want := range []string{
		"| `tight` | 2 | 1 | 1 | 1 | 1 |",
		"| `loose` | 2 | 2 | 1 | 0 | 2 |",
		"| **the best arm per cell and per set, with hindsight** | 3 | 2 | 1 (one arm per cell for every set) | | |",
		"2 of 3. Each entry",
		"| bursts at 1.10 | P. | .P |",
		"| sized at 1.10 | .. | P. |",
		"1 of 3 cells move by 10 points or more",
		"| bursts at 1.10 | 20.0% | 45.0% |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, md.String())
		}
	}
	if strings.Contains(md.String(), "| flow at 0.80 | P") {
		t.Errorf("report lists flow, which one arm meets on every set:\n%s", md.String())
	}

	// The draw marshals and reads back as it was.
	data, err := d.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Draw
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if jsonOf(t, back) != jsonOf(t, *d) {
		t.Errorf("draw read back differs:\n%s\n%s", jsonOf(t, back), jsonOf(t, *d))
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Runs that cannot be compared are refused, each with what is wrong.
func TestDrawRefuses(t *testing.T) {
	cells := []string{"flow@0.8", "bursts@1.1"}
	a, b := []uint64{1, 2, 3}, []uint64{4, 5, 6}
	r := map[string]float64{"flow@0.8": 0.5, "bursts@1.1": 0.2}
	ok := func(arm string, seeds []uint64) *GoalMatrix { return drawRun(arm, seeds, cells, nil, r) }
	mixed := ok("x", a)
	mixed.Cells[1].Goal.Seeds = b
	otherR := drawRun("y", a, cells, nil, map[string]float64{"flow@0.8": 0.5, "bursts@1.1": 0.3})
	for _, tc := range []struct {
		name string
		runs []*GoalMatrix
		want string
	}{
		{"none", nil, "no goal runs"},
		{"empty run", []*GoalMatrix{{Arm: "x"}}, "has no cells"},
		{"twice", []*GoalMatrix{ok("x", a), ok("x", a)}, "given twice"},
		{"missing set", []*GoalMatrix{ok("x", a), ok("x", b), ok("y", a)}, "arm y has no run on seeds 4-6"},
		{"mixed seeds", []*GoalMatrix{mixed}, "different seeds"},
		{"more cells", []*GoalMatrix{ok("x", a), drawRun("x", b, append([]string{"drift@0.8"}, cells...), nil, r)}, "the same cells"},
		{"missing cell", []*GoalMatrix{drawRun("x", a, cells[:1], nil, r), drawRun("x", b, cells[1:], nil, r)}, "no cell flow at 0.8"},
		{"another build", []*GoalMatrix{ok("x", a), otherR}, "different builds"},
	} {
		_, err := NewDraw(tc.runs)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

func TestSeedSetName(t *testing.T) {
	for _, tc := range []struct {
		seeds []uint64
		want  string
	}{
		{[]uint64{1, 2, 3, 4, 5}, "1-5"},
		{[]uint64{6, 7, 8, 9, 10}, "6-10"},
		{[]uint64{1, 3, 8}, "1,3,8"},
		{[]uint64{4, 5}, "4,5"},
		{[]uint64{7}, "7"},
		{[]uint64{3, 2, 1}, "3,2,1"},
	} {
		if got := SeedSetName(tc.seeds); got != tc.want {
			t.Errorf("SeedSetName(%v) = %q, want %q", tc.seeds, got, tc.want)
		}
	}
}
