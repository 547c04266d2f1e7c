// Package predict owns Harbinger's per-key duration predictor and the tier
// boundaries derived from it. It is pure: callers pass the time in, it starts
// no goroutines, holds no locks and does no I/O, so the broker, the RabbitMQ
// sidecar and the simulator run exactly the same code.
//
// A key is queue + producer + optional job type + optional size bucket. Each
// key keeps an EWMA of observed durations and a decaying log2 histogram. A
// message's predicted cost picks its tier; tier boundaries are quantiles of
// the predicted costs of recently enqueued messages. Cold keys (too few
// observations) and keys whose p99/median spread is too wide take the middle
// tier, because a guess there would do more harm than good.
package predict

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"
)

// Defaults for Config.
const (
	DefaultAlpha           = 0.2
	DefaultDecay           = 0.98
	DefaultMinObservations = 3
	DefaultSpreadGate      = 16
	DefaultTiers           = 3
	DefaultWindow          = 1024
	DefaultRecomputeEvery  = 256
	DefaultMaxKeys         = 100_000
	DefaultMaxDuration     = 24 * time.Hour
	DefaultLongShare       = 0.2
	MaxTiers               = 16
)

// keyMeanAlpha is the weight of a new observation in a key's slow mean,
// the figure the LongKeys cut ranks keys by. For its first 1/keyMeanAlpha
// observations the mean is a plain running mean.
const keyMeanAlpha = 0.05

// Estimators a Config may name.
const (
	EstimateEWMA   = "ewma"   // the key's EWMA (the default: it tracks the mean, which SJF wants)
	EstimateMedian = "median" // the key's histogram median
)

// BytesPerKey is the approximate memory one tracked key costs, excluding the
// bytes of its strings (see TestBytesPerKey).
const BytesPerKey = 400

// Errors returned by Observe.
var (
	// ErrBadDuration: a duration that is NaN-like, negative, zero or absurdly
	// large; it is never folded into an estimate.
	ErrBadDuration = errors.New("predict: duration must be positive and below the configured maximum")
)

// Config tunes a Predictor. The zero value of a field means its default.
type Config struct {
	Alpha           float64       // EWMA weight of a new observation, (0, 1]
	Decay           float64       // histogram weight kept per observation, (0, 1]
	MinObservations int           // a key with fewer is cold and takes the middle tier
	SpreadGate      float64       // p99/p50 above this takes the middle tier; negative disables
	Tiers           int           // number of tiers, 1..MaxTiers
	Window          int           // recent predicted costs the boundaries are quantiles of
	RecomputeEvery  int           // predictions between boundary recomputations
	MaxKeys         int           // tracked keys; the least recently used is evicted
	MaxDuration     time.Duration // longer observations are rejected
	Estimator       string        // EstimateEWMA or EstimateMedian
	NoSizeBucket    bool          // leave the size bucket out of keys
	// LongShare marks messages Long: the most expensive recent messages
	// that together make up this share of the recent predicted work (the
	// cut moved to the widest gap between neighbouring costs nearby), plus
	// every cold or spread-gated one. These are the jobs shortest-first
	// would starve. Negative disables.
	LongShare float64
	// LongKeys, when positive, also marks Long the messages of the
	// costliest keys: those whose slow mean duration (weight 0.05, a
	// running mean over a key's first twenty observations) is among the
	// top LongKeys share of the warm keys tracked (at least one key),
	// however little of the recent work they make up. The slow mean, not
	// the EWMA that orders messages, ranks keys, so that a costly kind of
	// job stays long through a few short runs. Only with LongShare. Zero
	// or negative is off: the predictor alone does not do it, the bounded
	// policy asks for it (sched.DefaultLongKeys).
	LongKeys float64
	// GateLongOnly applies the spread gate only to keys whose p99 is long
	// (by the LongShare and LongKeys cuts): a key whose slowest runs are
	// not long is predicted by its own estimate however spread its runs
	// are, so that short jobs whose measured times are noisy are not
	// treated as unknown, long work. Until the predictor has made enough
	// predictions to place a long cut, every spread key is gated. Only
	// with LongShare.
	GateLongOnly bool
	// GatedMean predicts a spread-gated key's messages at the key's slow
	// mean instead of the typical cost of the queue: they keep the middle
	// tier, but carry what the key costs on average, so shortest-first
	// orders them by expected cost (the order that minimises the mean wait
	// when single jobs of a key cannot be told apart), and they are Long
	// only as a warm key's would be (by the cuts, not for being spread).
	GatedMean bool
	// LongKeysByTail ranks keys for the LongKeys cut by the larger of
	// their slow mean and their p99 rather than the slow mean alone. A
	// key whose runs are mostly quick and sometimes minutes long learns
	// its mean late, from the runs that finished (its long runs are still
	// running), so its slow mean says short while its histogram's tail
	// already says long.
	LongKeysByTail bool
	// TailKeys, when above 0, marks TailLong the messages of a warm key
	// that is not Long but whose TailKeys quantile of durations (0.99: its
	// p99) reaches a long cut: its jobs are priced and ordered at their
	// key's cost, but some of them are among the longest jobs there are,
	// and a scheduler may hold them to their FIFO start as it does long
	// ones. Zero is off. Only with LongShare.
	TailKeys float64
	// TailKeysGated limits TailKeys to spread-gated keys.
	TailKeysGated bool
	// NearLongKeys, when above LongKeys, also marks TailLong the messages
	// of warm keys that are not Long but rank (as the LongKeys cut ranks
	// them) among the top NearLongKeys share of the warm keys: keys next
	// to the long ones, which a cut taken from a sample may leave out.
	// Zero is off.
	NearLongKeys float64
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Alpha == 0 {
		c.Alpha = DefaultAlpha
	}
	if c.Decay == 0 {
		c.Decay = DefaultDecay
	}
	if c.MinObservations == 0 {
		c.MinObservations = DefaultMinObservations
	}
	if c.SpreadGate == 0 {
		c.SpreadGate = DefaultSpreadGate
	}
	if c.Tiers == 0 {
		c.Tiers = DefaultTiers
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.RecomputeEvery == 0 {
		c.RecomputeEvery = DefaultRecomputeEvery
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = DefaultMaxKeys
	}
	if c.MaxDuration == 0 {
		c.MaxDuration = DefaultMaxDuration
	}
	if c.Estimator == "" {
		c.Estimator = EstimateEWMA
	}
	if c.LongShare == 0 {
		c.LongShare = DefaultLongShare
	}
	return c
}

// Validate reports the first setting that makes no sense, in plain words.
func (c Config) Validate() error {
	switch {
	case !(c.Alpha > 0 && c.Alpha <= 1):
		return fmt.Errorf("predict: alpha must be in (0, 1], got %v", c.Alpha)
	case !(c.Decay > 0 && c.Decay <= 1):
		return fmt.Errorf("predict: decay must be in (0, 1], got %v", c.Decay)
	case c.MinObservations < 1:
		return fmt.Errorf("predict: min observations must be at least 1, got %d", c.MinObservations)
	case math.IsNaN(c.SpreadGate) || (c.SpreadGate > 0 && c.SpreadGate < 1):
		return fmt.Errorf("predict: spread gate must be at least 1 (or negative to disable), got %v", c.SpreadGate)
	case c.Tiers < 1 || c.Tiers > MaxTiers:
		return fmt.Errorf("predict: tiers must be 1 to %d, got %d", MaxTiers, c.Tiers)
	case c.Window < 1 || c.Window > 1<<20:
		return fmt.Errorf("predict: window must be 1 to %d, got %d", 1<<20, c.Window)
	case c.RecomputeEvery < 1:
		return fmt.Errorf("predict: recompute interval must be at least 1, got %d", c.RecomputeEvery)
	case c.MaxKeys < 1:
		return fmt.Errorf("predict: max keys must be at least 1, got %d", c.MaxKeys)
	case c.MaxDuration <= 0:
		return fmt.Errorf("predict: max duration must be positive, got %v", c.MaxDuration)
	case math.IsNaN(c.LongShare) || c.LongShare > 1:
		return fmt.Errorf("predict: long share must be at most 1 (or negative to disable), got %v", c.LongShare)
	case math.IsNaN(c.LongKeys) || c.LongKeys > 1:
		return fmt.Errorf("predict: long keys must be at most 1 (0 or negative is off), got %v", c.LongKeys)
	case math.IsNaN(c.NearLongKeys) || c.NearLongKeys < 0 || c.NearLongKeys > 1:
		return fmt.Errorf("predict: near-long keys share must be 0 (off) to 1, got %v", c.NearLongKeys)
	case math.IsNaN(c.TailKeys) || c.TailKeys < 0 || c.TailKeys >= 1:
		return fmt.Errorf("predict: tail keys quantile must be 0 (off) or between 0 and 1, got %v", c.TailKeys)
	case c.Estimator != EstimateEWMA && c.Estimator != EstimateMedian:
		return fmt.Errorf("predict: unknown estimator %q (want %q or %q)", c.Estimator, EstimateEWMA, EstimateMedian)
	}
	return nil
}

// Key identifies what is learned about. SizeBucket is -1 when there is no
// size hint (or size buckets are off), else the bit length of the hint.
type Key struct {
	Queue, Producer, JobType string
	SizeBucket               int8
}

// Prediction is what the predictor says of one message.
type Prediction struct {
	Cost        time.Duration // predicted duration; for a cold or gated key, the typical duration of warm keys
	Tier        int           // 0 is served first
	Cold        bool          // too few observations to trust
	SpreadGated bool          // the key's p99/median is above the spread gate
	Long        bool          // among the most expensive LongShare of recent work, or cold, or gated
	TailLong    bool          // not Long, but the key's tail reaches a long cut (Config.TailKeys)
	Made        bool          // false for the zero Prediction
}

// Routed reports whether the prediction, not the default, chose the tier.
func (p Prediction) Routed() bool { return p.Made && !p.Cold && !p.SpreadGated }

type entry struct {
	key        Key
	count      uint64
	ewmaMS     float64
	meanMS     float64 // slow mean (keyMeanAlpha): what the LongKeys cut ranks keys by
	hist       histogram
	p50, p99   float64 // cached after each observation
	tier       int     // tier of the last prediction
	prev, next *entry  // LRU list, most recent at head
	warmIdx    int32   // index in Predictor.warm, -1 while the key is cold
	// The key's own accuracy over its routed predictions.
	absErrMS         float64
	scored, tierHits uint32
}

// Predictor learns per-key durations. It is not safe for concurrent use.
type Predictor struct {
	cfg        Config
	keys       map[Key]*entry
	head, tail *entry

	recent      []float64 // ring of recent warm predicted costs, ms
	recentN     int       // filled slots
	recentPos   int
	sincePlan   int
	boundaries  []float64 // ms; len Tiers-1; message goes to first tier whose boundary >= cost
	longMS      float64   // warm predictions at or above this cost are Long
	keyCutMS    float64   // and keys whose slow mean is at or above this one (LongKeys)
	nearCutMS   float64   // keys ranked at or above this one are TailLong (NearLongKeys)
	sinceKeys   int       // predictions since keyCutMS was computed
	sorted      []float64 // scratch for recomputing boundaries
	meanScratch []float64 // scratch for recomputing keyCutMS
	// The warm keys and their slow means, side by side, so that keyCut
	// reads one dense array rather than walking the keys' map.
	warm      []*entry
	warmMeans []float64
	typicalMS float64 // EWMA over all observations, the cost given to cold keys

	observations, rejected, evicted uint64
	absErrMS                        float64
	maeN                            uint64
	tierHits, tierN                 uint64
	// Observations not scored, by why (see Summary).
	unscoredCold, unscoredGated, unscoredNone uint64
}

// New returns a Predictor with cfg (zero fields take their defaults).
func New(cfg Config) (*Predictor, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Predictor{
		cfg:       cfg,
		keys:      make(map[Key]*entry),
		recent:    make([]float64, cfg.Window),
		longMS:    math.Inf(1),
		keyCutMS:  math.Inf(1),
		nearCutMS: math.Inf(1),
	}, nil
}

// Config returns the configuration in force.
func (p *Predictor) Config() Config { return p.cfg }

// KeyFor builds the key of a message. A zero size means no hint.
func (p *Predictor) KeyFor(queue, producer, jobType string, size uint64) Key {
	k := Key{Queue: queue, Producer: producer, JobType: jobType, SizeBucket: -1}
	if size > 0 && !p.cfg.NoSizeBucket {
		k.SizeBucket = int8(bits.Len64(size))
	}
	return k
}

// Predict estimates one enqueued message's cost and tier. Call it once per
// message: warm predictions also feed the tier boundaries.
func (p *Predictor) Predict(k Key) Prediction {
	e := p.keys[k]
	mid := p.cfg.Tiers / 2
	pr := Prediction{Made: true, Tier: mid, Cost: p.typical()}
	if e == nil || e.count < uint64(p.cfg.MinObservations) {
		// Nothing known could be anything, including the longest job there
		// is: it is held to its FIFO start like one.
		pr.Cold, pr.Long = true, p.cfg.LongShare > 0
		return pr
	}
	p.touch(e)
	if p.spreadGated(e) {
		pr.SpreadGated, pr.Long = true, p.cfg.LongShare > 0
		e.tier = mid
		if p.cfg.GatedMean && e.meanMS > 0 {
			pr.Cost = msToDuration(e.meanMS)
			p.record(e.meanMS)
			pr.Long = p.isLong(e.meanMS) || p.longKey(e)
		}
		pr.TailLong = !pr.Long && p.tailLong(e, true)
		return pr
	}
	cost := p.costOf(e)
	pr.Cost = msToDuration(cost)
	p.record(cost)
	pr.Tier = p.tierOf(cost)
	pr.Long = p.isLong(cost) || p.longKey(e)
	pr.TailLong = !pr.Long && p.tailLong(e, false)
	e.tier = pr.Tier
	return pr
}

// Observe folds a completed message's duration into its key. pred is what
// Predict said of that message (the zero Prediction if unknown); it is used
// only for the accuracy figures, which count routed predictions alone: a
// cold or spread-gated message was given the middle tier by default, and
// scoring that default would credit the predictor with guesses it never made.
func (p *Predictor) Observe(k Key, pred Prediction, d time.Duration) error {
	if d <= 0 || d > p.cfg.MaxDuration {
		p.rejected++
		return fmt.Errorf("%w: got %v (max %v)", ErrBadDuration, d, p.cfg.MaxDuration)
	}
	ms := float64(d) / float64(time.Millisecond)
	p.observations++
	var absErr float64
	var hit bool
	if pred.Routed() {
		absErr = math.Abs(float64(pred.Cost)/float64(time.Millisecond) - ms)
		hit = pred.Tier == p.tierOf(ms)
		p.absErrMS += absErr
		p.maeN++
		p.tierN++
		if hit {
			p.tierHits++
		}
	} else {
		switch {
		case !pred.Made:
			p.unscoredNone++
		case pred.Cold:
			p.unscoredCold++
		default:
			p.unscoredGated++
		}
	}
	if p.typicalMS == 0 {
		p.typicalMS = ms
	} else {
		p.typicalMS += 0.01 * (ms - p.typicalMS)
	}

	e := p.keys[k]
	if e == nil {
		e = p.insert(k)
	} else {
		p.touch(e)
	}
	if pred.Routed() && e.scored < math.MaxUint32 {
		e.absErrMS += absErr
		e.scored++
		if hit {
			e.tierHits++
		}
	}
	e.count++
	if e.count == 1 {
		e.ewmaMS, e.meanMS = ms, ms
	} else {
		e.ewmaMS += p.cfg.Alpha * (ms - e.ewmaMS)
		e.meanMS += max(keyMeanAlpha, 1/float64(e.count)) * (ms - e.meanMS)
	}
	e.hist.observe(d, p.cfg.Decay)
	e.p50 = e.hist.quantileMS(0.5)
	e.p99 = e.hist.quantileMS(0.99)
	p.noteCost(e)
	return nil
}

// noteCost keeps e's place among the warm keys' slow means up to date
// after what it learned changed.
func (p *Predictor) noteCost(e *entry) {
	if e.count < uint64(p.cfg.MinObservations) {
		return
	}
	if e.warmIdx < 0 {
		e.warmIdx = int32(len(p.warm))
		p.warm = append(p.warm, e)
		p.warmMeans = append(p.warmMeans, p.keyRank(e))
		return
	}
	p.warmMeans[e.warmIdx] = p.keyRank(e)
}

// dropWarm takes an evicted key out of the warm keys: the last one takes
// its place.
func (p *Predictor) dropWarm(e *entry) {
	i := e.warmIdx
	if i < 0 {
		return
	}
	last := len(p.warm) - 1
	p.warm[i], p.warmMeans[i] = p.warm[last], p.warmMeans[last]
	p.warm[i].warmIdx = i
	p.warm[last] = nil
	p.warm, p.warmMeans = p.warm[:last], p.warmMeans[:last]
	e.warmIdx = -1
}

// typical is the cost assumed for a message whose key cannot be trusted: the
// slowly moving mean of every observed duration.
func (p *Predictor) typical() time.Duration { return msToDuration(p.typicalMS) }

func msToDuration(ms float64) time.Duration {
	return time.Duration(ms * float64(time.Millisecond))
}

// tierOf maps a cost to its tier under the current boundaries. Until there
// are boundaries every message takes the middle tier.
func (p *Predictor) tierOf(ms float64) int {
	if len(p.boundaries) == 0 {
		return p.cfg.Tiers / 2
	}
	for i, b := range p.boundaries {
		if ms <= b {
			return i
		}
	}
	return len(p.boundaries)
}

func (p *Predictor) record(ms float64) {
	p.recent[p.recentPos] = ms
	p.recentPos = (p.recentPos + 1) % len(p.recent)
	p.recentN = min(p.recentN+1, len(p.recent))
	p.sincePlan++
	// While the window fills, recompute at every power of two as well, so the
	// first few predictions do not fix the tiers for a whole interval.
	warming := p.recentN < len(p.recent) && p.recentN&(p.recentN-1) == 0
	if warming || p.sincePlan >= p.cfg.RecomputeEvery {
		p.sincePlan = 0
		p.sorted = append(p.sorted[:0], p.recent[:p.recentN]...)
		slices.Sort(p.sorted)
		p.boundaries = boundaries(p.sorted, p.cfg.Tiers, p.boundaries)
		p.longMS = longCut(p.sorted, p.cfg.LongShare)
	}
	// The keys' cut visits every warm key's mean (a copy and a
	// quickselect of one dense array), so it is recomputed no more often
	// than once per key's worth of predictions: O(1) a prediction, and a
	// pause of about a quarter of a millisecond per 100,000 keys
	// (BenchmarkKeyCut).
	p.sinceKeys++
	if p.cfg.LongKeys > 0 && (warming || p.sinceKeys >= max(p.cfg.RecomputeEvery, len(p.keys))) {
		p.sinceKeys = 0
		p.keyCutMS = p.keyCut(p.cfg.LongKeys)
		if p.cfg.NearLongKeys > 0 {
			p.nearCutMS = p.keyCut(p.cfg.NearLongKeys)
		}
	}
}

// keyCut is the slow mean from which a warm key is among the costliest
// share of the warm keys (at least one); +Inf with no warm key.
func (p *Predictor) keyCut(share float64) float64 {
	if len(p.warmMeans) == 0 {
		return math.Inf(1)
	}
	means := append(p.meanScratch[:0], p.warmMeans...)
	p.meanScratch = means
	top := max(int(math.Ceil(float64(len(means))*share)), 1)
	return nthSmallest(means, len(means)-top)
}

// nthSmallest returns the value that would be at index n of xs sorted
// ascending (0 <= n < len(xs)), reordering xs: a quickselect, linear on
// average where a sort is n log n.
func nthSmallest(xs []float64, n int) float64 {
	lo, hi := 0, len(xs)-1
	for lo < hi {
		// Median of three as the pivot, so sorted input stays linear.
		mid := lo + (hi-lo)/2
		if xs[mid] < xs[lo] {
			xs[mid], xs[lo] = xs[lo], xs[mid]
		}
		if xs[hi] < xs[lo] {
			xs[hi], xs[lo] = xs[lo], xs[hi]
		}
		if xs[hi] < xs[mid] {
			xs[hi], xs[mid] = xs[mid], xs[hi]
		}
		pivot := xs[mid]
		i, j := lo, hi
		for i <= j {
			for xs[i] < pivot {
				i++
			}
			for xs[j] > pivot {
				j--
			}
			if i <= j {
				xs[i], xs[j] = xs[j], xs[i]
				i++
				j--
			}
		}
		switch {
		case n <= j:
			hi = j
		case n >= i:
			lo = i
		default:
			return xs[n] // between j and i: equal to the pivot
		}
	}
	return xs[n]
}

// costOf is what a warm key's messages are predicted to cost, in ms.
func (p *Predictor) costOf(e *entry) float64 {
	if p.cfg.Estimator == EstimateMedian {
		return e.p50
	}
	return e.ewmaMS
}

// spreadGated reports whether a warm key is spread past the gate (its p99
// more than SpreadGate times its median) and so takes the fallback: with
// GateLongOnly, only if its p99 is long as well, or if no long cut is
// known yet (too few predictions made).
func (p *Predictor) spreadGated(e *entry) bool {
	if p.cfg.SpreadGate <= 0 || e.p50 <= 0 || e.p99/e.p50 <= p.cfg.SpreadGate {
		return false
	}
	if !p.cfg.GateLongOnly || p.cfg.LongShare <= 0 {
		return true
	}
	noCut := math.IsInf(p.longMS, 1) && math.IsInf(p.keyCutMS, 1)
	return noCut || p.isLong(e.p99)
}

func (p *Predictor) isLong(ms float64) bool {
	return p.cfg.LongShare > 0 && (ms >= p.longMS || ms >= p.keyCutMS)
}

// tailLong reports whether a warm key's messages are TailLong: it ranks
// among the NearLongKeys, or its TailKeys quantile reaches a long cut
// (only if gated, with TailKeysGated).
func (p *Predictor) tailLong(e *entry, gated bool) bool {
	if p.cfg.NearLongKeys > 0 && p.keyRank(e) >= p.nearCutMS {
		return true
	}
	q := p.cfg.TailKeys
	if q <= 0 || p.cfg.TailKeysGated && !gated {
		return false
	}
	ms := e.p99
	if q != 0.99 {
		ms = e.hist.quantileMS(q)
	}
	return p.isLong(ms)
}

// keyRank is what the LongKeys cut ranks e by.
func (p *Predictor) keyRank(e *entry) float64 {
	if p.cfg.LongKeysByTail {
		return max(e.meanMS, e.p99)
	}
	return e.meanMS
}

// longKey reports whether a warm key is among the costliest LongKeys share
// of the keys by its slow mean.
func (p *Predictor) longKey(e *entry) bool {
	return p.cfg.LongShare > 0 && p.keyRank(e) >= p.keyCutMS
}

// Boundaries computes tier boundaries from a sample of costs: the
// (i+1)/tiers quantiles, each moved to the widest relative gap between
// neighbouring costs within half a tier of it. Costs cluster by key, and a
// boundary that cut through a cluster would split one key's messages between
// two tiers at random. costs is not modified.
func Boundaries(costs []float64, tiers int) []float64 {
	s := slices.Clone(costs)
	slices.Sort(s)
	return boundaries(s, tiers, nil)
}

// boundaries is Boundaries over sorted costs, reusing buf.
func boundaries(s []float64, tiers int, buf []float64) []float64 {
	buf = buf[:0]
	n := len(s)
	if tiers < 2 || n == 0 {
		return buf
	}
	half := n / (2 * tiers)
	for i := 1; i < tiers; i++ {
		k := i * n / tiers
		lo, hi := max(k-half, 1), min(k+half, n-1)
		best, bestGap := min(k, n-1), 0.0
		for j := lo; j <= hi; j++ {
			if s[j-1] <= 0 {
				continue
			}
			if g := s[j] / s[j-1]; g > bestGap {
				best, bestGap = j, g
			}
		}
		b := s[best]
		if bestGap > 1 {
			b = math.Sqrt(s[best-1] * s[best]) // geometric midpoint of the gap
		}
		if len(buf) > 0 && b < buf[len(buf)-1] {
			b = buf[len(buf)-1]
		}
		buf = append(buf, b)
	}
	return buf
}

func (p *Predictor) insert(k Key) *entry {
	if len(p.keys) >= p.cfg.MaxKeys && p.tail != nil {
		old := p.tail
		p.unlink(old)
		p.dropWarm(old)
		delete(p.keys, old.key)
		p.evicted++
	}
	e := &entry{key: k, tier: p.cfg.Tiers / 2, warmIdx: -1}
	p.keys[k] = e
	p.pushFront(e)
	return e
}

func (p *Predictor) touch(e *entry) {
	if p.head != e {
		p.unlink(e)
		p.pushFront(e)
	}
}

func (p *Predictor) pushFront(e *entry) {
	e.prev, e.next = nil, p.head
	if p.head != nil {
		p.head.prev = e
	}
	p.head = e
	if p.tail == nil {
		p.tail = e
	}
}

func (p *Predictor) unlink(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		p.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		p.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func nan() float64 { return math.NaN() }

// Record counts cost in the window of recent predicted costs that the tier
// boundaries and the long cut are drawn from, exactly as a warm Predict of
// that cost would, without predicting for any key: no key is touched and
// nothing is scored. A predictor of a fleet records the predictions its
// peers made, so that every member draws its tiers from the same mix of
// work. A cost that is not positive is ignored, as a warm prediction never
// has one.
func (p *Predictor) Record(cost time.Duration) {
	if cost <= 0 {
		return
	}
	p.record(float64(cost) / float64(time.Millisecond))
}

// Place tiers a message whose cost is known exactly (the simulator's oracle):
// the cost feeds the boundaries as a warm prediction would.
func (p *Predictor) Place(cost time.Duration) Prediction {
	ms := float64(cost) / float64(time.Millisecond)
	p.record(ms)
	return Prediction{Made: true, Cost: cost, Tier: p.tierOf(ms), Long: p.isLong(ms)}
}

// longCut returns the cost at and above which messages are long: the cut
// where the most expensive messages first add up to more than share of all
// the predicted work in sorted, moved to the widest relative gap between
// neighbouring costs within a sixteenth of the sample of it, so one key's
// messages are not split by noise. +Inf when nothing qualifies.
func longCut(sorted []float64, share float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.Inf(1)
	}
	total := 0.0
	for _, c := range sorted {
		total += c
	}
	acc, k := 0.0, n
	for k > 0 && acc+sorted[k-1] <= share*total {
		k--
		acc += sorted[k]
	}
	// sorted[k:] adds up to at most share; the cut lies between k-1 and k.
	m := max(n/16, 1)
	best, bestGap := k, 0.0
	for j := max(k-m, 1); j <= min(k+m, n-1); j++ {
		if sorted[j-1] > 0 {
			if g := sorted[j] / sorted[j-1]; g > bestGap {
				best, bestGap = j, g
			}
		}
	}
	if best >= n {
		return math.Inf(1)
	}
	if best == 0 || bestGap <= 1 {
		return sorted[best]
	}
	return math.Sqrt(sorted[best-1] * sorted[best])
}
