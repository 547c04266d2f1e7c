package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/harbinger-mq/harbinger/internal/broker"
)

// ScheduleConfig is a periodic schedule as a config file (schedules:) and
// `admin declare-schedule` give it: the fields of broker.Schedule a
// person sets. Give cron (with time_zone) or every.
type ScheduleConfig struct {
	Name     string            `yaml:"name"`
	Queue    string            `yaml:"queue"`
	Cron     string            `yaml:"cron"`
	TimeZone string            `yaml:"time_zone"`
	Every    time.Duration     `yaml:"every"`
	CatchUp  time.Duration     `yaml:"catch_up"`
	Paused   bool              `yaml:"paused"`
	Producer string            `yaml:"producer"`
	JobType  string            `yaml:"job_type"`
	Payload  string            `yaml:"payload"`
	Headers  map[string]string `yaml:"headers"`
}

func (s ScheduleConfig) schedule() broker.Schedule {
	return broker.Schedule{Name: s.Name, Queue: s.Queue, Cron: s.Cron, TimeZone: s.TimeZone, Every: s.Every,
		CatchUp: s.CatchUp, Paused: s.Paused, Producer: s.Producer, JobType: s.JobType,
		Payload: []byte(s.Payload), Headers: s.Headers}
}

// sameSchedule reports whether a declared schedule is already in force as
// the config file gives it (what the broker sets, ticks and counts, aside).
func sameSchedule(have broker.Schedule, want ScheduleConfig) bool {
	w := want.schedule()
	if w.CatchUp == 0 {
		w.CatchUp = broker.DefaultCatchUp
	}
	return have.Queue == w.Queue && have.Cron == w.Cron && have.TimeZone == w.TimeZone && have.Every == w.Every &&
		have.CatchUp == w.CatchUp && have.Paused == w.Paused && have.Producer == w.Producer && have.JobType == w.JobType &&
		bytes.Equal(have.Payload, w.Payload) && maps.Equal(have.Headers, w.Headers)
}

// assignments turns KEY=VALUE arguments into a YAML mapping, so that the
// command line and a config file read the same keys the same way: a
// value with commas is a list (weights=5,3,1), KEY.SUB=VALUE a nested
// mapping (static_tiers.email=0, headers.team=ops).
func assignments(args []string) ([]byte, error) {
	root := &yaml.Node{Kind: yaml.MappingNode}
	nested := map[string]*yaml.Node{}
	seen := map[string]bool{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("want KEY=VALUE, got %q", a)
		}
		if seen[k] {
			return nil, fmt.Errorf("%s given twice", k)
		}
		seen[k] = true
		if parent, sub, ok := strings.Cut(k, "."); ok {
			m := nested[parent]
			if m == nil {
				m = &yaml.Node{Kind: yaml.MappingNode}
				nested[parent] = m
				root.Content = append(root.Content, scalar(parent, false), m)
			}
			// Typed, so that static_tiers.email=0 and group_weights.acme=3
			// are numbers; a text setting (headers.team=7) reads them as
			// written all the same.
			m.Content = append(m.Content, scalar(sub, false), scalar(v, true))
			continue
		}
		val := scalar(v, true)
		if strings.Contains(v, ",") && !strings.ContainsAny(v, "{}[]\"' ") {
			val = &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
			for _, item := range strings.Split(v, ",") {
				val.Content = append(val.Content, scalar(item, true))
			}
		}
		root.Content = append(root.Content, scalar(k, false), val)
	}
	return yaml.Marshal(root)
}

// scalar is v as a YAML scalar: a number or true/false as such when typed
// is set (so that tiers=3 is a number), text otherwise.
func scalar(v string, typed bool) *yaml.Node {
	tag := "!!str"
	if typed {
		if _, err := strconv.ParseInt(v, 10, 64); err == nil {
			tag = "!!int"
		} else if _, err := strconv.ParseFloat(v, 64); err == nil {
			tag = "!!float"
		} else if v == "true" || v == "false" {
			tag = "!!bool"
		}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v}
}

// decodeStrict reads YAML into v, refusing unknown keys, with errors in
// words rather than Go's type names.
func decodeStrict(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return plainYAMLError(err)
	}
	return nil
}

// yamlInto matches the Go type a YAML error names.
var yamlInto = regexp.MustCompile(`into ([][*A-Za-z0-9_.]+)`)

// yamlTypeWords says in words what a value of a Go type is written as.
var yamlTypeWords = map[string]string{
	"time.Duration": "a duration such as 30s", "int": "a whole number", "int64": "a whole number",
	"uint64": "a whole number", "float64": "a number", "bool": "true or false", "string": "text",
	"[]int": "a list of whole numbers", "[]time.Duration": "a list of durations",
	"map[string]int": "a mapping of names to whole numbers", "map[string]string": "a mapping of names to text",
	"[]cli.ScheduleConfig": "a list of schedules", "broker.Rules": "a rule such as tenant=5, or a list of them", "map[string]broker.QueueConfig": "a mapping of queue names to their settings",
}

// plainYAMLError rewrites the Go type names in a YAML decoding error
// ("cannot unmarshal !!str `x` into cli.ServeConfig") as what the key
// wants ("want a mapping of settings (key: value)").
func plainYAMLError(err error) error {
	msg := yamlInto.ReplaceAllStringFunc(err.Error(), func(m string) string {
		t := strings.TrimPrefix(m, "into ")
		if w, ok := yamlTypeWords[t]; ok {
			return "where " + w + " is wanted"
		}
		if strings.HasPrefix(t, "cli.") || strings.HasPrefix(t, "broker.") || strings.HasPrefix(t, "*") {
			return "where a mapping of settings (key: value) is wanted"
		}
		return "where " + t + " is wanted"
	})
	msg = strings.ReplaceAll(msg, "in type cli.ServeConfig", "in the settings")
	msg = regexp.MustCompile(`in type [A-Za-z0-9_.]+`).ReplaceAllString(msg, "here")
	return errors.New(strings.TrimPrefix(msg, "yaml: "))
}

// applyDeclarations declares the config file's queues and schedules on b,
// in name order, and logs for each whether it was made, changed (which
// settings) or already as declared: a restart with the same file changes
// nothing and logs so.
func applyDeclarations(b *broker.Broker, queues map[string]broker.QueueConfig, scheds []ScheduleConfig, log *slog.Logger) error {
	def := b.Config().Queue
	for _, name := range slices.Sorted(maps.Keys(queues)) {
		want := queues[name].WithDefaults(def)
		have, err := b.Queue(name)
		existed := err == nil
		if existed {
			if diff := configDiff(have.Config, want); len(diff) == 0 {
				log.Info("harbinger: config: queue as declared", "queue", name)
				continue
			} else {
				log.Info("harbinger: config: queue changed", "queue", name, "changes", strings.Join(diff, "; "))
			}
		}
		if _, err := b.Declare(name, queues[name]); err != nil {
			return fmt.Errorf("config: queue %q: %w", name, err)
		}
		if !existed {
			log.Info("harbinger: config: queue declared", "queue", name, "policy", want.Policy, "tiers", want.Tiers)
		}
	}
	current := map[string]broker.Schedule{}
	for _, s := range b.Schedules() {
		current[s.Name] = s
	}
	seen := map[string]bool{}
	for _, s := range scheds {
		if seen[s.Name] {
			return fmt.Errorf("config: schedule %q is declared twice", s.Name)
		}
		seen[s.Name] = true
		have, existed := current[s.Name]
		if existed && sameSchedule(have, s) {
			log.Info("harbinger: config: schedule as declared", "schedule", s.Name)
			continue
		}
		if _, err := b.DeclareSchedule(s.schedule()); err != nil {
			return fmt.Errorf("config: schedule %q: %w", s.Name, err)
		}
		verb := "declared"
		if existed {
			verb = "changed"
		}
		log.Info("harbinger: config: schedule "+verb, "schedule", s.Name, "queue", s.Queue)
	}
	return nil
}

// configDiff names the settings that differ between have and want, each
// as "field: old -> new" with the config file's key.
func configDiff(have, want broker.QueueConfig) []string {
	var out []string
	hv, wv := reflect.ValueOf(have), reflect.ValueOf(want)
	t := hv.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if key == "" || key == "-" {
			continue
		}
		a, b := hv.Field(i).Interface(), wv.Field(i).Interface()
		if reflect.DeepEqual(a, b) || (emptyList(hv.Field(i)) && emptyList(wv.Field(i))) {
			continue
		}
		out = append(out, fmt.Sprintf("%s: %v -> %v", key, a, b))
	}
	return out
}

// emptyList reports whether v is a slice or map with nothing in it: nil
// and empty are the same setting.
func emptyList(v reflect.Value) bool {
	return (v.Kind() == reflect.Slice || v.Kind() == reflect.Map) && v.Len() == 0
}
