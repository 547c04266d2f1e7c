package web

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/predict"
)

// The views are what the JSON read API returns and what the pages render:
// one struct for both, built from the broker's inspector methods. Durations
// are milliseconds; a figure that does not exist yet (no sample, no
// observation) is null.

// QueueView is one queue: docs/dashboard.md describes its fields.
type QueueView struct {
	Name         string   `json:"name"`
	Paused       bool     `json:"paused"`
	Ready        int      `json:"ready"`
	ReadyPerTier []int    `json:"ready_per_tier"`
	InFlight     int      `json:"in_flight"`
	Delayed      int      `json:"delayed"`
	DeadLetters  int      `json:"dead_letters"`
	Consumers    int      `json:"consumers"`
	PublishPerS  *float64 `json:"publish_per_s"`
	AckPerS      *float64 `json:"ack_per_s"`

	// Waits of the jobs waiting now; OldestWaitMS is the starvation signal.
	OldestWaitMS float64 `json:"oldest_wait_ms"`
	WaitP50MS    float64 `json:"wait_p50_ms"`
	WaitP99MS    float64 `json:"wait_p99_ms"`
	// Run time of acked jobs since the broker started, measured within
	// broker.QuantileAccuracy (1%); null before the first ack.
	DurationP50MS *float64 `json:"duration_p50_ms"`
	DurationP99MS *float64 `json:"duration_p99_ms"`

	Published    uint64 `json:"published"`
	Delivered    uint64 `json:"delivered"`
	Acked        uint64 `json:"acked"`
	Nacked       uint64 `json:"nacked"`
	Redelivered  uint64 `json:"redelivered"`
	DeadLettered uint64 `json:"dead_lettered"`
	Expired      uint64 `json:"expired"`

	Config    ConfigView    `json:"config"`
	Predictor PredictorView `json:"predictor"`
	// WhatIf is the "what if" panel, on the queue page when asked for
	// (?whatif=WINDOW); its JSON is /api/v1/queues/{name}/whatif.
	WhatIf *WhatIfView `json:"-"`

	// Groups are the queue's groups under limits or fair shares (the
	// busiest broker.MaxGroupsShown), GroupCount how many it has; none
	// without limits. Throttled and Reserved: see broker.QueueInfo.
	Groups     []GroupView `json:"groups,omitempty"`
	GroupCount int         `json:"group_count,omitempty"`
	Throttled  uint64      `json:"throttled,omitempty"`
	Reserved   uint64      `json:"reserved,omitempty"`
}

// GroupView is one group of a queue with limits or fair shares.
type GroupView struct {
	Name    string `json:"name"`
	Weight  int    `json:"weight"`
	Running int    `json:"running"`
	Limit   int    `json:"limit"` // on the group's own key; 0 is none
	Waiting int    `json:"waiting"`
	// WorkShare is its share of the worker time of the jobs that ended in
	// the last minute; Throttled, its jobs that found a key at its limit
	// or out of tokens.
	WorkShare float64 `json:"work_share"`
	Throttled uint64  `json:"throttled"`
}

// ConfigView is a queue's settings.
type ConfigView struct {
	Policy       string         `json:"policy"`
	Tiers        int            `json:"tiers"`
	Weights      []int          `json:"weights,omitempty"`
	AgingMS      []float64      `json:"aging_ms,omitempty"`
	AgingOff     bool           `json:"aging_off"`
	StaticTiers  map[string]int `json:"static_tiers,omitempty"`
	MaxDepth     int            `json:"max_depth"`
	MaxInFlight  int            `json:"max_in_flight"` // 0 is no limit
	KeepDone     int            `json:"keep_done"`     // ended jobs GetJob still reports; 0 is none
	MaxAttempts  int            `json:"max_attempts"`
	LeaseMS      float64        `json:"lease_ms"`
	DefaultTTLMS float64        `json:"default_ttl_ms"`
	Shadow       bool           `json:"shadow"`
	GroupBy      string         `json:"group_by,omitempty"`
	Limits       []string       `json:"limits,omitempty"`
	RateLimits   []string       `json:"rate_limits,omitempty"`
	// The fair shares' settings, with group_by; Reserve and CreditMS 0
	// are turned off.
	Reserve         int     `json:"reserve,omitempty"`
	ReserveAbove    float64 `json:"reserve_above,omitempty"`
	ReserveWindowMS float64 `json:"reserve_window_ms,omitempty"`
	CreditMS        float64 `json:"credit_ms,omitempty"`
}

// PredictorView is what a queue's predictor learned, and how well it
// predicts.
type PredictorView struct {
	Keys         int       `json:"keys"`
	Evicted      uint64    `json:"evicted"`
	Observations uint64    `json:"observations"`
	Rejected     uint64    `json:"rejected"`
	MAEMS        *float64  `json:"mae_ms"`        // mean |predicted - actual| of routed predictions
	MAESamples   uint64    `json:"mae_samples"`   // how many
	TierAccuracy *float64  `json:"tier_accuracy"` // share of routed predictions in the right tier
	TierSamples  uint64    `json:"tier_samples"`
	BoundariesMS []float64 `json:"boundaries_ms"` // tier boundaries, ascending
	// Mean predicted and actual run time of acked jobs.
	MeanPredictedMS *float64 `json:"mean_predicted_ms"`
	MeanActualMS    *float64 `json:"mean_actual_ms"`
	// Observations not scored, by why: their job was predicted while its
	// key was cold, or spread-gated, or had no prediction at all.
	UnscoredCold        uint64 `json:"unscored_cold"`
	UnscoredGated       uint64 `json:"unscored_gated"`
	UnscoredUnpredicted uint64 `json:"unscored_unpredicted"`
	// WhyUnscored says in a sentence why nothing was scored, when the
	// predictor learned from jobs but scored none; "" otherwise.
	WhyUnscored string `json:"why_unscored,omitempty"`
}

// KeyView is what the predictor learned about one key: a producer, a job
// type and a payload size bucket.
type KeyView struct {
	Producer   string  `json:"producer"`
	JobType    string  `json:"job_type"`
	SizeBucket int     `json:"size_bucket"` // -1 when jobs carry no size
	Count      uint64  `json:"count"`
	EWMAMS     float64 `json:"ewma_ms"`
	// Run time of the key's jobs acked since the broker started, measured
	// within broker.QuantileAccuracy; null when none was.
	P50MS       *float64 `json:"p50_ms"`
	P99MS       *float64 `json:"p99_ms"`
	Tier        int      `json:"tier"`
	Cold        bool     `json:"cold"`         // too few observations: routed by default
	SpreadGated bool     `json:"spread_gated"` // p99/p50 too wide to trust: routed by default
	// Long: its next job would be marked long, and under the default
	// policy start no later than FIFO would start it.
	Long bool `json:"long"`
	// Predicted against actual over the key's routed predictions (Scored
	// of them); null while none were scored.
	MAEMS        *float64 `json:"mae_ms"`
	TierAccuracy *float64 `json:"tier_accuracy"`
	Scored       uint64   `json:"scored"`
}

// KeysView is a queue's learned keys, searched and sorted.
type KeysView struct {
	Queue     string        `json:"queue"`
	Predictor PredictorView `json:"predictor"`
	Total     int           `json:"total"` // keys before the search
	Keys      []KeyView     `json:"keys"`
	Search    string        `json:"search"`
	Sort      string        `json:"sort"`
	Desc      bool          `json:"desc"`
}

// WaitingView is a job waiting in line.
type WaitingView struct {
	Position  int        `json:"position"` // 1 runs next
	ID        string     `json:"id"`
	Producer  string     `json:"producer"`
	JobType   string     `json:"job_type"`
	Tier      int        `json:"tier"`
	Level     int        `json:"level"` // after aging
	CostMS    float64    `json:"predicted_ms"`
	Long      bool       `json:"long"`
	Cold      bool       `json:"cold"`
	Attempts  int        `json:"attempts"`
	WaitedMS  float64    `json:"waited_ms"`
	ExpiresAt *time.Time `json:"expires_at"` // the TTL deadline; null is never
}

// InFlightView is a job a consumer is running.
type InFlightView struct {
	ID          string    `json:"id"`
	Producer    string    `json:"producer"`
	JobType     string    `json:"job_type"`
	Consumer    string    `json:"consumer"`
	Attempt     int       `json:"attempt"`
	CostMS      float64   `json:"predicted_ms"`
	ElapsedMS   float64   `json:"elapsed_ms"`
	LeaseEnds   time.Time `json:"lease_ends"`
	Overrunning bool      `json:"overrunning"` // running longer than predicted
}

// DeadLetterView is a job that ran out of attempts, expired or was nacked
// to the dead-letter list.
type DeadLetterView struct {
	ID          string    `json:"id"`
	Producer    string    `json:"producer"`
	JobType     string    `json:"job_type"`
	Attempts    int       `json:"attempts"`
	Reason      string    `json:"reason"`
	PublishedAt time.Time `json:"published_at"`
	DeadAt      time.Time `json:"dead_at"`
	PayloadSize int       `json:"payload_bytes"`
}

// DelayedView is a job waiting for a due time: published to run later, or
// nacked with a delay and waiting for its next try (retry).
type DelayedView struct {
	ID          string    `json:"id"`
	Producer    string    `json:"producer"`
	JobType     string    `json:"job_type"`
	Retry       bool      `json:"retry"`
	Attempts    int       `json:"attempts"`
	MaxAttempts int       `json:"max_attempts"`
	PublishedAt time.Time `json:"published_at"`
	DueAt       time.Time `json:"due_at"`
}

// DoneView is a job that ended, kept by a queue with keep_done.
type DoneView struct {
	ID       string    `json:"id"`
	Producer string    `json:"producer"`
	JobType  string    `json:"job_type"`
	State    string    `json:"state"` // done or cancelled
	Attempts int       `json:"attempts"`
	EndedAt  time.Time `json:"ended_at"`
	TookMS   *float64  `json:"took_ms"` // done: the time its worker reported
}

// JobsView is a queue's jobs in every state: waiting in the order they
// will run, in flight, delayed and retry-pending (soonest due first),
// dead, and the ended ones it keeps (most recent first); each list is a
// page of Limit after Offset, out of its total.
type JobsView struct {
	Queue       string           `json:"queue"`
	Offset      int              `json:"offset"`
	Limit       int              `json:"limit"`
	Waiting     []WaitingView    `json:"waiting"`
	InFlight    []InFlightView   `json:"in_flight"`
	Delayed     []DelayedView    `json:"delayed"`
	DeadLetters []DeadLetterView `json:"dead_letters"`
	Done        []DoneView       `json:"done"`
	KeepDone    int              `json:"keep_done"` // the queue's keep_done; 0 keeps none
	Totals      JobTotals        `json:"totals"`
}

// JobTotals is how many jobs a queue holds in each state.
type JobTotals struct {
	Waiting     int `json:"waiting"`
	InFlight    int `json:"in_flight"`
	Delayed     int `json:"delayed"`
	DeadLetters int `json:"dead_letters"`
	Done        int `json:"done"`
}

// More reports whether any list goes on past this page.
func (v JobsView) More() bool {
	end := v.Offset + v.Limit
	t := v.Totals
	return t.Waiting > end || t.InFlight > end || t.Delayed > end || t.DeadLetters > end || t.Done > end
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func optional(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func queueView(in broker.QueueInfo, w broker.Waits, rates rates) QueueView {
	v := QueueView{
		Name: in.Name, Paused: in.Paused, Ready: in.Ready, ReadyPerTier: in.DepthPerTier,
		InFlight: in.InFlight, Delayed: in.Delayed, DeadLetters: in.DeadLetters, Consumers: in.Consumers,
		OldestWaitMS: ms(w.Oldest), WaitP50MS: ms(w.P50), WaitP99MS: ms(w.P99),
		Published: in.Published, Delivered: in.Delivered, Acked: in.Acked, Nacked: in.Nacked,
		Redelivered: in.Redelivered, DeadLettered: in.DeadLettered, Expired: in.Expired,
		PublishPerS: rates.publish, AckPerS: rates.ack,
		Config:    configView(in.Config),
		Predictor: predictorView(in),
	}
	if v.ReadyPerTier == nil {
		v.ReadyPerTier = []int{}
	}
	for _, g := range in.Groups {
		v.Groups = append(v.Groups, GroupView{Name: g.Name, Weight: g.Weight, Running: g.Running, Limit: g.Limit,
			Waiting: g.Waiting, WorkShare: g.WorkShare, Throttled: g.Throttled})
	}
	v.GroupCount, v.Throttled, v.Reserved = in.GroupCount, in.Throttled, in.Reserved
	if in.RunTime.Count > 0 {
		v.DurationP50MS, v.DurationP99MS = optional(ms(in.RunTime.P50)), optional(ms(in.RunTime.P99))
	}
	return v
}

func configView(c broker.QueueConfig) ConfigView {
	v := ConfigView{
		Policy: c.Policy, Tiers: c.Tiers, Weights: c.Weights, AgingOff: c.AgingOff, StaticTiers: c.StaticTiers,
		MaxDepth: c.MaxDepth, MaxInFlight: c.MaxInFlight, KeepDone: c.KeepDone, MaxAttempts: c.MaxAttempts, LeaseMS: ms(c.Lease), DefaultTTLMS: ms(c.DefaultTTL), Shadow: c.Shadow,
		GroupBy: c.GroupBy, Limits: c.Limits, RateLimits: c.RateLimits,
		Reserve: c.Reserve, ReserveAbove: c.ReserveAbove, ReserveWindowMS: ms(c.ReserveWindow), CreditMS: ms(c.Credit),
	}
	for _, a := range c.Aging {
		v.AgingMS = append(v.AgingMS, ms(a))
	}
	return v
}

func predictorView(in broker.QueueInfo) PredictorView {
	p := in.Predictor
	v := PredictorView{
		Keys: p.Keys, Evicted: p.Evicted, Observations: p.Observations, Rejected: p.Rejected,
		MAESamples: p.MAESamples, TierAccuracy: optional(p.TierAccuracy), TierSamples: p.TierSamples,
		BoundariesMS: []float64{},
	}
	if p.MAESamples > 0 {
		v.MAEMS = optional(ms(p.MAE))
	}
	for _, b := range p.Boundaries {
		v.BoundariesMS = append(v.BoundariesMS, ms(b))
	}
	v.UnscoredCold, v.UnscoredGated, v.UnscoredUnpredicted = p.UnscoredCold, p.UnscoredGated, p.UnscoredUnpredicted
	v.WhyUnscored = whyUnscored(p)
	if n := float64(in.Durations.Count); n > 0 {
		v.MeanPredictedMS = optional(1000 * in.Durations.PredictedSum / n)
		v.MeanActualMS = optional(1000 * in.Durations.ActualSum / n)
	}
	return v
}

// whyUnscored says why a predictor that learned from jobs scored none of
// its predictions: only routed ones are scored, and a job is predicted
// when it is published, so jobs published in a batch before their key
// learned enough were all cold.
func whyUnscored(p predict.Summary) string {
	if p.MAESamples > 0 || p.Observations == 0 {
		return ""
	}
	var parts []string
	if p.UnscoredCold > 0 {
		parts = append(parts, fmt.Sprintf("%d were published while their key was cold (too few observations to trust, so they took the middle tier by default; jobs published in a batch before the first acks all are)", p.UnscoredCold))
	}
	if p.UnscoredGated > 0 {
		parts = append(parts, fmt.Sprintf("%d were of keys whose run times vary too widely to rank (spread-gated)", p.UnscoredGated))
	}
	if p.UnscoredUnpredicted > 0 {
		parts = append(parts, fmt.Sprintf("%d had no prediction (a policy that does not predict, or jobs recovered from the log)", p.UnscoredUnpredicted))
	}
	return fmt.Sprintf("Nothing scored yet: only predictions that chose a tier are scored. Of the %d jobs learned from, %s.", p.Observations, strings.Join(parts, "; "))
}

func keyView(k predict.KeyStats) KeyView {
	return KeyView{
		Producer: k.Key.Producer, JobType: k.Key.JobType, SizeBucket: int(k.Key.SizeBucket),
		Count: k.Count, EWMAMS: ms(k.EWMA), P50MS: positive(ms(k.P50)), P99MS: positive(ms(k.P99)),
		Tier: k.Tier, Cold: k.Cold, SpreadGated: k.SpreadGated, Long: k.Long, Scored: k.Scored,
	}.scored(k)
}

func (v KeyView) scored(k predict.KeyStats) KeyView {
	if k.Scored > 0 {
		mae, acc := ms(k.MAE), k.TierAccuracy
		v.MAEMS, v.TierAccuracy = &mae, &acc
	}
	return v
}

// KeySorts are the columns the keys can be sorted by.
var KeySorts = []string{"count", "producer", "job_type", "ewma", "p50", "p99", "tier", "mae", "accuracy"}

// filterKeys keeps the keys whose producer or job type contains search
// (case-insensitive) and sorts them by column; unknown columns sort by
// count. Ties keep the broker's order (busiest first).
func filterKeys(keys []KeyView, search, column string, desc bool) []KeyView {
	if s := strings.ToLower(strings.TrimSpace(search)); s != "" {
		keys = slices.DeleteFunc(keys, func(k KeyView) bool {
			return !strings.Contains(strings.ToLower(k.Producer), s) && !strings.Contains(strings.ToLower(k.JobType), s)
		})
	}
	by := func(a, b KeyView) int { return cmp.Compare(a.Count, b.Count) }
	switch column {
	case "producer":
		by = func(a, b KeyView) int { return cmp.Compare(a.Producer, b.Producer) }
	case "job_type":
		by = func(a, b KeyView) int { return cmp.Compare(a.JobType, b.JobType) }
	case "ewma":
		by = func(a, b KeyView) int { return cmp.Compare(a.EWMAMS, b.EWMAMS) }
	case "p50":
		by = func(a, b KeyView) int { return cmp.Compare(orNaN(a.P50MS), orNaN(b.P50MS)) }
	case "p99":
		by = func(a, b KeyView) int { return cmp.Compare(orNaN(a.P99MS), orNaN(b.P99MS)) }
	case "tier":
		by = func(a, b KeyView) int { return cmp.Compare(a.Tier, b.Tier) }
	case "mae":
		by = func(a, b KeyView) int { return cmp.Compare(orNaN(a.MAEMS), orNaN(b.MAEMS)) }
	case "accuracy":
		by = func(a, b KeyView) int { return cmp.Compare(orNaN(a.TierAccuracy), orNaN(b.TierAccuracy)) }
	}
	slices.SortStableFunc(keys, func(a, b KeyView) int {
		if desc {
			return by(b, a)
		}
		return by(a, b)
	})
	return keys
}

func waitingView(now time.Time, js []broker.WaitingJob) []WaitingView {
	out := make([]WaitingView, len(js))
	for i, j := range js {
		out[i] = WaitingView{
			Position: i + 1, ID: j.ID, Producer: j.Producer, JobType: j.JobType, Tier: j.Tier, Level: j.Level,
			CostMS: ms(j.Cost), Long: j.Long, Cold: j.Cold, Attempts: j.Attempts, WaitedMS: ms(now.Sub(j.Enqueued)),
		}
		if !j.Expires.IsZero() {
			e := j.Expires
			out[i].ExpiresAt = &e
		}
	}
	return out
}

func inFlightView(now time.Time, js []broker.InFlightJob) []InFlightView {
	out := make([]InFlightView, len(js))
	for i, j := range js {
		el := now.Sub(j.Leased)
		out[i] = InFlightView{
			ID: j.ID, Producer: j.Producer, JobType: j.JobType, Consumer: j.Consumer, Attempt: j.Attempt,
			CostMS: ms(j.Cost), ElapsedMS: ms(el), LeaseEnds: j.Deadline, Overrunning: j.Cost > 0 && el > j.Cost,
		}
	}
	return out
}

func delayedView(js []broker.DelayedJob) []DelayedView {
	out := make([]DelayedView, len(js))
	for i, j := range js {
		out[i] = DelayedView{ID: j.ID, Producer: j.Producer, JobType: j.JobType, Retry: j.Retry, Attempts: j.Attempts,
			MaxAttempts: j.MaxAttempts, PublishedAt: j.PublishedAt, DueAt: j.Due}
	}
	return out
}

func doneView(js []broker.DoneJob) []DoneView {
	out := make([]DoneView, len(js))
	for i, j := range js {
		out[i] = DoneView{ID: j.ID, Producer: j.Producer, JobType: j.JobType, State: string(j.State), Attempts: j.Attempts, EndedAt: j.EndedAt}
		if j.State == broker.JobDone {
			took := ms(j.Took)
			out[i].TookMS = &took
		}
	}
	return out
}

func deadLetterView(ds []broker.DeadLetter) []DeadLetterView {
	out := make([]DeadLetterView, len(ds))
	for i, d := range ds {
		out[i] = DeadLetterView{
			ID: d.ID, Producer: d.Producer, JobType: d.JobType, Attempts: d.Attempts, Reason: d.Reason,
			PublishedAt: d.PublishedAt, DeadAt: d.DeadAt, PayloadSize: len(d.Payload),
		}
	}
	return out
}

// positive is &v, or nil for a figure not measured (0).
func positive(v float64) *float64 {
	if v <= 0 {
		return nil
	}
	return &v
}

// orNaN is *v, or NaN (which sorts first) for nil.
func orNaN(v *float64) float64 {
	if v == nil {
		return math.NaN()
	}
	return *v
}
