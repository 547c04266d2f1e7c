package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/harbinger-mq/harbinger/internal/sim"
	"github.com/harbinger-mq/harbinger/lab/internal/experiment"
)

func init() {
	register("goal-draw", "judge arms against the policy goal on several sets of seeds: which verdicts the draw decides; writes results/goal-draw/", runGoalDraw)
}

// armList is a repeatable --arm flag.
type armList []string

func (a *armList) String() string     { return strings.Join(*a, " ") }
func (a *armList) Set(v string) error { *a = append(*a, v); return nil }

func runGoalDraw(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("goal-draw", "goal-draw [--arm predictive]... [--seed-sets '1-5;6-10;11-15;16-20'] [--loads 0.5,0.8,0.95,1.1,1.3] [--scenarios trace,bimodal] [--from DIR,DIR...] [--out results/goal-draw]", stderr)
	var arms armList
	fs.Var(&arms, "arm", "an arm to judge, with settings if any (sim's --arms syntax: predictive:guard=0.25); repeat for several (default: predictive)")
	setsFlag := fs.String("seed-sets", "1-5;6-10;11-15;16-20", "sets of seeds, separated by ';', each comma-separated seeds or ranges (1-5)")
	mf := addMatrixFlags(fs)
	from := fs.String("from", "", "comma-separated `DIRS` of finished goal runs (each holding the summary.json goal wrote) to compare instead of running arms")
	out := fs.String("out", "results/goal-draw", "directory to write report.md and draw.json into")
	if err := parse(fs, args); err != nil {
		return err
	}
	var ms []*experiment.GoalMatrix
	var command string
	if *from != "" {
		var clash []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name != "from" && f.Name != "out" {
				clash = append(clash, "--"+f.Name)
			}
		})
		if len(clash) > 0 {
			return fmt.Errorf("--from compares finished runs; %s would start new ones", strings.Join(clash, ", "))
		}
		for _, dir := range strings.Split(*from, ",") {
			m, err := readGoalSummary(filepath.Join(strings.TrimSpace(dir), "summary.json"))
			if err != nil {
				return err
			}
			ms = append(ms, m)
		}
		command = "go run ./cmd/harbinger-lab goal-draw --from " + *from
	} else {
		if len(arms) == 0 {
			arms = armList{"predictive"}
		}
		sets, err := parseSeedSets(*setsFlag)
		if err != nil {
			return err
		}
		loads, scenarios, w, err := mf.cells()
		if err != nil {
			return err
		}
		parsed := make([]sim.Arm, len(arms))
		for i, a := range arms {
			if parsed[i], err = sim.ParseArm(a, w.JobTypes); err != nil {
				return fmt.Errorf("--arm %s: %w", a, err)
			}
		}
		n, k := len(arms)*len(sets), 0
		for i, arm := range parsed {
			for _, seeds := range sets {
				k++
				start := time.Now()
				m, err := experiment.RunGoalMatrix(scenarios, loads, seeds, arm, nil)
				if err != nil {
					return err
				}
				_, _, _, all, cells := m.Passes()
				fmt.Fprintf(stderr, "goal-draw: %d of %d: %s on seeds %s meets %d of %d cells (%.0f s)\n",
					k, n, arms[i], experiment.SeedSetName(seeds), all, cells, time.Since(start).Seconds())
				ms = append(ms, m)
			}
		}
		var b strings.Builder
		b.WriteString("go run ./cmd/harbinger-lab goal-draw")
		for _, a := range arms {
			fmt.Fprintf(&b, " --arm '%s'", a)
		}
		fmt.Fprintf(&b, " --seed-sets '%s' --loads %s", *setsFlag, *mf.loads)
		if *mf.only != "" {
			fmt.Fprintf(&b, " --scenarios %s", *mf.only)
		}
		command = b.String()
	}
	d, err := experiment.NewDraw(ms)
	if err != nil {
		return err
	}
	d.Command = command
	var md strings.Builder
	d.Markdown(&md)
	js, err := d.JSON()
	if err != nil {
		return err
	}
	if err := writeFiles(*out, map[string][]byte{"report.md": []byte(md.String()), "draw.json": js}); err != nil {
		return err
	}
	for ai, a := range d.Arms {
		every, none := d.Steady(ai)
		fmt.Fprintf(stdout, "%s: met on every set in %d of %d cells, on none in %d, on some in %d\n", a, every, len(d.Cells), none, len(d.Cells)-every-none)
	}
	fmt.Fprintf(stdout, "one arm per cell meets every set in %d of %d cells; wrote %s\n", d.OneForAllCount(), len(d.Cells), *out)
	return nil
}

// readGoalSummary reads the summary.json a goal run wrote.
func readGoalSummary(path string) (*experiment.GoalMatrix, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m experiment.GoalMatrix
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(m.Cells) == 0 {
		return nil, fmt.Errorf("%s: no cells: not a goal run's summary", path)
	}
	return &m, nil
}

// parseSeedSets reads "1-5;6-10" or "1,2,3;7,9": sets separated by ';',
// each of seeds and ranges separated by ','.
func parseSeedSets(s string) ([][]uint64, error) {
	var sets [][]uint64
	for _, part := range strings.Split(s, ";") {
		var set []uint64
		for _, f := range strings.Split(part, ",") {
			f = strings.TrimSpace(f)
			lo, hi, isRange := strings.Cut(f, "-")
			a, err := strconv.ParseUint(lo, 10, 64)
			b := a
			if err == nil && isRange {
				b, err = strconv.ParseUint(hi, 10, 64)
			}
			if err != nil || b < a || b-a >= maxSeedsPerSet {
				return nil, fmt.Errorf("--seed-sets: %q is not a seed or a range of at most %d seeds (1-5)", f, maxSeedsPerSet)
			}
			for v := a; ; v++ {
				set = append(set, v)
				if v == b {
					break
				}
			}
		}
		if len(set) > maxSeedsPerSet {
			return nil, fmt.Errorf("--seed-sets: a set of %d seeds; at most %d", len(set), maxSeedsPerSet)
		}
		sets = append(sets, set)
	}
	if len(sets) < 2 {
		return nil, errors.New("--seed-sets: at least two sets, separated by ';', to compare")
	}
	return sets, nil
}

// maxSeedsPerSet bounds a set of seeds: each seed is a full simulation of
// every cell.
const maxSeedsPerSet = 1000
