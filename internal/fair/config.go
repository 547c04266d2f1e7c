package fair

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// The fields a queue may group its jobs by or limit them on. The tenant is
// a label the producer sets in the job's TenantHeader header; a job without
// it has the empty tenant, a group (and a limit key) of its own.
const (
	Producer = "producer"
	JobType  = "job_type"
	Tenant   = "tenant"
)

// TenantHeader is the message header a producer sets to name the job's
// tenant.
const TenantHeader = "tenant"

// Fields lists the fields a declaration may name.
var Fields = []string{Producer, JobType, Tenant}

// Bounds and defaults of a declaration.
const (
	// MaxConcurrency is the largest concurrency limit a key may have.
	MaxConcurrency = 1_000_000
	// MaxRatePerSecond is the largest rate limit, in starts per second.
	MaxRatePerSecond = 1_000_000
	// MaxBurst is the largest burst a rate limit may allow.
	MaxBurst = 1_000_000
	// MaxWeight is the largest weight a group may have.
	MaxWeight = 1000
	// MaxRules is the most limits (and, separately, rate limits and
	// weights) one queue may declare.
	MaxRules = 1000
	// MaxValueLen is the longest field value a rule may name, in bytes.
	MaxValueLen = 256
	// DefaultReserve is how many workers a group past its share leaves
	// free while other groups have work (see Config.Reserve).
	DefaultReserve = 2
	// DefaultReserveWindow is how recently another group must have had
	// work for the reservation to hold.
	DefaultReserveWindow = time.Second
	// DefaultReserveAbove is how many times longer than the other groups'
	// mean a job must be predicted for the reservation to hold it back.
	DefaultReserveAbove = 4.0
	// MaxReserveAbove bounds Config.ReserveAbove.
	MaxReserveAbove = 1e6
	// MaxReserveWindow bounds Config.ReserveWindow.
	MaxReserveWindow = time.Hour
	// DefaultCredit is how much predicted work a group that had nothing
	// to run may be served ahead of the others (see Config.Credit).
	DefaultCredit = 200 * time.Millisecond
	// MaxCredit bounds Config.Credit.
	MaxCredit = time.Hour
)

// Limit caps how many jobs of one key run at once, across the broker.
// With Value empty it is a limit per value of Field ("at most 5 running
// per producer"); with Value set it applies to that value alone ("at most
// 2 running of job_type export").
type Limit struct {
	Field string `json:"field" yaml:"field"`
	Value string `json:"value,omitempty" yaml:"value,omitempty"`
	Max   int    `json:"max" yaml:"max"`
}

// Rate caps how often jobs of one key start: a token bucket that holds
// Burst starts and refills at PerSecond. Field and Value as in Limit.
type Rate struct {
	Field     string  `json:"field" yaml:"field"`
	Value     string  `json:"value,omitempty" yaml:"value,omitempty"`
	PerSecond float64 `json:"per_second" yaml:"per_second"`
	Burst     int     `json:"burst" yaml:"burst"`
}

// Config is a queue's limits and fair shares. The zero Config declares
// nothing: the queue schedules with its policy alone.
type Config struct {
	// GroupBy, when set, shares the workers between the groups of jobs
	// that have the same value of this field, in proportion to their
	// weights, measured in predicted work. Empty is no grouping.
	GroupBy string `json:"group_by,omitempty" yaml:"group_by,omitempty"`
	// Weights are the weights of named groups; a group not named has
	// weight 1. Needs GroupBy.
	Weights map[string]int `json:"weights,omitempty" yaml:"weights,omitempty"`
	// Limits are concurrency limits; a job runs only while every limit
	// that applies to it is below its Max.
	Limits []Limit `json:"limits,omitempty" yaml:"limits,omitempty"`
	// Rates are rate limits; a job starts only while every rate that
	// applies to it has a token.
	Rates []Rate `json:"rates,omitempty" yaml:"rates,omitempty"`
	// Reserve is how many of the last free workers a group past its share
	// may not take with a long job (see ReserveAbove) while another group
	// has work or had within ReserveWindow: with non-preemptive workers, a
	// flooding group's long jobs could otherwise hold every worker when a
	// short job of another group arrives. A group is past its share when
	// its running jobs, averaged over the last ReserveWindow or so, reach
	// its weight's share of the workers; it falls below as its jobs end,
	// so it is never held back for long. 0 is DefaultReserve; NoReserve
	// turns it off. Only with GroupBy, and only where the shell says how
	// many workers there are (Fair.SetWorkers).
	Reserve   int  `json:"reserve,omitempty" yaml:"reserve,omitempty"`
	NoReserve bool `json:"no_reserve,omitempty" yaml:"no_reserve,omitempty"`
	// ReserveAbove: the reservation holds back only a job predicted at
	// least this many times the mean predicted cost of the other groups'
	// jobs: a job no longer than theirs would hold its worker no longer
	// than they do. 0 is DefaultReserveAbove.
	ReserveAbove float64 `json:"reserve_above,omitempty" yaml:"reserve_above,omitempty"`
	// ReserveWindow: see Reserve. 0 is DefaultReserveWindow.
	ReserveWindow time.Duration `json:"reserve_window,omitempty" yaml:"reserve_window,omitempty"`
	// Credit is the predicted work (over its weight) a group that had
	// nothing to run may be served ahead of the others when work comes:
	// a light group's burst then goes ahead of a flooding group's backlog
	// instead of taking turns with it. 0 is DefaultCredit; NoCredit
	// turns it off (plain fair queueing).
	Credit   time.Duration `json:"credit,omitempty" yaml:"credit,omitempty"`
	NoCredit bool          `json:"no_credit,omitempty" yaml:"no_credit,omitempty"`
}

// ConfigError is a declaration refused: Field names the setting (as the
// declaration spells it, with an index into a list), Reason says why.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "fair: " + e.Field + ": " + e.Reason }

// Is makes every ConfigError match ErrConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// ErrConfig is what every refused declaration matches (errors.Is).
var ErrConfig = errors.New("fair: bad limits declaration")

func bad(field, format string, args ...any) error {
	return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Active reports whether c declares anything: without it a queue needs no
// Fair at all.
func (c Config) Active() bool {
	return c.GroupBy != "" || len(c.Limits) > 0 || len(c.Rates) > 0 || len(c.Weights) > 0
}

// WithDefaults fills in the settings left zero.
func (c Config) WithDefaults() Config {
	if c.Reserve == 0 {
		c.Reserve = DefaultReserve
	}
	if c.ReserveWindow == 0 {
		c.ReserveWindow = DefaultReserveWindow
	}
	if c.ReserveAbove == 0 {
		c.ReserveAbove = DefaultReserveAbove
	}
	if c.NoCredit {
		c.Credit = 0
	} else if c.Credit == 0 {
		c.Credit = DefaultCredit
	}
	return c
}

// Validate reports the first setting that makes no sense, as a
// *ConfigError naming it.
func (c Config) Validate() error {
	if c.GroupBy != "" && !knownField(c.GroupBy) {
		return bad("group_by", "unknown field %q (want producer, job_type or tenant)", c.GroupBy)
	}
	if len(c.Weights) > 0 && c.GroupBy == "" {
		return bad("weights", "weights need group_by: there are no groups to weigh")
	}
	if len(c.Weights) > MaxRules {
		return bad("weights", "at most %d, got %d", MaxRules, len(c.Weights))
	}
	for g, w := range c.Weights {
		if err := checkValue("weights["+strconv.Quote(g)+"]", g); err != nil {
			return err
		}
		if w < 1 || w > MaxWeight {
			return bad("weights["+strconv.Quote(g)+"]", "must be 1 to %d, got %d", MaxWeight, w)
		}
	}
	if len(c.Limits) > MaxRules {
		return bad("limits", "at most %d, got %d", MaxRules, len(c.Limits))
	}
	seen := map[[2]string]int{}
	for i, l := range c.Limits {
		at := fmt.Sprintf("limits[%d]", i)
		if err := checkRule(at, l.Field, l.Value); err != nil {
			return err
		}
		if l.Max < 1 || l.Max > MaxConcurrency {
			return bad(at+".max", "must be 1 to %d, got %d", MaxConcurrency, l.Max)
		}
		k := [2]string{l.Field, l.Value}
		if j, ok := seen[k]; ok {
			return bad(at, "conflicts with limits[%d]: both limit %s", j, describe(l.Field, l.Value))
		}
		seen[k] = i
	}
	if len(c.Rates) > MaxRules {
		return bad("rates", "at most %d, got %d", MaxRules, len(c.Rates))
	}
	clear(seen)
	for i, r := range c.Rates {
		at := fmt.Sprintf("rates[%d]", i)
		if err := checkRule(at, r.Field, r.Value); err != nil {
			return err
		}
		if math.IsNaN(r.PerSecond) || r.PerSecond <= 0 || r.PerSecond > MaxRatePerSecond {
			return bad(at+".per_second", "must be above 0 and at most %d, got %v", MaxRatePerSecond, r.PerSecond)
		}
		if r.Burst < 1 || r.Burst > MaxBurst {
			return bad(at+".burst", "must be 1 to %d, got %d", MaxBurst, r.Burst)
		}
		k := [2]string{r.Field, r.Value}
		if j, ok := seen[k]; ok {
			return bad(at, "conflicts with rates[%d]: both limit the rate of %s", j, describe(r.Field, r.Value))
		}
		seen[k] = i
	}
	if c.Reserve < 0 || c.Reserve > MaxConcurrency {
		return bad("reserve", "must be 0 (the default, %d) to %d, got %d", DefaultReserve, MaxConcurrency, c.Reserve)
	}
	if c.NoReserve && c.Reserve != 0 {
		return bad("reserve", "conflicts with no_reserve: set one or the other")
	}
	if math.IsNaN(c.ReserveAbove) || c.ReserveAbove < 0 || c.ReserveAbove > MaxReserveAbove {
		return bad("reserve_above", "must be 0 (the default, %v) to %v, got %v", DefaultReserveAbove, MaxReserveAbove, c.ReserveAbove)
	}
	if c.ReserveWindow < 0 || c.ReserveWindow > MaxReserveWindow {
		return bad("reserve_window", "must be 0 (the default, %v) to %v, got %v", DefaultReserveWindow, MaxReserveWindow, c.ReserveWindow)
	}
	if c.GroupBy == "" {
		for _, s := range []struct {
			field string
			set   bool
		}{
			{"reserve", c.Reserve != 0}, {"no_reserve", c.NoReserve},
			{"reserve_above", c.ReserveAbove != 0}, {"reserve_window", c.ReserveWindow != 0},
		} {
			if s.set {
				return bad(s.field, "the reservation is between groups: it needs group_by")
			}
		}
	}
	if c.Credit < 0 || c.Credit > MaxCredit {
		return bad("credit", "must be 0 (the default, %v) to %v, got %v", DefaultCredit, MaxCredit, c.Credit)
	}
	if c.NoCredit && c.Credit != 0 {
		return bad("credit", "conflicts with no_credit: set one or the other")
	}
	if c.GroupBy == "" && c.Credit != 0 {
		return bad("credit", "the credit is between groups: it needs group_by")
	}
	if c.GroupBy == "" && c.NoCredit {
		return bad("no_credit", "the credit is between groups: it needs group_by")
	}
	return nil
}

func knownField(f string) bool { return f == Producer || f == JobType || f == Tenant }

func checkRule(at, field, value string) error {
	if !knownField(field) {
		return bad(at+".field", "unknown field %q (want producer, job_type or tenant)", field)
	}
	return checkValue(at+".value", value)
}

func checkValue(at, v string) error {
	if len(v) > MaxValueLen {
		return bad(at, "at most %d bytes, got %d", MaxValueLen, len(v))
	}
	if !utf8.ValidString(v) {
		return bad(at, "not valid UTF-8")
	}
	return nil
}

func describe(field, value string) string {
	if value == "" {
		return "every " + field
	}
	return field + " " + strconv.Quote(value)
}
