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
		"group_weights.acme=3", "group_weights.ünï=2", "reserve=1", "reserve_above=1.5", "reserve_window=3s", "no_credit=true"})
	if err != nil {
		t.Fatal(err)
	}
	var cfg broker.QueueConfig
	if err := decodeStrict(data, &cfg); err != nil {
		t.Fatal(err)
	}
	want := "tenant [tenant=5] [producer:crawler=10/s:20 job_type:export=0.5] map[acme:3 ünï:2] 1 1.5 3s true"
	if got := fmt.Sprint(cfg.GroupBy, " ", cfg.Limits, " ", cfg.RateLimits, " ", cfg.GroupWeights, " ", cfg.Reserve, " ",
		cfg.ReserveAbove, " ", cfg.ReserveWindow, " ", cfg.NoCredit); got != want {
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
	yml := "queues:\n  reports:\n    group_by: tenant\n    limits: [tenant=2, job_type:export=1]\n    rate_limits: producer=100\n" +
		"    reserve_above: 2\n    reserve_window: 500ms\n    credit: 1s\n"
	if err := decodeStrict([]byte(yml), &file); err != nil {
		t.Fatal(err)
	}
	r := file.Queues["reports"]
	if got := fmt.Sprint(r.Limits, r.RateLimits, r.ReserveAbove, r.ReserveWindow, r.Credit); got != "[tenant=2 job_type:export=1] [producer=100] 2 500ms 1s" {
		t.Fatalf("config file: %s", got)
	}
	// A bad rule names itself.
	bad := broker.QueueConfig{Limits: broker.Rules{"tenant=5", "tenant=0"}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "limits[1].max") {
		t.Fatalf("Validate = %v, want it to name limits[1].max", err)
	}
}

// `harbinger sim` runs the same rules: an arm named +fair with the
// declaration, the others without; a bad rule is refused by name.
func TestSimFairArms(t *testing.T) {
	t.Parallel()
	var out, errb strings.Builder
	err := runSim(t.Context(), []string{"--workload", "../../workloads/noisy-equal.yaml", "--seeds", "1", "--arms", "fifo,fifo+fair",
		"--group-by", "producer", "--limit", "job_type:flood.job=2", "--tenants", "--window", "60s,120s"}, &out, &errb)
	if err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	for _, want := range []string{"fifo+fair                flood", "fifo                     steady-a", "busy in window"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("no %q in:\n%s", want, out.String())
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--limit", "tenant=0"}, "limits[0].max"},
		{[]string{"--rate", "producer=fast"}, "rates[0].per_second"},
		{[]string{"--group-by", "colour"}, "group_by"},
		{[]string{"--reserve", "1"}, "need --group-by"},
		{[]string{"--arms", "fifo+fair"}, "needs a declaration"},
	} {
		args := append([]string{"--workload", "../../workloads/noisy-equal.yaml", "--seeds", "1", "--tenants"}, tc.args...)
		if err := runSim(t.Context(), args, &out, &errb); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sim %v = %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
	// A history is replayed without limits or fair shares: their flags
	// are refused, not ignored.
	for _, flags := range [][]string{{"--group-by", "producer"}, {"--limit", "tenant=2"}, {"--rate", "producer=5"}, {"--tenants"}} {
		args := append([]string{"--history", "no-such-file.jsonl"}, flags...)
		if err := runSim(t.Context(), args, &out, &errb); err == nil || !strings.Contains(err.Error(), flags[0]+" does not apply to --history") {
			t.Errorf("sim %v = %v, want it refused", args, err)
		}
	}
}
