package workload

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// MaxFileBytes bounds the size of a workload file we agree to read.
const MaxFileBytes = 1 << 20

// Limits on what a workload may ask for, so a typo cannot ask the simulator
// for a billion messages.
const (
	maxJobTypes   = 1000
	maxArrivalsS  = 24 * 3600
	maxRatePerS   = 100_000
	maxWorkers    = 10_000
	maxMeanMS     = 24 * 3600 * 1000
	maxSigma      = 5
	maxSizeBytes  = 1 << 40
	maxSeeds      = 1000
	maxMultiplier = 1000
	maxMessages   = 20_000_000
)

// Error is a problem in a workload file, located by line and field path.
type Error struct {
	Line  int
	Field string
	Msg   string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("workload: line %d: %s: %s", e.Line, e.Field, e.Msg)
	}
	return fmt.Sprintf("workload: %s: %s", e.Field, e.Msg)
}

// Load reads and validates the workload file at path.
func Load(path string) (*Workload, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("workload: reading %s: %w", path, err)
	}
	w, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return w, nil
}

// Parse decodes and validates a workload document. Unknown fields, missing
// fields and impossible values are errors naming the field and its line.
func Parse(data []byte) (*Workload, error) {
	if len(data) > MaxFileBytes {
		return nil, &Error{Field: "file", Msg: fmt.Sprintf("larger than %d bytes", MaxFileBytes)}
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{Field: "file", Msg: "empty document"}
		}
		return nil, fmt.Errorf("workload: %w", err)
	}
	if len(doc.Content) != 1 {
		return nil, &Error{Field: "file", Msg: "expected one YAML document"}
	}
	p := &parser{}
	w := p.workload(doc.Content[0])
	if p.err != nil {
		return nil, p.err
	}
	return w, nil
}

// parser walks the YAML tree and keeps the first error it meets.
type parser struct{ err error }

func (p *parser) fail(n *yaml.Node, field, format string, args ...any) {
	if p.err == nil {
		p.err = &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
}

// mapping is a YAML mapping whose keys are checked against what was read.
type mapping struct {
	p      *parser
	node   *yaml.Node
	path   string
	fields map[string]*yaml.Node
}

func (p *parser) mapping(n *yaml.Node, path string, allowed ...string) *mapping {
	m := &mapping{p: p, node: n, path: path, fields: map[string]*yaml.Node{}}
	if n.Kind == yaml.AliasNode {
		p.fail(n, path, "aliases are not supported")
		return m
	}
	if n.Kind != yaml.MappingNode {
		p.fail(n, path, "expected a mapping")
		return m
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !slices.Contains(allowed, k.Value) {
			p.fail(k, join(path, k.Value), "unknown field (allowed: %v)", allowed)
			continue
		}
		if _, dup := m.fields[k.Value]; dup {
			p.fail(k, join(path, k.Value), "field given twice")
			continue
		}
		m.fields[k.Value] = v
	}
	return m
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// get returns the value node of field, failing if it is required and absent.
func (m *mapping) get(field string, required bool) *yaml.Node {
	v := m.fields[field]
	if v == nil && required {
		m.p.fail(m.node, join(m.path, field), "missing required field")
	}
	return v
}

func (m *mapping) scalar(field string, required bool) *yaml.Node {
	v := m.get(field, required)
	if v != nil && v.Kind != yaml.ScalarNode {
		m.p.fail(v, join(m.path, field), "expected a single value")
		return nil
	}
	return v
}

func (m *mapping) str(field string, required bool) string {
	v := m.scalar(field, required)
	if v == nil {
		return ""
	}
	if v.Value == "" {
		m.p.fail(v, join(m.path, field), "must not be empty")
	}
	return v.Value
}

// num reads a finite number in [lo, hi].
func (m *mapping) num(field string, required bool, lo, hi float64) (float64, bool) {
	v := m.scalar(field, required)
	if v == nil {
		return 0, false
	}
	f, err := strconv.ParseFloat(v.Value, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		m.p.fail(v, join(m.path, field), "expected a finite number, got %q", v.Value)
		return 0, false
	}
	if f < lo || f > hi {
		m.p.fail(v, join(m.path, field), "must be between %g and %g, got %g", lo, hi, f)
		return 0, false
	}
	return f, true
}

func (m *mapping) integer(field string, required bool, lo, hi int) int {
	f, ok := m.num(field, required, float64(lo), float64(hi))
	if ok && f != math.Trunc(f) {
		m.p.fail(m.fields[field], join(m.path, field), "must be a whole number, got %g", f)
	}
	return int(f)
}

func (m *mapping) boolean(field string) bool {
	v := m.scalar(field, false)
	if v == nil {
		return false
	}
	b, err := strconv.ParseBool(v.Value)
	if err != nil {
		m.p.fail(v, join(m.path, field), "expected true or false, got %q", v.Value)
	}
	return b
}

func (p *parser) sequence(n *yaml.Node, path string) []*yaml.Node {
	if n == nil {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.fail(n, path, "expected a list")
		return nil
	}
	return n.Content
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

func (p *parser) workload(n *yaml.Node) *Workload {
	m := p.mapping(n, "", "name", "arrivals_s", "workers", "seeds", "job_types", "events")
	w := &Workload{
		Name:    m.str("name", true),
		Workers: m.integer("workers", true, 1, maxWorkers),
	}
	w.ArrivalsS, _ = m.num("arrivals_s", true, 0, maxArrivalsS)
	if v, ok := m.fields["arrivals_s"]; ok && w.ArrivalsS == 0 {
		p.fail(v, "arrivals_s", "must be greater than 0")
	}
	if s := m.get("seeds", false); s != nil {
		items := p.sequence(s, "seeds")
		if len(items) == 0 || len(items) > maxSeeds {
			p.fail(s, "seeds", "must list 1 to %d seeds", maxSeeds)
		}
		for i, it := range items {
			u, err := strconv.ParseUint(it.Value, 10, 64)
			if err != nil || it.Kind != yaml.ScalarNode {
				p.fail(it, fmt.Sprintf("seeds[%d]", i), "expected a non-negative whole number, got %q", it.Value)
			}
			w.Seeds = append(w.Seeds, u)
		}
	} else {
		w.Seeds = []uint64{1}
	}

	jts := m.get("job_types", true)
	items := p.sequence(jts, "job_types")
	if jts != nil && len(items) == 0 {
		p.fail(jts, "job_types", "must list at least one job type")
	}
	if len(items) > maxJobTypes {
		p.fail(jts, "job_types", "at most %d job types", maxJobTypes)
		return w
	}
	seen := map[string]bool{}
	for i, it := range items {
		jt := p.jobType(it, fmt.Sprintf("job_types[%d]", i))
		if seen[jt.Name] {
			p.fail(it, fmt.Sprintf("job_types[%d].name", i), "duplicate job type %q", jt.Name)
		}
		seen[jt.Name] = true
		w.JobTypes = append(w.JobTypes, jt)
	}
	for i, it := range p.sequence(m.get("events", false), "events") {
		w.Events = append(w.Events, p.event(it, fmt.Sprintf("events[%d]", i), seen))
	}
	if p.err == nil {
		peak := 0.0
		for _, jt := range w.JobTypes {
			// The largest product of the multipliers in force at once:
			// rates are piecewise constant, so it is reached at an event's
			// start.
			mult := 1.0
			for _, at := range w.Events {
				if at.Kind != EventRate || at.JobType != jt.Name {
					continue
				}
				m := 1.0
				for _, e := range w.Events {
					if e.Kind == EventRate && e.JobType == jt.Name && at.StartS >= e.StartS && at.StartS < e.EndS {
						m *= e.Multiplier
					}
				}
				mult = max(mult, m)
			}
			peak += jt.RatePerS * mult * w.ArrivalsS
		}
		if peak > maxMessages {
			p.fail(n, "job_types", "would generate up to %.0f messages; the limit is %d", peak, maxMessages)
		}
	}
	return w
}

func (p *parser) jobType(n *yaml.Node, path string) JobType {
	m := p.mapping(n, path, "name", "producer", "tenant", "rate_per_s", "duration", "size_bytes", "static_tier", "class")
	jt := JobType{
		Name:       m.str("name", true),
		Producer:   m.str("producer", true),
		Tenant:     m.str("tenant", false),
		StaticTier: m.integer("static_tier", true, 0, 63),
		Class:      m.str("class", true),
	}
	for _, f := range []string{"name", "producer", "tenant", "class"} {
		if v := m.fields[f]; v != nil && v.Value != "" && !nameRE.MatchString(v.Value) {
			p.fail(v, join(path, f), "must be 1-128 letters, digits or _.:-, got %q", v.Value)
		}
	}
	jt.RatePerS, _ = m.num("rate_per_s", true, 0, maxRatePerS)
	if d := m.get("duration", true); d != nil {
		dm := p.mapping(d, join(path, "duration"), "dist", "mean_ms", "sigma", "per_size", "high_ms", "high_share", "alpha")
		jt.Duration.Dist = p.dist(dm, "fixed", "lognormal", "exponential", "bimodal", "pareto")
		jt.Duration.MeanMS, _ = dm.num("mean_ms", true, 0, maxMeanMS)
		if v := dm.fields["mean_ms"]; v != nil && jt.Duration.MeanMS == 0 {
			p.fail(v, join(dm.path, "mean_ms"), "must be greater than 0")
		}
		jt.Duration.Sigma, _ = dm.num("sigma", jt.Duration.Dist == "lognormal" || jt.Duration.Dist == "bimodal", 0, maxSigma)
		jt.Duration.PerSize = dm.boolean("per_size")
		bimodal, pareto := jt.Duration.Dist == "bimodal", jt.Duration.Dist == "pareto"
		for _, f := range []struct {
			name, dist string
			ok         bool
		}{{"high_ms", "bimodal", bimodal}, {"high_share", "bimodal", bimodal}, {"alpha", "pareto", pareto}} {
			if v := dm.fields[f.name]; v != nil && !f.ok {
				p.fail(v, join(dm.path, f.name), "only allowed with dist %s", f.dist)
			}
		}
		if bimodal {
			jt.Duration.HighMS, _ = dm.num("high_ms", true, 0, maxMeanMS)
			if v := dm.fields["high_ms"]; v != nil && jt.Duration.HighMS == 0 {
				p.fail(v, join(dm.path, "high_ms"), "must be greater than 0")
			}
			jt.Duration.HighShare, _ = dm.num("high_share", true, 0, 1)
		}
		if pareto {
			jt.Duration.Alpha, _ = dm.num("alpha", true, 1.05, 100)
		}
	}
	if s := m.get("size_bytes", false); s != nil {
		sm := p.mapping(s, join(path, "size_bytes"), "dist", "mean", "sigma")
		jt.Size.Dist = p.dist(sm, "fixed", "lognormal")
		jt.Size.Mean, _ = sm.num("mean", true, 1, maxSizeBytes)
		jt.Size.Sigma, _ = sm.num("sigma", jt.Size.Dist == "lognormal", 0, maxSigma)
	}
	if jt.Duration.PerSize && jt.Size.Dist == "" {
		p.fail(n, join(path, "duration.per_size"), "needs size_bytes")
	}
	return jt
}

// dist reads the "dist" field, which must be one of allowed.
func (p *parser) dist(m *mapping, allowed ...string) string {
	d := m.str("dist", true)
	if d != "" && !slices.Contains(allowed, d) {
		p.fail(m.fields["dist"], join(m.path, "dist"), "unknown distribution %q (allowed: %v)", d, allowed)
	}
	return d
}

func (p *parser) event(n *yaml.Node, path string, types map[string]bool) Event {
	m := p.mapping(n, path, "kind", "name", "job_type", "start_s", "end_s", "multiplier", "mean_ms")
	e := Event{Kind: m.str("kind", true), JobType: m.str("job_type", true), EndS: math.Inf(1)}
	if m.fields["name"] != nil {
		e.Name = m.str("name", false)
	}
	if v := m.fields["job_type"]; v != nil && e.JobType != "" && !types[e.JobType] {
		p.fail(v, join(path, "job_type"), "unknown job type %q", e.JobType)
	}
	e.StartS, _ = m.num("start_s", true, 0, maxArrivalsS)
	switch e.Kind {
	case EventRate:
		e.EndS, _ = m.num("end_s", true, 0, maxArrivalsS)
		e.Multiplier, _ = m.num("multiplier", true, 0, maxMultiplier)
		if v := m.fields["mean_ms"]; v != nil {
			p.fail(v, join(path, "mean_ms"), "not allowed on a rate event")
		}
	case EventCost:
		if m.fields["end_s"] != nil {
			e.EndS, _ = m.num("end_s", false, 0, maxArrivalsS)
		}
		e.MeanMS, _ = m.num("mean_ms", true, 0, maxMeanMS)
		if v := m.fields["mean_ms"]; v != nil && e.MeanMS == 0 {
			p.fail(v, join(path, "mean_ms"), "must be greater than 0")
		}
		if v := m.fields["multiplier"]; v != nil {
			p.fail(v, join(path, "multiplier"), "not allowed on a cost event")
		}
	case "":
	default:
		p.fail(m.fields["kind"], join(path, "kind"), "unknown event kind %q (allowed: rate, cost)", e.Kind)
	}
	if v := m.fields["end_s"]; v != nil && e.EndS <= e.StartS {
		p.fail(v, join(path, "end_s"), "must be after start_s (%g), got %g", e.StartS, e.EndS)
	}
	return e
}
