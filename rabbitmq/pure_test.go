package rabbitmq

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestPriorityFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tier, tiers int
		long        bool
		max         uint8
		want        uint8
	}{
		{0, 3, false, 3, 2}, {1, 3, false, 3, 1}, {2, 3, false, 3, 0},
		{0, 3, true, 3, 3}, {2, 3, true, 3, 3},
		{0, 3, false, 10, 9}, {2, 3, true, 10, 10},
		{0, 2, true, 1, 1}, {1, 2, true, 1, 0}, // no room for a top level: tiers only
	}
	for _, tt := range tests {
		if got := PriorityFor(tt.tier, tt.tiers, tt.long, tt.max); got != tt.want {
			t.Errorf("PriorityFor(%d, %d, %v, %d) = %d, want %d", tt.tier, tt.tiers, tt.long, tt.max, got, tt.want)
		}
	}
}

func TestAMQPPriority(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tier, tiers int
		max         uint8
		want        uint8
	}{
		{0, 3, 3, 3}, {1, 3, 3, 2}, {2, 3, 3, 0},
		{0, 3, 10, 10}, {1, 3, 10, 5}, {2, 3, 10, 0},
		{0, 2, 1, 1}, {1, 2, 1, 0},
		{-1, 3, 3, 3}, {7, 3, 3, 0}, // clamped
		{0, 1, 5, 5},
	}
	for _, tt := range tests {
		if got := AMQPPriority(tt.tier, tt.tiers, tt.max); got != tt.want {
			t.Errorf("AMQPPriority(%d, %d, %d) = %d, want %d", tt.tier, tt.tiers, tt.max, got, tt.want)
		}
	}
}

func TestPickerWeights(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	all := []time.Time{now, now, now}
	p := newPicker([]int{8, 3, 1}, 0)
	counts := make([]int, 3)
	for range 120 {
		counts[p.pick(all, now)]++
	}
	if counts[0] != 80 || counts[1] != 30 || counts[2] != 10 {
		t.Errorf("picks over 120 = %v, want [80 30 10]", counts)
	}
	// A tier with nothing held is never picked; the others share its turn.
	some := []time.Time{{}, now, now}
	for range 20 {
		if got := p.pick(some, now); got == 0 {
			t.Fatal("picked an empty tier")
		}
	}
}

func TestPickerAging(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	p := newPicker([]int{8, 3, 1}, time.Second)
	heads := []time.Time{now, now.Add(-1500 * time.Millisecond), now.Add(-2 * time.Second)}
	if got := p.pick(heads, now); got != 2 {
		t.Errorf("pick = %d, want the oldest aged head (2)", got)
	}
	heads[2] = now.Add(-500 * time.Millisecond)
	if got := p.pick(heads, now); got != 1 {
		t.Errorf("pick = %d, want the only aged head (1)", got)
	}
}

func TestHeadersRoundTrip(t *testing.T) {
	t.Parallel()
	k := Key{Queue: "q", Producer: "billing", JobType: "invoice", Size: 4096}
	at := time.Unix(1700000000, 123)
	own := amqp.Table{"mine": "kept"}
	h := stampHeaders(own, k, Priority{Tier: 2, Predicted: 42 * time.Millisecond}, at)
	if len(own) != 1 {
		t.Error("stampHeaders modified the caller's headers")
	}
	d := amqp.Delivery{Headers: h}
	if s, ok := stampOf(amqp.Delivery{Headers: h}); !ok || s != (Stamp{Predicted: 42 * time.Millisecond, Tier: 2}) {
		t.Errorf("stamp = %+v, %v; want 42ms, tier 2, not cold", s, ok)
	}
	cold := stampHeaders(nil, k, Priority{Tier: 1, Cold: true}, at)
	if s, ok := stampOf(amqp.Delivery{Headers: cold}); !ok || !s.Cold {
		t.Errorf("cold stamp = %+v, %v", s, ok)
	}
	for _, bad := range []amqp.Table{nil, {HeaderPredictedNS: int64(-1), HeaderTier: int32(0)}, {HeaderPredictedNS: int64(5), HeaderTier: int32(-3)}, {HeaderPredictedNS: "5", HeaderTier: int32(0)}} {
		if s, ok := stampOf(amqp.Delivery{Headers: bad}); ok {
			t.Errorf("stampOf(%v) = %+v, want no stamp", bad, s)
		}
	}
	if got := KeyOf("other", d); got != k {
		t.Errorf("KeyOf = %+v, want %+v", got, k)
	}
	if got, ok := PublishedAt(d); !ok || !got.Equal(at) {
		t.Errorf("PublishedAt = %v, %v; want %v", got, ok, at)
	}
	if h["mine"] != "kept" {
		t.Error("caller's header lost")
	}
	// A message from a publisher that is not Harbinger's keys on the queue.
	if got := KeyOf("plain", amqp.Delivery{}); got != (Key{Queue: "plain"}) {
		t.Errorf("KeyOf(no headers) = %+v", got)
	}
}

func TestLocalLearnsTiers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Three tiers, tiers only: with two keys the long one is all the work.
	l, err := NewLocal(LocalConfig{Tiers: 3, MaxPriority: 3, RecomputeEvery: 1, LongShare: -1})
	if err != nil {
		t.Fatal(err)
	}
	short, long := Key{Queue: "q", JobType: "short"}, Key{Queue: "q", JobType: "long"}
	pr, _ := l.Predict(ctx, short)
	if !pr.Cold || pr.Long || pr.Tier != 1 || pr.AMQP != 1 {
		t.Errorf("cold prediction, tiers only = %+v, want cold middle tier, AMQP 1", pr)
	}
	d, err := NewLocal(LocalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if pr, _ := d.Predict(ctx, short); !pr.Cold || !pr.Long || pr.Tier != DefaultTiers/2 || pr.AMQP != DefaultMaxPriority {
		t.Errorf("cold prediction = %+v, want cold, long, middle tier, AMQP %d (the top)", pr, DefaultMaxPriority)
	}
	for range 5 {
		_ = l.Observe(ctx, short, 5*time.Millisecond)
		_ = l.Observe(ctx, long, 500*time.Millisecond)
	}
	for range 4 {
		_, _ = l.Predict(ctx, short)
		_, _ = l.Predict(ctx, long)
	}
	ps, _ := l.Predict(ctx, short)
	pl, _ := l.Predict(ctx, long)
	if ps.Tier != 0 || pl.Tier != 2 || ps.AMQP <= pl.AMQP || ps.Cold || pl.Cold {
		t.Errorf("short %+v, long %+v: want tiers 0 and 2, short higher AMQP", ps, pl)
	}
	if err := l.Observe(ctx, short, -time.Second); err == nil {
		t.Error("negative duration accepted")
	}
	if st, ok := l.Lookup(short); !ok || st.Count != 5 {
		t.Errorf("Lookup(short) = %+v, %v; want 5 observations", st, ok)
	}
}

type failing struct{}

func (failing) Predict(context.Context, Key) (Priority, error) {
	return Priority{}, context.DeadlineExceeded
}
func (failing) Observe(context.Context, Key, time.Duration) error { return nil }

func TestPublisherPrepareFallsBack(t *testing.T) {
	t.Parallel()
	pb := NewPublisher(nil, failing{}, PublisherOptions{})
	var msg amqp.Publishing
	pr := pb.prepare(context.Background(), Key{Queue: "q"}, &msg)
	if pr.Tier != DefaultTiers/2 || pb.Fallbacks() != 1 {
		t.Errorf("prepare = %+v, fallbacks %d; want middle tier and one fallback", pr, pb.Fallbacks())
	}
	if _, ok := msg.Headers[HeaderPublishedNS]; !ok {
		t.Error("no published-ns header")
	}
}

func TestTierQueueNames(t *testing.T) {
	t.Parallel()
	tq := TierQueues{Name: "jobs"}
	if got := []string{tq.Queue(0), tq.Queue(2), tq.Queue(9)}; got[0] != "jobs.t0" || got[1] != "jobs.t2" || got[2] != "jobs.t2" {
		t.Errorf("queue names = %v", got)
	}
	if err := (TierConsumerOptions{Weights: []int{1, 0, 1}}).validate(3); err == nil {
		t.Error("zero weight accepted")
	}
}

// Both predictors take part in holding: Consume and Publisher find these
// methods by interface.
var (
	_ backlogTracker = (*Local)(nil)
	_ backlogTracker = (*Remote)(nil)
)

// Keys come from headers anyone publishing to RabbitMQ can set: a
// predictor fed thousands of 64 KB job types keeps names of at most
// MaxNameLen bytes of valid UTF-8, and a header that cannot be a queue
// name is not taken for one.
func TestLocalBoundsNamesFromHeaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := NewLocal(LocalConfig{MaxKeys: 500})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", 32<<10) // 64 KB
	for i := range 2000 {
		k := Key{Queue: "q", Producer: "p\xff" + long, JobType: fmt.Sprint(i) + long}
		if _, err := l.Predict(ctx, k); err != nil {
			t.Fatal(err)
		}
		if err := l.Observe(ctx, k, time.Duration(1+i%7)*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	ks := l.Keys(0)
	if len(ks) == 0 || len(ks) > 500 {
		t.Fatalf("%d keys tracked, want 1 to 500", len(ks))
	}
	for _, s := range ks {
		for _, name := range []string{s.Key.Producer, s.Key.JobType} {
			if len(name) > MaxNameLen || !utf8.ValidString(name) {
				t.Fatalf("a key keeps a name of %d bytes (valid UTF-8: %v)", len(name), utf8.ValidString(name))
			}
		}
	}
	// Names cut to the same first MaxNameLen bytes share a key.
	if _, ok := l.Lookup(Key{Queue: "q", Producer: "p\xff" + long[:1000], JobType: "1999" + long}); !ok {
		t.Error("a name cut to its first MaxNameLen bytes is not found")
	}
	d := amqp.Delivery{Headers: amqp.Table{HeaderQueue: strings.Repeat("q", 256), HeaderJobType: "j"}}
	if got := KeyOf("mine", d); got.Queue != "mine" {
		t.Errorf("a 256-byte x-harbinger-queue header was taken as the queue (%d bytes)", len(got.Queue))
	}
	d.Headers[HeaderQueue] = "bad\xff"
	if got := KeyOf("mine", d); got.Queue != "mine" {
		t.Errorf("an x-harbinger-queue header of invalid UTF-8 was taken as the queue")
	}
}

func TestFailuresAndRetry(t *testing.T) {
	for _, c := range []struct {
		v    any
		want int
	}{
		{nil, 0}, {int32(2), 2}, {int64(5), 5}, {int64(-3), 0}, {int32(-1), 0},
		{int64(1) << 40, math.MaxInt32}, {"3", 0}, {float64(2), 0},
	} {
		d := amqp.Delivery{Headers: amqp.Table{}}
		if c.v != nil {
			d.Headers[HeaderFailures] = c.v
		}
		if got := Failures(d); got != c.want {
			t.Errorf("Failures with %T(%v) = %d, want %d", c.v, c.v, got, c.want)
		}
	}
	orig := amqp.Table{"trace": "t-ü", HeaderFailures: int32(1)}
	d := amqp.Delivery{Headers: orig, Body: []byte("\xffbody"), Priority: 3, DeliveryMode: amqp.Persistent, MessageId: "m-1", ContentType: "application/json"}
	r := retryOf(d, 2)
	if r.Headers[HeaderFailures] != int32(2) || r.Headers["trace"] != "t-ü" || orig[HeaderFailures] != int32(1) {
		t.Errorf("retry headers %v, original now %v", r.Headers, orig)
	}
	if string(r.Body) != "\xffbody" || r.Priority != 3 || r.DeliveryMode != amqp.Persistent || r.MessageId != "m-1" || r.ContentType != "application/json" {
		t.Errorf("the retry lost the message's properties: %+v", r)
	}
	if err := (ConsumerOptions{MaxAttempts: -1}).WithDefaults().validate(); err == nil {
		t.Error("a negative MaxAttempts was accepted")
	}
	if err := (TierConsumerOptions{MaxAttempts: -1}).withDefaults(3).validate(3); err == nil {
		t.Error("a negative tier MaxAttempts was accepted")
	}
}
