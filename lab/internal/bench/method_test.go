package bench

import (
	"math"
	"strings"
	"testing"
)

func TestTurnaroundRanges(t *testing.T) {
	t.Parallel()
	runs := []RunResult{
		{Arm: "harbinger-fifo", TurnaroundUS: 170.2},
		{Arm: "rabbitmq-fifo", TurnaroundUS: 240},
		{Arm: "harbinger-fifo", TurnaroundUS: 229.6},
		{Arm: "redis-fifo", TurnaroundUS: math.NaN()},
	}
	got := turnaroundRanges(runs)
	if want := "harbinger-fifo 170 to 230, rabbitmq-fifo 240"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := turnaroundRanges(runs[3:]); !strings.HasPrefix(got, "n/a") {
		t.Errorf("no run with waits: got %q", got)
	}
}
