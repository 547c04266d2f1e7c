// Package server is Harbinger's gRPC transport: it decodes requests,
// validates what the broker cannot (proto shapes), calls the broker and
// encodes the answer. One table (errors.go) maps broker errors to status
// codes. It keeps no state of its own beyond each stream's consumer.
package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// Defaults and bounds of list requests.
const (
	DefaultListLimit = 100
	MaxListLimit     = 10_000
	// MaxBatch bounds the messages in one PublishRequest.
	MaxBatch = 10_000
)

// Server implements the Broker, Admin and Predictor gRPC services on top of
// a broker.Broker.
type Server struct {
	pb.UnimplementedBrokerServer
	b      *broker.Broker
	log    *slog.Logger
	health *health.Server
	admin  adminServer
	pred   predictorServer
}

// New returns a Server for b; log may be nil.
func New(b *broker.Broker, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{b: b, log: log, health: health.NewServer()}
	s.admin.s = s
	s.pred.s = s
	return s
}

// ServerOptions are the gRPC options the broker's limits call for: a
// receive limit large enough for a full-size payload and its envelope.
func ServerOptions(cfg broker.Config) []grpc.ServerOption {
	cfg = cfg.WithDefaults()
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(max(4<<20, cfg.MaxPayload+cfg.MaxHeaderBytes+64<<10)),
		// One write buffer per connection, shared by its streams, and a
		// fixed pool of stream handlers instead of a goroutine per stream.
		grpc.SharedWriteBuffer(true),
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
	}
}

// Register adds the Harbinger services, the standard health service and
// server reflection to gs, and marks the services as serving.
func (s *Server) Register(gs *grpc.Server) {
	pb.RegisterBrokerServer(gs, s)
	pb.RegisterAdminServer(gs, &s.admin)
	pb.RegisterPredictorServer(gs, &s.pred)
	healthpb.RegisterHealthServer(gs, s.health)
	reflection.Register(gs)
	for _, name := range []string{"", pb.Broker_ServiceDesc.ServiceName, pb.Admin_ServiceDesc.ServiceName, pb.Predictor_ServiceDesc.ServiceName} {
		s.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
}

// SetNotServing marks every service as not serving (the broker is draining).
func (s *Server) SetNotServing() { s.health.Shutdown() }

func (s *Server) publish(req *pb.PublishRequest) (*pb.PublishResponse, error) {
	if len(req.GetMessages()) == 0 {
		return nil, invalidArg("a publish request needs at least one message")
	}
	if len(req.Messages) > MaxBatch {
		return nil, invalidArg("a publish request holds at most %d messages, got %d", MaxBatch, len(req.Messages))
	}
	msgs := make([]*broker.Message, len(req.Messages))
	for i, m := range req.Messages {
		bm, err := fromMessage(i, m)
		if err != nil {
			return nil, err
		}
		msgs[i] = bm
	}
	ids, err := s.b.Publish(msgs...)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.PublishResponse{Ids: ids}, nil
}

// Publish implements pb.BrokerServer.
func (s *Server) Publish(_ context.Context, req *pb.PublishRequest) (*pb.PublishResponse, error) {
	return s.publish(req)
}

// PublishStream implements pb.BrokerServer: one response per request, in
// order; the first failed batch ends the stream with its status.
func (s *Server) PublishStream(stream grpc.BidiStreamingServer[pb.PublishRequest, pb.PublishResponse]) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := s.publish(req)
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// Consume implements pb.BrokerServer. The stream's first request must be a
// Subscribe. Deliveries are sent as credit allows; acks, nacks, credit and
// extends are applied as they arrive. When the stream ends, jobs the
// consumer still holds go back to the queue.
func (s *Server) Consume(stream grpc.BidiStreamingServer[pb.ConsumeRequest, pb.Delivery]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	sub := first.GetSubscribe()
	if sub == nil {
		return invalidArg("the first request on a Consume stream must be a Subscribe")
	}
	c, err := s.b.Subscribe(sub.Queue, sub.ConsumerName, int(min(sub.Prefetch, broker.MaxCredit)))
	if err != nil {
		return toStatus(err)
	}
	defer c.Close()

	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	recvDone := make(chan error, 1)
	go func() {
		recvDone <- s.consumeRecv(stream, c)
		cancel()
	}()

	var out pb.Delivery
	for {
		d, err := c.Next(ctx)
		if err != nil {
			if errors.Is(err, broker.ErrShuttingDown) {
				// Keep applying acks until the client goes or the drain ends.
				select {
				case err := <-recvDone:
					return err
				case <-s.b.Done():
					return toStatus(broker.ErrShuttingDown)
				}
			}
			select {
			case rerr := <-recvDone:
				return rerr
			default:
				return toStatus(err)
			}
		}
		toDelivery(&d, &out)
		if err := stream.Send(&out); err != nil {
			return err
		}
	}
}

// consumeRecv applies the client's requests until the stream ends. It
// returns nil when the client closes its side, or a status for a request
// that breaks the protocol.
func (s *Server) consumeRecv(stream grpc.BidiStreamingServer[pb.ConsumeRequest, pb.Delivery], c *broker.Consumer) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.apply(c, req); err != nil {
			return err
		}
	}
}

// apply handles one request on a subscribed stream. Acks and nacks for
// jobs the consumer no longer holds (its lease expired) and bad ack
// durations are logged, not fatal: the stream carries on.
func (s *Server) apply(c *broker.Consumer, req *pb.ConsumeRequest) error {
	var err error
	switch r := req.GetRequest().(type) {
	case *pb.ConsumeRequest_Credit:
		c.AddCredit(int(min(r.Credit.GetN(), broker.MaxCredit)))
		return nil
	case *pb.ConsumeRequest_Ack:
		a := r.Ack
		var d time.Duration
		if a.Duration != nil {
			d = a.Duration.AsDuration()
			if a.Duration.CheckValid() != nil {
				d = -1
			}
		}
		err = c.Ack(a.Id, d)
		c.AddCredit(int(min(a.Credit, broker.MaxCredit)))
	case *pb.ConsumeRequest_Nack:
		n := r.Nack
		var action broker.NackAction
		switch n.Action {
		case pb.NackAction_NACK_ACTION_UNSPECIFIED, pb.NackAction_NACK_ACTION_REQUEUE:
			action = broker.NackRequeue
		case pb.NackAction_NACK_ACTION_REQUEUE_AFTER:
			action = broker.NackRequeueAfter
		case pb.NackAction_NACK_ACTION_DEAD_LETTER:
			action = broker.NackDeadLetter
		default:
			return invalidArg("nack: unknown action %d", n.Action)
		}
		delay, derr := duration("nack delay", n.Delay)
		if derr != nil {
			return derr
		}
		err = c.Nack(n.Id, action, delay, n.Reason)
		c.AddCredit(int(min(n.Credit, broker.MaxCredit)))
	case *pb.ConsumeRequest_Extend:
		lease, derr := duration("extend lease", r.Extend.Lease)
		if derr != nil {
			return derr
		}
		err = c.Extend(r.Extend.Id, lease)
	case *pb.ConsumeRequest_Subscribe:
		return invalidArg("this stream is already subscribed to queue %q; open another stream for another queue", c.Queue())
	default:
		return invalidArg("empty consume request")
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, broker.ErrUnknownMessage):
		s.log.Debug("server: settle of a job the consumer does not hold", "queue", c.Queue(), "consumer", c.Name(), "err", err)
		return nil
	case errors.Is(err, broker.ErrBadDuration):
		s.log.Warn("server: ack duration not learned", "queue", c.Queue(), "consumer", c.Name(), "err", err)
		return nil
	default:
		return toStatus(err)
	}
}

// adminServer implements pb.AdminServer.
type adminServer struct {
	pb.UnimplementedAdminServer
	s *Server
}

func listLimit(n uint32) int {
	if n == 0 {
		return DefaultListLimit
	}
	return int(min(n, MaxListLimit))
}

func (a *adminServer) DeclareQueue(_ context.Context, req *pb.DeclareQueueRequest) (*pb.QueueInfo, error) {
	cfg, err := fromQueueConfig(req.Config)
	if err != nil {
		return nil, err
	}
	in, err := a.s.b.Declare(req.Name, cfg)
	if err != nil {
		return nil, toStatus(err)
	}
	return toQueueInfo(in), nil
}

func (a *adminServer) ListQueues(context.Context, *pb.ListQueuesRequest) (*pb.ListQueuesResponse, error) {
	qs := a.s.b.Queues()
	out := &pb.ListQueuesResponse{Queues: make([]*pb.QueueInfo, len(qs))}
	for i, q := range qs {
		out.Queues[i] = toQueueInfo(q)
	}
	return out, nil
}

func (a *adminServer) PurgeQueue(_ context.Context, req *pb.PurgeQueueRequest) (*pb.PurgeQueueResponse, error) {
	n, err := a.s.b.Purge(req.Name)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.PurgeQueueResponse{Purged: uint64(n)}, nil
}

func (a *adminServer) ListDeadLetters(_ context.Context, req *pb.ListDeadLettersRequest) (*pb.ListDeadLettersResponse, error) {
	dls, err := a.s.b.DeadLetters(req.Queue, listLimit(req.Limit))
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.ListDeadLettersResponse{DeadLetters: make([]*pb.DeadLetter, len(dls))}
	for i, d := range dls {
		out.DeadLetters[i] = &pb.DeadLetter{
			Id: d.ID, Queue: d.Queue, Producer: d.Producer, JobType: d.JobType,
			Payload: d.Payload, Headers: d.Headers, Attempts: uint32(d.Attempts),
			Reason: d.Reason, DeadAt: timestamppb.New(d.DeadAt),
		}
	}
	return out, nil
}

func (a *adminServer) RequeueDeadLetters(_ context.Context, req *pb.RequeueDeadLettersRequest) (*pb.RequeueDeadLettersResponse, error) {
	n, err := a.s.b.RequeueDeadLetters(req.Queue, req.Ids)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.RequeueDeadLettersResponse{Requeued: uint64(n)}, nil
}

func (a *adminServer) ListKeys(_ context.Context, req *pb.ListKeysRequest) (*pb.ListKeysResponse, error) {
	keys, err := a.s.b.Keys(req.Queue, listLimit(req.Limit))
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.ListKeysResponse{Keys: make([]*pb.KeyStats, len(keys))}
	for i, k := range keys {
		out.Keys[i] = &pb.KeyStats{
			Producer: k.Key.Producer, JobType: k.Key.JobType, SizeBucket: int32(k.Key.SizeBucket),
			Count: k.Count, EwmaMs: ms(k.EWMA), P50Ms: ms(k.P50), P99Ms: ms(k.P99),
			Tier: uint32(k.Tier), Cold: k.Cold, SpreadGated: k.SpreadGated,
		}
	}
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
