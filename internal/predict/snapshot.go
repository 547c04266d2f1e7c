package predict

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"math"
	"slices"
)

// snapshot is what a Predictor learned, in a form gob can write: every key
// (least recently used first, so Restore rebuilds the same order), the
// window of recent predicted costs the tiers are cut from, and the running
// figures.
type snapshot struct {
	Keys      []keySnapshot
	Recent    []float64 // oldest first
	TypicalMS float64

	Observations, Rejected, Evicted uint64
	AbsErrMS                        float64
	MAEN, TierHits, TierN           uint64
}

type keySnapshot struct {
	Producer, JobType string
	SizeBucket        int8
	Count             uint64
	EWMAMS            float64
	MeanMS            float64 // the slow mean; 0 in snapshots from before it, read as EWMAMS
	Hist              [histBuckets]float32
	HistTotal         float64
	HistWeight        float64
	Tier              int
	AbsErrMS          float64
	Scored, TierHits  uint32
}

// Snapshot encodes what the predictor learned, so that a broker restart
// keeps it. The queue part of keys is not kept: Restore takes it.
func (p *Predictor) Snapshot() []byte {
	s := snapshot{
		TypicalMS: p.typicalMS, Observations: p.observations, Rejected: p.rejected, Evicted: p.evicted,
		AbsErrMS: p.absErrMS, MAEN: p.maeN, TierHits: p.tierHits, TierN: p.tierN,
	}
	s.Keys = make([]keySnapshot, 0, len(p.keys))
	for e := p.tail; e != nil; e = e.prev {
		s.Keys = append(s.Keys, keySnapshot{
			Producer: e.key.Producer, JobType: e.key.JobType, SizeBucket: e.key.SizeBucket,
			Count: e.count, EWMAMS: e.ewmaMS, MeanMS: e.meanMS, Hist: e.hist.w, HistTotal: e.hist.total, HistWeight: e.hist.weight,
			Tier: e.tier, AbsErrMS: e.absErrMS, Scored: e.scored, TierHits: e.tierHits,
		})
	}
	s.Recent = make([]float64, 0, p.recentN)
	start := (p.recentPos - p.recentN + len(p.recent)) % len(p.recent)
	for i := range p.recentN {
		s.Recent = append(s.Recent, p.recent[(start+i)%len(p.recent)])
	}
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(&s); err != nil {
		panic(fmt.Sprintf("predict: encoding a snapshot: %v", err)) // plain data always encodes
	}
	return b.Bytes()
}

// Restore replaces what the predictor learned with a Snapshot taken of a
// predictor of queue, then recomputes the tier boundaries under its own
// config (so a snapshot from a predictor with other settings still loads).
func (p *Predictor) Restore(queue string, data []byte) error {
	var s snapshot
	if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&s); err != nil {
		return fmt.Errorf("predict: decoding a snapshot: %w", err)
	}
	if err := s.check(); err != nil {
		return fmt.Errorf("predict: a snapshot of queue %q: %w", queue, err)
	}
	p.keys = make(map[Key]*entry, min(len(s.Keys), p.cfg.MaxKeys))
	p.head, p.tail = nil, nil
	clear(p.warm)
	p.warm, p.warmMeans = p.warm[:0], p.warmMeans[:0]
	for _, k := range s.Keys {
		key := Key{Queue: queue, Producer: k.Producer, JobType: k.JobType, SizeBucket: k.SizeBucket}
		if p.keys[key] != nil {
			continue
		}
		e := p.insert(key) // evicts the oldest past MaxKeys, as live use would
		e.count, e.ewmaMS, e.meanMS, e.tier = k.Count, k.EWMAMS, k.MeanMS, min(max(k.Tier, 0), p.cfg.Tiers-1)
		if e.meanMS <= 0 {
			e.meanMS = e.ewmaMS
		}
		e.hist = histogram{w: k.Hist, total: k.HistTotal, weight: k.HistWeight}
		e.absErrMS, e.scored, e.tierHits = k.AbsErrMS, k.Scored, min(k.TierHits, k.Scored)
		e.p50 = e.hist.quantileMS(0.5)
		e.p99 = e.hist.quantileMS(0.99)
		p.noteCost(e)
	}
	p.recentN, p.recentPos, p.sincePlan = 0, 0, 0
	for _, ms := range s.Recent[max(len(s.Recent)-len(p.recent), 0):] {
		p.recent[p.recentPos] = ms
		p.recentPos = (p.recentPos + 1) % len(p.recent)
		p.recentN = min(p.recentN+1, len(p.recent))
	}
	p.sorted = append(p.sorted[:0], p.recent[:p.recentN]...)
	slices.Sort(p.sorted)
	p.boundaries = boundaries(p.sorted, p.cfg.Tiers, p.boundaries)
	p.longMS = longCut(p.sorted, p.cfg.LongShare)
	p.sinceKeys = 0
	if p.cfg.LongKeys > 0 {
		p.keyCutMS = p.keyCut(p.cfg.LongKeys)
		if p.cfg.NearLongKeys > 0 {
			p.nearCutMS = p.keyCut(p.cfg.NearLongKeys)
		}
	}
	p.typicalMS = s.TypicalMS
	p.observations, p.rejected, p.evicted = s.Observations, s.Rejected, s.Evicted
	p.absErrMS, p.maeN, p.tierHits, p.tierN = s.AbsErrMS, s.MAEN, s.TierHits, s.TierN
	return nil
}

// check refuses a snapshot whose figures no predictor writes: a negative,
// infinite or NaN duration, weight or error anywhere, which would come
// out as a negative or meaningless predicted cost. A snapshot comes from
// the broker's own log, so this is a damaged log, and one refused is
// relearned from the durations acked after it.
func (s *snapshot) check() error {
	bad := func(v float64) bool { return !(v >= 0) || math.IsInf(v, 1) }
	if bad(s.TypicalMS) || bad(s.AbsErrMS) {
		return fmt.Errorf("typical cost %v ms or error %v ms is not a duration", s.TypicalMS, s.AbsErrMS)
	}
	for i, ms := range s.Recent {
		if bad(ms) {
			return fmt.Errorf("recent cost %d is %v ms", i, ms)
		}
	}
	for _, k := range s.Keys {
		if bad(k.EWMAMS) || bad(k.MeanMS) || bad(k.HistTotal) || bad(k.HistWeight) || bad(k.AbsErrMS) {
			return fmt.Errorf("key %q/%q: EWMA %v ms, mean %v ms, histogram %v and %v, error %v ms: not all durations and weights",
				k.Producer, k.JobType, k.EWMAMS, k.MeanMS, k.HistTotal, k.HistWeight, k.AbsErrMS)
		}
		for b, w := range k.Hist {
			if bad(float64(w)) {
				return fmt.Errorf("key %q/%q: histogram bucket %d weighs %v", k.Producer, k.JobType, b, w)
			}
		}
	}
	return nil
}
