package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
)

// Defaults of ProducerConfig.
const (
	DefaultMaxBatch      = 256
	DefaultMaxBatchBytes = 1 << 20
	DefaultWindow        = 16
	DefaultCloseTimeout  = 5 * time.Second
)

// fallbackRequestBytes is the request limit assumed of a broker too old to
// answer GetLimits: gRPC's default receive limit.
const fallbackRequestBytes = 4 << 20

// requestSlack is kept free below the broker's request limit, so that a
// request cut to fit it is never refused by a few bytes of framing.
const requestSlack = 16 << 10

// ProducerConfig tunes a Producer. Zero fields take their defaults.
type ProducerConfig struct {
	// MaxBatch is the most messages sent in one request; default
	// DefaultMaxBatch, and never more than the broker allows.
	MaxBatch int
	// MaxBatchBytes is the encoded size a request is cut at; default
	// DefaultMaxBatchBytes, and never more than the broker reads in one
	// request (less a margin). A message larger than it goes alone.
	MaxBatchBytes int
	// Window is the most batches awaiting the broker's answer; default
	// DefaultWindow.
	Window int
	// CloseTimeout is how long Close waits for a broker it cannot reach
	// before failing what is still queued; default DefaultCloseTimeout.
	CloseTimeout time.Duration
	// MaxPending, when above 0, is the most messages published and not
	// yet answered: queued, or sent and awaiting the broker's answer (on
	// a durable broker, the fsync that covers them). A publish that
	// finds MaxPending messages unanswered waits for an answer to free a
	// place, or, with FailFast, fails. 0 bounds them only by the buffer
	// (2 x MaxBatch messages not yet sent) and Window.
	MaxPending int
	// FailFast makes a publish that finds the producer full (MaxPending
	// messages unanswered, or its buffer full) return ErrFull at once
	// instead of waiting for room. The message is not queued, and its
	// callback never runs: nothing is dropped without the caller knowing.
	FailFast bool
}

// ErrFull is returned by a Producer with FailFast set when it holds
// MaxPending unanswered messages, or a full buffer; the message was not
// queued. Publish it again once answers have come back.
var ErrFull = errors.New("harbinger: producer full: too many messages await the broker's answer")

// WithDefaults returns c with every zero or negative field set to its
// default.
func (c ProducerConfig) WithDefaults() ProducerConfig {
	if c.MaxBatch <= 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.CloseTimeout <= 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	return c
}

// Producer publishes at a high rate over one PublishStream: messages queued
// by any number of goroutines are gathered into batches, cut by count and
// by encoded size to fit the broker's request limit, and batches are
// pipelined without a round trip each. Each message gets its own outcome:
// one the broker refuses, or one too large for any request, fails alone.
// If the stream fails, the batches in flight fail with its error and the
// next batch opens a new stream; a batch the failed stream never took is
// sent again on the new one. While the broker is unreachable, batches wait
// for it (see Close for how long Close waits).
type Producer struct {
	c   *Client
	cfg ProducerConfig
	in  chan *pending

	// mu is held for reading by PublishAsync and for writing by Close, so
	// that nothing is sent on in after it is closed.
	mu        sync.RWMutex
	closed    bool
	closing   chan struct{} // closed when Close is called
	closeOnce sync.Once
	// room holds a token per unanswered message when MaxPending is set;
	// nil otherwise.
	room chan struct{}
	// reach ends CloseTimeout after Close is called: from then on, opening
	// a stream gives up instead of waiting for the broker.
	reach   context.Context
	giveUp  context.CancelFunc
	giveUpT *time.Timer
	done    chan struct{}

	held []*pending // taken from in (or sent back) but not yet batched; run's alone
}

type pending struct {
	m    *pb.Message
	size int   // bytes the message adds to a PublishRequest
	err  error // why the message cannot be sent at all
	// resent marks a message whose stream ended before it went out; it is
	// sent again once, on a new stream.
	resent bool
	done   func(Result)
}

// fail reports that the message was not stored, and why.
func (it *pending) fail(err error) { it.done(Result{Err: err}) }

type batch struct {
	items []*pending
}

// NewProducer starts a Producer; Close it when done.
func (c *Client) NewProducer(cfg ProducerConfig) *Producer {
	cfg = cfg.WithDefaults()
	reach, giveUp := context.WithCancel(context.Background())
	p := &Producer{
		c: c, cfg: cfg, in: make(chan *pending, max(cfg.MaxBatch*2, cfg.MaxPending)),
		closing: make(chan struct{}), reach: reach, giveUp: giveUp, done: make(chan struct{}),
	}
	if cfg.MaxPending > 0 {
		// The buffer holds MaxPending, so only room is ever waited for.
		p.room = make(chan struct{}, cfg.MaxPending)
	}
	go p.run()
	return p
}

// PublishAsync queues m and calls done with its id, or with its error as
// a gRPC status error, once the broker answers (or, for a message no
// request can carry, at once with InvalidArgument). A duplicate of a
// unique job (Message.UniqueKey) gets the first job's id and no error,
// like a new one; PublishAsyncResult tells them apart. done runs on one
// of the producer's goroutines, possibly while another message's done
// runs, and must not block; m must not change until it has run. To retry
// a failed message from done, publish it from a goroutine of its own: a
// publish from inside done waits for room in the buffer that done's own
// goroutine empties.
// PublishAsync blocks only while the producer's buffer is full, or it
// holds ProducerConfig.MaxPending unanswered messages (with FailFast it
// returns ErrFull instead), and returns ErrClosed after Close.
func (p *Producer) PublishAsync(m *Message, done func(id string, err error)) error {
	if done == nil {
		return p.PublishAsyncResult(m, nil)
	}
	return p.PublishAsyncResult(m, func(r Result) { done(r.ID, r.Err) })
}

// PublishAsyncResult is PublishAsync with the message's whole Result, as
// PublishEach gives it: a duplicate of a unique job has Duplicate set and
// the id of the job that holds the key, and nothing was stored for it.
func (p *Producer) PublishAsyncResult(m *Message, done func(Result)) error {
	return p.enqueue(context.Background(), m, done)
}

// enqueue queues m with done, waiting for room in the buffer while ctx
// allows. If it returns an error, m was not queued and done never runs.
func (p *Producer) enqueue(ctx context.Context, m *Message, done func(Result)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if done == nil {
		done = func(Result) {}
	}
	it := &pending{m: m.proto(), done: done}
	it.err = checkUTF8(it.m)
	it.size = messageSize(it.m)
	if p.room != nil {
		if err := p.takeRoom(ctx); err != nil {
			return err
		}
		// The message's answer, whatever it is, frees its place.
		it.done = func(r Result) {
			<-p.room
			done(r)
		}
	}
	err := p.put(ctx, it)
	if err != nil && p.room != nil {
		<-p.room
	}
	return err
}

// takeRoom takes a place for one more unanswered message, waiting while
// ctx allows unless FailFast.
func (p *Producer) takeRoom(ctx context.Context) error {
	select {
	case p.room <- struct{}{}:
		return nil
	default:
	}
	if p.cfg.FailFast {
		return ErrFull
	}
	select {
	case p.room <- struct{}{}:
		return nil
	case <-p.closing:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// put queues it for the run loop, waiting for room in the buffer while ctx
// allows unless FailFast.
func (p *Producer) put(ctx context.Context, it *pending) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	select {
	case p.in <- it:
		return nil
	default:
	}
	if p.cfg.FailFast {
		return ErrFull
	}
	select {
	case p.in <- it:
		return nil
	case <-p.closing:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checkUTF8 refuses a message whose strings are not valid UTF-8: it cannot
// be encoded, and a send that fails to encode ends the whole stream.
func checkUTF8(m *pb.Message) error {
	bad := func(what string) error {
		return status.Errorf(codes.InvalidArgument, "harbinger: message %s is not valid UTF-8; not sent", what)
	}
	for _, f := range [...]struct{ name, v string }{{"queue", m.Queue}, {"producer", m.Producer}, {"job type", m.JobType}, {"unique key", m.UniqueKey}} {
		if !utf8.ValidString(f.v) {
			return bad(f.name)
		}
	}
	for k, v := range m.Headers {
		if !utf8.ValidString(k) {
			return bad("header name")
		}
		if !utf8.ValidString(v) {
			return bad(fmt.Sprintf("header %q", k))
		}
	}
	return nil
}

// Publish queues m and waits for its id. Many goroutines calling Publish
// share batches. A duplicate of a unique job returns the first job's id
// and no error; PublishResult tells it from a new job, and says what ctx
// ending means for m.
func (p *Producer) Publish(ctx context.Context, m *Message) (string, error) {
	r, err := p.PublishResult(ctx, m)
	if err != nil {
		return "", err
	}
	return r.ID, r.Err
}

// PublishResult queues m and waits for its Result, as PublishEach gives
// it. Its error is for the call (ctx ended, the producer closed); a
// message the broker refused has its reason in Result.Err, and a
// duplicate of a unique job has Duplicate set. If ctx ends before m is
// queued (the buffer is full while the broker is slow or unreachable),
// m is not sent; once queued, m is sent even if ctx then ends, and the
// call returns ctx's error without waiting for its Result.
func (p *Producer) PublishResult(ctx context.Context, m *Message) (Result, error) {
	ch := make(chan Result, 1)
	if err := p.enqueue(ctx, m, func(r Result) { ch <- r }); err != nil {
		return Result{}, err
	}
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// Close stops taking messages, sends what is queued, waits for the
// broker's answers and closes the stream; every queued message's done has
// run when it returns. If the broker cannot be reached (no stream opens)
// within CloseTimeout of the call, the messages still queued fail with an
// Unavailable error instead, so a broker that stays down cannot make Close
// hang. Answers on a stream already open are waited for without a bound:
// a broker that is up answers them or ends the stream, and a dead
// connection ends it once gRPC notices (see grpc.WithKeepaliveParams for
// networks that drop packets silently).
func (p *Producer) Close() error {
	p.closeOnce.Do(func() {
		close(p.closing) // wakes PublishAsync calls blocked on a full buffer
		p.giveUpT = time.AfterFunc(p.cfg.CloseTimeout, p.giveUp)
		p.mu.Lock()
		p.closed = true
		close(p.in)
		p.mu.Unlock()
	})
	<-p.done
	p.giveUpT.Stop()
	p.giveUp()
	return nil
}

// limits are the sizes batches are cut to on one stream.
type limits struct {
	count  int    // most messages in one request
	target int    // encoded bytes a batch is cut at
	hard   int    // most encoded bytes of one request; no message over it can be sent
	broker uint64 // the broker's request limit, for error messages; 0 if unknown
}

// fetchLimits asks the broker for its request limits and derives the cut
// from them and a batch's most messages and bytes.
func (c *Client) fetchLimits(ctx context.Context, maxBatch, maxBatchBytes int) (limits, error) {
	l := limits{count: maxBatch}
	req := uint64(fallbackRequestBytes)
	got, err := c.broker.GetLimits(ctx, &pb.GetLimitsRequest{}, grpc.WaitForReady(true))
	switch {
	case err == nil:
		if got.MaxRequestBytes > 0 {
			req = min(got.MaxRequestBytes, math.MaxInt32)
			l.broker = got.MaxRequestBytes
		}
		if got.MaxBatch > 0 {
			l.count = min(l.count, int(got.MaxBatch))
		}
	case status.Code(err) == codes.Unimplemented:
		// A broker older than GetLimits reads gRPC's default.
	default:
		return limits{}, err
	}
	l.hard = max(int(req)-requestSlack, int(req)/2)
	l.target = min(maxBatchBytes, l.hard)
	return l, nil
}

// messageSize is the bytes m adds to a PublishRequest.
func messageSize(m *pb.Message) int {
	return protowire.SizeTag(1) + protowire.SizeBytes(proto.Size(m))
}

// tooLarge is the error of a message no request can carry.
func (l limits) tooLarge(size int) error {
	limit := "gRPC's default request limit, as the broker does not report its own"
	if l.broker > 0 {
		limit = fmt.Sprintf("the broker's request limit of %d bytes", l.broker)
	}
	return status.Errorf(codes.InvalidArgument,
		"harbinger: message encodes to %d bytes, more than one request may carry (%d bytes, under %s); not sent: store the body elsewhere and publish a reference, or raise the broker's max payload",
		size, l.hard, limit)
}

// cut splits the messages of ms at idx, in order, into requests of at
// most l.count messages and, unless a message alone is larger, l.target
// bytes. A message no request can carry is answered in out instead.
func (l limits) cut(ms []*pb.Message, idx []int, out []*pb.PublishResult) [][]int {
	var parts [][]int
	var cur []int
	bytes := 0
	for _, i := range idx {
		size := messageSize(ms[i])
		if size > l.hard {
			out[i] = refused(l.tooLarge(size))
			continue
		}
		if len(cur) > 0 && (len(cur) == l.count || bytes+size > l.target) {
			parts, cur, bytes = append(parts, cur), nil, 0
		}
		cur = append(cur, i)
		bytes += size
	}
	return append(parts, cur)
}

// unreachable is the error of a message that Close gave up on: err is why
// the last attempt to reach the broker ended.
func (p *Producer) unreachable(err error) error {
	return status.Errorf(codes.Unavailable,
		"harbinger: producer closed while the broker was unreachable (gave up after %v); message not sent: %s",
		p.cfg.CloseTimeout, status.Convert(err).Message())
}

// pstream is one PublishStream with the batches awaiting answers on it.
type pstream struct {
	s        grpc.BidiStreamingClient[pb.PublishRequest, pb.PublishResponse]
	cancel   context.CancelFunc
	lim      limits
	slots    chan struct{} // one per batch awaiting its answer: the window
	inflight chan *batch   // in send order; never fuller than slots
	recvDone chan struct{}
	broken   chan struct{} // closed when recv saw the stream fail
	err      error         // the stream's failure; set by recv before broken closes
}

// open opens a stream and learns the broker's limits. It waits for the
// broker as long as it takes, or, once Close is called, up to
// CloseTimeout. Nothing is published yet, so a connection that breaks
// meanwhile (the broker restarting) is simply tried again.
func (p *Producer) open() (*pstream, error) {
	bo := newBackoff(time.Second)
	for {
		ps, err := p.tryOpen()
		if err == nil || status.Code(err) != codes.Unavailable || p.reach.Err() != nil {
			return ps, err
		}
		if !pause(p.reach.Done(), bo.next()) {
			return nil, p.unreachable(err)
		}
	}
}

func (p *Producer) tryOpen() (*pstream, error) {
	if err := p.reach.Err(); err != nil {
		return nil, p.unreachable(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopWatch := context.AfterFunc(p.reach, cancel)
	lim, err := p.c.fetchLimits(ctx, p.cfg.MaxBatch, p.cfg.MaxBatchBytes)
	var s grpc.BidiStreamingClient[pb.PublishRequest, pb.PublishResponse]
	if err == nil {
		s, err = p.c.broker.PublishStream(ctx, grpc.WaitForReady(true))
	}
	// Once the stream is open the deadline no longer applies: answers are
	// waited for. A false stop means the deadline already cancelled ctx.
	if !stopWatch() {
		if err == nil {
			err = ctx.Err()
		}
		cancel()
		return nil, p.unreachable(err)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	ps := &pstream{
		s: s, cancel: cancel, lim: lim,
		slots: make(chan struct{}, p.cfg.Window), inflight: make(chan *batch, p.cfg.Window),
		recvDone: make(chan struct{}), broken: make(chan struct{}),
	}
	go ps.recv()
	return ps, nil
}

// recv answers batches in order. It waits for the broker's next answer
// before it takes the batch it belongs to (send hands a batch over right
// after sending it), so that an answer wakes it once rather than the
// batch and then its answer. After an error every later batch fails with
// it too.
func (ps *pstream) recv() {
	defer close(ps.recvDone)
	for {
		resp, err := ps.s.Recv()
		b, ok := <-ps.inflight
		if !ok {
			// Closed with nothing awaiting an answer: the stream ended
			// (Close, or abandon after a failed send).
			if err == nil {
				err = errMismatch // an answer to no batch
			}
			ps.fail(err)
			return
		}
		if err == nil && len(resp.Results) != len(b.items) {
			err = errMismatch
		}
		if err != nil {
			ps.fail(err)
			for _, it := range b.items {
				it.fail(ps.err)
			}
			<-ps.slots
			break
		}
		for i, it := range b.items {
			r := resp.Results[i]
			it.done(resultOf(r))
		}
		<-ps.slots
	}
	for b := range ps.inflight {
		for _, it := range b.items {
			it.fail(ps.err)
		}
		<-ps.slots
	}
}

// fail records the stream's failure; only the first counts.
func (ps *pstream) fail(err error) {
	if ps.err != nil {
		return
	}
	ps.err = err
	close(ps.broken)
	ps.cancel()
}

// isBroken reports whether recv has seen the stream fail.
func (ps *pstream) isBroken() bool {
	select {
	case <-ps.broken:
		return true
	default:
		return false
	}
}

// send sends b and hands it to recv; the caller holds a place in the
// window for it (ps.slots).
func (ps *pstream) send(b *batch) error {
	req := &pb.PublishRequest{Messages: make([]*pb.Message, len(b.items))}
	for i, it := range b.items {
		req.Messages[i] = it.m
	}
	if err := ps.s.Send(req); err != nil {
		<-ps.slots
		return err
	}
	ps.inflight <- b
	return nil
}

// close ends the stream after every answer has arrived.
func (ps *pstream) close() {
	close(ps.inflight)
	_ = ps.s.CloseSend()
	<-ps.recvDone
	ps.cancel()
}

// abandon ends a stream whose Send failed with sendErr, after recv has
// answered the batches already sent, and returns the stream's error.
func (ps *pstream) abandon(sendErr error) error {
	close(ps.inflight)
	<-ps.recvDone
	err := ps.err
	if err == nil && errors.Is(sendErr, io.EOF) {
		// The stream ended; its status is what Recv returns (recv is done).
		if _, err = ps.s.Recv(); err == nil || errors.Is(err, io.EOF) {
			err = status.Error(codes.Unavailable, "harbinger: the broker ended the publish stream")
		}
	}
	if err == nil {
		err = sendErr
	}
	ps.cancel()
	return err
}

// fill makes sure held has an item, taking one from in if needed; block
// says whether to wait for one. It reports false when there is none.
func (p *Producer) fill(block bool) bool {
	if len(p.held) > 0 {
		return true
	}
	var it *pending
	var ok bool
	if block {
		it, ok = <-p.in
	} else {
		select {
		case it, ok = <-p.in:
		default:
		}
	}
	if !ok {
		return false
	}
	p.held = append(p.held, it)
	return true
}

func (p *Producer) take() *pending {
	it := p.held[0]
	p.held[0] = nil
	p.held = p.held[1:]
	return it
}

func (p *Producer) run() {
	defer close(p.done)
	var cur *pstream
	defer func() {
		if cur != nil {
			cur.close()
		}
	}()
	for p.fill(true) {
		if it := p.held[0]; it.err != nil {
			p.take().fail(it.err)
			continue
		}
		if cur != nil && cur.isBroken() {
			cur.close() // its batches are answered; the next goes on a new stream
			cur = nil
		}
		if cur == nil {
			var err error
			if cur, err = p.open(); err != nil {
				p.take().fail(err)
				continue
			}
		}
		// A place in the window first, then the batch: messages queued
		// while the window is full go out together in the next request.
		cur.slots <- struct{}{}
		if len(cur.slots) > 1 {
			// Batches are awaiting answers, so this one would wait behind
			// them anyway: let the goroutines ready to run go first, so
			// that publishers woken by the last answer add theirs to it.
			// With nothing in flight (a publisher waiting for each answer)
			// the batch goes at once.
			runtime.Gosched()
		}
		b := p.gather(cur.lim)
		if len(b.items) == 0 {
			<-cur.slots
			continue
		}
		sendErr := cur.send(b)
		if sendErr == nil {
			continue
		}
		err := cur.abandon(sendErr)
		cur = nil
		// A stream that had ended before this batch went out took none of
		// it (gRPC says io.EOF), so it is safe to send it again, once, on a
		// new stream.
		var again []*pending
		for _, it := range b.items {
			if !errors.Is(sendErr, io.EOF) || it.resent {
				it.fail(err)
				continue
			}
			it.resent = true
			again = append(again, it)
		}
		p.held = append(again, p.held...)
	}
}

// gather takes the next batch from held and what in holds now: at most
// lim.count messages and, unless its first message alone is larger,
// lim.target bytes. Messages that cannot be sent at all fail here, alone.
func (p *Producer) gather(lim limits) *batch {
	b := &batch{}
	bytes := 0
	for len(b.items) < lim.count && p.fill(false) {
		it := p.held[0]
		if it.err != nil {
			p.take().fail(it.err)
			continue
		}
		if it.size > lim.hard {
			p.take().fail(lim.tooLarge(it.size))
			continue
		}
		if len(b.items) > 0 && bytes+it.size > lim.target {
			break // it opens the next batch
		}
		b.items = append(b.items, p.take())
		bytes += it.size
	}
	return b
}

type mismatchError struct{}

func (mismatchError) Error() string {
	return "harbinger: broker answered a batch with the wrong number of ids"
}

var errMismatch = mismatchError{}
