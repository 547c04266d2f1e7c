package harness

import (
	"testing"
	"time"
)

func TestBodyRoundTrip(t *testing.T) {
	t.Parallel()
	sent := time.Unix(1_800_000_000, 123456789)
	b := EncodeBody(42, sent, 64)
	if len(b) != 64 {
		t.Fatalf("body is %d bytes, want 64", len(b))
	}
	seq, got, err := DecodeBody(b)
	if err != nil || seq != 42 || !got.Equal(sent) {
		t.Errorf("DecodeBody = %d, %v, %v; want 42, %v, nil", seq, got, err, sent)
	}
	if _, _, err := DecodeBody(b[:10]); err == nil {
		t.Error("DecodeBody accepted a short body")
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
