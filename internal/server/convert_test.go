package server

import (
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/fair"
)

// simpleDeliveryResponse is the response built field by field with the
// well-known types' own constructors: the reference toDeliveryResponse
// must match.
func simpleDeliveryResponse(d *broker.Delivery) *pb.ConsumeResponse {
	return &pb.ConsumeResponse{Response: &pb.ConsumeResponse_Delivery{Delivery: &pb.Delivery{
		Id: d.ID, Queue: d.Queue, Producer: d.Producer, JobType: d.JobType,
		SizeHint: d.SizeHint, Payload: d.Payload, Headers: d.Headers,
		Attempt:     uint32(d.Attempt),
		PublishedAt: timestamppb.New(d.PublishedAt),
		Lease:       durationpb.New(d.Lease),
		Tier:        uint32(d.Tier),
		PredictedMs: float64(d.Predicted) / float64(time.Millisecond),
	}}}
}

func TestToDeliveryResponse(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 3, 4, 5, 6, 7, 891011121, time.UTC)
	tests := []struct {
		name string
		d    broker.Delivery
	}{
		{"zero", broker.Delivery{}},
		{"full", broker.Delivery{ID: "42", Queue: "q", Producer: "p", JobType: "j", SizeHint: 64,
			Payload: []byte("body"), Headers: map[string]string{"k": "v"}, Attempt: 3,
			PublishedAt: base, Lease: 30*time.Second + 5*time.Nanosecond, Tier: 2, Predicted: 1500 * time.Microsecond}},
		{"before 1970", broker.Delivery{ID: "1", PublishedAt: time.Date(1969, 12, 31, 23, 59, 59, 5, time.UTC)}},
		{"negative lease", broker.Delivery{ID: "1", Lease: -1500 * time.Millisecond}},
		{"other zone", broker.Delivery{ID: "1", PublishedAt: base.In(time.FixedZone("x", 3600))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, want := toDeliveryResponse(&tt.d), simpleDeliveryResponse(&tt.d)
			if !proto.Equal(got, want) {
				t.Fatalf("toDeliveryResponse = %v, want %v", got, want)
			}
		})
	}
}

// BenchmarkDeliveryResponse compares building and encoding a delivery's
// response in one allocation with building it field by field.
func BenchmarkDeliveryResponse(b *testing.B) {
	d := broker.Delivery{ID: "123456", Queue: "cost", Producer: "cost", JobType: "noop", SizeHint: 64,
		Payload: make([]byte, 64), Attempt: 1, PublishedAt: time.Now(), Lease: 30 * time.Second, Predicted: time.Millisecond}
	for _, bb := range []struct {
		name  string
		build func(*broker.Delivery) *pb.ConsumeResponse
	}{{"one-allocation", toDeliveryResponse}, {"field-by-field", simpleDeliveryResponse}} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				var err error
				if buf, err = marshal(buf[:0], bb.build(&d)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func marshal(buf []byte, m proto.Message) ([]byte, error) {
	return proto.MarshalOptions{}.MarshalAppend(buf, m)
}

// A queue's oldest wait reaches the Admin API only while a job waits.
func TestQueueInfoOldestWait(t *testing.T) {
	got := toQueueInfo(broker.QueueInfo{Name: "q", Ready: 3, OldestWait: 1500 * time.Millisecond})
	if w := got.GetOldestWait(); w == nil || w.AsDuration() != 1500*time.Millisecond {
		t.Errorf("3 waiting, oldest 1.5 s: oldest_wait %v", w)
	}
	if w := toQueueInfo(broker.QueueInfo{Name: "q"}).GetOldestWait(); w != nil {
		t.Errorf("none waiting: oldest_wait %v, want unset", w)
	}
	if _, err := proto.Marshal(got); err != nil {
		t.Fatal(err)
	}
}

// The fair shares' settings go through DeclareQueue and come back in the
// queue's info, those left unset at their defaults; a bad one is refused
// as an invalid argument that names it.
func TestDeclareFairSettings(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	declare := func(c *pb.QueueConfig) (*pb.QueueInfo, error) {
		return tb.ac.DeclareQueue(tb.ctx, &pb.DeclareQueueRequest{Name: "q", Config: c})
	}
	info, err := declare(&pb.QueueConfig{GroupBy: "tenant", ReserveAbove: 1.5, ReserveWindow: durationpb.New(3 * time.Second), Credit: durationpb.New(50 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	c := info.GetConfig()
	if c.GetReserveAbove() != 1.5 || c.GetReserveWindow().AsDuration() != 3*time.Second || c.GetCredit().AsDuration() != 50*time.Millisecond ||
		c.GetReserve() != fair.DefaultReserve || c.GetNoCredit() {
		t.Fatalf("declared settings read back as %v", c)
	}
	info, err = declare(&pb.QueueConfig{GroupBy: "tenant", NoCredit: true})
	if err != nil {
		t.Fatal(err)
	}
	c = info.GetConfig()
	if c.GetReserveAbove() != fair.DefaultReserveAbove || c.GetReserveWindow().AsDuration() != fair.DefaultReserveWindow ||
		c.GetCredit() != nil || !c.GetNoCredit() {
		t.Fatalf("the redeclare reads back as %v", c)
	}
	for _, tc := range []struct {
		cfg   *pb.QueueConfig
		field string
	}{
		{&pb.QueueConfig{GroupBy: "tenant", ReserveAbove: -1}, "reserve_above"},
		{&pb.QueueConfig{GroupBy: "tenant", ReserveAbove: math.NaN()}, "reserve_above"},
		{&pb.QueueConfig{GroupBy: "tenant", ReserveAbove: 1e300}, "reserve_above"},
		{&pb.QueueConfig{GroupBy: "tenant", ReserveWindow: durationpb.New(-time.Second)}, "reserve_window"},
		{&pb.QueueConfig{GroupBy: "tenant", ReserveWindow: durationpb.New(48 * time.Hour)}, "reserve_window"},
		{&pb.QueueConfig{GroupBy: "tenant", Credit: &durationpb.Duration{Seconds: 1, Nanos: -1}}, "credit"},
		{&pb.QueueConfig{GroupBy: "tenant", Credit: durationpb.New(48 * time.Hour)}, "credit"},
		{&pb.QueueConfig{Credit: durationpb.New(time.Second)}, "credit"},
		{&pb.QueueConfig{NoCredit: true}, "no_credit"},
		{&pb.QueueConfig{ReserveAbove: 2}, "reserve_above"},
	} {
		_, err := declare(tc.cfg)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%v: %v, want an invalid argument naming %s", tc.cfg, err, tc.field)
		}
	}
}
