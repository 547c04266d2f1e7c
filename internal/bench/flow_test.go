package bench

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// TestFlowEveryArm runs every flow arm briefly against the real brokers and
// checks that every message completed.
func TestFlowEveryArm(t *testing.T) {
	drivers := map[string]Driver{RabbitMQ: rabbitForTest(t), Redis: redisForTest(t), Harbinger: harbingerForTest(t),
		RabbitSidecars: sidecarsForTest(t)}
	src := productionFlow(t)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	res, err := RunFlow(ctx, FlowConfig{Source: src, Seeds: []uint64{1}, Arms: FlowArms,
		TimeScale: 0.05, Window: 6 * time.Second, DrainTimeout: 10 * time.Second}, drivers)
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range res.Runs {
		if run.Sent == 0 {
			t.Errorf("%s: sent nothing", run.Arm)
		}
		if lost := run.Sent - len(run.Records); lost != 0 {
			t.Errorf("%s: lost %d of %d", run.Arm, lost, run.Sent)
		}
		t.Logf("%s: %d sent, %d duplicates, wall %.1fs, handler overrun %.0f µs, MAE %.1f ms, tier accuracy %.2f",
			run.Arm, run.Sent, run.Duplicates, run.Wall.Seconds(), run.OverrunUS, run.MAEms, run.TierAccuracy)
		// The arms that predict report how well: Harbinger's broker predicts
		// on every queue, whatever its policy; RabbitMQ only with the
		// rabbitmq package (in process or through sidecars); Redis never.
		predicts := strings.HasPrefix(run.Arm, "harbinger-") || strings.HasPrefix(run.Arm, "rabbitmq-predictive")
		if got := !math.IsNaN(run.MAEms) && !math.IsNaN(run.TierAccuracy); got != predicts {
			t.Errorf("%s: MAE %v, tier accuracy %v; want figures: %v", run.Arm, run.MAEms, run.TierAccuracy, predicts)
		}
	}
	for _, name := range res.Report.ArmOrder {
		a := res.Report.Arms[name]
		t.Logf("%-22s mean %.3f p99 %.3f short %.3f export %.3f thr %.1f", name, a.MeanS, a.P99S, a.ShortMedianS, a.ExportMaxWaitS, a.ThroughputPerS)
	}
}

// The method line describes the sidecar arm only in runs that have it.
func TestSidecarArmMethod(t *testing.T) {
	t.Parallel()
	arms, err := ParseArms("rabbitmq-fifo,rabbitmq-predictive-sidecars", FlowArms)
	if err != nil {
		t.Fatal(err)
	}
	m := sidecarArmMethod(arms)
	for _, want := range []string{"rabbitmq-predictive-sidecars:", fmt.Sprintf("%d `harbinger sidecar --hold` processes", SidecarsPerRun), SidecarCacheFor.String()} {
		if !strings.Contains(m, want) {
			t.Errorf("method %q lacks %q", m, want)
		}
	}
	if m := sidecarArmMethod(arms[:1]); m != "" {
		t.Errorf("a run without the sidecar arm describes it: %q", m)
	}
}
