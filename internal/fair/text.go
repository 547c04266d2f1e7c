package fair

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseLimit reads a concurrency limit written FIELD=MAX ("tenant=5": at
// most 5 running per tenant) or FIELD:VALUE=MAX ("job_type:export=2": at
// most 2 running of job type export), as the command line and config file
// write it. at names it in errors ("limits[0]").
func ParseLimit(at, s string) (Limit, error) {
	key, n, ok := cutLast(s, "=")
	if !ok {
		return Limit{}, bad(at, "want FIELD=MAX or FIELD:VALUE=MAX, got %q", s)
	}
	field, value, _ := strings.Cut(key, ":")
	max, err := strconv.Atoi(strings.TrimSpace(n))
	if err != nil {
		return Limit{}, bad(at+".max", "want a whole number, got %q", n)
	}
	return Limit{Field: strings.TrimSpace(field), Value: value, Max: max}, nil
}

// String writes l as ParseLimit reads it.
func (l Limit) String() string { return ruleText(l.Field, l.Value) + "=" + strconv.Itoa(l.Max) }

// ParseRate reads a rate limit written FIELD[:VALUE]=RATE[/s][:BURST]
// ("producer:crawler=10/s:20": at most 10 starts a second of producer
// crawler, 20 at once after a quiet spell). Without a burst the burst is
// one second's starts (at least 1).
func ParseRate(at, s string) (Rate, error) {
	key, spec, ok := cutLast(s, "=")
	if !ok {
		return Rate{}, bad(at, "want FIELD[:VALUE]=RATE[/s][:BURST], got %q", s)
	}
	field, value, _ := strings.Cut(key, ":")
	rate, burst, hasBurst := strings.Cut(strings.TrimSpace(spec), ":")
	rate = strings.TrimSuffix(rate, "/s")
	r, err := strconv.ParseFloat(rate, 64)
	if err != nil || math.IsInf(r, 0) {
		return Rate{}, bad(at+".per_second", "want a number of starts a second, got %q", rate)
	}
	out := Rate{Field: strings.TrimSpace(field), Value: value, PerSecond: r, Burst: max(1, int(math.Ceil(min(r, MaxBurst))))}
	if hasBurst {
		b, err := strconv.Atoi(burst)
		if err != nil {
			return Rate{}, bad(at+".burst", "want a whole number, got %q", burst)
		}
		out.Burst = b
	}
	return out, nil
}

// String writes r as ParseRate reads it.
func (r Rate) String() string {
	return fmt.Sprintf("%s=%s/s:%d", ruleText(r.Field, r.Value), strconv.FormatFloat(r.PerSecond, 'g', -1, 64), r.Burst)
}

func ruleText(field, value string) string {
	if value == "" {
		return field
	}
	return field + ":" + value
}

// cutLast cuts s around the last sep: a value may hold the separator, a
// number never does.
func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}
