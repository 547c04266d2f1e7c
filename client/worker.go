package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
)

// Delivery is one job handed to a worker.
type Delivery struct {
	ID          string
	Queue       string
	Producer    string
	JobType     string
	SizeHint    uint64
	Payload     []byte
	Headers     map[string]string
	Attempt     int // 1 for the first delivery
	PublishedAt time.Time
	Lease       time.Duration // time before the broker redelivers unless acked or extended
	Tier        int           // scheduling tier, 0 is the shortest
	Predicted   time.Duration // the broker's guess of how long the job takes
}

func fromProto(d *pb.Delivery) *Delivery {
	return &Delivery{
		ID: d.Id, Queue: d.Queue, Producer: d.Producer, JobType: d.JobType, SizeHint: d.SizeHint,
		Payload: d.Payload, Headers: d.Headers, Attempt: int(d.Attempt),
		PublishedAt: d.PublishedAt.AsTime(), Lease: d.Lease.AsDuration(), Tier: int(d.Tier),
		Predicted: time.Duration(d.PredictedMs * float64(time.Millisecond)),
	}
}

// Handler runs one job. Returning nil acks it with the measured duration;
// an error nacks it for a retry after WorkerConfig.RetryBackoff, or sends it
// straight to the dead-letter list if the error wraps ErrDeadLetter. A
// panic is a failure like an error (logged with its stack), and so is a
// call to runtime.Goexit; either way the worker goes on taking jobs.
type Handler func(ctx context.Context, d *Delivery) error

// ErrDeadLetter, wrapped in a handler's error, sends the job to the
// dead-letter list without further attempts: return
// fmt.Errorf("%w: bad input", client.ErrDeadLetter).
var ErrDeadLetter = errors.New("harbinger: dead-letter this job")

// ErrTimeout is the cause (context.Cause) of a handler's context when the
// job ran past WorkerConfig.Timeout.
var ErrTimeout = errors.New("harbinger: job timed out")

// ErrClientClosed is returned by RunWorker when its Client was closed.
var ErrClientClosed = errors.New("harbinger: client closed")

// WorkerConfig configures RunWorker.
type WorkerConfig struct {
	// Queue to consume from; required.
	Queue string
	// Concurrency is how many handlers run at once; default 1. With more
	// than one, the acks and nacks of handlers that finish close together
	// go to the broker in one request (on a broker that reads batches:
	// Limits.max_consume_batch).
	Concurrency int
	// Prefetch is how many deliveries the worker may hold at once, counting
	// those being handled; default 1, and never below Concurrency. Keeping it
	// at Concurrency lets the broker choose each job at the last moment.
	// A delivery waiting for a free handler has its lease renewed like a
	// running job's, and one cancelled while it waits never runs.
	// With more than one, the broker may send several deliveries in one
	// response when several handlers are free; it still picks each job
	// only when the worker has room for it.
	Prefetch int
	// Name identifies the worker in admin views.
	Name string
	// RetryBackoff, when set, is the delay before a failed job is retried,
	// given the attempt that failed. By default the broker's retry policy
	// decides (the job's or the queue's: exponential with jitter), so
	// workers in every language retry alike.
	RetryBackoff func(attempt int) time.Duration
	// LeaseExtend is how often the lease of a job the worker holds (running
	// or waiting for a handler) is renewed; 0 renews at half the lease,
	// negative never.
	LeaseExtend time.Duration
	// Timeout bounds how long one job's handler may run; 0, the default,
	// is no bound. When it passes, the handler's context is cancelled with
	// cause ErrTimeout and the job's lease is no longer renewed: a handler
	// that returns an error then has its job retried (the nack's reason
	// says it timed out), and one that ignores its context keeps its
	// handler busy, but the broker gives the job to another worker once
	// the lease runs out. A handler that returns nil after its timeout
	// still acks its job.
	Timeout time.Duration
	// MaxReconnectDelay caps the backoff between reconnects; default 5s.
	MaxReconnectDelay time.Duration
	// OnRequestError is told of every ack, nack or extend the broker
	// refused or applied only in part (a *RequestError); default logs it at
	// Warn. It runs on the worker's receive goroutine and must not block.
	OnRequestError func(err *RequestError)
}

// RequestError is the broker's answer to one ack, nack or extend it did not
// apply exactly as sent. Only that job is affected.
type RequestError struct {
	ID      string     // delivery id the request named
	Request string     // "ack", "nack", "extend" or "credit"
	Code    codes.Code // InvalidArgument for a bad value, FailedPrecondition for a job no longer held
	Message string
	// Applied is true when the request took effect in an adjusted form:
	// an ack whose duration was not learned still settled the job.
	Applied bool
}

func (e *RequestError) Error() string {
	what := "refused"
	if e.Applied {
		what = "applied with a change"
	}
	return fmt.Sprintf("harbinger: %s of %s %s: %s", e.Request, e.ID, what, e.Message)
}

// DefaultRetryBackoff doubles from one second per attempt, up to a minute:
// the client-side schedule of earlier versions, for WorkerConfig.RetryBackoff.
func DefaultRetryBackoff(attempt int) time.Duration {
	d := time.Second << min(max(attempt-1, 0), 6)
	return min(d, time.Minute)
}

// RunWorker consumes cfg.Queue until ctx ends, running h for each job and
// acking it with the time h took, so the broker learns how long each kind
// of job runs. When the broker goes away it reconnects with backoff; jobs
// it held are redelivered by the broker. It returns nil once ctx ends,
// ErrClientClosed once c is closed, or an error the broker says retrying
// cannot fix (e.g. an invalid queue name).
func (c *Client) RunWorker(ctx context.Context, cfg WorkerConfig, h Handler) error {
	if cfg.Queue == "" {
		return errors.New("harbinger: RunWorker needs a queue")
	}
	if h == nil {
		return errors.New("harbinger: RunWorker needs a handler")
	}
	// A request with a string that is not valid UTF-8 cannot be encoded, so
	// no session could ever open: say so instead of reconnecting forever.
	for _, f := range [...]struct{ what, v string }{{"queue", cfg.Queue}, {"name", cfg.Name}} {
		if !utf8.ValidString(f.v) {
			return status.Errorf(codes.InvalidArgument, "harbinger: RunWorker's %s %q is not valid UTF-8", f.what, strings.ToValidUTF8(f.v, "\uFFFD"))
		}
	}
	if cfg.Timeout < 0 {
		return status.Errorf(codes.InvalidArgument, "harbinger: RunWorker's Timeout %v is negative (0 is no bound)", cfg.Timeout)
	}
	cfg.Concurrency = max(cfg.Concurrency, 1)
	cfg.Prefetch = max(cfg.Prefetch, cfg.Concurrency)
	if cfg.MaxReconnectDelay <= 0 {
		cfg.MaxReconnectDelay = 5 * time.Second
	}
	if cfg.OnRequestError == nil {
		log := c.log
		cfg.OnRequestError = func(err *RequestError) {
			log.Warn("harbinger: broker answered a request", "queue", cfg.Queue, "err", err)
		}
	}
	bo := newBackoff(cfg.MaxReconnectDelay)
	for {
		got, err := c.session(ctx, cfg, h)
		if ctx.Err() != nil {
			return nil
		}
		if c.conn.GetState() == connectivity.Shutdown {
			// Every later call would fail at once, as this one did.
			return fmt.Errorf("%w: %w", ErrClientClosed, err)
		}
		switch status.Code(err) {
		case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented:
			return err
		}
		if got {
			bo.reset()
		}
		delay := bo.next()
		c.log.Warn("harbinger: worker reconnecting", "queue", cfg.Queue, "in", delay, "err", err)
		if !pause(ctx.Done(), delay) {
			return nil
		}
	}
}

// drainGrace bounds how long a stopping worker waits for the broker to
// read its last acks and end the stream.
const drainGrace = 750 * time.Millisecond

// session runs one Consume stream. got reports whether any delivery
// arrived, so a healthy connection resets the reconnect backoff.
func (c *Client) session(ctx context.Context, cfg WorkerConfig, h Handler) (got bool, err error) {
	// The stream outlives ctx briefly so finished handlers can still ack;
	// but while it is still being opened (the broker may be down), ctx
	// ending cancels it at once.
	sctx, cancelStream := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelStream()
	opened := make(chan struct{})
	stopOpening := context.AfterFunc(ctx, func() {
		select {
		case <-opened:
		default:
			cancelStream()
		}
	})
	defer stopOpening()
	callOpts := []grpc.CallOption{grpc.WaitForReady(true)}
	var maxBatch int // 0: the broker sends and reads no batches
	if lim, err := c.broker.GetLimits(sctx, &pb.GetLimitsRequest{}, grpc.WaitForReady(true)); err == nil {
		// Whatever the broker accepted, this worker can receive.
		callOpts = append(callOpts, grpc.MaxCallRecvMsgSize(int(min(lim.MaxDeliveryBytes, math.MaxInt32))))
		maxBatch = int(min(lim.MaxConsumeBatch, math.MaxInt32))
	} else if status.Code(err) != codes.Unimplemented {
		return false, err
	}
	stream, err := c.broker.Consume(sctx, callOpts...)
	if err != nil {
		return false, err
	}
	close(opened)
	s := &session{stream: stream, cfg: cfg, log: c.log}
	sub := &pb.Subscribe{Queue: cfg.Queue, Prefetch: uint32(cfg.Prefetch), ConsumerName: cfg.Name}
	if maxBatch > 1 {
		// Several deliveries to a response when the worker has room for
		// them, and, with several handlers, their acks and nacks gathered
		// into one request.
		sub.MaxBatch = uint32(min(cfg.Prefetch, maxBatch))
		if cfg.Concurrency > 1 {
			s.gather = &gatherer{max: maxBatch}
		}
	}
	if err := s.send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Subscribe{Subscribe: sub}}); err != nil {
		return false, err
	}
	hctx, cancelHandlers := context.WithCancel(ctx)
	defer cancelHandlers()
	// A delivery goes straight to an idle handler when there is one, and
	// otherwise waits in queued, which the broker's credit (Prefetch)
	// keeps from filling, so that the receiving goroutine never waits for
	// a handler: it must go on reading cancel notices and answers.
	direct := make(chan *Delivery)
	queued := make(chan *Delivery, cfg.Prefetch)
	stop := make(chan struct{})
	defer s.forget()
	var wg sync.WaitGroup
	var slot func()
	slot = func() {
		r := &renewer{s: s}
		defer r.stop()
		done := false
		defer func() {
			if !done { // a handler called runtime.Goexit: this slot goes on in a new goroutine
				wg.Go(slot)
			}
		}()
		for {
			select {
			case <-stop:
				done = true
				return
			default:
			}
			select {
			case d := <-direct:
				s.handle(hctx, d, h, r)
			case d := <-queued:
				s.handle(hctx, d, h, r)
			case <-stop:
				done = true
				return
			}
		}
	}
	for range cfg.Concurrency {
		wg.Go(slot)
	}
	recvErr := make(chan error, 1)
	var gotAny atomic.Bool
	dispatch := func(pd *pb.Delivery) {
		d := fromProto(pd)
		s.hold(d)
		if len(queued) == 0 {
			select {
			case direct <- d:
				return
			default:
			}
		}
		s.wait(d)
		select {
		case queued <- d:
		case <-stop:
			// Stopping: the broker takes the job back when the stream closes.
		}
	}
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			if re := resp.GetError(); re != nil {
				cfg.OnRequestError(&RequestError{ID: re.Id, Request: re.Request, Code: codes.Code(re.Code), Message: re.Message, Applied: re.Applied})
				continue
			}
			if cn := resp.GetCancel(); cn != nil {
				s.cancel(cn.Id)
				continue
			}
			if b := resp.GetDeliveries(); b != nil {
				gotAny.Store(true)
				for _, pd := range b.Deliveries {
					dispatch(pd)
				}
				continue
			}
			pd := resp.GetDelivery()
			if pd == nil {
				continue // a kind of response this SDK does not know
			}
			gotAny.Store(true)
			dispatch(pd)
		}
	}()
	select {
	case err = <-recvErr:
		cancelHandlers() // their acks cannot reach the broker any more
		close(stop)
		wg.Wait()
	case <-ctx.Done():
		close(stop)
		wg.Wait() // let running handlers finish and settle their jobs
		s.mu.Lock()
		_ = stream.CloseSend()
		s.mu.Unlock()
		// The broker ends the stream once it has read our last acks.
		t := time.NewTimer(drainGrace)
		select {
		case err = <-recvErr:
		case <-t.C:
			cancelStream()
			err = <-recvErr
		}
		t.Stop()
	}
	return gotAny.Load(), err
}

type session struct {
	mu     sync.Mutex // gRPC allows one Send at a time
	stream grpc.BidiStreamingClient[pb.ConsumeRequest, pb.ConsumeResponse]
	cfg    WorkerConfig
	log    *slog.Logger // nil logs nothing (tests)
	// gather, when set, gathers acks and nacks of handlers that finish
	// close together into one request; nil sends each alone.
	gather *gatherer

	runMu sync.Mutex
	held  map[string]*heldJob // deliveries not yet settled, by id
}

// heldJob is a delivery the session holds: waiting for a handler, or
// running.
type heldJob struct {
	stop      context.CancelCauseFunc // its handler's; nil until it starts
	cancelled bool                    // the broker cancelled it before its handler started
	renew     *time.Timer             // renews its lease while it waits; nil if it did not wait
}

// renewEvery is how often d's lease is renewed; 0 or less for never.
func (s *session) renewEvery(d *Delivery) time.Duration {
	if s.cfg.LeaseExtend != 0 {
		return s.cfg.LeaseExtend
	}
	return d.Lease / 2
}

// wait renews the lease of d, which found no idle handler, until a
// handler takes it: its lease runs from the delivery, and a job that
// waited past it would go back to the queue and run twice. Only a
// delivery that waits pays for a timer of its own.
func (s *session) wait(d *Delivery) {
	every := s.renewEvery(d)
	if every <= 0 {
		return
	}
	s.runMu.Lock()
	defer s.runMu.Unlock()
	j := s.held[d.ID]
	if j == nil || j.stop != nil {
		return
	}
	waiting := func() bool {
		s.runMu.Lock()
		defer s.runMu.Unlock()
		return j.stop == nil && s.held[d.ID] == j
	}
	j.renew = time.AfterFunc(every, func() {
		if s.sendIf(waiting, extendRequest(d)) {
			s.runMu.Lock()
			if j.stop == nil && s.held[d.ID] == j {
				j.renew.Reset(every)
			}
			s.runMu.Unlock()
		}
	})
}

// forget stops renewing the deliveries no handler took, once the session
// ends; the broker takes them back when the stream closes.
func (s *session) forget() {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	for _, j := range s.held {
		if j.renew != nil {
			j.renew.Stop()
		}
	}
	clear(s.held)
}

// hold records d as held before it is handed to a handler, so that a
// cancel notice that arrives before the handler starts is not lost.
func (s *session) hold(d *Delivery) {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	if s.held == nil {
		s.held = map[string]*heldJob{}
	}
	s.held[d.ID] = &heldJob{}
}

// cancel stops the handler of a job the broker cancelled, or marks it so
// that its handler never runs. A notice for a job already settled is
// ignored.
func (s *session) cancel(id string) {
	s.runMu.Lock()
	j := s.held[id]
	var stop context.CancelCauseFunc
	if j != nil {
		j.cancelled = true
		stop = j.stop
	}
	s.runMu.Unlock()
	if stop != nil {
		stop(ErrCancelled)
	}
}

func (s *session) send(req *pb.ConsumeRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stream.Send(req)
}

// sendIf sends req if ok(), deciding and sending under the send lock, and
// reports whether it did. A renewal decides so: a job's settle is sent
// after its renewal stops, so an extend is either sent before the settle
// or, seeing the renewal stopped, not at all; the broker refuses an extend
// of a job it no longer holds.
func (s *session) sendIf(ok func() bool, req *pb.ConsumeRequest) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok() {
		return false
	}
	_ = s.stream.Send(req)
	return true
}

func extendRequest(d *Delivery) *pb.ConsumeRequest {
	return &pb.ConsumeRequest{Request: &pb.ConsumeRequest_Extend{Extend: &pb.Extend{Id: d.ID, Lease: durationpb.New(d.Lease)}}}
}

// handle runs h on d, renews its lease while it runs, and settles it. A
// job the broker cancelled while it waited is settled without running h.
func (s *session) handle(ctx context.Context, d *Delivery, h Handler, r *renewer) {
	jctx, stop := context.WithCancelCause(ctx)
	s.runMu.Lock()
	j := s.held[d.ID]
	if j == nil { // delivered twice (its lease ran out meanwhile) and forgotten at the first settle
		j = &heldJob{}
	}
	j.stop = stop
	if j.renew != nil {
		j.renew.Stop() // r renews it from here
	}
	skip := j.cancelled
	s.runMu.Unlock()
	var err error
	took := time.Microsecond
	returned := false
	defer func() {
		if returned {
			return
		}
		// The handler called runtime.Goexit (t.FailNow, say), which no
		// recover stops: settle the job as a failure on the way out, so
		// that it is retried now rather than when its lease runs out.
		r.stop()
		if s.log != nil {
			s.log.Error("harbinger: handler called runtime.Goexit; the job will be retried", "queue", s.cfg.Queue, "id", d.ID, "job_type", d.JobType)
		}
		s.settle(ctx, jctx, stop, d, j, errGoexit, took)
	}()
	if skip {
		stop(ErrCancelled)
	} else {
		start := time.Now()
		var until time.Time // renew no lease past it
		hctx := context.Context(jctx)
		if t := s.cfg.Timeout; t > 0 {
			until = start.Add(t)
			var cancel context.CancelFunc
			hctx, cancel = context.WithDeadlineCause(jctx, until, ErrTimeout)
			defer cancel()
		}
		every := s.renewEvery(d)
		if every > 0 {
			r.start(d, every, until)
		}
		err = run(hctx, d, h)
		took = max(time.Since(start), time.Microsecond)
		if p, ok := errors.AsType[*panicError](err); ok && s.log != nil {
			// The nack's reason has room for the value, not the stack.
			s.log.Error("harbinger: handler panicked; the job will be retried", "queue", s.cfg.Queue, "id", d.ID,
				"job_type", d.JobType, "panic", p.value, "stack", string(p.stack))
		}
		if every > 0 {
			r.stop()
		}
		if err != nil && errors.Is(context.Cause(hctx), ErrTimeout) {
			err = fmt.Errorf("timed out after %v: %w", s.cfg.Timeout, err)
		}
	}
	returned = true
	s.settle(ctx, jctx, stop, d, j, err, took)
}

// errGoexit is the failure of a handler that called runtime.Goexit.
var errGoexit = errors.New("handler called runtime.Goexit")

// settle forgets d and sends the broker its outcome: an ack when err is
// nil, else the nack err calls for.
func (s *session) settle(ctx, jctx context.Context, stop context.CancelCauseFunc, d *Delivery, j *heldJob, err error, took time.Duration) {
	cancelled := errors.Is(context.Cause(jctx), ErrCancelled)
	s.runMu.Lock()
	if s.held[d.ID] == j {
		delete(s.held, d.ID)
	}
	s.runMu.Unlock()
	stop(nil)
	credit := uint32(1)
	if ctx.Err() != nil {
		credit = 0 // stopping: ask for nothing more
	}
	var nack *pb.Nack
	switch {
	case cancelled:
		// The broker drops it whatever we say; say why, and ask for more.
		nack = &pb.Nack{Id: d.ID, Action: pb.NackAction_NACK_ACTION_DEAD_LETTER, Reason: "cancelled", Credit: credit}
	case err == nil:
		if s.gather != nil {
			s.settleGathered(newAck(d.ID, took, credit), nil)
			return
		}
		_ = s.send(ackRequest(d.ID, took, credit)) // if the stream is gone, the broker redelivers the job
		return
	case errors.Is(err, ErrDeadLetter):
		nack = &pb.Nack{Id: d.ID, Action: pb.NackAction_NACK_ACTION_DEAD_LETTER, Reason: reason(err), Credit: credit}
	case ctx.Err() != nil:
		nack = &pb.Nack{Id: d.ID, Action: pb.NackAction_NACK_ACTION_REQUEUE, Reason: "worker stopping"}
	case s.cfg.RetryBackoff == nil:
		nack = &pb.Nack{Id: d.ID, Action: pb.NackAction_NACK_ACTION_RETRY, Reason: reason(err), Credit: credit}
	default:
		nack = &pb.Nack{Id: d.ID, Action: pb.NackAction_NACK_ACTION_REQUEUE_AFTER,
			Delay: durationpb.New(s.cfg.RetryBackoff(d.Attempt)), Reason: reason(err), Credit: credit}
	}
	if s.gather != nil {
		s.settleGathered(nil, nack)
		return
	}
	_ = s.send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Nack{Nack: nack}})
}

// gatherer holds the acks and nacks waiting to go out together.
type gatherer struct {
	max int // most items in one request (Limits.max_consume_batch)

	mu      sync.Mutex
	acks    []*pb.Ack
	nacks   []*pb.Nack
	sending bool // a handler is sending what is gathered
}

// settleGathered sends an ack or a nack together with those of other
// handlers that finish close together. The first handler to settle while
// nothing is being sent sends for all: it lets the goroutines ready to
// run go first (those that are about to finish their jobs add theirs),
// then sends what has gathered, and again until nothing is left. The
// others return at once. With one handler finishing at a time, that is a
// plain ack or nack a scheduler pass later; with many finishing together,
// one request instead of many, and the broker applies them in one pass.
func (s *session) settleGathered(a *pb.Ack, n *pb.Nack) {
	g := s.gather
	g.mu.Lock()
	if a != nil {
		g.acks = append(g.acks, a)
	}
	if n != nil {
		g.nacks = append(g.nacks, n)
	}
	if g.sending {
		g.mu.Unlock()
		return
	}
	g.sending = true
	g.mu.Unlock()
	runtime.Gosched()
	g.mu.Lock()
	for len(g.acks)+len(g.nacks) > 0 {
		acks, nacks := g.acks, g.nacks
		g.acks, g.nacks = nil, nil // gRPC may still read a request after Send returns
		g.mu.Unlock()
		s.sendSettles(acks, nacks)
		g.mu.Lock()
	}
	g.sending = false
	g.mu.Unlock()
}

// sendSettles sends acks and nacks: one alone as a plain request, more as
// ConsumeBatch requests of at most the broker's batch size. If the stream
// is gone, the broker redelivers the jobs.
func (s *session) sendSettles(acks []*pb.Ack, nacks []*pb.Nack) {
	switch {
	case len(acks) == 1 && len(nacks) == 0:
		_ = s.send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Ack{Ack: acks[0]}})
		return
	case len(acks) == 0 && len(nacks) == 1:
		_ = s.send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Nack{Nack: nacks[0]}})
		return
	}
	limit := s.gather.max
	for len(acks)+len(nacks) > 0 {
		b := &pb.ConsumeBatch{}
		k := min(len(acks), limit)
		b.Acks, acks = acks[:k:k], acks[k:]
		k = min(len(nacks), limit-len(b.Acks))
		b.Nacks, nacks = nacks[:k:k], nacks[k:]
		_ = s.send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Batch{Batch: b}})
	}
}

// renewer renews the lease of the job one handler runs, every so often
// while it runs. Each handler keeps one for all its jobs, so a job costs a
// timer reset, not a timer of its own.
type renewer struct {
	s     *session
	mu    sync.Mutex
	t     *time.Timer
	d     *Delivery // the job whose lease it renews; nil between jobs
	every time.Duration
	until time.Time // no renewal after it (the job's timeout); zero is none
	gen   uint64    // counts jobs, so that a late firing for one does nothing for the next
}

// start renews d's lease every every until stop, or until until if it is
// not zero.
func (r *renewer) start(d *Delivery, every time.Duration, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.d, r.every, r.until = d, every, until
	r.gen++
	if r.t == nil {
		r.t = time.AfterFunc(every, r.fire)
		return
	}
	r.t.Reset(every)
}

// stop ends the renewals of the current job, if any.
func (r *renewer) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.d = nil
	r.gen++
	if r.t != nil {
		r.t.Stop()
	}
}

func (r *renewer) fire() {
	r.mu.Lock()
	d, gen, until := r.d, r.gen, r.until
	r.mu.Unlock()
	if d == nil || (!until.IsZero() && time.Now().After(until)) {
		return // a job past its timeout keeps the lease it has, no more
	}
	current := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.gen == gen
	}
	if !r.s.sendIf(current, extendRequest(d)) {
		return
	}
	r.mu.Lock()
	if r.gen == gen {
		r.t.Reset(r.every)
	}
	r.mu.Unlock()
}

// ack is an ack request and every message in it, so that one allocation
// serves an ack instead of four. Each ack gets a fresh one: gRPC may still
// read a message after Send returns.
type ack struct {
	req   pb.ConsumeRequest
	oneof pb.ConsumeRequest_Ack
	ack   pb.Ack
	took  durationpb.Duration
}

// ackRequest is the request that acks job id after took, asking for
// credit more deliveries.
func ackRequest(id string, took time.Duration, credit uint32) *pb.ConsumeRequest {
	a := new(ack)
	// As durationpb.New computes it.
	a.took.Seconds, a.took.Nanos = int64(took/time.Second), int32(took%time.Second)
	a.ack.Id, a.ack.Duration, a.ack.Credit = id, &a.took, credit
	a.oneof.Ack = &a.ack
	a.req.Request = &a.oneof
	return &a.req
}

// gatheredAck is an ack of a batch with its duration, in one allocation.
type gatheredAck struct {
	ack  pb.Ack
	took durationpb.Duration
}

// newAck is the ack of job id after took, asking for credit more
// deliveries, for a batch.
func newAck(id string, took time.Duration, credit uint32) *pb.Ack {
	a := new(gatheredAck)
	a.took.Seconds, a.took.Nanos = int64(took/time.Second), int32(took%time.Second)
	a.ack.Id, a.ack.Duration, a.ack.Credit = id, &a.took, credit
	return &a.ack
}

func run(ctx context.Context, d *Delivery, h Handler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{value: r, stack: debug.Stack()}
		}
	}()
	return h(ctx, d)
}

// panicError is a handler's panic: its value, which the nack's reason
// carries, and the goroutine's stack, which the worker logs.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.value) }

// Unwrap lets errors.Is see an error the handler panicked with, such as
// one wrapping ErrDeadLetter.
func (e *panicError) Unwrap() error {
	err, _ := e.value.(error)
	return err
}

// maxReason bounds the reason sent with a nack; the broker keeps 1,024
// bytes of it.
const maxReason = 512

// reason is err's text as a nack reason: invalid UTF-8 replaced (a
// protobuf string must be valid, or the whole stream fails) and cut to
// maxReason bytes on a character boundary. It is the rule of the broker's
// internal/text, kept here so that the SDK imports nothing internal.
func reason(err error) string {
	s := err.Error()
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= maxReason {
		return s
	}
	cut := maxReason
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
