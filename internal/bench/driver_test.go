package bench

import (
	"testing"
	"time"
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

func TestBodyRoundTrip(t *testing.T) {
	t.Parallel()
	sent := time.Unix(1_800_000_000, 123456789)
	b := encodeBody(42, sent, 64)
	if len(b) != 64 {
		t.Fatalf("body is %d bytes, want 64", len(b))
	}
	seq, got, err := decodeBody(b)
	if err != nil || seq != 42 || !got.Equal(sent) {
		t.Errorf("decodeBody = %d, %v, %v; want 42, %v, nil", seq, got, err, sent)
	}
	if _, _, err := decodeBody(b[:10]); err == nil {
		t.Error("decodeBody accepted a short body")
	}
}

func TestWakeCompensatorConverges(t *testing.T) {
	t.Parallel()
	// A sleeper that always wakes 300 µs late: the correction should
	// approach 300 µs and the residual overrun zero.
	var c wakeCompensator
	const late = 300 * time.Microsecond
	want := 2 * time.Millisecond
	var over time.Duration
	for range 200 {
		over = late - c.estimate(want)
		c.observe(over)
	}
	if over < -20*time.Microsecond || over > 20*time.Microsecond {
		t.Errorf("residual overrun %v after 200 sleeps, want about 0", over)
	}
}
