package report

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	t.Parallel()
	s := time.Second
	recs := []Record{
		{Class: ClassShort, Sent: 0, Started: 0, Done: 1 * s},
		{Class: ClassShort, Sent: 1 * s, Started: 2 * s, Done: 4 * s},
		{Class: ClassExport, Sent: 2 * s, Started: 7 * s, Done: 10 * s},
		{Class: "mid", Sent: 3 * s, Started: 3 * s, Done: 5 * s},
	}
	r := Summarize(7, 5, recs)
	if r.Lost != 1 || r.Completed != 4 || r.Seed != 7 {
		t.Fatalf("counts: %+v", r)
	}
	// Latencies 1, 3, 8, 2: mean 3.5, short median (1+3)/2, export wait 5.
	if r.MeanS != 3.5 || r.ShortMedianS != 2 || r.ExportMaxWaitS != 5 {
		t.Fatalf("figures: %+v", r)
	}
	if got := float64(r.ThroughputPerS); math.Abs(got-0.4) > 1e-12 {
		t.Fatalf("throughput %v, want 4 / 10 s", got)
	}
	if p99 := float64(r.P99S); p99 < 7.8 || p99 > 8 {
		t.Fatalf("P99 %v", p99)
	}
	empty := Summarize(1, 3, nil)
	if empty.Lost != 3 || !math.IsNaN(float64(empty.MeanS)) {
		t.Fatalf("empty run: %+v", empty)
	}
}

func arm(means ...float64) *ArmResult {
	var per []SeedResult
	for i, m := range means {
		per = append(per, SeedResult{Seed: uint64(i + 1), MeanS: Num(m), P99S: Num(m * 4), ShortMedianS: Num(m / 10),
			ExportMaxWaitS: Num(m * 2), ThroughputPerS: 100, MAEms: Num(math.NaN()), TierAccuracy: Num(math.NaN())})
	}
	return Combine(per)
}

// A primary arm at exactly 40% of the baseline on every seed: every percent
// row estimates -60% with a degenerate interval, every ratio row 0.4x.
func TestGateKnownAnswer(t *testing.T) {
	t.Parallel()
	arms := map[string]*ArmResult{
		"fifo":       arm(10, 20, 30, 40, 50),
		"static":     arm(4, 8, 12, 16, 20),
		"predictive": arm(4, 8, 12, 16, 20),
	}
	rows := Gate(arms, SimBaselines)
	byID := map[string]Row{}
	for _, r := range rows {
		byID[r.ID] = r
	}
	if r := byID["P1"]; math.Abs(float64(r.Estimate)+0.6) > 1e-12 || r.CI[0] != r.CI[1] || !r.Pass {
		t.Fatalf("P1 = %+v", r)
	}
	if r := byID["P2"]; r.Pass {
		t.Fatalf("P2 passed at -60%% against a -90%% threshold: %+v", r)
	}
	if r := byID["P5"]; r.Estimate != 0 || !r.Pass {
		t.Fatalf("P5 (equal arms) = %+v", r)
	}
	if r := byID["G2"]; math.Abs(float64(r.Estimate)-0.4) > 1e-12 || !r.Pass {
		t.Fatalf("G2 = %+v", r)
	}
	if r := byID["G4"]; r.Estimate != 1 || !r.Pass || !r.AtLeast {
		t.Fatalf("G4 = %+v", r)
	}
	if r := byID["G3"]; !r.Pass || r.Estimate != 0 {
		t.Fatalf("G3 = %+v", r)
	}
	// A missing arm is reported, never passed.
	live := Gate(arms, LiveBaselines)
	for _, r := range live {
		if r.Pass || r.Note != "not run" {
			t.Fatalf("live row without arms: %+v", r)
		}
	}
	// Losing a message anywhere fails G3.
	arms["predictive"].PerSeed[2].Lost = 1
	arms["predictive"] = Combine(arms["predictive"].PerSeed)
	if r := Gate(arms, SimBaselines)[7]; r.ID != "G3" || r.Pass || r.Estimate != 1 {
		t.Fatalf("G3 with a loss = %+v", r)
	}
}

func TestJSONAndText(t *testing.T) {
	t.Parallel()
	arms := map[string]*ArmResult{"fifo": arm(1, 2), "predictive": arm(0.5, 1)}
	r := &Report{Workload: "w", Seeds: []uint64{1, 2}, Arms: arms, ArmOrder: []string{"fifo", "predictive"},
		Gate: Gate(arms, SimBaselines)}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if a := back["arms"].(map[string]any)["fifo"].(map[string]any); a["mae_ms"] != nil || a["mean_s"].(float64) != 1.5 {
		t.Fatalf("fifo arm JSON: %v", a)
	}
	var sb strings.Builder
	if err := WriteText(&sb, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"predictive mean vs fifo", "-50.0%", "not run", "Gate:"} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, sb.String())
		}
	}
}

// withThroughput sets every seed's throughput of a.
func withThroughput(a *ArmResult, perS ...float64) *ArmResult {
	per := append([]SeedResult(nil), a.PerSeed...)
	for i := range per {
		per[i].ThroughputPerS = Num(perS[i])
	}
	return Combine(per)
}

// A live run whose RabbitMQ FIFO baseline delivers 10% less than the other
// FIFO arms is flagged, with the guards read against the others; one that
// keeps pace (within G4's 2%) is not.
func TestBaselineWarnings(t *testing.T) {
	t.Parallel()
	b := LiveBaselines
	pace := []float64{96, 95, 97, 96, 95}
	fresh := func(rabbitPace []float64) map[string]*ArmResult {
		return map[string]*ArmResult{
			b.Primary:         withThroughput(arm(4, 8, 12, 16, 20), pace...),
			b.RabbitFIFO:      withThroughput(arm(20, 40, 60, 80, 100), rabbitPace...),
			b.RedisFIFO:       withThroughput(arm(10, 20, 30, 40, 50), pace...),
			LiveHarbingerFIFO: withThroughput(arm(10, 20, 30, 40, 50), pace...),
		}
	}
	slow := make([]float64, len(pace))
	near := make([]float64, len(pace))
	for i, p := range pace {
		slow[i], near[i] = 0.9*p, 0.985*p
	}
	ws := BaselineWarnings(fresh(slow), b)
	if len(ws) != 2 {
		t.Fatalf("a baseline at 0.9x the others' pace: %d warnings, want one per other FIFO arm: %q", len(ws), ws)
	}
	for i, other := range []string{b.RedisFIFO, LiveHarbingerFIFO} {
		// The primary is 0.4x the others on every seed: P99 and export
		// wait 0.400x against them, 0.200x against the slow baseline.
		for _, want := range []string{b.RabbitFIFO + " kept a slower pace than " + other, "(0.900x its throughput", "a P99 of 0.400x", "export max wait of 0.400x"} {
			if !strings.Contains(ws[i], want) {
				t.Errorf("warning %d lacks %q: %s", i, want, ws[i])
			}
		}
	}
	if ws := BaselineWarnings(fresh(near), b); len(ws) != 0 {
		t.Errorf("a baseline at 0.985x the others' pace is flagged: %q", ws)
	}
	// A run without the other FIFO arms has nothing to compare.
	arms := fresh(slow)
	delete(arms, b.RedisFIFO)
	delete(arms, LiveHarbingerFIFO)
	if ws := BaselineWarnings(arms, b); len(ws) != 0 {
		t.Errorf("no other FIFO arm, yet warnings: %q", ws)
	}
	// The secondary rows carry the same comparisons.
	rows := Secondary(fresh(slow), b, true)
	found := 0
	for _, r := range rows {
		if r.Criterion == b.RabbitFIFO+" throughput vs "+b.RedisFIFO && math.Abs(float64(r.Estimate)-0.9) < 1e-9 {
			found++
		}
		if r.Criterion == b.Primary+" all-message P99 vs "+LiveHarbingerFIFO && math.Abs(float64(r.Estimate)-0.4) < 1e-9 {
			found++
		}
	}
	if found != 2 {
		t.Errorf("secondary rows lack the baseline comparisons: %+v", rows)
	}
	// A slow Redis baseline flatters P3 and P4, and is named against each
	// FIFO arm that kept a faster pace.
	arms = fresh(pace)
	arms[b.RedisFIFO] = withThroughput(arm(20, 40, 60, 80, 100), slow...)
	ws = BaselineWarnings(arms, b)
	if len(ws) != 2 {
		t.Fatalf("a Redis baseline at 0.9x the others' pace: %d warnings, want 2: %q", len(ws), ws)
	}
	for i, other := range []string{b.RabbitFIFO, LiveHarbingerFIFO} {
		// The primary's mean is 0.2x rabbitmq-fifo's and 0.4x harbinger-fifo's.
		mean := []string{"-80.0%", "-60.0%"}[i]
		for _, want := range []string{b.RedisFIFO + " kept a slower pace than " + other, "(0.900x its throughput", "P3 and P4", "mean differs by " + mean} {
			if !strings.Contains(ws[i], want) {
				t.Errorf("warning %d lacks %q: %s", i, want, ws[i])
			}
		}
	}
	// The simulator's baselines are one arm: nothing to warn about.
	if ws := BaselineWarnings(map[string]*ArmResult{"fifo": arm(1, 2), "predictive": arm(1, 2)}, SimBaselines); len(ws) != 0 {
		t.Errorf("simulator: %q", ws)
	}
}

// A FIFO arm's seed that ran far slower against the simulator than its
// other seeds is flagged, by arm and seed; the spread of an ordinary run
// is not.
func TestSlowSeeds(t *testing.T) {
	t.Parallel()
	sim := map[uint64]float64{1: 9.3, 2: 8.3, 3: 14.1, 4: 10.9, 5: 8.5}
	fifoAt := func(ratios ...float64) *ArmResult {
		var per []SeedResult
		for i, r := range ratios {
			seed := uint64(i + 1)
			per = append(per, SeedResult{Seed: seed, MeanS: Num(r * sim[seed]), P99S: 1, ShortMedianS: 1, ExportMaxWaitS: 1,
				ThroughputPerS: 100, MAEms: Num(math.NaN()), TierAccuracy: Num(math.NaN())})
		}
		return Combine(per)
	}
	arms := map[string]*ArmResult{
		// The first cluster run of the sidecars: seed 3 an outlier.
		"rabbitmq-fifo": fifoAt(2.09, 2.43, 3.68, 2.18, 2.14),
		// The registered run of 2026-12-03: an ordinary spread.
		"redis-fifo": fifoAt(1.85, 1.51, 1.99, 1.47, 1.74),
		// Not a FIFO arm, however slow.
		"harbinger-predictive": fifoAt(1, 1, 9, 1, 1),
	}
	ws := SlowSeeds(arms, []string{"rabbitmq-fifo", "redis-fifo", "nats-fifo"}, sim)
	if len(ws) != 1 || !strings.Contains(ws[0], "rabbitmq-fifo ran seed 3 slow") || !strings.Contains(ws[0], "3.68x") || !strings.Contains(ws[0], "2.18x") {
		t.Fatalf("want one warning, for rabbitmq-fifo's seed 3 at 3.68x against a median of 2.18x: %q", ws)
	}
	// Two seeds are too few to call one slow; a seed the simulator has no
	// figure for is left out.
	two := map[string]*ArmResult{"rabbitmq-fifo": fifoAt(1, 5)}
	if ws := SlowSeeds(two, []string{"rabbitmq-fifo"}, sim); len(ws) != 0 {
		t.Errorf("two seeds: %q", ws)
	}
	if ws := SlowSeeds(arms, []string{"rabbitmq-fifo"}, map[uint64]float64{1: 9.3, 2: 8.3, 4: 10.9, 5: 8.5}); len(ws) != 0 {
		t.Errorf("seed 3 without a simulated figure: %q", ws)
	}
}

// A Num survives JSON both ways: numbers as they were, NaN and the
// infinities as null and back as NaN; anything else is refused.
func TestNumRoundTrip(t *testing.T) {
	in := []Num{0, 1.5, -2e-9, 123456.789, Num(math.NaN()), Num(math.Inf(1)), Num(math.Inf(-1))}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(data), "[0,1.5,-2e-9,123456.789,null,null,null]"; got != want {
		t.Fatalf("marshalled %s, want %s", got, want)
	}
	var out []Num
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	for i, v := range out {
		w := in[i]
		if math.IsNaN(float64(w)) || math.IsInf(float64(w), 0) {
			if !math.IsNaN(float64(v)) {
				t.Errorf("element %d: %v read back as %v, want NaN", i, w, v)
			}
		} else if v != w {
			t.Errorf("element %d: %v read back as %v", i, w, v)
		}
	}
	var n Num
	if err := json.Unmarshal([]byte(`"1.5"`), &n); err == nil {
		t.Errorf("a quoted number read as %v, want an error", n)
	}
}
