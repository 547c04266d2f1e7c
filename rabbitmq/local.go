package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/harbinger-mq/harbinger/internal/predict"
)

// LocalConfig configures an in-process predictor. The zero value of a field
// means its default (those of Harbinger's broker).
type LocalConfig struct {
	Tiers           int     // number of tiers, default 5
	MaxPriority     uint8   // the queues' x-max-priority, default 5; sets Priority.AMQP
	Alpha           float64 // EWMA weight of a new observation, default 0.2
	MinObservations int     // a key with fewer observations is cold, default 3
	SpreadGate      float64 // p99/p50 above this takes the middle tier, default 16; negative disables
	Window          int     // recent predicted costs the tier boundaries are quantiles of, default 1024
	RecomputeEvery  int     // predictions between boundary recomputations, default 256 (predict.DefaultRecomputeEvery)
	MaxKeys         int     // tracked keys, least recently used evicted, default 100000
	NoSizeBucket    bool    // leave the size out of keys
	// GateAll applies the spread gate to every key, as Harbinger's broker
	// does. By default it applies only to keys whose p99 is long (by the
	// LongShare and LongKeys cuts): without a guard on every message, a
	// gated message is held like unknown long work, and the shortest keys,
	// whose measured times are most spread by the wait for a core on a
	// loaded machine, were held that way (docs/sidecar.md).
	GateAll bool
	// LongShare: the most expensive recent messages that together make up
	// this share of the recent predicted work are Long and take the top
	// priority, as are cold and gated keys' messages; default 0.2, negative
	// disables (tiers only).
	LongShare float64
	// LongKeys: the messages of the costliest keys, those whose slow mean
	// duration is among the top LongKeys share of the warm keys (at least
	// one), are Long too, as in the broker's default policy; default
	// DefaultLongKeys, negative disables. With LongShare negative no
	// message is Long and this does nothing.
	LongKeys float64
	// Hold is the share of its FIFO wait a long message is held before it
	// takes the top priority (see HoldQueueArgs), default DefaultHold;
	// negative disables holding. It applies only to queues that Consume
	// drains with this predictor, since only then is the backlog known, and
	// only to publishers with a HoldQueue.
	Hold float64
	// MaxHold caps a hold, default DefaultMaxHold.
	MaxHold time.Duration
	// MaxQueues caps the queues whose backlog is tracked (those with
	// handlers attached), default DefaultMaxQueues. The predictor's keys
	// are capped by MaxKeys; this bounds the rest of Local's per-queue
	// state, so that a sidecar's clients cannot grow it without limit by
	// attaching handlers to ever new queue names.
	MaxQueues int
}

// DefaultLongKeys is LocalConfig.LongKeys' default: the costliest
// twentieth of the warm keys, the broker's default policy's share
// (docs/policy.md).
const DefaultLongKeys = 0.05

// DefaultMaxQueues is LocalConfig.MaxQueues' default: far more queues than
// one process or sidecar drains, far fewer than would cost real memory.
const DefaultMaxQueues = 4096

// ErrTooManyQueues is returned by TryAttach for a queue that would take the
// queues with handlers attached past LocalConfig.MaxQueues.
var ErrTooManyQueues = errors.New("rabbitmq: too many queues with handlers attached")

// WithDefaults returns c with every zero field set to its default.
func (c LocalConfig) WithDefaults() LocalConfig {
	if c.Tiers == 0 {
		c.Tiers = DefaultTiers
	}
	if c.MaxPriority == 0 {
		c.MaxPriority = DefaultMaxPriority
	}
	if c.Hold == 0 {
		c.Hold = DefaultHold
	}
	if c.MaxHold == 0 {
		c.MaxHold = DefaultMaxHold
	}
	if c.MaxQueues == 0 {
		c.MaxQueues = DefaultMaxQueues
	}
	if c.LongKeys == 0 {
		c.LongKeys = DefaultLongKeys
	}
	return c
}

func (c LocalConfig) validate() error {
	switch {
	case math.IsNaN(c.Hold) || c.Hold > 1:
		return fmt.Errorf("rabbitmq: hold must be at most 1 (negative disables), got %v", c.Hold)
	case c.MaxHold < 0:
		return fmt.Errorf("rabbitmq: max hold must be positive, got %v", c.MaxHold)
	case c.MaxQueues < 1:
		return fmt.Errorf("rabbitmq: max queues must be at least 1, got %d", c.MaxQueues)
	}
	return nil
}

func (c LocalConfig) predictConfig() predict.Config {
	return predict.Config{
		Alpha:           c.Alpha,
		MinObservations: c.MinObservations,
		SpreadGate:      c.SpreadGate,
		Tiers:           c.Tiers,
		Window:          c.Window,
		RecomputeEvery:  c.RecomputeEvery,
		MaxKeys:         c.MaxKeys,
		NoSizeBucket:    c.NoSizeBucket,
		LongShare:       c.LongShare,
		LongKeys:        c.LongKeys,
		GateLongOnly:    !c.GateAll,
	}
}

// Local is Harbinger's predictor in the publisher's own process: the same
// code as the broker's, behind a mutex. It learns only from what this
// process observes; use the sidecar to share learning between processes.
// When this process also consumes a queue (Consume), Local tracks the
// queue's backlog and holds long messages (LocalConfig.Hold).
type Local struct {
	cfg LocalConfig

	mu          sync.Mutex
	p           *predict.Predictor
	backlog     backlog
	long        longKeys
	peers       Peers    // nil: holds from this process's own counts
	predictions []uint64 // by tier
	cold, held  uint64
}

// NewLocal returns an in-process predictor.
func NewLocal(cfg LocalConfig) (*Local, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p, err := predict.New(cfg.predictConfig())
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: %w", err)
	}
	return &Local{cfg: cfg, p: p, backlog: newBacklog(cfg.MaxQueues), long: newLongKeys(p.Config().Window, p.Config().RecomputeEvery, p.Config().LongShare), predictions: make([]uint64, cfg.Tiers)}, nil
}

// Config returns the configuration in force.
func (l *Local) Config() LocalConfig { return l.cfg }

// Peers is what the other predictors of a fleet (sidecars that each see
// part of a queue's publishes and completions) report of a queue: the sum
// of their net work (predicted work published through them minus that of
// the completions reported to them; negative where they complete what
// others published) and of their handlers. The sidecar implements it from
// the totals the fleet exchanges. Backlog is called with Local's lock
// held, so it must not call back into Local.
type Peers interface {
	Backlog(queue string) (net time.Duration, consumers int)
}

// QueueTotals is one queue's share of a fleet's backlog as one predictor
// counts it: Net is the predicted work published through it minus the
// predicted work of the completions reported to it, Consumers its attached
// handlers.
type QueueTotals struct {
	Net       time.Duration
	Consumers int
}

// SetPeers makes holds count the whole fleet: a long message's hold is
// then share of (this predictor's net work plus the peers', floored at
// zero) over (this predictor's handlers plus the peers'). From then on
// Local counts the net work of every queue it predicts or completes for
// (up to LocalConfig.MaxQueues), whether or not handlers are attached
// here, since publishers and consumers may use different predictors. Set
// it before the first prediction: net work counted before is lost, and
// setting it again keeps the counts. nil goes back to this process's own
// counts.
func (l *Local) SetPeers(p Peers) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.peers = p
	if p != nil && l.backlog.net == nil {
		l.backlog.net = make(map[string]time.Duration)
	}
}

// Totals returns this predictor's share of each queue's backlog, for the
// fleet: every queue with handlers attached, and with peers set every
// queue whose net work is counted.
func (l *Local) Totals() map[string]QueueTotals {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]QueueTotals, len(l.backlog.consumers)+len(l.backlog.net))
	for q, n := range l.backlog.net {
		out[q] = QueueTotals{Net: n, Consumers: l.backlog.consumers[q]}
	}
	for q, c := range l.backlog.consumers {
		if _, ok := out[q]; !ok {
			out[q] = QueueTotals{Net: l.backlog.work[q], Consumers: c}
		}
	}
	return out
}

// Predict implements Predictor. It never fails. The message counts in its
// queue's backlog until Consume reports it completed. It keeps nothing for
// a key or queue it has not seen: a key never observed gets the cold default
// and is not remembered, and only queues with handlers attached have a
// backlog.
func (l *Local) Predict(_ context.Context, k Key) (Priority, error) {
	return l.predict(k, -1), nil
}

// PredictCounted is Predict for a message its publisher already sent with
// an earlier answer for its key (Remote's cache, RemoteOptions.CacheFor),
// whose predicted duration, stamped on the message, was counted: that is
// what its queue's backlog counts, so that the stamp its consumer reports
// takes out exactly what went in. The answer, fresh, is for the publisher's
// next message of the key; the fresh prediction is what enters the tier
// window.
func (l *Local) PredictCounted(_ context.Context, k Key, counted time.Duration) (Priority, error) {
	return l.predict(k, max(counted, 0)), nil
}

// predict predicts for k and counts the message in its queue's backlog at
// counted, or at the prediction when counted is negative.
func (l *Local) predict(k Key, counted time.Duration) Priority {
	l.mu.Lock()
	pk := l.keyFor(k)
	pr := l.p.Predict(pk)
	if pr.Routed() {
		pr.Long = l.long.mark(pk, pr.Cost, pr.Long)
	}
	l.predictions[pr.Tier]++
	if !pr.Routed() {
		l.cold++
	}
	var hold time.Duration
	if pr.Long {
		hold = l.backlog.hold(k.Queue, l.cfg.Hold, l.cfg.MaxHold, l.peers)
		if hold > 0 && counted < 0 {
			l.held++
		}
	}
	if counted < 0 {
		counted = pr.Cost
	}
	l.backlog.published(k.Queue, counted)
	l.mu.Unlock()
	return Priority{
		Tier:        pr.Tier,
		AMQP:        PriorityFor(pr.Tier, l.cfg.Tiers, pr.Long, l.cfg.MaxPriority),
		Predicted:   pr.Cost,
		Cold:        !pr.Routed(),
		SpreadGated: pr.SpreadGated,
		Long:        pr.Long,
		Hold:        hold,
	}
}

// Observe implements Predictor. It fails only for a duration that is not
// positive or is absurdly long.
func (l *Local) Observe(_ context.Context, k Key, d time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.p.Observe(l.keyFor(k), predict.Prediction{}, d); err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	return nil
}

// ObservePeer is Observe for a completion reported to another predictor
// of a fleet that does not share its predictions (a sidecar without
// batches; see RecordPeer for one that does). Besides learning the
// duration it counts the key's predicted cost in the recent window that
// the tier boundaries and the long cut are drawn from, standing in for the
// prediction that peer made: without that, each sidecar would draw its
// boundaries from its own publishers' mix of jobs alone, and sidecars whose
// publishers send different kinds of work would give the same cost
// different tiers. It is an approximation: in a fleet of n, the kinds of
// job this predictor's own publishers send count up to twice as much as
// the others.
func (l *Local) ObservePeer(_ context.Context, k Key, d time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	pk := l.keyFor(k)
	if err := l.p.Observe(pk, predict.Prediction{}, d); err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	if pr := l.p.Predict(pk); pr.Routed() {
		l.long.mark(pk, pr.Cost, pr.Long)
	}
	return nil
}

// RecordPeer counts a prediction another predictor of a fleet made for its
// own clients (a sidecar folding in a peer's shared prediction) in the
// recent window that the tier boundaries and the long cut are drawn from,
// as Predict does for this predictor's own clients; cost is what that
// predictor predicted for k. Nothing is learned about k's duration and no
// backlog changes: a peer counts its own publishes in its own backlog
// totals. When every member of a fleet records the others' predictions,
// every member draws its tiers from the same window, the fleet's own mix
// of published work, up to the time the predictions take to arrive. A peer
// that shares its predictions must not also have its completions counted
// in the window (ObservePeer), or they would count twice: fold those with
// Observe.
func (l *Local) RecordPeer(k Key, cost time.Duration) {
	if cost <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.p.Record(cost)
	l.long.mark(l.keyFor(k), cost, false)
}

// Forget takes a message that never reached its queue (its publish
// failed) out of the queue's backlog; predicted is what Predict said of it.
func (l *Local) Forget(_ context.Context, queue string, predicted time.Duration) {
	if !l.possible(predicted) {
		return
	}
	l.mu.Lock()
	l.backlog.completed(queue, predicted)
	l.mu.Unlock()
}

// possible reports whether a stamped prediction is one this predictor
// could have made: at most the longest duration it learns. The stamp is a
// header any publisher can set, and the backlog a running sum: one
// impossible stamp (292 years) would sink its queue's backlog for good.
func (l *Local) possible(predicted time.Duration) bool {
	return predicted >= 0 && predicted <= l.p.Config().MaxDuration
}

// ObserveStamped is Observe for a message whose publisher stamped it
// (Consume reads the stamp from its headers): it also takes the message
// out of its queue's backlog and scores the prediction (MAE, tier
// accuracy).
func (l *Local) ObserveStamped(_ context.Context, k Key, s Stamp, took time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var pr predict.Prediction // an impossible stamp is neither counted nor scored
	if l.possible(s.Predicted) {
		l.backlog.completed(k.Queue, s.Predicted)
		pr = predict.Prediction{Cost: s.Predicted, Tier: s.Tier, Cold: s.Cold, Made: true}
	}
	if err := l.p.Observe(l.keyFor(k), pr, took); err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	return nil
}

// Attach adds handlers (negative: removes them) to the count of those
// draining queue; Consume calls it. While a queue has handlers, Local
// tracks its backlog and holds its long messages. A new queue beyond
// LocalConfig.MaxQueues is not tracked, so its long messages are not held
// (see TryAttach).
func (l *Local) Attach(ctx context.Context, queue string, handlers int) {
	_ = l.TryAttach(ctx, queue, handlers)
}

// TryAttach is Attach that reports a queue it could not track: it returns
// ErrTooManyQueues, and changes nothing, when handlers are added to a queue
// without any while LocalConfig.MaxQueues queues have handlers already.
func (l *Local) TryAttach(_ context.Context, queue string, handlers int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.backlog.attach(queue, handlers, l.cfg.MaxQueues) {
		return fmt.Errorf("%w: handlers are attached to %d queues, the most tracked (LocalConfig.MaxQueues); detach them from queues no longer consumed", ErrTooManyQueues, l.cfg.MaxQueues)
	}
	return nil
}

// KeyStats is what a predictor knows of one key. Key.Size is a
// representative size of the key's size bucket (0 when there is none).
type KeyStats struct {
	Key            Key
	Count          uint64
	EWMA, P50, P99 time.Duration
	Tier           int
	Cold           bool
}

// MaxNameLen is the longest producer or job type a key keeps, in bytes,
// as the broker's default max-key-len. Keys come from message headers that
// anything publishing to RabbitMQ can set; a longer name is cut at a
// character boundary (and invalid UTF-8 replaced), so that its memory is
// bounded: names that share their first MaxNameLen bytes share a key.
const MaxNameLen = 256

// keyFor is k as the predictor's key, its names cleaned (MaxNameLen).
func (l *Local) keyFor(k Key) predict.Key {
	return l.p.KeyFor(k.Queue, cleanName(k.Producer), cleanName(k.JobType), k.Size)
}

func cleanName(s string) string {
	c := clean(s, MaxNameLen)
	if len(s) > MaxNameLen {
		c = strings.Clone(c) // not a window on a header kept whole
	}
	return c
}

// Keys returns up to limit keys (all when limit <= 0), busiest first.
func (l *Local) Keys(limit int) []KeyStats {
	l.mu.Lock()
	ks := l.p.Keys(limit)
	l.mu.Unlock()
	out := make([]KeyStats, len(ks))
	for i, s := range ks {
		out[i] = keyStats(s)
	}
	return out
}

// Lookup returns what is known of k.
func (l *Local) Lookup(k Key) (KeyStats, bool) {
	l.mu.Lock()
	s, ok := l.p.Lookup(l.keyFor(k))
	l.mu.Unlock()
	return keyStats(s), ok
}

func keyStats(s predict.KeyStats) KeyStats {
	return KeyStats{
		Key:   Key{Queue: s.Key.Queue, Producer: s.Key.Producer, JobType: s.Key.JobType, Size: bucketSize(s.Key.SizeBucket)},
		Count: s.Count, EWMA: s.EWMA, P50: s.P50, P99: s.P99, Tier: s.Tier, Cold: s.Cold,
	}
}

// bucketSize returns the smallest size in a size bucket (bucket b holds
// sizes of bit length b), which maps back onto the same bucket.
func bucketSize(b int8) uint64 {
	if b <= 0 {
		return 0
	}
	return 1 << (b - 1)
}

// LocalStats are a Local predictor's overall figures, for metrics.
type LocalStats struct {
	Keys         int
	Observations uint64
	Rejected     uint64
	Evicted      uint64
	MAE          time.Duration // over MAESamples completions of routed predictions
	MAESamples   uint64
	TierAccuracy float64 // over TierSamples completions; NaN when unknown
	TierSamples  uint64
	Boundaries   []time.Duration
	Predictions  []uint64 // by tier
	Cold         uint64   // predictions that took the default tier
	Held         uint64   // long messages given a hold
	// Queues is how many queues have handlers attached, and so a tracked
	// backlog; at most LocalConfig.MaxQueues.
	Queues int
	// Backlog is the predicted work published and not yet completed, by
	// queue, for the queues this process consumes.
	Backlog map[string]time.Duration
}

// Stats returns the overall figures.
func (l *Local) Stats() LocalStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.p.Summary()
	return LocalStats{
		Keys: s.Keys, Observations: s.Observations, Rejected: s.Rejected, Evicted: s.Evicted,
		MAE: s.MAE, MAESamples: s.MAESamples, TierAccuracy: s.TierAccuracy, TierSamples: s.TierSamples, Boundaries: s.Boundaries,
		Predictions: append([]uint64(nil), l.predictions...), Cold: l.cold, Held: l.held,
		Queues: len(l.backlog.consumers), Backlog: maps.Clone(l.backlog.work),
	}
}

// clean returns s with invalid UTF-8 replaced by U+FFFD and cut to at most
// n bytes on a character boundary: the broker's rule for names (its
// internal/text, which this module cannot import; the root module's
// internal/sdk checks that the two agree).
func clean(s string, n int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
