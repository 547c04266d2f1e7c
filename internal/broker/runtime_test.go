package broker

import (
	"math"
	"testing"
	"time"
)

// Jobs that always take 200 ms report a p50 and p99 of 200 ms, within
// QuantileAccuracy, for the queue and for their key; the bucket midpoint
// the duration histogram would give (181 ms) is not within it.
func TestRunTimeQuantilesAreMeasured(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	c := tb.sub(t, "q", 1)
	for i := range 300 {
		jt, d := "fixed", 200*time.Millisecond
		if i%3 == 0 {
			jt, d = "quick", 20*time.Millisecond
		}
		tb.publish(t, msg("q", jt))
		if err := c.Ack(next(t, c).ID, d); err != nil {
			t.Fatal(err)
		}
		c.AddCredit(1)
	}
	within := func(what string, got, want time.Duration) {
		t.Helper()
		if e := math.Abs(float64(got-want)) / float64(want); e > QuantileAccuracy {
			t.Errorf("%s = %v, want %v within %.0f%% (off by %.2f%%)", what, got, want, 100*QuantileAccuracy, 100*e)
		}
	}
	in, err := tb.b.Queue("q")
	if err != nil {
		t.Fatal(err)
	}
	if in.RunTime.Count != 300 {
		t.Errorf("run-time count %d, want 300", in.RunTime.Count)
	}
	within("queue p50", in.RunTime.P50, 200*time.Millisecond)
	within("queue p99", in.RunTime.P99, 200*time.Millisecond)
	keys, err := tb.b.Keys("q", 0)
	if err != nil || len(keys) != 2 {
		t.Fatalf("Keys = %+v, %v", keys, err)
	}
	for _, k := range keys {
		want := 200 * time.Millisecond
		if k.Key.JobType == "quick" {
			want = 20 * time.Millisecond
		}
		within(k.Key.JobType+" p50", k.P50, want)
		within(k.Key.JobType+" p99", k.P99, want)
	}
}
