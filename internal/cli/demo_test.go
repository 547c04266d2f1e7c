package cli

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/harbinger-mq/harbinger/internal/report"
)

// The demo's closing sentence blames the machine for a backlog only when
// it completed less than the workload's own workers can, and names the
// workload's own overload when there is one.
func TestDemoSentenceNamesWhoseBacklog(t *testing.T) {
	t.Parallel()
	arm := func(thr float64) report.SeedResult {
		return report.SeedResult{MeanS: 10, P99S: 40, ShortMedianS: 8, ExportMaxWaitS: 30, ThroughputPerS: report.Num(thr)}
	}
	const overloaded, machine = "asks more of its 4 workers", "This machine did not keep up"
	for _, tc := range []struct {
		name       string
		thr        float64
		pace       demoPace
		want, dont []string
	}{
		// production-flow: 113 msg/s arrive, 4 workers complete 101, and
		// the live run did as well as the simulator.
		{"overloaded workload, machine kept up", 99.8, demoPace{offered: 113, capacity: 101.2, workers: 4},
			[]string{overloaded, "113 msg/s arrive", "completes 101"}, []string{machine}},
		{"overloaded workload, machine behind", 80, demoPace{offered: 113, capacity: 101.2, workers: 4},
			[]string{overloaded, machine, "80 msg/s completed", "complete 101"}, nil},
		{"workload within its workers, machine kept up", 49.5, demoPace{offered: 50, capacity: 50, workers: 4},
			nil, []string{overloaded, machine}},
		{"workload within its workers, machine behind", 40, demoPace{offered: 50, capacity: 50, workers: 4},
			[]string{machine, "40 msg/s completed"}, []string{overloaded}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fifo, pred := arm(tc.thr), arm(tc.thr+0.3)
			pred.ShortMedianS, pred.MeanS = 0.02, 3
			s := demoSentence(fifo, pred, tc.pace)
			for _, w := range tc.want {
				if !strings.Contains(s, w) {
					t.Errorf("sentence lacks %q:\n%s", w, s)
				}
			}
			for _, d := range tc.dont {
				if strings.Contains(s, d) {
					t.Errorf("sentence says %q:\n%s", d, s)
				}
			}
		})
	}
}

// A time scale that is not a finite number is refused before the demo
// starts: NaN passed the "negative" check and ran the demo with
// durations no clock can keep ("squeezed NaNx into about NaN s").
func TestDemoRefusesTimeScaleNotANumber(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // a demo that starts anyway gives up at once
	for _, v := range []string{"NaN", "+Inf", "-1"} {
		var stdout strings.Builder
		err := runDemo(ctx, []string{"--time-scale", v}, &stdout, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--time-scale") {
			t.Errorf("demo --time-scale %s: %v, want it refused naming --time-scale", v, err)
		}
		if stdout.Len() > 0 {
			t.Errorf("demo --time-scale %s started: %q", v, stdout.String())
		}
	}
}
