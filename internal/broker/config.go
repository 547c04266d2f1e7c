package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/fair"
	"github.com/harbinger-mq/harbinger/internal/history"
	"github.com/harbinger-mq/harbinger/internal/predict"
	"github.com/harbinger-mq/harbinger/internal/sched"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// Defaults for Config and QueueConfig.
const (
	DefaultMaxPayload      = 1 << 20 // bytes of payload per message
	DefaultMaxHeaderBytes  = 64 << 10
	DefaultMaxKeyLen       = 256 // bytes of producer and of job type
	DefaultMaxQueueName    = 128
	DefaultMaxKeysPerQueue = predict.DefaultMaxKeys
	DefaultMaxQueues       = 1024
	DefaultMaxConsumers    = 10_000
	DefaultMaxDepth        = 1_000_000
	DefaultMaxDeadLetters  = 100_000  // per queue; the oldest are dropped past it
	DefaultMaxBytes        = 1 << 30  // bytes held across the broker: see Config.MaxBytes
	DefaultCheckpointBytes = 64 << 20 // log size that first triggers a checkpoint
	DefaultLease           = 30 * time.Second
	DefaultMaxAttempts     = 5
	DefaultPolicy          = sched.DefaultPolicy
	DefaultRetryBase       = time.Second // first retry's delay; doubled per attempt
	DefaultRetryMax        = time.Minute
	DefaultRetryJitter     = 0.2       // each delay is drawn from ±20% of the curve
	DefaultMaxUniqueKeys   = 1_000_000 // per queue

	// MaxAttemptsLimit bounds any max-attempts setting.
	MaxAttemptsLimit = 10_000
	// MaxLease bounds any lease, so a typo cannot pin a job for a year.
	MaxLease = 24 * time.Hour
	// MinLease bounds any lease from below, as MinEvery bounds a
	// schedule's interval: a lease shorter than a round trip and the
	// worker's first renewal hands a running job to a second worker
	// before the first could ask for more time, and a lease of 1 ns
	// arms the queue's timer anew for each delivery.
	MinLease = time.Second
	// MaxDelay bounds how far ahead a job may be scheduled.
	MaxDelay = 365 * 24 * time.Hour
	// MaxInFlightLimit bounds QueueConfig.MaxInFlight.
	MaxInFlightLimit = 1 << 24
	// MaxKeepDone bounds QueueConfig.KeepDone: each costs about 120 bytes.
	MaxKeepDone = 1_000_000
	// MaxUniqueFor bounds a unique key's window.
	MaxUniqueFor = 30 * 24 * time.Hour
	// MaxUniqueKeyLen bounds a unique key, in bytes.
	MaxUniqueKeyLen = 1024
	// MaxTTL bounds any time to live.
	MaxTTL = 365 * 24 * time.Hour
	// MaxPayloadLimit bounds the max payload setting, so that a delivery
	// always fits a gRPC message with room to spare.
	MaxPayloadLimit = 256 << 20
)

// Config is the broker's limits and the defaults of its queues. The zero value
// of every field means its default; call WithDefaults then Validate.
type Config struct {
	// MaxPayload is the largest payload accepted, in bytes.
	MaxPayload int `yaml:"max_payload"`
	// MaxHeaderBytes bounds the summed length of a message's header keys and
	// values.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxKeyLen bounds producer and job type, in bytes.
	MaxKeyLen int `yaml:"max_key_len"`
	// MaxQueueName bounds queue names, in bytes.
	MaxQueueName int `yaml:"max_queue_name"`
	// MaxKeysPerQueue is how many predictor keys each queue tracks; the least
	// recently used is evicted past it.
	MaxKeysPerQueue int `yaml:"max_keys_per_queue"`
	// MaxQueues bounds the number of queues, declared or auto-created.
	MaxQueues int `yaml:"max_queues"`
	// MaxConsumers bounds open consumers across all queues.
	MaxConsumers int `yaml:"max_consumers"`
	// MaxDeadLetters bounds each queue's dead-letter list.
	MaxDeadLetters int `yaml:"max_dead_letters"`
	// MaxBytes bounds the memory the broker's jobs take, across every queue
	// and every state (ready, delayed, in flight, dead-lettered): a job
	// counts its payload, headers and names plus a fixed estimate of the
	// job itself (msgOverhead, 208 bytes) from publish until it is acked,
	// purged or dropped. A publish that would
	// pass it is refused with ErrOverBudget.
	MaxBytes int64 `yaml:"max_bytes"`
	// MaxUniqueKeys bounds each queue's index of unique keys whose window
	// is still open; a publish with a new key past it is refused.
	MaxUniqueKeys int `yaml:"max_unique_keys"`
	// MaxDuration is the longest ack duration the predictor learns from.
	MaxDuration time.Duration `yaml:"max_duration"`
	// Queue is the config of queues that were never declared, and the
	// defaults of the fields a declaration leaves zero.
	Queue QueueConfig `yaml:"queue"`
	// Store is where the broker keeps its jobs across restarts; nil keeps
	// them in memory only. The broker replays it in New and appends to it
	// from then on; the caller opens and closes it.
	Store store.Store `yaml:"-"`
	// CheckpointBytes is the log size past which the broker writes a
	// checkpoint and drops the history before it; after a checkpoint the
	// threshold is twice what is left, and after a restart twice the live
	// jobs recovered (never less than CheckpointBytes), so rewriting costs
	// at most about as much again as the log itself and the log follows
	// the live jobs across restarts.
	CheckpointBytes int64 `yaml:"checkpoint_bytes"`
	// History bounds each queue's record of its settled deliveries (see
	// internal/history): on by default, history.DefaultMaxBytes and
	// history.DefaultMaxAge per queue.
	History history.Config `yaml:"history"`
	// Clock is the source of every time read and timer; nil means clock.Real.
	Clock clock.Clock `yaml:"-"`
	// Logger receives lifecycle and shutdown logs; nil means slog.Default.
	Logger *slog.Logger `yaml:"-"`
}

// QueueConfig is one queue's scheduling and delivery settings. Zero fields
// take the broker's defaults (Config.Queue), then the package defaults.
type QueueConfig struct {
	// Policy is a scheduling policy name (see sched.Policies).
	Policy string `yaml:"policy"`
	// Tiers is the number of priority tiers.
	Tiers int `yaml:"tiers"`
	// Weights is the share of service per tier for the weighted policy.
	Weights []int `yaml:"weights"`
	// Aging holds the waiting time after which a job moves up one level, one
	// per tier (index 0 unused) or one per tier below the top.
	Aging []time.Duration `yaml:"aging"`
	// AgingOff turns aging (and the bounded policy's bound) off.
	AgingOff bool `yaml:"aging_off"`
	// StaticTiers maps job types to tiers for the static policy.
	StaticTiers map[string]int `yaml:"static_tiers"`
	// MaxDepth is the most ready jobs before publishes are refused.
	MaxDepth int `yaml:"max_depth"`
	// MaxInFlight is the most jobs of the queue delivered and not yet
	// settled, across every consumer: a bound on the work it sends to
	// whatever its handlers call. 0 is none.
	MaxInFlight int `yaml:"max_in_flight"`
	// KeepDone is how many of the queue's jobs that ended (acked or
	// cancelled) GetJob still reports, the most recent kept; in memory
	// only, about 120 bytes each. 0 is none.
	KeepDone int `yaml:"keep_done"`
	// MaxAttempts is the default number of deliveries before a job is
	// dead-lettered.
	MaxAttempts int `yaml:"max_attempts"`
	// Lease is the visibility timeout given with each delivery.
	Lease time.Duration `yaml:"lease"`
	// DefaultTTL applies to jobs published without a TTL; 0 is forever.
	DefaultTTL time.Duration `yaml:"default_ttl"`
	// RetryBase, RetryMax and RetryJitter shape the delay before a retry
	// the broker schedules (a nack with NackRetry): RetryBase doubled per
	// attempt, at most RetryMax, times a random factor in 1±RetryJitter.
	// A job may set its own base and max.
	RetryBase   time.Duration `yaml:"retry_base"`
	RetryMax    time.Duration `yaml:"retry_max"`
	RetryJitter float64       `yaml:"retry_jitter"`
	// Shadow predicts and records tiers without acting on them (FIFO order).
	Shadow bool `yaml:"shadow"`
	// GroupBy shares the queue's workers fairly, in predicted work,
	// between the groups of jobs with the same producer, job_type or
	// tenant (the tenant a producer names in the "tenant" header); empty
	// is no grouping. docs/limits.md has the rules.
	GroupBy string `yaml:"group_by"`
	// GroupWeights are named groups' weights in the shares (default 1).
	GroupWeights map[string]int `yaml:"group_weights"`
	// Limits are concurrency limits across the broker, each FIELD=MAX
	// ("tenant=5": at most 5 running per tenant) or FIELD:VALUE=MAX
	// ("job_type:export=2"). A job whose key is at its limit is skipped,
	// not waited for.
	Limits Rules `yaml:"limits"`
	// RateLimits are start-rate limits, each FIELD[:VALUE]=RATE[/s][:BURST]
	// ("producer:crawler=10/s:20"), a token bucket per key.
	RateLimits Rules `yaml:"rate_limits"`
	// Reserve is how many of the last free workers a group past its share
	// may not take with a long job while other groups have work (default
	// 2 with GroupBy); NoReserve turns the reservation off.
	Reserve   int  `yaml:"reserve"`
	NoReserve bool `yaml:"no_reserve"`
	// ReserveAbove: the reservation holds back only a job predicted at
	// least this many times the other groups' mean (default 4).
	ReserveAbove float64 `yaml:"reserve_above"`
	// ReserveWindow is how recently another group must have had work for
	// the reservation to hold, and the window a group's use of the
	// workers is averaged over (default 1s).
	ReserveWindow time.Duration `yaml:"reserve_window"`
	// Credit is the predicted work (over its weight) a group that had
	// nothing to run may be served ahead of the others when work comes
	// (default 200ms); NoCredit turns it off.
	Credit   time.Duration `yaml:"credit"`
	NoCredit bool          `yaml:"no_credit"`
}

// Rules are limits as text, one a rule; a config file or the command line
// may give one rule alone, not in a list.
type Rules []string

// UnmarshalYAML takes a list of rules or one rule.
func (r *Rules) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*r = Rules{n.Value}
		return nil
	}
	var list []string
	if err := n.Decode(&list); err != nil {
		return err
	}
	*r = list
	return nil
}

// fairConfig is the queue's limits and fair shares as the delivery line
// takes them, or an *InvalidError naming the setting that is wrong.
func (q QueueConfig) fairConfig() (fair.Config, error) {
	c := fair.Config{
		GroupBy: q.GroupBy, Weights: q.GroupWeights, Reserve: q.Reserve, NoReserve: q.NoReserve,
		ReserveAbove: q.ReserveAbove, ReserveWindow: q.ReserveWindow, Credit: q.Credit, NoCredit: q.NoCredit,
	}
	for i, s := range q.Limits {
		l, err := fair.ParseLimit(fmt.Sprintf("limits[%d]", i), s)
		if err != nil {
			return fair.Config{}, fairInvalid(err)
		}
		c.Limits = append(c.Limits, l)
	}
	for i, s := range q.RateLimits {
		r, err := fair.ParseRate(fmt.Sprintf("rate_limits[%d]", i), s)
		if err != nil {
			return fair.Config{}, fairInvalid(err)
		}
		c.Rates = append(c.Rates, r)
	}
	if err := c.Validate(); err != nil {
		return fair.Config{}, fairInvalid(err)
	}
	return c, nil
}

// fairInvalid words a refused limits declaration as the queue's settings
// name it.
func fairInvalid(err error) error {
	var ce *fair.ConfigError
	if !errors.As(err, &ce) {
		return invalid("limits", err.Error())
	}
	field := ce.Field
	switch {
	case strings.HasPrefix(field, "weights"):
		field = "group_" + field
	case strings.HasPrefix(field, "rates["):
		field = "rate_limits[" + strings.TrimPrefix(field, "rates[")
	}
	return invalid(field, ce.Reason)
}

// UnmarshalJSON reads a config as the log keeps it. A lease under
// MinLease, which brokers before the minimum took, reads as MinLease, so
// that a queue declared with one is recovered (and then given the
// minimum) instead of stopping the broker from starting.
func (q *QueueConfig) UnmarshalJSON(data []byte) error {
	type plain QueueConfig // without this method
	if err := json.Unmarshal(data, (*plain)(q)); err != nil {
		return err
	}
	if q.Lease > 0 && q.Lease < MinLease {
		q.Lease = MinLease
	}
	return nil
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxPayload, DefaultMaxPayload)
	def(&c.MaxHeaderBytes, DefaultMaxHeaderBytes)
	def(&c.MaxKeyLen, DefaultMaxKeyLen)
	def(&c.MaxQueueName, DefaultMaxQueueName)
	def(&c.MaxKeysPerQueue, DefaultMaxKeysPerQueue)
	def(&c.MaxQueues, DefaultMaxQueues)
	def(&c.MaxConsumers, DefaultMaxConsumers)
	def(&c.MaxDeadLetters, DefaultMaxDeadLetters)
	def(&c.MaxUniqueKeys, DefaultMaxUniqueKeys)
	if c.MaxDuration == 0 {
		c.MaxDuration = predict.DefaultMaxDuration
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.CheckpointBytes == 0 {
		c.CheckpointBytes = DefaultCheckpointBytes
	}
	c.Queue = c.Queue.WithDefaults(QueueConfig{})
	c.History = c.History.WithDefaults()
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports the first setting that makes no sense, in plain words.
func (c Config) Validate() error {
	pos := []struct {
		name string
		v    int
	}{
		{"max payload", c.MaxPayload}, {"max header bytes", c.MaxHeaderBytes},
		{"max key length", c.MaxKeyLen}, {"max queue name", c.MaxQueueName},
		{"max keys per queue", c.MaxKeysPerQueue}, {"max queues", c.MaxQueues},
		{"max consumers", c.MaxConsumers}, {"max dead letters", c.MaxDeadLetters},
		{"max unique keys", c.MaxUniqueKeys},
	}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("broker: %s must be positive, got %d", p.name, p.v)
		}
	}
	if c.MaxPayload > MaxPayloadLimit {
		return fmt.Errorf("broker: max payload must be at most %d bytes, got %d", MaxPayloadLimit, c.MaxPayload)
	}
	if c.MaxHeaderBytes > MaxPayloadLimit {
		return fmt.Errorf("broker: max header bytes must be at most %d, got %d", MaxPayloadLimit, c.MaxHeaderBytes)
	}
	if c.MaxBytes < int64(c.MaxPayload) {
		return fmt.Errorf("broker: max bytes (%d) must be at least the max payload (%d), or no full-size job fits", c.MaxBytes, c.MaxPayload)
	}
	if c.MaxDuration <= 0 {
		return fmt.Errorf("broker: max duration must be positive, got %v", c.MaxDuration)
	}
	if err := c.Queue.Validate(); err != nil {
		return err
	}
	if !c.History.Off {
		if err := c.History.Validate(); err != nil {
			return fmt.Errorf("broker: %w", err)
		}
	}
	return nil
}

// WithDefaults returns q with its zero fields taken from def, then from the
// package defaults.
func (q QueueConfig) WithDefaults(def QueueConfig) QueueConfig {
	if q.Policy == "" {
		q.Policy = def.Policy
	}
	if q.Shadow && (q.Policy == "" || q.Policy == sched.FIFO) {
		q.Policy = sched.Shadow
	}
	if q.Policy == "" {
		q.Policy = DefaultPolicy
	}
	if q.Policy == sched.Shadow {
		q.Shadow = true
	}
	if q.Tiers == 0 {
		q.Tiers = def.Tiers
	}
	if q.Tiers == 0 {
		q.Tiers = predict.DefaultTiers
	}
	if q.MaxDepth == 0 {
		q.MaxDepth = def.MaxDepth
	}
	if q.MaxDepth == 0 {
		q.MaxDepth = DefaultMaxDepth
	}
	if q.MaxInFlight == 0 {
		q.MaxInFlight = def.MaxInFlight
	}
	if q.KeepDone == 0 {
		q.KeepDone = def.KeepDone
	}
	if q.MaxAttempts == 0 {
		q.MaxAttempts = def.MaxAttempts
	}
	if q.MaxAttempts == 0 {
		q.MaxAttempts = DefaultMaxAttempts
	}
	if q.Lease == 0 {
		q.Lease = def.Lease
	}
	if q.Lease == 0 {
		q.Lease = DefaultLease
	}
	if q.DefaultTTL == 0 {
		q.DefaultTTL = def.DefaultTTL
	}
	durDef := func(v *time.Duration, d, pkg time.Duration) {
		if *v == 0 {
			*v = d
		}
		if *v == 0 {
			*v = pkg
		}
	}
	durDef(&q.RetryBase, def.RetryBase, DefaultRetryBase)
	durDef(&q.RetryMax, def.RetryMax, DefaultRetryMax)
	if q.RetryJitter == 0 {
		q.RetryJitter = def.RetryJitter
	}
	if q.RetryJitter == 0 {
		q.RetryJitter = DefaultRetryJitter
	}
	if len(q.Weights) == 0 && q.Policy == def.Policy {
		q.Weights = slices.Clone(def.Weights)
	}
	if len(q.Aging) == 0 && q.Policy == def.Policy {
		q.Aging = slices.Clone(def.Aging)
	}
	if q.GroupBy != "" {
		// The fair shares' settings mean something only between groups,
		// and fair refuses them without.
		if !q.NoReserve && q.Reserve == 0 {
			q.Reserve = fair.DefaultReserve
		}
		if q.ReserveAbove == 0 {
			q.ReserveAbove = fair.DefaultReserveAbove
		}
		if q.ReserveWindow == 0 {
			q.ReserveWindow = fair.DefaultReserveWindow
		}
		if !q.NoCredit && q.Credit == 0 {
			q.Credit = fair.DefaultCredit
		}
	}
	return q
}

// Validate reports the first setting that makes no sense, in plain words.
func (q QueueConfig) Validate() error {
	_, err := q.policy()
	return err
}

// policy resolves the config to a scheduling policy.
func (q QueueConfig) policy() (sched.Policy, error) {
	if q.Shadow && q.Policy != sched.Shadow {
		return sched.Policy{}, invalid("shadow", fmt.Sprintf("shadow mode routes as FIFO, so it cannot be combined with policy %q", q.Policy))
	}
	if q.MaxDepth < 0 {
		return sched.Policy{}, invalid("max_depth", fmt.Sprintf("must not be negative, got %d", q.MaxDepth))
	}
	if q.KeepDone < 0 || q.KeepDone > MaxKeepDone {
		return sched.Policy{}, invalid("keep_done", fmt.Sprintf("must be 0 (none) to %d, got %d", MaxKeepDone, q.KeepDone))
	}
	if q.MaxInFlight < 0 || q.MaxInFlight > MaxInFlightLimit {
		return sched.Policy{}, invalid("max_in_flight", fmt.Sprintf("must be 0 (no limit) to %d, got %d", MaxInFlightLimit, q.MaxInFlight))
	}
	if q.MaxAttempts < 0 || q.MaxAttempts > MaxAttemptsLimit {
		return sched.Policy{}, invalid("max_attempts", fmt.Sprintf("must be 1 to %d, got %d", MaxAttemptsLimit, q.MaxAttempts))
	}
	if q.Lease < 0 || (q.Lease > 0 && q.Lease < MinLease) || q.Lease > MaxLease {
		return sched.Policy{}, invalid("lease", fmt.Sprintf("must be 0 (default %v) or %v to %v, got %v", DefaultLease, MinLease, MaxLease, q.Lease))
	}
	if q.RetryBase < 0 || q.RetryBase > MaxNackDelay || q.RetryMax < 0 || q.RetryMax > MaxNackDelay {
		return sched.Policy{}, invalid("retry", fmt.Sprintf("retry base and max must be 0 (default) to %v, got %v and %v", MaxNackDelay, q.RetryBase, q.RetryMax))
	}
	if q.RetryJitter < 0 || q.RetryJitter > 1 {
		return sched.Policy{}, invalid("retry_jitter", fmt.Sprintf("must be 0 to 1, got %v", q.RetryJitter))
	}
	if q.DefaultTTL < 0 || q.DefaultTTL > MaxTTL {
		return sched.Policy{}, invalid("default_ttl", fmt.Sprintf("must be 0 (forever) to %v, got %v", MaxTTL, q.DefaultTTL))
	}
	if q.Tiers < 0 || q.Tiers > predict.MaxTiers {
		return sched.Policy{}, invalid("tiers", fmt.Sprintf("must be 1 to %d, got %d", predict.MaxTiers, q.Tiers))
	}
	opts := sched.PolicyOptions{Tiers: q.Tiers, Weights: q.Weights, AgingOff: q.AgingOff, StaticTiers: q.StaticTiers}
	if len(q.Aging) > 0 {
		tiers := max(q.Tiers, 1)
		switch len(q.Aging) {
		case tiers:
			opts.AgeAfter = slices.Clone(q.Aging)
		case tiers - 1:
			opts.AgeAfter = append([]time.Duration{0}, q.Aging...)
		default:
			return sched.Policy{}, invalid("aging", fmt.Sprintf("want one threshold per tier (%d), got %d", tiers, len(q.Aging)))
		}
	}
	for jt := range q.StaticTiers {
		// Kept in the config, shown and answered with it, whatever the
		// policy: a job type must be text, as a message's is.
		if !utf8.ValidString(jt) {
			return sched.Policy{}, invalid("static_tiers", fmt.Sprintf("job type %q is not valid UTF-8", jt))
		}
	}
	if q.Policy == sched.Static {
		for jt, t := range q.StaticTiers {
			if t < 0 || t >= max(q.Tiers, 1) {
				return sched.Policy{}, invalid("static_tiers", fmt.Sprintf("tier of job type %q must be 0 to %d, got %d", jt, max(q.Tiers, 1)-1, t))
			}
		}
	}
	p, err := sched.NewPolicy(q.Policy, opts)
	if err != nil {
		return sched.Policy{}, invalid("policy", err.Error())
	}
	if _, err := q.fairConfig(); err != nil {
		return sched.Policy{}, err
	}
	return p, nil
}

func invalid(field, reason string) error { return &InvalidError{Field: field, Reason: reason} }
