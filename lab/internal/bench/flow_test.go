package bench

import (
	"context"
	"fmt"
	"math"
	"os"
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

// TestFlowHarbingerServe runs the Harbinger flow arms the way the
// registered comparison now does, each on a `harbinger serve --memory`
// process of its own, and checks that every message completed and that
// the predictor's figures come back from the other process.
func TestFlowHarbingerServe(t *testing.T) {
	for _, tc := range []struct {
		mode          HarbingerMode
		version, line string
	}{
		{ServeMemory, "harbinger serve --memory, its own process", "`harbinger serve --memory` process per run"},
		{ServeDurable, "harbinger serve --fsync always, its own process", "`harbinger serve --fsync always` process per run on a fresh data directory (durable"},
	} {
		t.Run(tc.version, func(t *testing.T) {
			arms, err := ParseArms("harbinger-fifo,harbinger-predictive", FlowArms)
			if err != nil {
				t.Fatal(err)
			}
			dataDir := t.TempDir()
			drivers, err := Connect(context.Background(), arms, ConnectOptions{Binary: harbingerBinaryForTest(t),
				Harbinger: HarbingerOptions{Mode: tc.mode, DataDir: dataDir}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { CloseAll(drivers) })
			if v := drivers[Harbinger].Version(context.Background()); !strings.Contains(v, tc.version) {
				t.Errorf("version %q does not say the broker ran as %q", v, tc.version)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
			defer cancel()
			cfg := FlowConfig{Source: productionFlow(t), Seeds: []uint64{1}, Arms: arms,
				TimeScale: 0.05, Window: 6 * time.Second, DrainTimeout: 10 * time.Second, HarbingerMode: tc.mode}
			res, err := RunFlow(ctx, cfg, drivers)
			if err != nil {
				t.Fatal(err)
			}
			for _, run := range res.Runs {
				if run.Sent == 0 || run.Sent != len(run.Records) {
					t.Errorf("%s: %d sent, %d completed", run.Arm, run.Sent, len(run.Records))
				}
				if math.IsNaN(run.MAEms) || math.IsNaN(run.TierAccuracy) || run.TierAccuracy < 0 || run.TierAccuracy > 1 {
					t.Errorf("%s: MAE %v ms, tier accuracy %v: want the serve process's figures", run.Arm, run.MAEms, run.TierAccuracy)
				}
				// The broker is a process of its own, so its CPU is accounted.
				if b := run.CPU.BrokerUS; b == nil || *b < 0 || run.CPU.HarnessUS <= 0 {
					t.Errorf("%s: CPU per message %v: want the serve process's and the harness's", run.Arm, run.CPU)
				}
				if run.TurnaroundUS < 0 || run.TurnaroundP99US < 0 {
					t.Errorf("%s: turnaround mean %v µs, P99 %v µs: negative", run.Arm, run.TurnaroundUS, run.TurnaroundP99US)
				}
			}
			m := FlowMethod(cfg.WithDefaults(), Describe(ctx, drivers), res.Runs)
			for _, want := range []string{tc.line, "Admin.ListKeys"} {
				if !strings.Contains(m, want) {
					t.Errorf("method line lacks %q", want)
				}
			}
			if strings.Contains(m, "inside the harness process") {
				t.Error("method line says the broker ran inside the harness")
			}
			// A durable run's brokers each had a data directory of their
			// own, removed when the run was done.
			if left, _ := os.ReadDir(dataDir); len(left) != 0 {
				t.Errorf("%d data directories left behind in %s", len(left), dataDir)
			}
		})
	}
}
