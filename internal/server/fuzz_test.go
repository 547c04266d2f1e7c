package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// fuzzServer is a Server without a network, on a fake clock, so each fuzz
// input runs in microseconds and leaves no timers behind.
func fuzzServer(t *testing.T) (*Server, *broker.Broker) {
	b, err := broker.New(broker.Config{Clock: fakeClock(), Logger: quiet, MaxPayload: 1 << 10, MaxQueues: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	return New(b, quiet), b
}

// checkCode fails unless err is nil or a status a client can act on; an
// Internal or Unknown code means a request slipped past validation.
func checkCode(t *testing.T, err error) {
	t.Helper()
	switch c := status.Code(err); c {
	case codes.OK, codes.InvalidArgument, codes.NotFound, codes.ResourceExhausted, codes.FailedPrecondition:
	default:
		t.Fatalf("unexpected code %v: %v", c, err)
	}
}

// mustMarshal fails unless m encodes: a handler's answer that cannot be
// marshalled would abort the call or the stream on the wire.
func mustMarshal(t *testing.T, m proto.Message) {
	t.Helper()
	if _, err := proto.Marshal(m); err != nil {
		t.Fatalf("response does not encode: %v", err)
	}
}

func dur(sec int64, nanos int32, set bool) *durationpb.Duration {
	if !set {
		return nil
	}
	return &durationpb.Duration{Seconds: sec, Nanos: nanos}
}

func FuzzPublish(f *testing.F) {
	f.Add("q", "p", "j", uint64(0), []byte("x"), int64(0), int32(0), false, uint32(0), "k", "v", 1)
	f.Add("", "", "", uint64(1<<63), []byte{}, int64(-1), int32(-5), true, uint32(1<<31), "", "", 0)
	f.Add("q q", "\xff", "j", uint64(3), make([]byte, 2000), int64(1<<62), int32(999999999), true, uint32(5), "a", "b", 3)
	f.Fuzz(func(t *testing.T, queue, producer, jobType string, size uint64, payload []byte, ttlSec int64, ttlNanos int32, ttlSet bool, attempts uint32, hk, hv string, copies int) {
		s, b := fuzzServer(t)
		m := &pb.Message{Queue: queue, Producer: producer, JobType: jobType, SizeHint: size, Payload: payload,
			Ttl: dur(ttlSec, ttlNanos, ttlSet), MaxAttempts: attempts, Headers: map[string]string{hk: hv}}
		req := &pb.PublishRequest{}
		for range min(max(copies, 0), 4) {
			req.Messages = append(req.Messages, m)
		}
		if copies < 0 {
			req.Messages = append(req.Messages, nil)
		}
		resp, err := s.Publish(context.Background(), req)
		checkCode(t, err)
		mustMarshal(t, resp)
		if err != nil {
			return
		}
		if len(resp.Results) != len(req.Messages) {
			t.Fatalf("%d results for %d messages", len(resp.Results), len(req.Messages))
		}
		stored := 0
		for i, r := range resp.Results {
			if (r.Id == "") == (r.Code == 0) {
				t.Fatalf("result %d is neither stored nor refused: %v", i, r)
			}
			if r.Id != "" {
				stored++
			}
			checkCode(t, status.Error(codes.Code(r.Code), r.Error))
		}
		// What was stored is exactly what the queue holds.
		var held uint64
		for _, q := range b.Queues() {
			held += uint64(q.Ready)
		}
		if held != uint64(stored) {
			t.Fatalf("%d stored, %d held", stored, held)
		}
	})
}

func FuzzConsumeRequest(f *testing.F) {
	f.Add(uint8(0), "", uint32(1), int64(1), int32(0), true, int32(1), "boom", uint32(1), true)
	f.Add(uint8(1), "x", uint32(0), int64(-1), int32(-1), true, int32(2), "", uint32(0), false)
	f.Add(uint8(2), "", uint32(5), int64(1<<40), int32(0), true, int32(9), "r", uint32(1<<31), true)
	f.Add(uint8(3), "", uint32(0), int64(0), int32(0), false, int32(0), "", uint32(0), true)
	f.Fuzz(func(t *testing.T, kind uint8, id string, n uint32, sec int64, nanos int32, durSet bool, action int32, reason string, credit uint32, realID bool) {
		s, b := fuzzServer(t)
		if _, err := b.Publish(&broker.Message{Queue: "q"}); err != nil {
			t.Fatal(err)
		}
		c, err := b.Subscribe("q", "fuzz", 1)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		d, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if realID {
			id = d.ID
		}
		var req *pb.ConsumeRequest
		switch kind % 6 {
		case 0:
			req = &pb.ConsumeRequest{Request: &pb.ConsumeRequest_Ack{Ack: &pb.Ack{Id: id, Duration: dur(sec, nanos, durSet), Credit: credit}}}
		case 1:
			req = &pb.ConsumeRequest{Request: &pb.ConsumeRequest_Nack{Nack: &pb.Nack{Id: id, Action: pb.NackAction(action), Delay: dur(sec, nanos, durSet), Reason: reason, Credit: credit}}}
		case 2:
			req = &pb.ConsumeRequest{Request: &pb.ConsumeRequest_Extend{Extend: &pb.Extend{Id: id, Lease: dur(sec, nanos, durSet)}}}
		case 3:
			req = &pb.ConsumeRequest{Request: &pb.ConsumeRequest_Credit{Credit: &pb.Credit{N: n}}}
		case 4:
			req = &pb.ConsumeRequest{Request: &pb.ConsumeRequest_Subscribe{Subscribe: &pb.Subscribe{Queue: id, Prefetch: n}}}
		case 5:
			req = &pb.ConsumeRequest{}
		}
		re, granted, err := s.apply(c, req)
		checkCode(t, err)
		if granted < 0 || granted > broker.MaxCredit {
			t.Fatalf("credit %d granted", granted)
		}
		c.AddCredit(granted)
		mustMarshal(t, re)
		if re != nil {
			checkCode(t, status.Error(codes.Code(re.Code), re.Message))
		}
		// Whatever happened, the job is acked, waiting, in flight, delayed or dead.
		in, _ := b.Queue("q")
		if in.Acked+uint64(in.Ready+in.InFlight+in.Delayed+in.DeadLetters) != 1 {
			t.Fatalf("job lost or duplicated: %+v", in)
		}
		// And what the admin side reports of it still encodes.
		dl, err := s.admin.ListDeadLetters(context.Background(), &pb.ListDeadLettersRequest{Queue: "q"})
		checkCode(t, err)
		mustMarshal(t, dl)
		qs, err := s.admin.ListQueues(context.Background(), &pb.ListQueuesRequest{})
		checkCode(t, err)
		mustMarshal(t, qs)
	})
}

func FuzzDeclareQueue(f *testing.F) {
	f.Add("q", "predictive", uint32(3), []byte{8, 3, 1}, int64(10), true, false, "j", uint32(1), uint64(10), uint32(5), int64(30), int64(0), false)
	f.Add("", "weighted", uint32(99), []byte{}, int64(-1), true, true, "", uint32(99), uint64(1<<50), uint32(1<<31), int64(-1), int64(-5), true)
	f.Add("s", "static", uint32(2), []byte{0}, int64(0), false, false, "a", uint32(1), uint64(0), uint32(0), int64(0), int64(1), false)
	f.Fuzz(func(t *testing.T, name, policy string, tiers uint32, weights []byte, agingSec int64, agingSet, agingOff bool, jobType string, tier uint32, depth uint64, attempts uint32, leaseSec, ttlSec int64, shadow bool) {
		s, _ := fuzzServer(t)
		cfg := &pb.QueueConfig{Policy: policy, Tiers: tiers, AgingOff: agingOff, StaticTiers: map[string]uint32{jobType: tier},
			MaxDepth: depth, MaxAttempts: attempts, Lease: dur(leaseSec, 0, leaseSec != 0), DefaultTtl: dur(ttlSec, 0, ttlSec != 0), Shadow: shadow}
		for _, w := range weights {
			cfg.Weights = append(cfg.Weights, uint32(w))
		}
		if agingSet {
			for range tiers % 20 {
				cfg.Aging = append(cfg.Aging, durationpb.New(time.Duration(agingSec)))
			}
		}
		info, err := s.admin.DeclareQueue(context.Background(), &pb.DeclareQueueRequest{Name: name, Config: cfg})
		checkCode(t, err)
		mustMarshal(t, info)
		if err != nil {
			return
		}
		// A declared queue works: publish, consume, list.
		pr, err := s.Publish(context.Background(), &pb.PublishRequest{Messages: []*pb.Message{{Queue: name, JobType: jobType}}})
		checkCode(t, err)
		mustMarshal(t, pr)
		if uint64(len(info.DepthPerTier)) == 0 {
			t.Fatalf("declared queue has no tiers: %v", info)
		}
		for _, call := range []func() (proto.Message, error){
			func() (proto.Message, error) {
				return s.admin.ListKeys(context.Background(), &pb.ListKeysRequest{Queue: name, Limit: tier})
			},
			func() (proto.Message, error) {
				return s.admin.ListDeadLetters(context.Background(), &pb.ListDeadLettersRequest{Queue: name})
			},
			func() (proto.Message, error) {
				return s.admin.ListQueues(context.Background(), &pb.ListQueuesRequest{})
			},
			func() (proto.Message, error) {
				return s.admin.PurgeQueue(context.Background(), &pb.PurgeQueueRequest{Name: name})
			},
			func() (proto.Message, error) {
				ids := pr.GetResults()
				if len(ids) == 0 {
					return s.admin.GetJob(context.Background(), &pb.GetJobRequest{Queue: name, Id: jobType})
				}
				return s.admin.GetJob(context.Background(), &pb.GetJobRequest{Queue: name, Id: ids[0].GetId()})
			},
			func() (proto.Message, error) {
				return s.admin.DeleteQueue(context.Background(), &pb.DeleteQueueRequest{Name: name, Force: tier%2 == 0})
			},
		} {
			resp, err := call()
			checkCode(t, err)
			if err == nil {
				mustMarshal(t, resp)
			}
		}
	})
}

// FuzzDeclareSchedule declares schedules of any shape: no input may panic
// the broker (the cron parser's TZ= prefix once did) or be answered with
// something that does not encode; a schedule that is accepted has a next
// tick, after now and not before its start, and can be listed, paused and
// deleted.
func FuzzDeclareSchedule(f *testing.F) {
	f.Add("digest", "mail", "30 7 * * 1-5", "America/New_York", int64(0), int32(0), int64(0), int64(0), "j", []byte("x"))
	f.Add("sweep", "m", "", "", int64(600), int32(0), int64(1767225600), int64(3600), "", []byte{})
	f.Add("tz", "q", "TZ=UTC", "", int64(0), int32(0), int64(0), int64(0), "", []byte{})
	f.Add("tz2", "q", "CRON_TZ=Asia/Tokyo 0 9 * * *", "Europe/Paris", int64(0), int32(0), int64(0), int64(0), "", []byte{})
	f.Add("feb30", "q", "0 0 30 2 *", "", int64(0), int32(0), int64(0), int64(0), "", []byte{})
	f.Add("old", "q", "", "", int64(3), int32(0), int64(-8_520_336_000), int64(0), "", []byte{})
	f.Add("n\xff", "q q", "@every 1s", "../../etc/passwd", int64(-1), int32(-1), int64(253402300800), int64(-1), "\xff", make([]byte, 2000))
	f.Fuzz(func(t *testing.T, name, queue, cronSpec, zone string, everySec int64, everyNanos int32, startSec, catchUpSec int64, jobType string, payload []byte) {
		s, b := fuzzServer(t)
		req := &pb.Schedule{Name: name, Queue: queue, Cron: cronSpec, TimeZone: zone, JobType: jobType, Payload: payload,
			Every: dur(everySec, everyNanos, everySec != 0 || everyNanos != 0), CatchUp: dur(catchUpSec, 0, catchUpSec != 0)}
		if startSec != 0 {
			req.Start = &timestamppb.Timestamp{Seconds: startSec}
		}
		out, err := s.admin.DeclareSchedule(context.Background(), req)
		checkCode(t, err)
		if err != nil {
			return
		}
		mustMarshal(t, out)
		now := b.Now()
		next := out.GetNextTick().AsTime()
		if out.NextTick == nil || !next.After(now) && !next.Equal(out.GetStart().AsTime()) || next.Before(out.GetStart().AsTime()) {
			t.Fatalf("accepted schedule (now %v, start %v) ticks next at %v", now, out.GetStart().AsTime(), out.GetNextTick())
		}
		list, err := s.admin.ListSchedules(context.Background(), &pb.ListSchedulesRequest{})
		checkCode(t, err)
		mustMarshal(t, list)
		if len(list.Schedules) != 1 || list.Schedules[0].Name != name {
			t.Fatalf("listed %v, want %q alone", list.Schedules, name)
		}
		p, err := s.admin.PauseSchedule(context.Background(), &pb.PauseScheduleRequest{Name: name, Paused: true})
		checkCode(t, err)
		mustMarshal(t, p)
		if _, err := s.admin.DeleteSchedule(context.Background(), &pb.DeleteScheduleRequest{Name: name}); err != nil {
			t.Fatalf("delete: %v", err)
		}
	})
}
