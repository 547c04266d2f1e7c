package broker

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// A lease is at least MinLease. A queue, or the broker's default, with a
// shorter one is refused with an error naming the field and the bounds;
// an extend asking for less is raised to the minimum and says so. Before,
// a lease of 1 ns was taken: each delivery expired at once and went to
// the next worker while the first still ran it.
func TestLeaseMinimum(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		lease time.Duration
		ok    bool
	}{
		{0, true}, // the default
		{time.Nanosecond, false},
		{100 * time.Millisecond, false},
		{MinLease - time.Nanosecond, false},
		{MinLease, true},
		{MaxLease, true},
		{MaxLease + time.Nanosecond, false},
		{-time.Second, false},
	} {
		err := QueueConfig{Lease: tc.lease}.Validate()
		if tc.ok != (err == nil) {
			t.Errorf("lease %v: %v", tc.lease, err)
		}
		if err != nil && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "lease") || !strings.Contains(err.Error(), MinLease.String())) {
			t.Errorf("lease %v: %q does not name the field and the minimum", tc.lease, err)
		}
		if err := (Config{Queue: QueueConfig{Lease: tc.lease}}).WithDefaults().Validate(); tc.ok != (err == nil) {
			t.Errorf("a broker whose queues' default lease is %v: %v", tc.lease, err)
		}
	}
	tb := setup(t, Config{})
	if _, err := tb.b.Declare("q", QueueConfig{Lease: time.Nanosecond}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("declare with a lease of 1ns: %v", err)
	}

	tb = setup(t, Config{Queue: QueueConfig{Lease: 10 * time.Second}})
	tb.publish(t, msg("q", "j"))
	c := tb.sub(t, "q", 1)
	d := next(t, c)
	var adj *AdjustedError
	if err := c.Extend(d.ID, time.Nanosecond); !errors.As(err, &adj) || adj.Capped != MinLease || adj.Got != time.Nanosecond {
		t.Fatalf("an extend of 1ns: %v, want it raised to %v", err, MinLease)
	}
	tb.clk.Advance(MinLease - time.Nanosecond)
	if in, _ := tb.b.Queue("q"); in.InFlight != 1 {
		t.Fatalf("the job's lease ran out before the minimum: %+v", in)
	}
	tb.clk.Advance(time.Nanosecond)
	if in, _ := tb.b.Queue("q"); in.InFlight != 0 || in.Ready != 1 {
		t.Fatalf("the job's lease did not run out at the minimum: %+v", in)
	}
}

// A queue declared with a lease under the minimum by a broker before it
// recovers, with the minimum; so does a schedule of @every 1ns, which the
// cron library runs every second.
func TestShortLeaseInTheLogRecovers(t *testing.T) {
	t.Parallel()
	st := store.NewMemory()
	data, err := json.Marshal(QueueConfig{Lease: time.Nanosecond, MaxAttempts: 7})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(&store.Record{Kind: store.KindDeclare, Queue: "fast", Data: data}); err != nil {
		t.Fatal(err)
	}
	sched := []byte(`{"name":"often","queue":"fast","cron":"@every 1ns","start":"2026-01-01T00:00:00Z"}`)
	if _, err := st.Append(&store.Record{Kind: store.KindSchedule, ID: "often", Data: sched}); err != nil {
		t.Fatal(err)
	}
	b := durable(t, st, clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), Config{})
	defer b.Shutdown(t.Context())
	in, err := b.Queue("fast")
	if err != nil {
		t.Fatal(err)
	}
	if in.Config.Lease != MinLease || in.Config.MaxAttempts != 7 {
		t.Fatalf("recovered config %+v, want lease %v and the rest as logged", in.Config, MinLease)
	}
	if got := b.Schedules(); len(got) != 1 || got[0].Cron != "@every 1ns" {
		t.Fatalf("recovered schedules %+v", got)
	}
}
