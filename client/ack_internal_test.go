package client

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
)

func TestAckRequest(t *testing.T) {
	t.Parallel()
	for _, took := range []time.Duration{time.Microsecond, 1500 * time.Millisecond, 90*time.Minute + 7} {
		want := &pb.ConsumeRequest{Request: &pb.ConsumeRequest_Ack{Ack: &pb.Ack{Id: "7", Duration: durationpb.New(took), Credit: 1}}}
		if got := ackRequest("7", took, 1); !proto.Equal(got, want) {
			t.Errorf("ackRequest(%v) = %v, want %v", took, got, want)
		}
	}
}

// BenchmarkAckRequest compares building and encoding an ack in one
// allocation with building it field by field.
func BenchmarkAckRequest(b *testing.B) {
	for _, bb := range []struct {
		name  string
		build func() *pb.ConsumeRequest
	}{
		{"one-allocation", func() *pb.ConsumeRequest { return ackRequest("123456", 3*time.Microsecond, 1) }},
		{"field-by-field", func() *pb.ConsumeRequest {
			return &pb.ConsumeRequest{Request: &pb.ConsumeRequest_Ack{Ack: &pb.Ack{Id: "123456", Duration: durationpb.New(3 * time.Microsecond), Credit: 1}}}
		}},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				var err error
				if buf, err = marshal(buf[:0], bb.build()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func marshal(buf []byte, m proto.Message) ([]byte, error) {
	return proto.MarshalOptions{}.MarshalAppend(buf, m)
}
