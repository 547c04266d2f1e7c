// Package report owns the figures Harbinger's comparisons print: per-message
// records reduced to per-seed results, per-arm medians, and the
// pre-registered gate with paired bootstrap intervals. The simulator and the
// live benchmark both feed it, so their reports have one shape.
package report

import (
	"encoding/json"
	"math"
	"slices"
	"time"

	"github.com/harbinger-mq/harbinger/internal/stats"
)

// Classes the gate reports on.
const (
	ClassShort  = "short"
	ClassExport = "export"
)

// Record is one completed message, times measured from the run's start in
// workload time.
type Record struct {
	Job     int // its index among the run's jobs, to pair it with another arm's
	Type    int
	Class   string
	Sent    time.Duration
	Started time.Duration // handed to a worker (last delivery, for retries)
	Done    time.Duration // acked
}

// Num is a float that encodes NaN and infinities as JSON null.
type Num float64

// MarshalJSON implements json.Marshaler.
func (n Num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(f)
}

// UnmarshalJSON implements json.Unmarshaler: null reads back as NaN, so a
// report written and read again keeps its missing figures missing.
func (n *Num) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = Num(math.NaN())
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*n = Num(f)
	return nil
}

// SeedResult is one arm's figures for one seed.
type SeedResult struct {
	Seed           uint64 `json:"seed"`
	MeanS          Num    `json:"mean_s"`
	P99S           Num    `json:"p99_s"`
	ShortMedianS   Num    `json:"short_median_s"`
	ExportMaxWaitS Num    `json:"export_max_wait_s"`
	Lost           int    `json:"lost"`
	ThroughputPerS Num    `json:"throughput_per_s"`
	MAEms          Num    `json:"mae_ms"`
	TierAccuracy   Num    `json:"tier_accuracy"`
	Sent           int    `json:"sent"`
	Completed      int    `json:"completed"`
}

// Summarize reduces one run's records to its figures. sent is how many
// messages the producers sent; records holds one entry per completed message.
// MAEms and TierAccuracy are left NaN for the caller to fill.
func Summarize(seed uint64, sent int, records []Record) SeedResult {
	r := SeedResult{Seed: seed, Sent: sent, Completed: len(records), Lost: sent - len(records),
		MAEms: Num(math.NaN()), TierAccuracy: Num(math.NaN())}
	if len(records) == 0 {
		nan := Num(math.NaN())
		r.MeanS, r.P99S, r.ShortMedianS, r.ExportMaxWaitS, r.ThroughputPerS = nan, nan, nan, nan, nan
		return r
	}
	lat := make([]float64, 0, len(records))
	var short []float64
	exportMax := math.NaN()
	firstSend, lastDone := records[0].Sent, records[0].Done
	for _, rec := range records {
		l := (rec.Done - rec.Sent).Seconds()
		lat = append(lat, l)
		switch rec.Class {
		case ClassShort:
			short = append(short, l)
		case ClassExport:
			w := (rec.Started - rec.Sent).Seconds()
			if math.IsNaN(exportMax) || w > exportMax {
				exportMax = w
			}
		}
		firstSend = min(firstSend, rec.Sent)
		lastDone = max(lastDone, rec.Done)
	}
	slices.Sort(lat)
	r.MeanS = Num(stats.Mean(lat))
	r.P99S = Num(stats.QuantileSorted(lat, 0.99))
	r.ShortMedianS = Num(stats.Median(short))
	r.ExportMaxWaitS = Num(exportMax)
	if span := (lastDone - firstSend).Seconds(); span > 0 {
		r.ThroughputPerS = Num(float64(len(records)) / span)
	}
	return r
}

// ArmResult is one arm across seeds: each figure is the median of the
// per-seed figures; Lost is the largest loss of any seed.
type ArmResult struct {
	MeanS          Num          `json:"mean_s"`
	P99S           Num          `json:"p99_s"`
	ShortMedianS   Num          `json:"short_median_s"`
	ExportMaxWaitS Num          `json:"export_max_wait_s"`
	Lost           int          `json:"lost"`
	ThroughputPerS Num          `json:"throughput_per_s"`
	MAEms          Num          `json:"mae_ms"`
	TierAccuracy   Num          `json:"tier_accuracy"`
	PerSeed        []SeedResult `json:"per_seed"`
}

// Combine takes the medians across seeds.
func Combine(per []SeedResult) *ArmResult {
	a := &ArmResult{PerSeed: per}
	med := func(f func(SeedResult) Num) Num {
		xs := make([]float64, 0, len(per))
		for _, s := range per {
			if v := float64(f(s)); !math.IsNaN(v) {
				xs = append(xs, v)
			}
		}
		return Num(stats.Median(xs))
	}
	a.MeanS = med(func(s SeedResult) Num { return s.MeanS })
	a.P99S = med(func(s SeedResult) Num { return s.P99S })
	a.ShortMedianS = med(func(s SeedResult) Num { return s.ShortMedianS })
	a.ExportMaxWaitS = med(func(s SeedResult) Num { return s.ExportMaxWaitS })
	a.ThroughputPerS = med(func(s SeedResult) Num { return s.ThroughputPerS })
	a.MAEms = med(func(s SeedResult) Num { return s.MAEms })
	a.TierAccuracy = med(func(s SeedResult) Num { return s.TierAccuracy })
	for _, s := range per {
		a.Lost = max(a.Lost, s.Lost)
	}
	return a
}

// Report is a whole comparison: the arms, the gate and how it was measured.
type Report struct {
	Workload  string                `json:"workload"`
	Seeds     []uint64              `json:"seeds"`
	Arms      map[string]*ArmResult `json:"arms"`
	Gate      []Row                 `json:"gate"`
	Secondary []Row                 `json:"secondary"`
	// Warnings are what a reader must know before trusting the gate, such
	// as a baseline that ran slow (BaselineWarnings).
	Warnings []string `json:"warnings,omitempty"`
	Method   string   `json:"method"`
	ArmOrder []string `json:"arm_order"`
}
