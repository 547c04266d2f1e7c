package cli

import (
	"fmt"
	"strings"
	"testing"

	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/server"
)

// `admin declare-queue` and a config file write limits the same way: one
// rule alone or a list, weights per group, and they reach the broker's
// declaration and back through the wire unchanged.
func TestDeclareLimitSettings(t *testing.T) {
	t.Parallel()
	data, err := assignments([]string{"group_by=tenant", "limits=tenant=5", "rate_limits=producer:crawler=10/s:20,job_type:export=0.5",
		"group_weights.acme=3", "group_weights.ünï=2", "reserve=1"})
	if err != nil {
		t.Fatal(err)
	}
	var cfg broker.QueueConfig
	if err := decodeStrict(data, &cfg); err != nil {
		t.Fatal(err)
	}
	want := "tenant [tenant=5] [producer:crawler=10/s:20 job_type:export=0.5] map[acme:3 ünï:2] 1"
	if got := fmt.Sprint(cfg.GroupBy, " ", cfg.Limits, " ", cfg.RateLimits, " ", cfg.GroupWeights, " ", cfg.Reserve); got != want {
		t.Fatalf("settings %q, want %q", got, want)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	back, err := server.QueueConfigFromProto(server.QueueConfigProto(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if diff := configDiff(cfg, back); len(diff) > 0 {
		t.Fatalf("through the wire: %v", diff)
	}
	var file ServeConfig
	yml := "queues:\n  reports:\n    group_by: tenant\n    limits: [tenant=2, job_type:export=1]\n    rate_limits: producer=100\n"
	if err := decodeStrict([]byte(yml), &file); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(file.Queues["reports"].Limits, file.Queues["reports"].RateLimits); got != "[tenant=2 job_type:export=1] [producer=100]" {
		t.Fatalf("config file: %s", got)
	}
	// A bad rule names itself.
	bad := broker.QueueConfig{Limits: broker.Rules{"tenant=5", "tenant=0"}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "limits[1].max") {
		t.Fatalf("Validate = %v, want it to name limits[1].max", err)
	}
}
