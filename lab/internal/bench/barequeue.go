package bench

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/server"
)

// BareQueue is the bare-grpc arm's broker: the limit of Harbinger's
// transport. It speaks the same gRPC API (PublishStream, Publish, the
// bidirectional Consume stream with credit, GetLimits, and the Admin calls
// the harness uses), with the same server options, so the unchanged client
// SDK drives it. Behind the API there is nothing but one slice of waiting
// messages per queue: no scheduling, no predictor, no leases, no
// redelivery, no store. A delivery is forgotten once sent; an ack only
// returns its credit. It exists to be measured, never to hold real work.
type BareQueue struct {
	pb.UnimplementedBrokerServer
	pb.UnimplementedAdminServer

	mu     sync.Mutex
	queues map[string]*bareSlice
	ids    atomic.Uint64
	limits *pb.Limits
}

// bareSlice is one queue: its waiting messages, oldest at head.
type bareSlice struct {
	mu        sync.Mutex
	cond      *sync.Cond
	msgs      []*pb.Message
	head      int
	consumers int
}

// NewBareQueue returns an empty bare queue server.
func NewBareQueue() *BareQueue {
	limits := server.Limits(broker.Config{})
	// It speaks the Consume stream one item to a message: said so, the
	// SDK neither asks for batched deliveries nor sends batched acks.
	limits.MaxConsumeBatch = 0
	return &BareQueue{queues: map[string]*bareSlice{}, limits: limits}
}

// ServeBareQueue serves a BareQueue on addr until ctx ends; ready, if not
// nil, gets the bound address once it listens.
func ServeBareQueue(ctx context.Context, addr string, ready func(addr string)) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	gs := grpc.NewServer(server.ServerOptions(broker.Config{})...)
	bq := NewBareQueue()
	pb.RegisterBrokerServer(gs, bq)
	pb.RegisterAdminServer(gs, bq)
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	if ready != nil {
		ready(lis.Addr().String())
	}
	select {
	case <-ctx.Done():
		gs.Stop()
		<-errc
		return nil
	case err := <-errc:
		return err
	}
}

func (b *BareQueue) queue(name string) *bareSlice {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[name]
	if q == nil {
		q = &bareSlice{}
		q.cond = sync.NewCond(&q.mu)
		b.queues[name] = q
	}
	return q
}

func (b *BareQueue) publish(req *pb.PublishRequest) *pb.PublishResponse {
	resp := &pb.PublishResponse{Results: make([]*pb.PublishResult, len(req.Messages))}
	// Requests carry one queue's messages in the harness; take each
	// queue's lock once per run of messages to it, and wake one waiting
	// consumer per message.
	var q *bareSlice
	var name string
	for i, m := range req.Messages {
		if q == nil || m.Queue != name {
			if q != nil {
				q.mu.Unlock()
			}
			name, q = m.Queue, b.queue(m.Queue)
			q.mu.Lock()
		}
		q.msgs = append(q.msgs, m)
		q.cond.Signal()
		resp.Results[i] = &pb.PublishResult{Id: strconv.FormatUint(b.ids.Add(1), 10)}
	}
	if q != nil {
		q.mu.Unlock()
	}
	return resp
}

// Publish implements pb.BrokerServer.
func (b *BareQueue) Publish(_ context.Context, req *pb.PublishRequest) (*pb.PublishResponse, error) {
	return b.publish(req), nil
}

// PublishStream implements pb.BrokerServer: one response per request.
func (b *BareQueue) PublishStream(stream grpc.BidiStreamingServer[pb.PublishRequest, pb.PublishResponse]) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(b.publish(req)); err != nil {
			return err
		}
	}
}

// GetLimits implements pb.BrokerServer with Harbinger's default limits.
func (b *BareQueue) GetLimits(context.Context, *pb.GetLimitsRequest) (*pb.Limits, error) {
	return b.limits, nil
}

// pop waits for a message, or for ctx to end (nil).
func (q *bareSlice) pop(ctx context.Context) *pb.Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.head == len(q.msgs) {
		if ctx.Err() != nil {
			return nil
		}
		q.cond.Wait()
	}
	m := q.msgs[q.head]
	q.msgs[q.head] = nil
	q.head++
	if q.head == len(q.msgs) {
		q.msgs, q.head = q.msgs[:0], 0
	} else if q.head > 4096 && q.head > len(q.msgs)/2 {
		q.msgs = append(q.msgs[:0], q.msgs[q.head:]...)
		q.head = 0
	}
	return m
}

// Consume implements pb.BrokerServer: Subscribe grants its prefetch as
// credit, each delivery spends one, an ack, nack or Credit request gives
// back what it says.
func (b *BareQueue) Consume(stream grpc.BidiStreamingServer[pb.ConsumeRequest, pb.ConsumeResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	sub := first.GetSubscribe()
	if sub == nil {
		return status.Error(codes.InvalidArgument, "the first request on a Consume stream must be a Subscribe")
	}
	q := b.queue(sub.Queue)
	q.mu.Lock()
	q.consumers++
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		q.consumers--
		q.mu.Unlock()
	}()
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	stopWake := context.AfterFunc(ctx, func() {
		q.mu.Lock()
		q.cond.Broadcast()
		q.mu.Unlock()
	})
	defer stopWake()
	credit := make(chan struct{}, broker.MaxCredit)
	give := func(n uint32) {
		for range min(n, broker.MaxCredit) {
			select {
			case credit <- struct{}{}:
			default:
				return
			}
		}
	}
	give(max(sub.Prefetch, 1))
	recvErr := make(chan error, 1)
	go func() {
		defer cancel()
		for {
			req, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				recvErr <- err
				return
			}
			switch r := req.GetRequest().(type) {
			case *pb.ConsumeRequest_Ack:
				give(r.Ack.Credit)
			case *pb.ConsumeRequest_Nack:
				// No redelivery: the bare queue forgets what it sent.
				give(r.Nack.Credit)
			case *pb.ConsumeRequest_Credit:
				give(r.Credit.N)
			}
		}
	}()
	for {
		select {
		case <-credit:
		case <-ctx.Done():
			return <-recvErr
		}
		m := q.pop(ctx)
		if m == nil {
			return <-recvErr
		}
		d := &pb.Delivery{Id: strconv.FormatUint(b.ids.Add(1), 10), Queue: m.Queue, Producer: m.Producer,
			JobType: m.JobType, SizeHint: m.SizeHint, Payload: m.Payload, Headers: m.Headers, Attempt: 1}
		if err := stream.Send(&pb.ConsumeResponse{Response: &pb.ConsumeResponse_Delivery{Delivery: d}}); err != nil {
			return err
		}
	}
}

// DeclareQueue implements pb.AdminServer: the queue exists from then on;
// its config is ignored.
func (b *BareQueue) DeclareQueue(_ context.Context, req *pb.DeclareQueueRequest) (*pb.QueueInfo, error) {
	q := b.queue(req.Name)
	q.mu.Lock()
	defer q.mu.Unlock()
	return &pb.QueueInfo{Name: req.Name, Ready: uint64(len(q.msgs) - q.head), Consumers: uint32(q.consumers)}, nil
}

// ListQueues implements pb.AdminServer: names, waiting counts and consumers.
func (b *BareQueue) ListQueues(context.Context, *pb.ListQueuesRequest) (*pb.ListQueuesResponse, error) {
	b.mu.Lock()
	names := make(map[string]*bareSlice, len(b.queues))
	for n, q := range b.queues {
		names[n] = q
	}
	b.mu.Unlock()
	resp := &pb.ListQueuesResponse{}
	for n, q := range names {
		q.mu.Lock()
		resp.Queues = append(resp.Queues, &pb.QueueInfo{Name: n, Ready: uint64(len(q.msgs) - q.head), Consumers: uint32(q.consumers)})
		q.mu.Unlock()
	}
	return resp, nil
}

// PurgeQueue implements pb.AdminServer.
func (b *BareQueue) PurgeQueue(_ context.Context, req *pb.PurgeQueueRequest) (*pb.PurgeQueueResponse, error) {
	q := b.queue(req.Name)
	q.mu.Lock()
	defer q.mu.Unlock()
	n := len(q.msgs) - q.head
	q.msgs, q.head = nil, 0
	return &pb.PurgeQueueResponse{Purged: uint64(n)}, nil
}
