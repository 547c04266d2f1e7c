package bench

import (
	"context"
	"testing"
	"time"
)

// TestFlowEveryArm runs every flow arm briefly against the real brokers and
// checks that every message completed.
func TestFlowEveryArm(t *testing.T) {
	drivers := map[string]Driver{RabbitMQ: rabbitForTest(t), Redis: redisForTest(t), Harbinger: harbingerForTest(t)}
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
		t.Logf("%s: %d sent, %d duplicates, wall %.1fs, handler overrun %.0f µs", run.Arm, run.Sent, run.Duplicates, run.Wall.Seconds(), run.OverrunUS)
	}
	for _, name := range res.Report.ArmOrder {
		a := res.Report.Arms[name]
		t.Logf("%-22s mean %.3f p99 %.3f short %.3f export %.3f thr %.1f", name, a.MeanS, a.P99S, a.ShortMedianS, a.ExportMaxWaitS, a.ThroughputPerS)
	}
}
