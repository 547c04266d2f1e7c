// Package server is Harbinger's gRPC transport: it decodes requests,
// validates what the broker cannot (proto shapes), calls the broker and
// encodes the answer. One table (errors.go) maps broker errors to status
// codes. It keeps no state of its own beyond each stream's consumer.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/text"
	"github.com/harbinger-mq/harbinger/internal/tracing"
)

// Defaults and bounds of list requests.
const (
	DefaultListLimit = 100
	MaxListLimit     = 10_000
	// MaxBatch bounds the messages in one PublishRequest.
	MaxBatch = 10_000
	// MaxConsumeBatch bounds the deliveries in one DeliveryBatch, and is
	// what a client is told to put in one ConsumeBatch at most
	// (Limits.max_consume_batch). A consumer's batches are bounded by its
	// credit first; this keeps one frame's worth of work, and of its
	// deliveries' memory, small at any prefetch.
	MaxConsumeBatch = 256
)

// Server implements the Broker, Admin and Predictor gRPC services on top of
// a broker.Broker.
type Server struct {
	pb.UnimplementedBrokerServer
	b      *broker.Broker
	log    *slog.Logger
	health *health.Server
	admin  adminServer
	pred   pb.PredictorServer // see SetPredictor
	// maxSend is the largest response the server sends (ServerOptions).
	maxSend int
	// tr records jobs' spans; nil is tracing off (see SetTracer).
	tr *tracing.Tracer
	// maxFrame is the largest DeliveryBatch it sends: a consumer's receive
	// limit is sized for one delivery (Limits.max_delivery_bytes).
	maxFrame int
}

// New returns a Server for b; log may be nil.
func New(b *broker.Broker, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{b: b, log: log, health: health.NewServer(), pred: pb.UnimplementedPredictorServer{}, maxSend: sendLimit(b.Config()),
		maxFrame: int(Limits(b.Config()).MaxDeliveryBytes)}
	s.admin.s = s
	return s
}

// envelope bounds what a message carries beyond its payload and headers:
// queue name, producer, job type, id and the fixed fields.
const envelope = 64 << 10

// headerEncoding bounds the encoded size of headers per byte the broker
// counts of them (their keys' and values' lengths). Each header is a map
// entry with a tag and a length for the entry, its key and its value: six
// bytes beyond a short key and value, so seven for a one-byte key with an
// empty value. A delivery's limit must allow for that, or a message with
// many short headers that the broker accepted could never be delivered.
const headerEncoding = 7

// Limits are the wire limits that follow from the broker's max payload and
// max header bytes: the server reads requests up to MaxRequestBytes, and a
// delivery never exceeds MaxDeliveryBytes. GetLimits reports them, and the
// SDK sizes its batches and receive limits from them.
func Limits(cfg broker.Config) *pb.Limits {
	cfg = cfg.WithDefaults()
	one := uint64(cfg.MaxPayload + headerEncoding*cfg.MaxHeaderBytes + envelope)
	return &pb.Limits{
		MaxPayloadBytes:  uint64(cfg.MaxPayload),
		MaxHeaderBytes:   uint64(cfg.MaxHeaderBytes),
		MaxRequestBytes:  max(4<<20, one),
		MaxBatch:         MaxBatch,
		MaxDeliveryBytes: one,
		MaxCredit:        broker.MaxCredit,
		MaxConsumeBatch:  MaxConsumeBatch,
	}
}

// sendLimit is the largest response the server sends: a delivery, and the
// answer to a full publish batch, which with a small max payload is far
// larger than a delivery (MaxBatch ids), must both get out. gRPC refuses
// to send a larger response, failing the whole call.
func sendLimit(cfg broker.Config) int {
	l := Limits(cfg)
	return int(max(l.MaxRequestBytes, l.MaxDeliveryBytes))
}

// Flow-control windows of the broker's connections and the SDK's. A
// static window turns off gRPC's bandwidth-delay estimator, which sends a
// PING (and a connection window update) whenever data arrives and no ping
// is outstanding: with small messages spaced wider than the round trip,
// that is an extra frame each way, and an extra wake-up, for nearly every
// message. The windows are at least the estimator's ceiling for a stream
// of full-size requests, so large messages are not slowed on a network
// with a long round trip.
const (
	// StreamWindow is a stream's window unless the request limit is
	// larger (up to ConnWindow).
	StreamWindow = 4 << 20
	// ConnWindow is a connection's window: the estimator's own ceiling.
	ConnWindow = 16 << 20
)

// ServerOptions are the gRPC options the broker's limits call for: a
// receive limit large enough for a full-size payload and its envelope, a
// send limit that lets any delivery and any publish answer out, and static
// flow-control windows large enough for a full-size request, and a
// decoding that answers a string that is not UTF-8 with InvalidArgument
// and the field's name (see requestCodec; its interceptors run after those
// of options given before these), and ConnOptions with their defaults.
func ServerOptions(cfg broker.Config) []grpc.ServerOption {
	l := Limits(cfg)
	opts := append(UTF8Options(), ConnOptions(ConnConfig{})...)
	return append(opts, []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(l.MaxRequestBytes)),
		grpc.MaxSendMsgSize(sendLimit(cfg)),
		// One write buffer per connection, shared by its streams, and a
		// fixed pool of stream handlers instead of a goroutine per stream.
		grpc.SharedWriteBuffer(true),
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
		grpc.StaticStreamWindowSize(int32(min(max(l.MaxRequestBytes, StreamWindow), ConnWindow))),
		grpc.StaticConnWindowSize(ConnWindow),
		// Clients ping a quiet connection while a call is open, so that a
		// worker waiting for jobs learns when its connection died without
		// a word (client.KeepaliveTime): allow pings that often, where
		// gRPC's default refuses more than one per five minutes and then
		// closes the connection. (The broker's own pings: ConnOptions.)
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: MinPingInterval, PermitWithoutStream: true}),
	}...)
}

// MinPingInterval is how often a client may ping the broker: half gRPC's
// floor for a client's pings (10 s). The server counts a ping that arrives
// even a millisecond sooner than this after the one before as a strike and
// closes the connection after three; at the floor itself, a client pinging
// as often as it may was cut off now and then when timers on the two
// sides ran a little apart (TestIdleWorkerKeepsItsConnection, under load).
const MinPingInterval = 5 * time.Second

// Register adds the Harbinger services, the standard health service and
// server reflection to gs, and marks the services as serving.
func (s *Server) Register(gs *grpc.Server) {
	pb.RegisterBrokerServer(gs, s)
	pb.RegisterAdminServer(gs, &s.admin)
	pb.RegisterPredictorServer(gs, s.pred)
	healthpb.RegisterHealthServer(gs, s.health)
	reflection.Register(gs)
	for _, name := range []string{"", pb.Broker_ServiceDesc.ServiceName, pb.Admin_ServiceDesc.ServiceName, pb.Predictor_ServiceDesc.ServiceName} {
		s.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
}

// SetPredictor sets the Predictor service that Register serves; call it
// before Register. The Predictor service predicts for jobs published to
// RabbitMQ, not to this broker, so it is not the broker's: `harbinger
// serve` passes the shared one (internal/predictsvc), which keeps this
// package free of the AMQP client. Without one, its methods answer
// Unimplemented.
func (s *Server) SetPredictor(p pb.PredictorServer) { s.pred = p }

// SetTracer makes the server record each job's publish, wait and run as
// spans and carry its trace context in its traceparent header; call it
// before Register. Without it (nil) tracing is off and costs a nil check.
func (s *Server) SetTracer(t *tracing.Tracer) { s.tr = t }

// SetNotServing marks every service as not serving (the broker is draining).
func (s *Server) SetNotServing() { s.health.Shutdown() }

// publish answers every message of a well-formed request on its own; only
// a request that is malformed as a whole fails the call.
// publishBufs are one publish request's scratch space. A PublishStream,
// which handles one request at a time, keeps its own for the next request,
// so a stream of small batches does not allocate a broker.Message per
// message; the broker keeps none of it (only the payloads and headers the
// messages point at).
type publishBufs struct {
	msgs []broker.Message
	ptrs []*broker.Message
	idx  []int // request index of ptrs[j]
	res  []broker.Result
}

// maxKeptBatch bounds the messages a stream's publishBufs keeps room for.
const maxKeptBatch = 256

func (s *Server) publish(req *pb.PublishRequest, bufs *publishBufs) (*pb.PublishResponse, error) {
	resp, d, err := s.admit(req, bufs)
	if err != nil {
		return nil, err
	}
	s.settle(resp, d)
	return resp, nil
}

// settle waits for the records of an admitted publish to be durable and,
// if the log failed, answers every message the publish stored with its
// error instead of an id.
func (s *Server) settle(resp *pb.PublishResponse, d broker.Durable) {
	err := d.Wait()
	if err == nil {
		return
	}
	st := toStatus(err)
	results := make([]pb.PublishResult, len(resp.Results))
	for i, r := range resp.Results {
		if r.Code == 0 {
			setError(&results[i], st)
		} else {
			results[i].Code, results[i].Error = r.Code, r.Error
		}
	}
	fitErrors(results, s.maxSend)
	for i := range results {
		resp.Results[i] = &results[i]
	}
}

// admit stores what a publish request can and returns its answer, which
// is not to be sent before the returned Durable's Wait (settle).
func (s *Server) admit(req *pb.PublishRequest, bufs *publishBufs) (*pb.PublishResponse, broker.Durable, error) {
	if len(req.GetMessages()) == 0 {
		return nil, broker.Durable{}, invalidArg("a publish request needs at least one message")
	}
	if len(req.Messages) > MaxBatch {
		return nil, broker.Durable{}, invalidArg("a publish request holds at most %d messages, got %d", MaxBatch, len(req.Messages))
	}
	n := len(req.Messages)
	var msgs []broker.Message
	switch {
	case cap(bufs.msgs) >= n:
		msgs = bufs.msgs[:n]
	case n <= maxKeptBatch:
		bufs.msgs = make([]broker.Message, n)
		msgs = bufs.msgs
	default:
		msgs = make([]broker.Message, n) // a large batch's space is not kept
	}
	ptrs, idx := bufs.ptrs[:0], bufs.idx[:0]
	results := make([]pb.PublishResult, n)
	for i, m := range req.Messages {
		if err := fromMessage(i, m, &msgs[i]); err != nil {
			setError(&results[i], err)
			continue
		}
		ptrs = append(ptrs, &msgs[i])
		idx = append(idx, i)
	}
	var spans []trace.Span
	if s.tr != nil {
		spans = make([]trace.Span, len(ptrs))
		now := s.b.Now()
		for j, m := range ptrs {
			spans[j] = s.tr.Publish(m, now)
		}
	}
	res, d := s.b.Admit(ptrs, bufs.res[:0])
	if spans != nil {
		// The span ends at admission: the fsync that confirms the
		// publish runs after it, shared with the requests around it.
		now := s.b.Now()
		for j, r := range res {
			s.tr.Published(spans[j], r, now)
		}
	}
	for j, r := range res {
		if r.Err != nil {
			setError(&results[idx[j]], toStatus(r.Err))
			continue
		}
		results[idx[j]].Id = r.ID
		results[idx[j]].Duplicate = r.Duplicate
	}
	fitErrors(results, s.maxSend)
	// Nothing of the request is kept past the next one.
	clear(msgs)
	clear(ptrs)
	clear(res)
	bufs.ptrs, bufs.idx, bufs.res = ptrs[:0], idx[:0], res[:0]
	resp := &pb.PublishResponse{Results: make([]*pb.PublishResult, n)}
	for i := range results {
		resp.Results[i] = &results[i]
	}
	return resp, d, nil
}

// resultOverhead bounds what a PublishResult takes in a response beyond
// its id and error text: its tag and length, and the other fields' tags,
// lengths, code and flag.
const resultOverhead = 16

// fitErrors cuts the error texts of results, when it must, so that their
// response fits in limit bytes. gRPC refuses to send a larger response:
// the whole call would fail after its other messages were stored, naming
// none of them, and a caller that publishes them again stores them twice.
func fitErrors(results []pb.PublishResult, limit int) {
	fixed, said, errs := 0, 0, 0
	for i := range results {
		fixed += resultOverhead + len(results[i].Id)
		if e := results[i].Error; e != "" {
			said += len(e)
			errs++
		}
	}
	if fixed+said <= limit || errs == 0 {
		return
	}
	each := max(0, (limit-fixed)/errs)
	for i := range results {
		if len(results[i].Error) > each {
			results[i].Error = text.Clean(results[i].Error, each)
		}
	}
}

func setError(r *pb.PublishResult, err error) {
	st, _ := status.FromError(err)
	r.Code = uint32(st.Code())
	r.Error = st.Message()
}

// Publish implements pb.BrokerServer.
func (s *Server) Publish(_ context.Context, req *pb.PublishRequest) (*pb.PublishResponse, error) {
	return s.publish(req, &publishBufs{})
}

// PublishStream implements pb.BrokerServer: one response per request, in
// order; the first failed batch ends the stream with its status. On a
// durable broker a request is admitted as soon as it arrives and answered
// once its records are on disk (publishPipelined), so the requests a
// producer keeps in flight share fsyncs instead of taking one each.
func (s *Server) PublishStream(stream grpc.BidiStreamingServer[pb.PublishRequest, pb.PublishResponse]) error {
	if s.b.Config().Store != nil {
		return s.publishPipelined(stream)
	}
	var bufs publishBufs
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := s.publish(req, &bufs)
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// maxPipelined bounds the requests of one publish stream admitted and not
// yet answered. It is above the SDK's default window of batches
// (client.DefaultWindow), so a Producer's window is never cut short.
const maxPipelined = 64

// admitted is a publish request admitted and awaiting its records' fsync.
type admitted struct {
	resp *pb.PublishResponse
	d    broker.Durable
}

// publishPipelined is PublishStream for a durable broker: this goroutine
// reads and admits requests, and another waits for each one's records to
// be on disk and answers it, in order. While one request's fsync runs, the
// next is admitted, and the next fsync covers it and every other waiting.
func (s *Server) publishPipelined(stream grpc.BidiStreamingServer[pb.PublishRequest, pb.PublishResponse]) error {
	queue := make(chan admitted, maxPipelined)
	sent := make(chan error, 1)
	go func() {
		var err error
		for a := range queue {
			s.settle(a.resp, a.d)
			if err == nil {
				err = stream.Send(a.resp)
			}
			// After a failed send, the rest are only waited for: the
			// stream is gone, and so are their answers; each was stored.
		}
		sent <- err
	}()
	var bufs publishBufs
	for {
		req, err := stream.Recv()
		if err != nil {
			close(queue)
			serr := <-sent
			switch {
			case errors.Is(err, io.EOF):
				return serr
			default:
				return err
			}
		}
		resp, d, err := s.admit(req, &bufs)
		if err != nil {
			close(queue)
			<-sent // the requests before it are answered first
			return err
		}
		queue <- admitted{resp: resp, d: d}
	}
}

// Consume implements pb.BrokerServer. The stream's first request must be a
// Subscribe. Deliveries are sent as credit allows; acks, nacks, credit and
// extends are applied as they arrive. When the stream ends, jobs the
// consumer still holds go back to the queue.
func (s *Server) Consume(stream grpc.BidiStreamingServer[pb.ConsumeRequest, pb.ConsumeResponse]) error {
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
	runs := s.tr.Runs(sub.ConsumerName)
	if runs != nil {
		// After c.Close (deferred below, so run first), which ends the
		// deliveries.
		defer func() { runs.Close(s.b.Now()) }()
	}
	defer c.Close()
	cs := &consumeStream{s: s, c: c, batch: int(max(min(sub.MaxBatch, MaxConsumeBatch), 1)), runs: runs}

	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	// Both goroutines send: deliveries from this one, request errors from
	// the receiver. gRPC allows one Send at a time.
	var sendMu sync.Mutex
	cs.send = func(r *pb.ConsumeResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(r)
	}
	recvDone := make(chan error, 1)
	go func() {
		recvDone <- cs.recv(stream)
		cancel()
	}()

	var buf []broker.Delivery
	if cs.batch > 1 {
		buf = make([]broker.Delivery, 0, cs.batch)
	}
	for {
		var err error
		if cs.batch == 1 {
			var d broker.Delivery
			if d, err = c.Next(ctx); err == nil {
				buf = append(buf[:0], d)
			}
		} else {
			buf, err = c.NextBatch(ctx, cs.batch, buf[:0])
		}
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
		if len(buf) == 1 && buf[0].Cancel {
			if err := cs.send(&pb.ConsumeResponse{Response: &pb.ConsumeResponse_Cancel{Cancel: &pb.CancelNotice{Id: buf[0].ID}}}); err != nil {
				return err
			}
			continue
		}
		if err := cs.deliver(buf); err != nil {
			return err
		}
	}
}

// consumeStream is one Consume stream's consumer and how it sends.
type consumeStream struct {
	s *Server
	c *broker.Consumer
	// batch is the most deliveries in one response: 1 for a client that
	// did not ask for batches (Subscribe.max_batch), which gets each
	// delivery as a response of its own.
	batch int
	// send sends one response; the stream's two goroutines share it.
	send func(*pb.ConsumeResponse) error
	// runs records the run span of each job delivered; nil is tracing off.
	runs *tracing.Runs
}

// deliver sends ds: one alone as a plain delivery, several as
// DeliveryBatch responses cut to the client's receive limit. Deliveries
// that did not go out go back to the queue, their attempts not charged.
func (cs *consumeStream) deliver(ds []broker.Delivery) error {
	if cs.runs != nil {
		// Each job's trace context goes out set to its run span.
		now := cs.s.b.Now()
		for i := range ds {
			ds[i].Headers = cs.runs.Delivered(&ds[i], now)
		}
	}
	for len(ds) > 0 {
		n, size := 1, deliverySize(&ds[0])
		for n < len(ds) {
			size += deliverySize(&ds[n])
			if size > cs.s.maxFrame {
				break
			}
			n++
		}
		var resp *pb.ConsumeResponse
		if n == 1 {
			resp = toDeliveryResponse(&ds[0])
		} else {
			resp = toBatchResponse(ds[:n])
		}
		if err := cs.send(resp); err != nil {
			for i := range ds {
				cs.c.Return(ds[i].ID) // it never left: no attempt charged
				cs.runs.Lost(ds[i].ID, "the delivery could not be sent", cs.s.b.Now())
			}
			return err
		}
		ds = ds[n:]
	}
	return nil
}

// recv applies the client's requests until the stream ends. It returns
// nil when the client closes its side, or a status for a request that
// breaks the protocol (a second Subscribe, an empty request). A bad ack,
// nack or extend, alone or in a batch, is answered for its job alone.
func (cs *consumeStream) recv(stream grpc.BidiStreamingServer[pb.ConsumeRequest, pb.ConsumeResponse]) error {
	s, c := cs.s, cs.c
	var answers []*pb.RequestError
	var buf []broker.Delivery
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var credit int
		if b := req.GetBatch(); b != nil {
			answers, credit = s.applyBatch(c, b, answers[:0], cs.runs)
		} else {
			var re *pb.RequestError
			if re, credit, err = s.apply(c, req); err != nil {
				return err
			}
			answers = answers[:0]
			if re != nil {
				answers = append(answers, re)
			}
		}
		if cs.runs != nil && req.GetBatch() == nil && len(answers) <= 1 {
			var re *pb.RequestError
			if len(answers) == 1 {
				re = answers[0]
			}
			s.settled(cs.runs, req, re)
		}
		for _, re := range answers {
			s.log.Warn("server: consumer request refused or adjusted", "queue", c.Queue(), "consumer", c.Name(),
				"request", re.Request, "id", re.Id, "applied", re.Applied, "err", re.Message)
			if err := cs.send(&pb.ConsumeResponse{Response: &pb.ConsumeResponse_Error{Error: re}}); err != nil {
				return err
			}
		}
		clear(answers)
		// The credit comes after the answers, so that a request's answer
		// reaches the client before the delivery its credit lets through.
		// Jobs ready for it go out from here, without waking the sending
		// goroutine.
		if buf = c.AddCreditTakeBatch(credit, cs.batch, buf[:0]); len(buf) > 0 {
			if err := cs.deliver(buf); err != nil {
				return err
			}
		}
		clear(buf) // the payloads are the queue's to free
	}
}

// settled ends the run span of the job an ack or nack settled, or that
// the consumer no longer held; a request refused with the job still held
// (an unknown nack action) leaves it open.
func (s *Server) settled(runs *tracing.Runs, req *pb.ConsumeRequest, re *pb.RequestError) {
	var id string
	switch r := req.GetRequest().(type) {
	case *pb.ConsumeRequest_Ack:
		id = r.Ack.Id
		if re == nil || re.Applied {
			runs.Acked(id, s.b.Now())
			return
		}
	case *pb.ConsumeRequest_Nack:
		id = r.Nack.Id
		if re == nil || re.Applied {
			action := strings.ToLower(strings.TrimPrefix(r.Nack.Action.String(), "NACK_ACTION_"))
			if r.Nack.Action == pb.NackAction_NACK_ACTION_UNSPECIFIED {
				action = "requeue"
			}
			runs.Nacked(id, action, r.Nack.Reason, s.b.Now())
			return
		}
	default:
		return
	}
	if codes.Code(re.Code) == codes.FailedPrecondition {
		runs.Lost(id, re.Message, s.b.Now())
	}
}

// applyBatch applies a ConsumeBatch as its items would be applied one by
// one (the extends, then the acks, then the nacks) and returns the
// answers for the items refused or adjusted, appended to answers, and the
// credit granted. Nothing in a batch breaks the protocol: an item with a
// string that is not UTF-8 is refused alone.
func (s *Server) applyBatch(c *broker.Consumer, b *pb.ConsumeBatch, answers []*pb.RequestError, runs *tracing.Runs) ([]*pb.RequestError, int) {
	credit := 0
	one := func(kind, id string, item proto.Message, req *pb.ConsumeRequest) {
		if paths := badUTF8(item); paths != "" {
			answers = append(answers, requestError(kind, id, invalidArg("%s %s: not valid UTF-8 (protobuf strings must be); nothing was done", kind, paths)))
			return
		}
		re, n, _ := s.apply(c, req) // only a Subscribe or an empty request breaks the protocol
		if runs != nil {
			s.settled(runs, req, re)
		}
		if re != nil {
			answers = append(answers, re)
		}
		credit = min(credit+n, broker.MaxCredit)
	}
	var req pb.ConsumeRequest
	var ext pb.ConsumeRequest_Extend
	var ack pb.ConsumeRequest_Ack
	var nack pb.ConsumeRequest_Nack
	for _, e := range b.Extends {
		ext.Extend = e
		req.Request = &ext
		one("extend", e.GetId(), e, &req)
	}
	for _, a := range b.Acks {
		ack.Ack = a
		req.Request = &ack
		one("ack", a.GetId(), a, &req)
	}
	for _, n := range b.Nacks {
		nack.Nack = n
		req.Request = &nack
		one("nack", n.GetId(), n, &req)
	}
	return answers, credit
}

// apply handles one request on a subscribed stream and returns the
// credit it grants, for the caller to add once it has answered. It returns
// a RequestError for an ack, nack or extend the broker refused or
// adjusted, and an error only for a request that breaks the protocol.
func (s *Server) apply(c *broker.Consumer, req *pb.ConsumeRequest) (*pb.RequestError, int, error) {
	switch r := req.GetRequest().(type) {
	case *pb.ConsumeRequest_Credit:
		return nil, credit(r.Credit.GetN()), nil
	case *pb.ConsumeRequest_Ack:
		a := r.Ack
		d, ok := ackDuration(a.Duration)
		if !ok {
			d = -1 // refused by the predictor like any other bad duration
		}
		err := c.Ack(a.Id, d)
		if !ok && errors.Is(err, broker.ErrBadDuration) {
			// Say what was sent, not the placeholder.
			err = fmt.Errorf("%w: message %s acked, but its duration %s does not fit a duration and was not learned", broker.ErrBadDuration, a.Id, formatDuration(a.Duration))
		}
		return requestError("ack", a.Id, err), credit(a.Credit), nil
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
		case pb.NackAction_NACK_ACTION_RETRY:
			action = broker.NackRetry
		default:
			return requestError("nack", n.Id, status.Errorf(codes.InvalidArgument, "unknown nack action %d; the job stays leased to this consumer", n.Action)), credit(n.Credit), nil
		}
		err := c.Nack(n.Id, action, wireDuration(n.Delay), n.Reason)
		return requestError("nack", n.Id, asSent(err, n.Delay)), credit(n.Credit), nil
	case *pb.ConsumeRequest_Extend:
		e := r.Extend
		// Only a malformed lease is refused: one that is negative or over
		// the limit goes to the broker, which applies the queue's lease or
		// the limit and says so, as the contract promises. Refusing it here
		// left the lease to run out and the job to run twice.
		var lease time.Duration // unset: the queue's lease
		if e.Lease != nil {
			if err := e.Lease.CheckValid(); err != nil {
				return requestError("extend", e.Id, invalidArg("extend lease: %v; the lease is unchanged", err)), 0, nil
			}
			lease = wireDuration(e.Lease)
		}
		return requestError("extend", e.Id, asSent(c.Extend(e.Id, lease), e.Lease)), 0, nil
	case *pb.ConsumeRequest_Subscribe:
		return nil, 0, invalidArg("this stream is already subscribed to queue %q; open another stream for another queue", c.Queue())
	default:
		return nil, 0, invalidArg("empty consume request")
	}
}

// credit is a request's credit, capped at broker.MaxCredit.
func credit(n uint32) int { return int(min(n, broker.MaxCredit)) }

// requestError turns a settle error into the stream's answer for that job;
// nil for nil.
func requestError(kind, id string, err error) *pb.RequestError {
	if err == nil {
		return nil
	}
	applied := errors.Is(err, broker.ErrBadDuration) || errors.Is(err, broker.ErrAdjusted)
	st, _ := status.FromError(toStatus(err))
	// The id and the message quote what the client sent; an answer must
	// encode whatever that was (gRPC refuses invalid UTF-8 on the wire,
	// but apply does not rely on it), and stay small: an id of megabytes
	// echoed twice made an answer over the send limit, whose failure
	// ended the whole session.
	return &pb.RequestError{Id: text.Clean(id, maxEchoedID), Request: kind, Code: uint32(st.Code()),
		Message: text.Clean(st.Message(), maxRequestErrorText), Applied: applied}
}

// Bounds of what a RequestError echoes of its request; a broker's ids
// are a few bytes, and its messages a few hundred.
const (
	maxEchoedID         = 1 << 10
	maxRequestErrorText = 4 << 10
)

// ackDuration converts an ack's duration; ok is false for one that is
// missing or does not fit a time.Duration.
func ackDuration(d *durationpb.Duration) (time.Duration, bool) {
	if d == nil || d.CheckValid() != nil {
		return 0, false
	}
	if !fitsDuration(d) {
		return 0, false
	}
	return d.AsDuration(), true
}

// wireDuration converts a request's duration, nil as 0. One past what a
// time.Duration holds saturates (the broker caps it and says so, quoting
// what was sent: asSent).
func wireDuration(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.AsDuration()
}

// asSent makes an *AdjustedError quote the duration as the client sent
// it where wireDuration saturated it. Before, a nack's negative delay was
// passed on as -1 ns and reported so ("nack delay -1ns is out of range"),
// and a lease of 300 years as 2562047h47m16.854775807s.
func asSent(err error, d *durationpb.Duration) error {
	var adj *broker.AdjustedError
	if d != nil && errors.As(err, &adj) && (d.CheckValid() != nil || !fitsDuration(d)) {
		adj.Sent = formatDuration(d)
	}
	return err
}

// fitsDuration reports whether d converts to a time.Duration without
// saturating.
func fitsDuration(d *durationpb.Duration) bool {
	return d.Seconds <= math.MaxInt64/int64(time.Second)-1 && d.Seconds >= math.MinInt64/int64(time.Second)+1
}

// formatDuration prints a proto duration as sent, even one that does not
// fit a time.Duration.
func formatDuration(d *durationpb.Duration) string {
	if d == nil {
		return "(none)"
	}
	if d.Nanos == 0 {
		return fmt.Sprintf("%ds", d.Seconds)
	}
	return fmt.Sprintf("%ds+%dns", d.Seconds, d.Nanos)
}

// GetLimits implements pb.BrokerServer.
func (s *Server) GetLimits(context.Context, *pb.GetLimitsRequest) (*pb.Limits, error) {
	return Limits(s.b.Config()), nil
}

// queueInfo is in with the waits of its waiting jobs.
func (a *adminServer) queueInfo(in broker.QueueInfo) *pb.QueueInfo {
	out := toQueueInfo(in)
	if w, err := a.s.b.Waits(in.Name); err == nil && w.Waiting > 0 {
		out.WaitP50, out.WaitP99 = durationpb.New(w.P50), durationpb.New(w.P99)
	}
	return out
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
	return a.queueInfo(in), nil
}

func (a *adminServer) ListQueues(context.Context, *pb.ListQueuesRequest) (*pb.ListQueuesResponse, error) {
	qs := a.s.b.Queues()
	out := &pb.ListQueuesResponse{Queues: make([]*pb.QueueInfo, len(qs))}
	for i, q := range qs {
		out.Queues[i] = a.queueInfo(q)
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

func (a *adminServer) DeleteQueue(_ context.Context, req *pb.DeleteQueueRequest) (*pb.DeleteQueueResponse, error) {
	d, err := a.s.b.DeleteQueue(req.Name, req.Force)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.DeleteQueueResponse{Waiting: uint64(d.Waiting), Delayed: uint64(d.Delayed), Running: uint64(d.Running),
		Dead: uint64(d.Dead), Consumers: uint64(d.Consumers)}, nil
}

func (a *adminServer) ListDeadLetters(_ context.Context, req *pb.ListDeadLettersRequest) (*pb.ListDeadLettersResponse, error) {
	dls, err := a.s.b.DeadLetters(req.Queue, listLimit(req.Limit))
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.ListDeadLettersResponse{DeadLetters: make([]*pb.DeadLetter, 0, len(dls))}
	size := 0
	for _, d := range dls {
		pd := &pb.DeadLetter{
			Id: d.ID, Queue: d.Queue, Producer: d.Producer, JobType: d.JobType,
			Payload: d.Payload, Headers: d.Headers, Attempts: uint32(d.Attempts),
			Reason: d.Reason, DeadAt: timestamppb.New(d.DeadAt),
		}
		// gRPC refuses to send a response over its limit, failing the
		// call: with payloads of some kilobytes, the default limit of
		// dead letters would be over it. The oldest that fit are answered
		// (the limit is a most); one always fits, as a delivery does.
		n := proto.Size(pd) + listEntryOverhead
		if size+n > a.s.maxSend && len(out.DeadLetters) > 0 {
			break
		}
		size += n
		out.DeadLetters = append(out.DeadLetters, pd)
	}
	return out, nil
}

// listEntryOverhead bounds what an item of a list response takes beyond
// its own encoding: its tag and length.
const listEntryOverhead = 6

func (a *adminServer) ListJobs(_ context.Context, req *pb.ListJobsRequest) (*pb.ListJobsResponse, error) {
	n, off := int(min(req.Limit, broker.MaxJobsListed)), int(req.Offset)
	b := a.s.b
	now := b.Now()
	waiting, err := b.WaitingJobsFrom(req.Queue, off, n)
	if err != nil {
		return nil, toStatus(err)
	}
	running, err := b.InFlightJobs(req.Queue, 0)
	if err != nil {
		return nil, toStatus(err)
	}
	delayed, delayedTotal, err := b.DelayedJobs(req.Queue, off, n)
	if err != nil {
		return nil, toStatus(err)
	}
	dead, err := b.DeadLettersFrom(req.Queue, off, jobsLimit(n))
	if err != nil {
		return nil, toStatus(err)
	}
	done, doneTotal, err := b.DoneJobs(req.Queue, off, n)
	if err != nil {
		return nil, toStatus(err)
	}
	in, err := b.Queue(req.Queue)
	if err != nil {
		return nil, toStatus(err)
	}
	runningTotal := len(running)
	running = running[min(off, len(running)):]
	running = running[:min(len(running), jobsLimit(n))]
	out := &pb.ListJobsResponse{
		Waiting: make([]*pb.WaitingJob, len(waiting)), Running: make([]*pb.RunningJob, len(running)),
		WaitingTotal: uint64(in.Ready), RunningTotal: uint64(runningTotal), DelayedTotal: uint64(delayedTotal),
		DeadTotal: uint64(in.DeadLetters), DoneTotal: uint64(doneTotal),
	}
	for i, j := range waiting {
		w := &pb.WaitingJob{
			Id: j.ID, Producer: j.Producer, JobType: j.JobType, Tier: uint32(j.Tier), Level: uint32(j.Level),
			PredictedMs: float64(j.Cost) / float64(time.Millisecond), Long: j.Long, Cold: j.Cold, Attempts: uint32(j.Attempts),
			Enqueued: timestamppb.New(j.Enqueued), Waited: durationpb.New(max(0, now.Sub(j.Enqueued))),
		}
		if !j.Expires.IsZero() {
			w.Expires = timestamppb.New(j.Expires)
		}
		out.Waiting[i] = w
	}
	for i, j := range running {
		out.Running[i] = &pb.RunningJob{
			Id: j.ID, Producer: j.Producer, JobType: j.JobType, Consumer: j.Consumer, Attempt: uint32(j.Attempt),
			PredictedMs: float64(j.Cost) / float64(time.Millisecond),
			Leased:      timestamppb.New(j.Leased), Running: durationpb.New(max(0, now.Sub(j.Leased))),
			LeaseDeadline: timestamppb.New(j.Deadline),
		}
	}
	for _, j := range delayed {
		out.Delayed = append(out.Delayed, &pb.DelayedJob{
			Id: j.ID, Producer: j.Producer, JobType: j.JobType, Retry: j.Retry, Attempts: uint32(j.Attempts),
			MaxAttempts: uint32(j.MaxAttempts), PublishedAt: timestamppb.New(j.PublishedAt), Due: timestamppb.New(j.Due),
		})
	}
	// Without payloads: a thousand of them could pass gRPC's message
	// limit; GetJob and ListDeadLetters have them.
	for _, d := range dead {
		out.Dead = append(out.Dead, &pb.DeadLetter{
			Id: d.ID, Queue: d.Queue, Producer: d.Producer, JobType: d.JobType, Headers: d.Headers,
			Attempts: uint32(d.Attempts), Reason: d.Reason, DeadAt: timestamppb.New(d.DeadAt),
		})
	}
	for _, d := range done {
		pd := &pb.DoneJob{Id: d.ID, Producer: d.Producer, JobType: d.JobType, State: string(d.State),
			Attempts: uint32(d.Attempts), EndedAt: timestamppb.New(d.EndedAt)}
		if d.State == broker.JobDone {
			pd.Took = durationpb.New(d.Took)
		}
		out.Done = append(out.Done, pd)
	}
	return out, nil
}

// jobsLimit is n, or the broker's most when n is 0.
func jobsLimit(n int) int {
	if n <= 0 {
		return broker.MaxJobsListed
	}
	return n
}

func (a *adminServer) RunJobsNow(_ context.Context, req *pb.RunJobsNowRequest) (*pb.RunJobsNowResponse, error) {
	n, err := a.s.b.RunNow(req.Queue, req.Ids)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.RunJobsNowResponse{Moved: uint64(n)}, nil
}

// took is a done job's reported time, unset for any other.
func took(j broker.JobInfo) *durationpb.Duration {
	if j.State != broker.JobDone {
		return nil
	}
	return durationpb.New(j.Took)
}

func (a *adminServer) GetJob(_ context.Context, req *pb.GetJobRequest) (*pb.JobInfo, error) {
	j, err := a.s.b.GetJob(req.Queue, req.Id)
	if errors.Is(err, broker.ErrUnknownMessage) {
		return nil, status.Error(codes.NotFound, strings.TrimPrefix(err.Error(), "broker: "))
	}
	if err != nil {
		return nil, toStatus(err)
	}
	ts := func(t time.Time) *timestamppb.Timestamp {
		if t.IsZero() {
			return nil
		}
		return timestamppb.New(t)
	}
	return &pb.JobInfo{
		Id: j.ID, Queue: j.Queue, Producer: j.Producer, JobType: j.JobType, State: string(j.State),
		Payload: j.Payload, Headers: j.Headers, Attempts: uint32(j.Attempts), MaxAttempts: uint32(j.MaxAttempts),
		PublishedAt: ts(j.PublishedAt), Tier: uint32(j.Tier),
		PredictedMs: float64(j.Cost) / float64(time.Millisecond), Long: j.Long, Cold: j.Cold,
		Enqueued: ts(j.Enqueued), Expires: ts(j.Expires), Due: ts(j.Due),
		Consumer: j.Consumer, Leased: ts(j.Leased), LeaseDeadline: ts(j.Deadline),
		Reason: j.Reason, DeadAt: ts(j.DeadAt), Cancelled: j.Cancelled, EndedAt: ts(j.EndedAt), Took: took(j),
	}, nil
}

func (a *adminServer) RequeueDeadLetters(_ context.Context, req *pb.RequeueDeadLettersRequest) (*pb.RequeueDeadLettersResponse, error) {
	n, err := a.s.b.RequeueDeadLetters(req.Queue, req.Ids)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.RequeueDeadLettersResponse{Requeued: uint64(n)}, nil
}

func (a *adminServer) CancelJob(_ context.Context, req *pb.CancelJobRequest) (*pb.CancelJobResponse, error) {
	st, err := a.s.b.Cancel(req.Queue, req.Id)
	if errors.Is(err, broker.ErrUnknownMessage) {
		return nil, status.Error(codes.NotFound, strings.TrimPrefix(err.Error(), "broker: "))
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.CancelJobResponse{State: string(st)}, nil
}

func (a *adminServer) PauseQueue(_ context.Context, req *pb.PauseQueueRequest) (*pb.QueueInfo, error) {
	if err := a.s.b.Pause(req.Name, req.Paused); err != nil {
		return nil, toStatus(err)
	}
	in, err := a.s.b.Queue(req.Name)
	if err != nil {
		return nil, toStatus(err)
	}
	return a.queueInfo(in), nil
}

func (a *adminServer) DeleteDeadLetters(_ context.Context, req *pb.DeleteDeadLettersRequest) (*pb.DeleteDeadLettersResponse, error) {
	n, err := a.s.b.DeleteDeadLetters(req.Queue, req.Ids)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.DeleteDeadLettersResponse{Deleted: uint64(n)}, nil
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
			MaeMs: ms(k.MAE), TierAccuracy: k.TierAccuracy, Scored: k.Scored,
			Tier: uint32(k.Tier), Cold: k.Cold, SpreadGated: k.SpreadGated, Long: k.Long,
		}
	}
	return out, nil
}

func (a *adminServer) ListGroups(_ context.Context, req *pb.ListGroupsRequest) (*pb.ListGroupsResponse, error) {
	in, err := a.s.b.Groups(req.Queue, listLimit(req.Limit))
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.ListGroupsResponse{
		Groups:     make([]*pb.GroupStats, len(in.Groups)),
		GroupCount: uint64(in.GroupCount), Throttled: in.Throttled, Reserved: in.Reserved,
	}
	for i, g := range in.Groups {
		out.Groups[i] = &pb.GroupStats{
			Name: g.Name, Weight: uint32(g.Weight), Running: uint64(g.Running), Waiting: uint64(g.Waiting),
			Limit: uint32(g.Limit), WorkShare: g.WorkShare, WorkSeconds: g.WorkSeconds, Throttled: g.Throttled,
		}
	}
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
