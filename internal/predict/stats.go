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
	// Long: the key's next message would be marked long (Prediction.Long):
	// it is cold or spread-gated, or its cost is at or above the
	// work-share cut or among the costliest keys (Config.LongKeys).
	Long bool
	// The key's predicted against actual, over its routed predictions
	// (Scored of them): mean absolute error, and the share whose tier was
	// the one the duration earned (both 0 while Scored is 0: read them only
	// when it is not).
	MAE          time.Duration
	TierAccuracy float64
	Scored       uint64
}

// Summary is the predictor's overall state and accuracy.
type Summary struct {
	Keys         int
	Evicted      uint64          // keys dropped to stay under MaxKeys
	Observations uint64          // accepted durations
	Rejected     uint64          // durations refused by Observe
	MAE          time.Duration   // mean |predicted - actual| over routed predictions
	MAESamples   uint64          // how many predictions MAE is over
	TierAccuracy float64         // fraction of routed predictions whose tier was the one the duration earned; NaN when none
	TierSamples  uint64          // how many routed predictions TierAccuracy is over; cold and spread-gated ones are not scored
	Boundaries   []time.Duration // current tier boundaries, ascending
	// Why observations were not scored, by what the prediction of their
	// job was: made while its key was cold (too few observations: its job
	// was published before the key had learned enough), spread-gated, or
	// none at all (a policy that does not predict, a job recovered from
	// the log, or an observation reported without one).
	UnscoredCold, UnscoredGated, UnscoredUnpredicted uint64
}

func (p *Predictor) stats(e *entry) KeyStats {
	ks := KeyStats{
		Key:    e.key,
		Count:  e.count,
		EWMA:   msToDuration(e.ewmaMS),
		P50:    msToDuration(e.p50),
		P99:    msToDuration(e.p99),
		Tier:   e.tier,
		Cold:   e.count < uint64(p.cfg.MinObservations),
		Scored: uint64(e.scored),
	}
	if e.scored > 0 {
		ks.MAE = msToDuration(e.absErrMS / float64(e.scored))
		ks.TierAccuracy = float64(e.tierHits) / float64(e.scored)
	}
	ks.SpreadGated = !ks.Cold && p.spreadGated(e)
	cost := p.costOf(e)
	if ks.SpreadGated && p.cfg.GatedMean {
		cost = e.meanMS // as Predict prices a gated key
	}
	ks.Long = p.cfg.LongShare > 0 && (ks.Cold || ks.SpreadGated && !p.cfg.GatedMean || p.isLong(cost) || p.longKey(e))
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

// Keys returns up to limit keys (all when limit <= 0) in the order of
// SortKeys, busiest first.
func (p *Predictor) Keys(limit int) []KeyStats {
	ks := p.SelectKeys(nil, limit)
	SortKeys(ks)
	return ks
}

// SelectKeys appends to buf the stats of the keys Keys(limit) returns, in no
// particular order, and returns the extended slice. It takes O(n log limit)
// time and O(limit) memory (O(n) when limit <= 0) and does not sort, so that
// a caller which must hold a lock around the predictor can copy the keys out
// quickly and sort them with SortKeys once the lock is released.
func (p *Predictor) SelectKeys(buf []KeyStats, limit int) []KeyStats {
	if limit <= 0 || limit >= len(p.keys) {
		buf = slices.Grow(buf, len(p.keys))
		for e := p.head; e != nil; e = e.next {
			buf = append(buf, p.stats(e))
		}
		return buf
	}
	// A heap of the limit busiest keys seen so far, the least busy of them
	// at the root: most keys lose to the root on their count alone, and
	// the counts sit in the heap so that comparing them reads no entry.
	h := make([]ranked, 0, limit)
	for e := p.head; e != nil; e = e.next {
		r := ranked{e.count, e}
		if len(h) < limit {
			h = append(h, r)
			for i := len(h) - 1; i > 0; {
				parent := (i - 1) / 2
				if h[i].compare(h[parent]) <= 0 {
					break
				}
				h[i], h[parent] = h[parent], h[i]
				i = parent
			}
			continue
		}
		if r.compare(h[0]) >= 0 {
			continue
		}
		h[0] = r
		for i := 0; ; {
			c := 2*i + 1
			if c >= len(h) {
				break
			}
			if right := c + 1; right < len(h) && h[right].compare(h[c]) > 0 {
				c = right
			}
			if h[c].compare(h[i]) <= 0 {
				break
			}
			h[i], h[c] = h[c], h[i]
			i = c
		}
	}
	buf = slices.Grow(buf, len(h))
	for _, r := range h {
		buf = append(buf, p.stats(r.e))
	}
	return buf
}

// ranked is an entry and its count, in SelectKeys's heap.
type ranked struct {
	count uint64
	e     *entry
}

// compare orders ranked entries as SortKeys orders their stats.
func (a ranked) compare(b ranked) int {
	if a.count != b.count {
		return cmp.Compare(b.count, a.count)
	}
	return compareBusiest(a.count, a.e.key, b.count, b.e.key)
}

// SortKeys sorts ks busiest first (the highest Count), ties broken by queue,
// producer, job type and size bucket, ascending: a total order over distinct
// keys, so the same keys always list in the same order.
func SortKeys(ks []KeyStats) {
	slices.SortFunc(ks, func(a, b KeyStats) int { return compareBusiest(a.Count, a.Key, b.Count, b.Key) })
}

// compareBusiest is negative when key a, seen ac times, lists before key b,
// seen bc times.
func compareBusiest(ac uint64, a Key, bc uint64, b Key) int {
	if c := cmp.Compare(bc, ac); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Queue, b.Queue); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Producer, b.Producer); c != 0 {
		return c
	}
	if c := cmp.Compare(a.JobType, b.JobType); c != 0 {
		return c
	}
	return cmp.Compare(a.SizeBucket, b.SizeBucket)
}

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
		UnscoredCold: p.unscoredCold, UnscoredGated: p.unscoredGated, UnscoredUnpredicted: p.unscoredNone,
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
