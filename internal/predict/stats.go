package predict

import (
	"cmp"
	"slices"
	"time"
)

// KeyStats is what the predictor knows of one key.
type KeyStats struct {
	Key         Key
	Count       uint64
	EWMA        time.Duration
	P50, P99    time.Duration
	Tier        int
	Cold        bool
	SpreadGated bool
}

// Summary is the predictor's overall state and accuracy.
type Summary struct {
	Keys         int
	Evicted      uint64          // keys dropped to stay under MaxKeys
	Observations uint64          // accepted durations
	Rejected     uint64          // durations refused by Observe
	MAE          time.Duration   // mean |predicted - actual| over routed predictions
	MAESamples   uint64          // how many predictions MAE is over
	TierAccuracy float64         // fraction of observed messages whose predicted tier was the one their duration earned; NaN when none
	TierSamples  uint64          //
	Boundaries   []time.Duration // current tier boundaries, ascending
}

func (p *Predictor) stats(e *entry) KeyStats {
	ks := KeyStats{
		Key:   e.key,
		Count: e.count,
		EWMA:  msToDuration(e.ewmaMS),
		P50:   msToDuration(e.p50),
		P99:   msToDuration(e.p99),
		Tier:  e.tier,
		Cold:  e.count < uint64(p.cfg.MinObservations),
	}
	ks.SpreadGated = !ks.Cold && p.cfg.SpreadGate > 0 && e.p50 > 0 && e.p99/e.p50 > p.cfg.SpreadGate
	return ks
}

// Lookup returns the stats of one key without touching its recency.
func (p *Predictor) Lookup(k Key) (KeyStats, bool) {
	e := p.keys[k]
	if e == nil {
		return KeyStats{}, false
	}
	return p.stats(e), true
}

// Keys returns up to limit keys (all when limit <= 0), busiest first.
func (p *Predictor) Keys(limit int) []KeyStats {
	out := make([]KeyStats, 0, len(p.keys))
	for _, e := range p.keys {
		out = append(out, p.stats(e))
	}
	slices.SortFunc(out, func(a, b KeyStats) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(keyString(a.Key), keyString(b.Key))
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

func keyString(k Key) string { return k.Queue + "\x00" + k.Producer + "\x00" + k.JobType }

// Summary returns the overall figures.
func (p *Predictor) Summary() Summary {
	s := Summary{
		Keys:         len(p.keys),
		Evicted:      p.evicted,
		Observations: p.observations,
		Rejected:     p.rejected,
		MAESamples:   p.maeN,
		TierSamples:  p.tierN,
		TierAccuracy: nan(),
	}
	if p.maeN > 0 {
		s.MAE = msToDuration(p.absErrMS / float64(p.maeN))
	}
	if p.tierN > 0 {
		s.TierAccuracy = float64(p.tierHits) / float64(p.tierN)
	}
	for _, b := range p.boundaries {
		s.Boundaries = append(s.Boundaries, msToDuration(b))
	}
	return s
}
