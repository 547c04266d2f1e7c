package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/harbinger-mq/harbinger/internal/sched"
	"github.com/harbinger-mq/harbinger/internal/sim"
)

func TestPolicyFlagsApply(t *testing.T) {
	t.Parallel()
	arms := func() []sim.Arm {
		fifo, _ := sim.ArmByName("fifo", nil)
		pred, _ := sim.ArmByName("predictive", nil)
		return []sim.Arm{fifo, pred}
	}
	a := arms()
	p := policyFlags{stretch: "-0.5", othersStretch: "1"}
	if err := p.apply(a); err != nil {
		t.Fatal(err)
	}
	if a[0].Options.Stretch != nil || a[0].Options.OthersStretch != nil {
		t.Error("fifo arm got bound settings")
	}
	if s, o := a[1].Options.Stretch, a[1].Options.OthersStretch; s == nil || *s != -0.5 || o == nil || *o != 1 {
		t.Errorf("predictive arm stretch %v, others %v; want -0.5 and 1", s, o)
	}
	for _, bad := range []policyFlags{{stretch: "x"}, {othersStretch: "NaN"}, {othersStretch: "off"}} {
		err := bad.apply(arms())
		if err == nil || !strings.Contains(err.Error(), "is not a number") {
			t.Errorf("apply(%+v) = %v, want a not-a-number error", bad, err)
		}
	}
}

// The learning-policy flags state the defaults the scheduler really uses:
// --stretch said -0.25 and --long-share 0.2, the bounded policy's values
// before its guard, long after sched had moved to -0.05 and 0.01.
func TestSimHelpStatesPolicyDefaults(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	var p policyFlags
	p.register(fs)
	for name, want := range map[string]string{
		"stretch":    fmt.Sprintf("(default %g)", sched.DefaultStretch),
		"long-share": fmt.Sprintf("(default %g;", sched.DefaultLongShare),
		"age-after":  fmt.Sprintf("(default %v)", sched.DefaultAgeAfter),
	} {
		if u := fs.Lookup(name).Usage; !strings.Contains(u, want) {
			t.Errorf("--%s usage %q lacks %q", name, u, want)
		}
	}
}

// --tiers sets the learning arms' tiers and leaves the one-level arms
// alone: oracle-sjf is the fixed reference the matrix measures against,
// and a fourth tier would make it something else.
func TestTiersFlagKeepsOneLevelArms(t *testing.T) {
	t.Parallel()
	var arms []sim.Arm
	for _, name := range []string{"predictive", "strict-aging", "sjf", "oracle-sjf"} {
		a, err := sim.ArmByName(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		arms = append(arms, a)
	}
	if err := (&policyFlags{tiers: 4}).apply(arms); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{4, 4, 1, 1} {
		if got := arms[i].Options.Tiers; got != want {
			t.Errorf("%s: %d tiers after --tiers 4, want %d", arms[i].Name, got, want)
		}
	}
}

// --overhead charges every message outside its handler: the same FIFO run
// gets slower, the method line says so, and a negative one is refused.
func TestSimOverheadFlag(t *testing.T) {
	t.Parallel()
	run := func(args ...string) (string, error) {
		var out, errOut strings.Builder
		err := runSim(context.Background(), append([]string{"--arms", "fifo", "--seeds", "1"}, args...), &out, &errOut)
		return out.String(), err
	}
	mean := func(out string) float64 {
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "fifo" {
				v, err := strconv.ParseFloat(f[1], 64)
				if err != nil {
					t.Fatalf("fifo row %q: %v", line, err)
				}
				return v
			}
		}
		t.Fatalf("no fifo row in %q", out)
		return 0
	}
	ideal, err := run()
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := run("--overhead", "2ms")
	if err != nil {
		t.Fatal(err)
	}
	if a, b := mean(ideal), mean(loaded); !(b > a) {
		t.Errorf("FIFO mean %v s with a 2 ms overhead, %v s without", b, a)
	}
	if !strings.Contains(loaded, "costs its worker 2ms before the handler starts") || strings.Contains(ideal, "before the handler starts") {
		t.Errorf("the method line does not say when there is an overhead:\n%s", loaded)
	}
	if _, err := run("--overhead", "-1ms"); err == nil || !strings.Contains(err.Error(), "--overhead cannot be negative") {
		t.Errorf("a negative overhead: %v", err)
	}
}

// An arm's settings are comma-separated like the arms themselves: the
// documented --arms 'predictive,predictive:guard=0.25,overtake=0.1' is two
// arms, the second with both settings.
func TestSplitArmsKeepsSettingsTogether(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"fifo,predictive", []string{"fifo", "predictive"}},
		{"predictive,predictive:guard=0.25,overtake=0.1", []string{"predictive", "predictive:guard=0.25,overtake=0.1"}},
		{"predictive:tail=0, guardmin=0.2 ,fifo,key-oracle:guard=1", []string{"predictive:tail=0,guardmin=0.2", "fifo", "key-oracle:guard=1"}},
		{"predictive:guard=0.25,overtake=0.1+fair,fifo", []string{"predictive:guard=0.25,overtake=0.1+fair", "fifo"}},
		// A stray setting with no arm before it stays an item, and is refused by ParseArm.
		{"guard=0.25,fifo", []string{"guard=0.25", "fifo"}},
	} {
		if got := splitArms(c.in); !slices.Equal(got, c.want) {
			t.Errorf("splitArms(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// sim --goal shows each seed's own P99 ratio beside the pooled one: in the
// JSON one per seed, in the table their lowest and highest, and nothing
// for a single seed.
func TestSimGoalShowsEachSeedsP99(t *testing.T) {
	t.Parallel()
	run := func(args ...string) string {
		t.Helper()
		var out strings.Builder
		if err := runSim(context.Background(), append([]string{"--goal", "--at-load", "1.1", "--arms", "predictive"}, args...), &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	var g struct {
		Arms []struct {
			P99   float64   `json:"p99_ratio"`
			Seeds []float64 `json:"p99_ratio_by_seed"`
		} `json:"arms"`
	}
	if err := json.Unmarshal([]byte(run("--seeds", "1,2", "--json")), &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Arms) != 1 || len(g.Arms[0].Seeds) != 2 {
		t.Fatalf("goal JSON arms %+v, want one with two seeds' P99", g.Arms)
	}
	lo, hi := slices.Min(g.Arms[0].Seeds), slices.Max(g.Arms[0].Seeds)
	if !(lo > 0) || !(hi < 10) {
		t.Fatalf("seeds' P99 ratios %v", g.Arms[0].Seeds)
	}
	row := func(out string) string {
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "predictive ") {
				return line
			}
		}
		t.Fatalf("no predictive row in:\n%s", out)
		return ""
	}
	if want, got := fmt.Sprintf(" %.2f-%.2fx ", lo, hi), row(run("--seeds", "1,2")); !strings.Contains(got, want) {
		t.Errorf("table row %q lacks the seeds' spread %q", got, want)
	}
	if f := strings.Fields(row(run("--seeds", "1"))); len(f) < 6 || f[5] != "-" {
		t.Errorf("one seed: row fields %q, want - for the spread", f)
	}
}
