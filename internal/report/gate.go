package report

import (
	"fmt"
	"math"

	"github.com/harbinger-mq/harbinger/internal/stats"
)

// Row is one gate criterion evaluated.
type Row struct {
	ID        string `json:"id"`
	Criterion string `json:"criterion"`
	Estimate  Num    `json:"estimate"`
	CI        [2]Num `json:"ci"`
	Threshold Num    `json:"threshold"`
	Pass      bool   `json:"pass"`
	Kind      string `json:"kind"`               // "percent", "ratio" or "count"
	AtLeast   bool   `json:"at_least,omitempty"` // pass means estimate >= threshold
	Note      string `json:"note,omitempty"`
}

// Baselines names the arms the gate compares the primary arm with. In the
// simulator the FIFO baselines are harbinger's own fifo arm and P5 compares
// with the static arm; live, they are the other brokers' arms.
type Baselines struct {
	Primary    string
	RabbitFIFO string
	RedisFIFO  string
	P5         string
}

// SimBaselines and LiveBaselines are the two forms of the pre-registered gate.
var (
	SimBaselines  = Baselines{Primary: "predictive", RabbitFIFO: "fifo", RedisFIFO: "fifo", P5: "static"}
	LiveBaselines = Baselines{Primary: "harbinger-predictive", RabbitFIFO: "rabbitmq-fifo", RedisFIFO: "redis-fifo", P5: "rabbitmq-predictive"}
)

type metric struct {
	name string
	get  func(SeedResult) Num
}

var (
	mMean       = metric{"mean", func(s SeedResult) Num { return s.MeanS }}
	mP99        = metric{"all-message P99", func(s SeedResult) Num { return s.P99S }}
	mShort      = metric{"short-job median", func(s SeedResult) Num { return s.ShortMedianS }}
	mExport     = metric{"export max wait", func(s SeedResult) Num { return s.ExportMaxWaitS }}
	mThroughput = metric{"throughput", func(s SeedResult) Num { return s.ThroughputPerS }}
)

// Compare evaluates arm a against arm b on a metric, paired by seed: the
// estimate is the median of the per-seed percent differences (kind
// "percent", as a fraction) or ratios (kind "ratio"), with a 95% bootstrap
// interval over seeds. pass is decided by the point estimate: <= threshold,
// or >= threshold when atLeast.
func compare(arms map[string]*ArmResult, id, a, b string, m metric, kind string, threshold float64, atLeast bool) Row {
	crit := fmt.Sprintf("%s %s vs %s", a, m.name, b)
	row := Row{ID: id, Criterion: crit, Kind: kind, Threshold: Num(threshold), AtLeast: atLeast,
		Estimate: Num(math.NaN()), CI: [2]Num{Num(math.NaN()), Num(math.NaN())}}
	ra, rb := arms[a], arms[b]
	if ra == nil || rb == nil {
		row.Note = "not run"
		return row
	}
	bySeed := map[uint64]SeedResult{}
	for _, s := range rb.PerSeed {
		bySeed[s.Seed] = s
	}
	var diffs []float64
	for _, s := range ra.PerSeed {
		t, ok := bySeed[s.Seed]
		if !ok {
			continue
		}
		x, y := float64(m.get(s)), float64(m.get(t))
		if math.IsNaN(x) || math.IsNaN(y) || y == 0 {
			continue
		}
		if kind == "percent" {
			diffs = append(diffs, (x-y)/y)
		} else {
			diffs = append(diffs, x/y)
		}
	}
	if len(diffs) == 0 {
		row.Note = "no paired seeds"
		return row
	}
	est := stats.Median(diffs)
	lo, hi := stats.BootstrapMedianCI(diffs, stats.BootstrapResamples, 0.95, stats.BootstrapSeed)
	row.Estimate, row.CI = Num(est), [2]Num{Num(lo), Num(hi)}
	if atLeast {
		row.Pass = est >= threshold
	} else {
		row.Pass = est <= threshold
	}
	return row
}

// The pre-registered guards' thresholds: G1's all-message P99 ratio, G2's
// export max wait ratio, G4's throughput ratio (also the least a gate
// baseline's throughput may be of another FIFO arm's: BaselineWarnings).
const (
	G1MaxP99        = 1.10
	G2MaxExport     = 1.00
	G4MinThroughput = 0.98
)

// Gate evaluates the pre-registered gate for the given baselines.
func Gate(arms map[string]*ArmResult, b Baselines) []Row {
	p := b.Primary
	rows := []Row{
		compare(arms, "P1", p, b.RabbitFIFO, mMean, "percent", -0.50, false),
		compare(arms, "P2", p, b.RabbitFIFO, mShort, "percent", -0.90, false),
		compare(arms, "P3", p, b.RedisFIFO, mMean, "percent", -0.50, false),
		compare(arms, "P4", p, b.RedisFIFO, mShort, "percent", -0.90, false),
		compare(arms, "P5", p, b.P5, mMean, "percent", 0, false),
		compare(arms, "G1", p, b.RabbitFIFO, mP99, "ratio", G1MaxP99, false),
		compare(arms, "G2", p, b.RabbitFIFO, mExport, "ratio", G2MaxExport, false),
		lostRow(arms, p),
		compare(arms, "G4", p, b.RabbitFIFO, mThroughput, "ratio", G4MinThroughput, true),
	}
	return rows
}

func lostRow(arms map[string]*ArmResult, p string) Row {
	row := Row{ID: "G3", Criterion: p + " lost work in every run", Kind: "count",
		CI: [2]Num{Num(math.NaN()), Num(math.NaN())}}
	a := arms[p]
	if a == nil {
		row.Estimate, row.Note = Num(math.NaN()), "not run"
		return row
	}
	row.Estimate = Num(a.Lost)
	row.Pass = a.Lost == 0
	return row
}

// Secondary evaluates the reported-but-not-gated comparisons that apply to
// the arms present.
func Secondary(arms map[string]*ArmResult, b Baselines, live bool) []Row {
	var rows []Row
	add := func(id, a, base string, m metric, kind string) {
		if arms[a] != nil && arms[base] != nil {
			r := compare(arms, id, a, base, m, kind, math.NaN(), false)
			r.Pass = false
			rows = append(rows, r)
		}
	}
	if live {
		add("S1", "harbinger-fifo", b.RabbitFIFO, mMean, "percent")
		add("S2", "rabbitmq-predictive", b.RabbitFIFO, mMean, "percent")
		add("S3", "harbinger-weighted", b.RabbitFIFO, mMean, "percent")
		add("S4", "harbinger-weighted", b.RabbitFIFO, mP99, "ratio")
		add("S5", "rabbitmq-priority", b.RabbitFIFO, mExport, "ratio")
		add("S6", "rabbitmq-predictive", b.RabbitFIFO, mExport, "ratio")
		add("S7", "rabbitmq-predictive", b.RabbitFIFO, mP99, "ratio")
		// The gate's guards against the other FIFO baselines, and the gate
		// baseline's own pace against theirs (BaselineWarnings).
		n := 8
		for _, other := range otherFIFO(b) {
			add(fmt.Sprintf("S%d", n), b.Primary, other, mP99, "ratio")
			add(fmt.Sprintf("S%d", n+1), b.Primary, other, mExport, "ratio")
			add(fmt.Sprintf("S%d", n+2), b.RabbitFIFO, other, mThroughput, "ratio")
			n += 3
		}
	} else {
		add("S1", b.Primary, "oracle", mMean, "ratio")
		add("S2", "weighted", b.RabbitFIFO, mMean, "percent")
		add("S3", "weighted", b.RabbitFIFO, mP99, "ratio")
		add("S4", "static", b.RabbitFIFO, mExport, "ratio")
		add("S5", "static", b.RabbitFIFO, mP99, "ratio")
	}
	return rows
}

// LiveHarbingerFIFO is the live run's own FIFO arm: a third FIFO baseline
// beside the gate's two.
const LiveHarbingerFIFO = "harbinger-fifo"

// otherFIFO lists the live FIFO arms besides the gate's baseline.
func otherFIFO(b Baselines) []string {
	var out []string
	for _, a := range []string{b.RedisFIFO, LiveHarbingerFIFO} {
		if a != b.RabbitFIFO {
			out = append(out, a)
		}
	}
	return out
}

// BaselineWarnings says when a gate's FIFO baseline kept a slower pace
// than another FIFO arm of the same run: every broker runs the same jobs on
// the same workers, so their throughput should agree, and when a
// baseline's falls short of another's by G4's own margin (a paired median
// below 0.98x), the rows that are ratios to it flatter the primary arm:
// G1, G2 and G4 for RabbitFIFO, P3 and P4 for RedisFIFO.
func BaselineWarnings(arms map[string]*ArmResult, b Baselines) []string {
	out := rabbitWarnings(arms, b)
	if b.RedisFIFO == b.RabbitFIFO {
		return out
	}
	for _, other := range []string{b.RabbitFIFO, LiveHarbingerFIFO} {
		r := compare(arms, "", b.RedisFIFO, other, mThroughput, "ratio", G4MinThroughput, true)
		if r.Note != "" || r.Pass {
			continue
		}
		mean := compare(arms, "", b.Primary, other, mMean, "percent", -0.50, false)
		out = append(out, fmt.Sprintf("The gate's baseline %s kept a slower pace than %s (%s its throughput, paired by seed): "+
			"P3 and P4 are differences from it and flatter %s. Against %s, %s's mean differs by %s (P3 asks %s or less).",
			b.RedisFIFO, other, FormatValue("ratio", r.Estimate), b.Primary, other, b.Primary,
			FormatValue("percent", mean.Estimate), FormatValue("percent", -0.50)))
	}
	return out
}

// rabbitWarnings is BaselineWarnings for RabbitFIFO, the guards' baseline.
func rabbitWarnings(arms map[string]*ArmResult, b Baselines) []string {
	var out []string
	for _, other := range otherFIFO(b) {
		r := compare(arms, "", b.RabbitFIFO, other, mThroughput, "ratio", G4MinThroughput, true)
		if r.Note != "" || r.Pass {
			continue
		}
		p99 := compare(arms, "", b.Primary, other, mP99, "ratio", G1MaxP99, false)
		exp := compare(arms, "", b.Primary, other, mExport, "ratio", G2MaxExport, false)
		ratio := func(v Num) string { return FormatValue("ratio", v) }
		out = append(out, fmt.Sprintf("The gate's baseline %s kept a slower pace than %s (%s its throughput, paired by seed, where G4 asks %s): "+
			"G1, G2 and G4 are ratios to it and flatter %s. Against %s, %s has a P99 of %s (G1 allows %s) and an export max wait of %s (G2 allows %s).",
			b.RabbitFIFO, other, ratio(r.Estimate), ratio(G4MinThroughput), b.Primary, other, b.Primary,
			ratio(p99.Estimate), ratio(G1MaxP99), ratio(exp.Estimate), ratio(G2MaxExport)))
	}
	return out
}

// SlowSeedFactor is how far past its arm's median a seed's ratio of live
// to simulated FIFO mean latency must be to be called slow.
const SlowSeedFactor = 1.5

// SlowSeeds flags the seeds on which a FIFO arm of a live run ran slow:
// each seed's mean latency is taken over what the simulator gives FIFO on
// the same jobs and workers (simMean, by seed), which leaves the broker's
// overhead; an arm's overhead should not move much from seed to seed, so a
// seed whose ratio is more than SlowSeedFactor times the arm's median
// ratio (over at least three seeds) was a slow run of that baseline, and
// every paired ratio against it on that seed flatters the arm compared.
func SlowSeeds(arms map[string]*ArmResult, fifoArms []string, simMean map[uint64]float64) []string {
	var out []string
	for _, name := range fifoArms {
		a := arms[name]
		if a == nil {
			continue
		}
		var seeds []uint64
		var ratios []float64
		for _, s := range a.PerSeed {
			m, ok := simMean[s.Seed]
			if v := float64(s.MeanS); ok && m > 0 && !math.IsNaN(v) {
				seeds = append(seeds, s.Seed)
				ratios = append(ratios, v/m)
			}
		}
		if len(ratios) < 3 {
			continue
		}
		med := stats.Median(ratios)
		for i, r := range ratios {
			if r > SlowSeedFactor*med {
				out = append(out, fmt.Sprintf("%s ran seed %d slow: its mean latency was %.2fx what the simulator gives FIFO on the same jobs, "+
					"where its seeds' median was %.2fx; ratios against it on that seed flatter the arm compared.", name, seeds[i], r, med))
			}
		}
	}
	return out
}
