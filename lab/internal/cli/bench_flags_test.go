package cli

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harbinger-mq/harbinger/lab/internal/bench"
)

// Flags of bench flow that cannot go together are refused before
// anything starts.
func TestBenchFlowModeFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--harbinger-in-process", "--harbinger-durable"}, "exclude each other"},
		{[]string{"--data-dir", t.TempDir()}, "--data-dir needs --harbinger-durable"},
	} {
		err := runBenchFlow(t.Context(), append(tc.args, "--out", ""), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bench flow %v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// Numbers bench flow cannot run with are refused, naming their flag,
// before any broker is started or dialled: a NaN or infinite time scale
// and a negative arrival window were let through to the run, which
// refused them only after connecting every arm's broker (and, without
// RabbitMQ at hand, failed on that instead).
func TestBenchFlowRefusesNonsenseBeforeConnecting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--time-scale", "NaN"}, "--time-scale must be a positive number"},
		{[]string{"--time-scale", "+Inf"}, "--time-scale must be a positive number"},
		{[]string{"--arrival-window", "-1s"}, "--arrival-window must not be negative"},
	} {
		var stderr strings.Builder
		// The in-process broker keeps what a run would start small.
		args := append(tc.args, "--harbinger-in-process", "--arms", "harbinger-fifo", "--out", "")
		err := runBenchFlow(t.Context(), args, io.Discard, &stderr)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("bench flow %v: %v, want an error starting %q", tc.args, err, tc.want)
		}
		if stderr.Len() > 0 {
			t.Errorf("bench flow %v started: %q", tc.args, stderr.String())
		}
	}
}

// bench cost refuses an infinite --rate before building or starting
// anything, as it does a negative one; the run refused it only after
// every broker was up.
func TestBenchCostRefusesInfiniteRate(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // a run that gets past the flags stops at its first step
	err := runBenchCost(ctx, []string{"--rate", "+Inf", "--out", ""}, io.Discard, io.Discard)
	if err == nil || !strings.HasPrefix(err.Error(), "--rate must be a positive number") {
		t.Errorf("bench cost --rate +Inf: %v, want it refused naming --rate", err)
	}
}

// bench flow --cpuprofile writes the harness's profile even when the run
// stops early, and names the flag when it cannot create the file.
func TestBenchFlowCPUProfile(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "harness.prof")
	err := runBenchFlow(t.Context(), []string{"--cpuprofile", prof, "--arms", "no-such-arm", "--out", ""}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "no-such-arm") {
		t.Fatalf("bench flow with an unknown arm: %v", err)
	}
	if fi, err := os.Stat(prof); err != nil || fi.Size() == 0 {
		t.Errorf("profile after an early stop: %v, %v; want a non-empty file", fi, err)
	}
	err = runBenchFlow(t.Context(), []string{"--cpuprofile", filepath.Join(dir, "missing", "x.prof"), "--out", ""}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--cpuprofile") {
		t.Errorf("an uncreatable profile path: %v, want an error naming --cpuprofile", err)
	}
}

// bench fair refuses a window, a time scale or a case it cannot run with
// before any broker is started.
func TestBenchFairRefusesNonsenseBeforeConnecting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--window", "120s,60s"}, "--window takes FROM,TO"},
		{[]string{"--window", "60s"}, "--window takes FROM,TO"},
		{[]string{"--time-scale", "0"}, "--time-scale must be a positive number"},
		{[]string{"--cases", "loud"}, "--cases: unknown case \"loud\""},
		{[]string{"--reserve", "-1"}, "--reserve and --reserve-above take 0"},
		{[]string{"--reserve-above", "-0.5"}, "--reserve and --reserve-above take 0"},
	} {
		var stderr strings.Builder
		err := runBenchFair(t.Context(), append(tc.args, "--out", ""), io.Discard, &stderr)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("bench fair %v: %v, want an error starting %q", tc.args, err, tc.want)
		}
		if stderr.Len() > 0 {
			t.Errorf("bench fair %v started: %q", tc.args, stderr.String())
		}
	}
}

// bench fair's --reserve and --reserve-above are what the fair arm's
// queue declares; without them it declares the broker's defaults.
func TestBenchFairReserveFlags(t *testing.T) {
	t.Parallel()
	bf, err := parseBenchFair([]string{"--workloads", "../../../workloads", "--cases", "equal", "--reserve", "1", "--reserve-above", "1.5", "--out", ""}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (bench.FairSettings{Reserve: 1, ReserveAbove: 1.5}); bf.cfg.Fair != want {
		t.Fatalf("settings %+v, want %+v", bf.cfg.Fair, want)
	}
	if m := bench.FairMethod(bf.cfg, bench.Environment{}); !strings.Contains(m, "group_by producer and reserve 1, reserve_above 1.5,") {
		t.Errorf("the method line does not say what was declared:\n%s", m)
	}
	bf, err = parseBenchFair([]string{"--workloads", "../../../workloads", "--cases", "equal", "--out", ""}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if bf.cfg.Fair != (bench.FairSettings{}) || !strings.Contains(bench.FairMethod(bf.cfg, bench.Environment{}), "the default fair settings") {
		t.Errorf("without the flags: %+v", bf.cfg.Fair)
	}
}
