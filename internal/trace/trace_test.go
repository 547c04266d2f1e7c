package trace

import (
	"bytes"
	"encoding/csv"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const shipped = "../../traces/azure-functions-2019"

// The repository ships a copy of the sample so replays work anywhere; it must
// never drift from the shared original.
func TestShippedSampleMatchesShared(t *testing.T) {
	t.Parallel()
	orig := filepath.Join("..", "..", "..", "shared", "traces", "azure-functions-2019")
	if _, err := os.Stat(orig); errors.Is(err, os.ErrNotExist) {
		t.Skip("the shared traces folder is not beside this checkout")
	}
	for _, name := range []string{"100_inv.csv", "100_run.csv", "LICENSE.invitro"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			want, err := os.ReadFile(filepath.Join(orig, name))
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(shipped, name))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("traces/azure-functions-2019/%s differs from the shared file; copy it again, never edit it", name)
			}
		})
	}
}

func TestLoadShipped(t *testing.T) {
	t.Parallel()
	tr := mustLoad(t, shipped, Options{})
	// The defaults: minutes 721-780 at 1/12 speed, so the hour replays in 300 s.
	if got, want := tr.Name(), "azure-functions-2019 minutes 721-780 x0.0833 load 0.95"; got != want {
		t.Errorf("Name = %q, want %q", got, want)
	}
	if got := tr.windowSeconds(); math.Abs(got-300) > 1e-9 {
		t.Errorf("window = %v s of virtual time, want 300", got)
	}
	if got := tr.Seeds(); !slices.Equal(got, []uint64{1, 2, 3, 4, 5}) {
		t.Errorf("Seeds = %v", got)
	}
	types := tr.Types()
	if tr.functions != 100 || tr.invOnly != 0 || tr.runOnly != 0 || len(types)+tr.idle != 100 {
		t.Errorf("functions %d, used %d, idle %d, inv only %d, run only %d", tr.functions, len(types), tr.idle, tr.invOnly, tr.runOnly)
	}
	// The invocation count, from an independent reading of the inv file.
	var jobs int64
	for _, counts := range readInvCounts(t, filepath.Join(shipped, "100_inv.csv")) {
		for _, n := range counts[DefaultStartMinute : DefaultStartMinute+DefaultMinutes] {
			jobs += int64(n)
		}
	}
	if jobs == 0 || tr.jobs != jobs {
		t.Errorf("%d invocations in the window, the file has %d", tr.jobs, jobs)
	}
	classes := map[string]int{}
	for _, jt := range types {
		classes[jt.Class]++
		if len(jt.Name) != 12 || len(jt.Producer) != 12 || jt.Duration.MeanMS <= 0 || jt.StaticTier < 0 || jt.StaticTier > 2 {
			t.Errorf("type %+v", jt)
		}
	}
	if classes[ClassExport] != exportCount(len(types)) || classes[ClassShort] == 0 || classes[ClassMid] == 0 {
		t.Errorf("classes %v of %d types", classes, len(types))
	}
	if w := tr.Workers(); w < 1 {
		t.Errorf("Workers = %d", w)
	}
	if l := tr.OfferedLoad(); l > 0.95 || l < 0.9 {
		t.Errorf("OfferedLoad = %.4f, want just under 0.95", l)
	}
	// Durations are compressed with arrivals, so replaying in real time
	// needs the same workers for the same load.
	real := mustLoad(t, shipped, Options{Compression: 1})
	if real.Workers() != tr.Workers() || math.Abs(real.OfferedLoad()-tr.OfferedLoad()) > 1e-9 {
		t.Errorf("uncompressed: %d workers, load %v; compressed: %d workers, load %v",
			real.Workers(), real.OfferedLoad(), tr.Workers(), tr.OfferedLoad())
	}
	d := tr.Describe()
	for _, want := range []string{"minutes 721-780 (60 min)", "x0.0833", strconv.FormatInt(jobs, 10) + " invocations",
		"300 s", strconv.Itoa(tr.Workers()) + " workers", "export", "short", "mid"} {
		if !strings.Contains(d, want) {
			t.Errorf("Describe lacks %q:\n%s", want, d)
		}
	}
}

// readInvCounts parses the inv file independently of the package: short
// hash -> minute -> count.
func readInvCounts(t *testing.T, path string) map[string][]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]int{}
	for _, r := range recs[1:] {
		counts := make([]int, dayMinutes+1)
		for m := 1; m <= dayMinutes; m++ {
			counts[m], err = strconv.Atoi(r[2+m])
			if err != nil {
				t.Fatal(err)
			}
		}
		out[r[0][:12]] = counts
	}
	return out
}

func TestGeneratedCountsMatchFile(t *testing.T) {
	t.Parallel()
	want := readInvCounts(t, filepath.Join(shipped, "100_inv.csv"))
	tests := []Options{
		{},
		{StartMinute: 1, Minutes: 5, Compression: 1},
		{StartMinute: 1431, Minutes: 10, Compression: 0.1},
		{StartMinute: 600, Minutes: 1, Compression: 2},
	}
	for _, opts := range tests {
		t.Run(strconv.Itoa(opts.StartMinute), func(t *testing.T) {
			t.Parallel()
			tr := mustLoad(t, shipped, opts)
			o := tr.opts
			minute := time.Duration(60 * o.Compression * float64(time.Second))
			types := tr.Types()
			got := map[string][]int{}
			for _, jt := range types {
				got[jt.Name] = make([]int, dayMinutes+1)
			}
			for _, j := range tr.Generate(7) {
				m := o.StartMinute + int(j.Arrival/minute)
				if m >= o.StartMinute+o.Minutes {
					t.Fatalf("job %d arrives at %v, after the window", j.Seq, j.Arrival)
				}
				got[types[j.Type].Name][m]++
			}
			for name, counts := range want {
				window := counts[o.StartMinute : o.StartMinute+o.Minutes]
				if got[name] == nil {
					if slices.ContainsFunc(window, func(n int) bool { return n > 0 }) {
						t.Errorf("%s is invoked in the window but has no type", name)
					}
					continue
				}
				if g := got[name][o.StartMinute : o.StartMinute+o.Minutes]; !slices.Equal(g, window) {
					t.Errorf("%s: generated %v, file %v", name, g, window)
				}
			}
		})
	}
}

func TestGenerateDeterministic(t *testing.T) {
	t.Parallel()
	tr := mustLoad(t, shipped, Options{})
	a, b := tr.Generate(3), tr.Generate(3)
	if !slices.Equal(a, b) {
		t.Fatal("Generate(3) differs between calls")
	}
	if slices.Equal(a, tr.Generate(4)) {
		t.Fatal("seeds 3 and 4 give identical jobs")
	}
	for i, j := range a {
		if j.Seq != i || j.Size != 0 || j.Duration < time.Microsecond || (i > 0 && j.Arrival < a[i-1].Arrival) {
			t.Fatalf("job %d = %+v", i, j)
		}
	}
}

// A function's jobs depend only on the seed and the function: not on the row
// order of the files, nor on which other functions are present.
func TestGenerateIndependentOfOtherFunctions(t *testing.T) {
	t.Parallel()
	inv, run := invSheet(baseFns...), runSheet(baseFns...)
	full := mustLoad(t, writeDir(t, inv.bytes(t), run.bytes(t)), Options{StartMinute: 1, Minutes: 3})

	reversed := func(s sheet) sheet {
		c := s.clone()
		slices.Reverse(c[1:])
		return c
	}
	shuffled := mustLoad(t, writeDir(t, reversed(inv).bytes(t), reversed(run).bytes(t)), Options{StartMinute: 1, Minutes: 3})
	if !slices.Equal(full.Generate(1), shuffled.Generate(1)) {
		t.Error("reordering the rows changed the jobs")
	}

	alone := mustLoad(t, writeDir(t, invSheet(baseFns[1]).bytes(t), runSheet(baseFns[1]).bytes(t)), Options{StartMinute: 1, Minutes: 3})
	var want []time.Duration
	for _, j := range full.Generate(1) {
		if full.types[j.Type].Name == short(baseFns[1].hash) {
			want = append(want, j.Arrival, j.Duration)
		}
	}
	var got []time.Duration
	for _, j := range alone.Generate(1) {
		got = append(got, j.Arrival, j.Duration)
	}
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("function's jobs alone %v, beside others %v", got, want)
	}
}

// Generated durations follow the function's percentile curve, compressed by
// the same factor as arrivals.
func TestDurationQuantiles(t *testing.T) {
	t.Parallel()
	c := [7]float64{0, 2, 10, 20, 40, 100, 200}
	counts := map[int]int{}
	for m := 1; m <= 5; m++ {
		counts[m] = 20_000
	}
	f := fn{hash: "synthetic", counts: counts, curve: c, mean: 30}
	dir := writeDir(t, invSheet(f).bytes(t), runSheet(f).bytes(t))
	for _, compression := range []float64{DefaultCompression, 1, 4} {
		t.Run(strconv.FormatFloat(compression, 'g', 4, 64), func(t *testing.T) {
			t.Parallel()
			tr := mustLoad(t, dir, Options{StartMinute: 1, Minutes: 5, Compression: compression})
			jobs := tr.Generate(11)
			if len(jobs) != 100_000 {
				t.Fatalf("%d jobs, want 100000", len(jobs))
			}
			ms := make([]float64, len(jobs))
			work := 0.0
			for i, j := range jobs {
				ms[i] = float64(j.Duration) / float64(time.Millisecond)
				work += j.Duration.Seconds()
			}
			slices.Sort(ms)
			if ms[0] < 0.001 {
				t.Errorf("shortest duration %v ms, want at least 1 µs", ms[0])
			}
			cv := curve(c)
			for _, q := range []float64{0.005, 0.01, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9, 0.99, 0.995} {
				got, want := ms[int(q*float64(len(ms)))], cv.at(q)*compression
				if math.Abs(got-want) > 0.03*want+0.05*compression {
					t.Errorf("quantile %.3f = %.4f ms, want %.4f (curve %.3f ms x%g)", q, got, want, cv.at(q), compression)
				}
			}
			if got, want := work/(float64(tr.Workers())*tr.windowSeconds()), tr.OfferedLoad(); math.Abs(got-want) > 0.01*want {
				t.Errorf("realised load %.4f, expected %.4f", got, want)
			}
		})
	}
}

func TestCurve(t *testing.T) {
	t.Parallel()
	c := curve{0, 2, 10, 20, 40, 100, 200}
	tests := []struct{ u, want float64 }{
		{0, 0}, {0.005, 1}, {0.01, 2}, {0.13, 6}, {0.5, 20}, {0.625, 30}, {0.99, 100}, {0.995, 150}, {1, 200},
	}
	for _, tt := range tests {
		if got := c.at(tt.u); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("at(%v) = %v, want %v", tt.u, got, tt.want)
		}
	}
	// 0.01*1 + 0.24*6 + 0.25*15 + 0.25*30 + 0.24*70 + 0.01*150
	if got, want := c.mean(), 0.01+1.44+3.75+7.5+16.8+1.5; math.Abs(got-want) > 1e-9 {
		t.Errorf("mean = %v, want %v", got, want)
	}
}

// Workers = ceil(offered work per second / Load). Arrivals and durations are
// compressed alike, so workers and load are the same at every compression.
func TestWorkersAndLoad(t *testing.T) {
	t.Parallel()
	flat := func(ms float64) [7]float64 { return [7]float64{ms, ms, ms, ms, ms, ms, ms} }
	every := func(n int) map[int]int {
		m := map[int]int{}
		for i := 1; i <= 10; i++ {
			m[i] = n
		}
		return m
	}
	// 1200 jobs of 1 s in 10 trace minutes: 2 busy workers.
	busy2 := []fn{{hash: "a", counts: every(120), curve: flat(1000), mean: 1000}}
	tests := []struct {
		name    string
		fns     []fn
		load    float64 // target
		workers int
		offered float64
	}{
		{"half load", busy2, 0.5, 4, 0.5},
		{"full load", busy2, 1, 2, 1},
		{"rounds up", busy2, 0.95, 3, 2.0 / 3},
		{"quarter load", busy2, 0.25, 8, 0.25},
		{"at least one", []fn{{hash: "a", counts: map[int]int{1: 1}, curve: flat(1), mean: 1}}, 0.95, 1, 0.001 / 600},
		// Average says 5 ms, but Generate draws from the curve: 1 s.
		{"curve mean, not Average", []fn{{hash: "a", counts: every(120), curve: flat(1000), mean: 5}}, 1, 2, 1},
		{"two functions", []fn{
			{hash: "a", counts: every(60), curve: flat(1000), mean: 1000}, // 1 busy worker
			{hash: "b", counts: every(600), curve: flat(200), mean: 200},  // 2
		}, 0.5, 6, 0.5},
	}
	for _, tt := range tests {
		dir := writeDir(t, invSheet(tt.fns...).bytes(t), runSheet(tt.fns...).bytes(t))
		for _, c := range []float64{0, 1, minCompression, 0.1, 7, maxCompression} {
			t.Run(tt.name+"/x"+strconv.FormatFloat(c, 'g', -1, 64), func(t *testing.T) {
				t.Parallel()
				tr := mustLoad(t, dir, Options{StartMinute: 1, Minutes: 10, Compression: c, Load: tt.load})
				if tr.Workers() != tt.workers || math.Abs(tr.OfferedLoad()-tt.offered) > 1e-9*tt.offered {
					t.Errorf("workers %d load %v, want %d and %v", tr.Workers(), tr.OfferedLoad(), tt.workers, tt.offered)
				}
			})
		}
	}
}

func TestClasses(t *testing.T) {
	t.Parallel()
	mk := func(hash string, medianMS, meanMS float64) fn {
		return fn{hash: hash, counts: map[int]int{1: 1}, curve: [7]float64{0, 0, 0, medianMS, medianMS, medianMS, medianMS}, mean: meanMS}
	}
	fns := []fn{
		mk("f1", 1, 1), mk("f2", 2, 2), mk("f3", 3, 3), mk("f4", 4, 4), mk("f5", 5, 5), mk("f6", 6, 6),
		mk("f7", 0.5, 900), // short median, longest mean: export wins
		{hash: "idle", counts: map[int]int{50: 1}, curve: [7]float64{1, 1, 1, 1, 1, 1, 1}, mean: 1},
	}
	inv, run := invSheet(fns...), runSheet(fns...)
	inv = append(inv, invSheet(mk("invonly", 1, 1))[1])
	run = append(run, runSheet(mk("runonly", 1, 1))[1])
	tr := mustLoad(t, writeDir(t, inv.bytes(t), run.bytes(t)), Options{StartMinute: 1, Minutes: 1})

	want := map[string]struct {
		tier  int
		class string
	}{
		"f7": {0, ClassExport}, "f1": {0, ClassShort}, "f2": {0, ClassShort},
		"f3": {1, ClassMid}, "f4": {1, ClassMid}, "f5": {2, ClassMid}, "f6": {2, ClassMid},
	}
	types := tr.Types()
	if len(types) != len(want) {
		t.Fatalf("%d types, want %d", len(types), len(want))
	}
	for _, jt := range types {
		w := want[jt.Name]
		if jt.StaticTier != w.tier || jt.Class != w.class || jt.Producer != "app-"+jt.Name {
			t.Errorf("%s: tier %d class %s producer %s, want %d %s", jt.Name, jt.StaticTier, jt.Class, jt.Producer, w.tier, w.class)
		}
	}
	if tr.idle != 1 || tr.invOnly != 1 || tr.runOnly != 1 {
		t.Errorf("idle %d inv only %d run only %d, want 1 each", tr.idle, tr.invOnly, tr.runOnly)
	}
	if d := tr.Describe(); !strings.Contains(d, "7 are used and 1 idle in the window; skipped: 1 without a run row, and 1 run rows") {
		t.Errorf("Describe: %s", d)
	}
}

func TestExportCount(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]int{1: 1, 19: 1, 20: 1, 21: 2, 48: 3, 100: 5} {
		if got := exportCount(n); got != want {
			t.Errorf("exportCount(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestShortNameCollision(t *testing.T) {
	t.Parallel()
	a := fn{hash: "0123456789abXXXX", counts: map[int]int{1: 1}, curve: [7]float64{1, 1, 1, 1, 1, 1, 1}, mean: 1}
	b := a
	b.hash = "0123456789abYYYY"
	inv, run := invSheet(a, b), runSheet(a, b)
	for _, s := range []sheet{inv, run} { // same app, so only the function tells them apart
		s.set(t, 2, colApp, "app")
		s.set(t, 3, colApp, "app")
	}
	tr := mustLoad(t, writeDir(t, inv.bytes(t), run.bytes(t)), Options{StartMinute: 1, Minutes: 1})
	var names []string
	for _, jt := range tr.Types() {
		names = append(names, jt.Producer+" "+jt.Name)
	}
	if want := []string{"app " + a.hash, "app " + b.hash}; !slices.Equal(names, want) {
		t.Errorf("names %v, want %v", names, want)
	}
}

func TestNameFallsBackToPrefix(t *testing.T) {
	t.Parallel()
	if got := sourceName(".", filepath.Join(".", "100_inv.csv")); got != "100" {
		t.Errorf("sourceName = %q", got)
	}
}

// Window replays another hour of the same trace with the same options.
func TestWindow(t *testing.T) {
	t.Parallel()
	tr := mustLoad(t, shipped, Options{Load: 1.2, Compression: 0.1})
	w, err := tr.Window(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	o := w.Options()
	if o.StartMinute != 1 || o.Minutes != DefaultMinutes || o.Load != 1.2 || o.Compression != 0.1 {
		t.Errorf("window options %+v", o)
	}
	if got, want := w.Name(), "azure-functions-2019 minutes 1-60 x0.1 load 1.2"; got != want {
		t.Errorf("Name = %q, want %q", got, want)
	}
	if _, err := tr.Window(1400, 60); err == nil {
		t.Error("a window past the end of the day loaded")
	}
}
