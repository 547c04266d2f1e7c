package bench

import (
	"testing"
)

func TestParseArms(t *testing.T) {
	t.Parallel()
	got, err := ParseArms(" redis-fifo, harbinger-fifo,redis-fifo,", FlowArms)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "redis-fifo" || got[1].Name != "harbinger-fifo" {
		t.Errorf("ParseArms = %v, want redis-fifo, harbinger-fifo", ArmNames(got))
	}
	if _, err := ParseArms("harbinger-oracle", FlowArms); err == nil {
		t.Error("ParseArms accepted an arm that only the simulator has")
	}
	if _, err := ParseArms(" , ", FlowArms); err == nil {
		t.Error("ParseArms accepted an empty list")
	}
}

func TestPriorityOf(t *testing.T) {
	t.Parallel()
	for tier, want := range map[int]uint8{-1: 2, 0: 2, 1: 1, 2: 0, 7: 0} {
		if got := PriorityOf(tier); got != want {
			t.Errorf("PriorityOf(%d) = %d, want %d", tier, got, want)
		}
	}
}
