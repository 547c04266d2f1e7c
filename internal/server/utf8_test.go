package server

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/rawproto"
)

// rawConn dials addr with a connection whose calls send a
// rawproto.Request as it is.
func rawConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(rawproto.CallOption()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// The placeholders and what replaces them: a lone continuation byte, a
// truncated three-byte sequence, and an overlong encoding of '/'.
var utf8Swaps = map[string]string{"web-@@": "web-\x80\x81", "kind@@@": "kind\xe2\x82x", "ops@@": "ops\xc0\xaf"}

// A batch with strings that are not UTF-8 is answered per message: the
// messages at fault are refused with InvalidArgument and the field's name,
// the others are stored, and a stream carries on. gRPC alone would answer
// the whole request with Internal.
func TestInvalidUTF8RefusedPerMessage(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	conn := rawConn(t, tb.addr)
	payload := bytes.Repeat([]byte("ü\xff"), 2<<10) // bytes may hold anything
	req := &pb.PublishRequest{Messages: []*pb.Message{
		{Queue: "q", Producer: "wéb", JobType: "thumbnail", Payload: payload},
		{Queue: "q", Producer: "web-@@", JobType: "thumbnail", Payload: payload},
		{Queue: "q", Producer: "wéb", JobType: "kind@@@", Headers: map[string]string{"trace": "ops@@"}},
		{Queue: "q", Producer: "wéb", JobType: "report", Headers: map[string]string{"ключ": "значение"}},
	}}
	raw := rawproto.BadUTF8(t, req, utf8Swaps)
	check := func(how string, resp *pb.PublishResponse) {
		t.Helper()
		rs := resp.GetResults()
		if len(rs) != 4 || rs[0].Id == "" || rs[3].Id == "" {
			t.Fatalf("%s: results %v, want messages 0 and 3 stored", how, rs)
		}
		for i, want := range map[int][]string{1: {"producer"}, 2: {"job_type", "headers"}} {
			if rs[i].Id != "" || codes.Code(rs[i].Code) != codes.InvalidArgument {
				t.Errorf("%s: message %d answered %v, want InvalidArgument", how, i, rs[i])
			}
			for _, w := range want {
				if !strings.Contains(rs[i].Error, w) || !strings.Contains(rs[i].Error, "UTF-8") {
					t.Errorf("%s: message %d refused with %q, want it to name %s", how, i, rs[i].Error, w)
				}
			}
		}
	}

	resp := new(pb.PublishResponse)
	if err := conn.Invoke(t.Context(), "/harbinger.v1.Broker/Publish", raw, resp); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	check("Publish", resp)

	stream, err := conn.NewStream(t.Context(), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/harbinger.v1.Broker/PublishStream")
	if err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		if err := stream.SendMsg(raw); err != nil {
			t.Fatal(err)
		}
		resp := new(pb.PublishResponse)
		if err := stream.RecvMsg(resp); err != nil {
			t.Fatalf("PublishStream round %d: %v", round, err)
		}
		check("PublishStream", resp)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}

	if got := tb.info(t, "q").Ready; got != 6 {
		t.Errorf("%d jobs ready, want the 6 valid messages of three batches", got)
	}
	// What was stored is what was sent, the payload's bytes untouched.
	c := tb.consume(t, "q", 1)
	if d := c.recv(t); !bytes.Equal(d.Payload, payload) || d.Producer != "wéb" {
		t.Errorf("delivered %q from %q, want the payload sent by wéb", d.Payload[:8], d.Producer)
	}
}

// Every other request with a string that is not UTF-8 is refused whole,
// with InvalidArgument and the field's path, unary or streamed.
func TestInvalidUTF8RefusedWithItsField(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	conn := rawConn(t, tb.addr)

	err := conn.Invoke(t.Context(), "/harbinger.v1.Admin/DeclareQueue",
		rawproto.BadUTF8(t, &pb.DeclareQueueRequest{Name: "web-@@"}, utf8Swaps), new(pb.QueueInfo))
	wantCode(t, err, codes.InvalidArgument, "name: not valid UTF-8")

	stream, err := conn.NewStream(t.Context(), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/harbinger.v1.Broker/Consume")
	if err != nil {
		t.Fatal(err)
	}
	sub := &pb.ConsumeRequest{Request: &pb.ConsumeRequest_Subscribe{Subscribe: &pb.Subscribe{Queue: "web-@@", Prefetch: 1}}}
	if err := stream.SendMsg(rawproto.BadUTF8(t, sub, utf8Swaps)); err != nil {
		t.Fatal(err)
	}
	err = stream.RecvMsg(new(pb.ConsumeResponse))
	wantCode(t, err, codes.InvalidArgument, "subscribe.queue: not valid UTF-8")

	// A request that is not protobuf at all is still refused, not fixed.
	junk := rawproto.Request{0x0a, 0xff, 0xff}
	err = conn.Invoke(t.Context(), "/harbinger.v1.Admin/DeclareQueue", &junk, new(pb.QueueInfo))
	if st := status.Convert(err); st.Code() == codes.OK || strings.Contains(st.Message(), "UTF-8") {
		t.Errorf("a malformed request answered %v", err)
	}
	if _, err := tb.ac.ListQueues(context.Background(), &pb.ListQueuesRequest{}); err != nil {
		t.Errorf("the broker after bad requests: %v", err)
	}
}

// A request that is not protobuf, or not the method's message, is the
// client's fault: InvalidArgument, naming the message and what the decoder
// found, unary or streamed, and nothing of it is done. gRPC answers a
// request its codec cannot decode with Internal, as if the broker had
// failed, which is what the broker answered before.
func TestMalformedRequestIsInvalidArgument(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{})
	conn := rawConn(t, tb.addr)
	junk := []rawproto.Request{
		{0x0a, 0xff, 0xff},       // a length past the end
		{0x0a, 0x05, 0x0a, 0x01}, // a message cut short
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, // a tag of 11 bytes
		{0x07}, // field 0
		{0x0b}, // a group never ended
	}
	for _, j := range junk {
		for _, call := range []struct {
			method string
			reply  proto.Message
			want   string
		}{
			{"/harbinger.v1.Admin/DeclareQueue", new(pb.QueueInfo), "harbinger.v1.DeclareQueueRequest"},
			{"/harbinger.v1.Broker/Publish", new(pb.PublishResponse), "harbinger.v1.PublishRequest"},
			{"/grpc.health.v1.Health/Check", new(healthpb.HealthCheckResponse), "grpc.health.v1.HealthCheckRequest"},
		} {
			err := conn.Invoke(t.Context(), call.method, &j, call.reply)
			wantCode(t, err, codes.InvalidArgument, "not a valid "+call.want)
		}
		for _, method := range []string{"/harbinger.v1.Broker/Consume", "/harbinger.v1.Broker/PublishStream"} {
			stream, err := conn.NewStream(t.Context(), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method)
			if err != nil {
				t.Fatal(err)
			}
			if err := stream.SendMsg(&j); err != nil {
				t.Fatal(err)
			}
			err = stream.RecvMsg(new(pb.ConsumeResponse))
			wantCode(t, err, codes.InvalidArgument, "not a valid harbinger.v1.")
		}
	}
	if qs, err := tb.ac.ListQueues(context.Background(), &pb.ListQueuesRequest{}); err != nil || len(qs.Queues) != 0 {
		t.Errorf("the broker after malformed requests: %v, %v; want no queue made", qs, err)
	}
}

// fixUTF8 leaves what a valid encoding says as it was, and whatever it
// returns decodes into a message that encodes again, every string valid
// and the fields at fault noted.
func FuzzFixUTF8(f *testing.F) {
	valid, _ := proto.Marshal(&pb.PublishRequest{Messages: []*pb.Message{
		{Queue: "q", Producer: "wéb", Headers: map[string]string{"ключ": "значение"}, Payload: []byte{0xff}},
	}})
	f.Add(valid)
	bad, _ := proto.Marshal(&pb.PublishRequest{Messages: []*pb.Message{{Queue: "q", Producer: "web-@@", Headers: map[string]string{"k": "ops@@"}}}})
	bad = bytes.ReplaceAll(bytes.ReplaceAll(bad, []byte("web-@@"), []byte(utf8Swaps["web-@@"])), []byte("ops@@"), []byte(utf8Swaps["ops@@"]))
	f.Add(bad)
	f.Add([]byte{0x0a, 0x03, 0x12, 0x01, 0x80})
	md := (&pb.PublishRequest{}).ProtoReflect().Descriptor()
	f.Fuzz(func(t *testing.T, b []byte) {
		fixed, bad, err := fixUTF8(b, md)
		var orig pb.PublishRequest
		if proto.Unmarshal(b, &orig) == nil {
			var again pb.PublishRequest
			if err != nil || len(bad) != 0 || proto.Unmarshal(fixed, &again) != nil || !proto.Equal(&orig, &again) {
				t.Fatalf("a valid request changed: %v %v\n%x\n%x", err, bad, b, fixed)
			}
			return
		}
		if err != nil {
			return
		}
		var m pb.PublishRequest
		if proto.Unmarshal(fixed, &m) != nil {
			return // broken otherwise than in its strings
		}
		if _, err := proto.Marshal(&m); err != nil {
			t.Fatalf("a fixed request does not encode: %v", err)
		}
		if len(bad) > 0 && badUTF8(&m) == "" {
			t.Fatalf("fixed %v without a note", bad)
		}
	})
}
