package cli

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/harbinger-mq/harbinger/internal/fair"
)

// fairFlags declare limits and fair shares on the command line, for the
// simulator: the same rules and the same text as a queue's declaration
// (config file and admin declare-queue: group_by, group_weights, limits,
// rate_limits, reserve, no_reserve, reserve_above, reserve_window, credit,
// no_credit).
type fairFlags struct {
	groupBy       string
	weights       repeated
	limits        repeated
	rates         repeated
	reserve       int
	noReserve     bool
	reserveWindow time.Duration
	credit        time.Duration
	noCredit      bool
	reserveAbove  float64
}

// repeated is a flag given any number of times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, " ") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func (f *fairFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.groupBy, "group-by", "", "share the workers fairly, by predicted work, between the groups of jobs with the same producer, job_type or tenant (the tenant header)")
	fs.Var(&f.weights, "group-weight", "NAME=W: the group NAME's weight in the fair shares (default 1); repeatable")
	fs.Var(&f.limits, "limit", "FIELD=MAX or FIELD:VALUE=MAX: at most MAX running per FIELD (producer, job_type, tenant) or of that VALUE; repeatable")
	fs.Var(&f.rates, "rate", "FIELD[:VALUE]=RATE[/s][:BURST]: at most RATE starts a second per key, BURST at once (default one second's); repeatable")
	fs.IntVar(&f.reserve, "reserve", 0, fmt.Sprintf("with --group-by: workers a group at or past its share leaves free while other groups have work (default %d)", fair.DefaultReserve))
	fs.BoolVar(&f.noReserve, "no-reserve", false, "with --group-by: no reservation; a group may take every free worker")
	fs.DurationVar(&f.credit, "credit", 0, fmt.Sprintf("with --group-by: predicted work a group that had nothing to run may be served ahead of the others (default %v)", fair.DefaultCredit))
	fs.BoolVar(&f.noCredit, "no-credit", false, "with --group-by: no credit; plain fair queueing")
	fs.Float64Var(&f.reserveAbove, "reserve-above", 0, fmt.Sprintf("with --group-by: the reservation holds back only jobs predicted at least this many times the other groups' mean (default %g)", fair.DefaultReserveAbove))
	fs.DurationVar(&f.reserveWindow, "reserve-window", 0, fmt.Sprintf("with --group-by: how recently another group must have had work for the reservation to hold (default %v)", fair.DefaultReserveWindow))
}

// any refuses the flags where they do not apply: a history is replayed
// without limits or fair shares.
func (f *fairFlags) any(fs *flag.FlagSet) error {
	for _, name := range []string{"group-by", "group-weight", "limit", "rate", "reserve", "no-reserve", "reserve-window", "credit", "no-credit", "reserve-above"} {
		if flagSet(fs, name) {
			return fmt.Errorf("--%s does not apply to --history: a history is replayed without limits or fair shares", name)
		}
	}
	return nil
}

// config is the declaration the flags make, nil when they make none.
func (f *fairFlags) config() (*fair.Config, error) {
	c := fair.Config{GroupBy: f.groupBy, Reserve: f.reserve, NoReserve: f.noReserve, ReserveWindow: f.reserveWindow, Credit: f.credit, NoCredit: f.noCredit, ReserveAbove: f.reserveAbove}
	for i, w := range f.weights {
		name, n, ok := strings.Cut(w, "=")
		v, err := strconv.Atoi(n)
		if !ok || err != nil {
			return nil, fmt.Errorf("--group-weight: want NAME=W, got %q", w)
		}
		if c.Weights == nil {
			c.Weights = map[string]int{}
		}
		if _, dup := c.Weights[name]; dup {
			return nil, fmt.Errorf("--group-weight: %q given twice (the %d%s)", name, i+1, ordinal(i+1))
		}
		c.Weights[name] = v
	}
	for i, s := range f.limits {
		l, err := fair.ParseLimit(fmt.Sprintf("limits[%d]", i), s)
		if err != nil {
			return nil, fmt.Errorf("--limit %q: %w", s, err)
		}
		c.Limits = append(c.Limits, l)
	}
	for i, s := range f.rates {
		r, err := fair.ParseRate(fmt.Sprintf("rates[%d]", i), s)
		if err != nil {
			return nil, fmt.Errorf("--rate %q: %w", s, err)
		}
		c.Rates = append(c.Rates, r)
	}
	if !c.Active() && (c.Reserve != 0 || c.NoReserve || c.ReserveWindow != 0 || c.ReserveAbove != 0 || c.Credit != 0 || c.NoCredit) {
		return nil, fmt.Errorf("--reserve, --no-reserve, --reserve-window, --credit and --no-credit need --group-by")
	}
	if !c.Active() {
		return nil, nil
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func ordinal(n int) string {
	switch n {
	case 1:
		return "st"
	case 2:
		return "nd"
	case 3:
		return "rd"
	}
	return "th"
}
