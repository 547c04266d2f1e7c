package client

import (
	"context"
	"sync"

	"google.golang.org/grpc"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
)

// ProducerConfig tunes a Producer.
type ProducerConfig struct {
	// MaxBatch is the most messages sent in one request; default 256.
	MaxBatch int
	// Window is the most batches awaiting the broker's answer; default 16.
	Window int
}

// Producer publishes at a high rate over one PublishStream: messages queued
// by any number of goroutines are gathered into batches, and batches are
// pipelined without a round trip each. If the stream fails, the batches in
// flight fail with its error and the next publish opens a new stream.
type Producer struct {
	c   *Client
	cfg ProducerConfig
	in  chan *pending

	mu     sync.Mutex
	closed bool
	done   chan struct{}
}

type pending struct {
	m    *pb.Message
	done func(id string, err error)
}

type batch struct {
	items []*pending
}

// NewProducer starts a Producer; Close it when done.
func (c *Client) NewProducer(cfg ProducerConfig) *Producer {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 256
	}
	if cfg.Window <= 0 {
		cfg.Window = 16
	}
	p := &Producer{c: c, cfg: cfg, in: make(chan *pending, cfg.MaxBatch*2), done: make(chan struct{})}
	go p.run()
	return p
}

// PublishAsync queues m and calls done with its id or error once the broker
// answers. done runs on the producer's goroutine and must not block. It
// blocks only while the producer's buffer is full, and returns ErrClosed
// after Close.
func (p *Producer) PublishAsync(m *Message, done func(id string, err error)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.in <- &pending{m: m.proto(), done: done}
	return nil
}

// Publish queues m and waits for its id. Many goroutines calling Publish
// share batches.
func (p *Producer) Publish(ctx context.Context, m *Message) (string, error) {
	type result struct {
		id  string
		err error
	}
	ch := make(chan result, 1)
	if err := p.PublishAsync(m, func(id string, err error) { ch <- result{id, err} }); err != nil {
		return "", err
	}
	select {
	case r := <-ch:
		return r.id, r.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// Close sends what is queued, waits for the broker's answers and closes the
// stream.
func (p *Producer) Close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.in)
	}
	p.mu.Unlock()
	<-p.done
	return nil
}

// pstream is one PublishStream with the batches awaiting answers on it.
type pstream struct {
	s        grpc.BidiStreamingClient[pb.PublishRequest, pb.PublishResponse]
	cancel   context.CancelFunc
	inflight chan *batch
	recvDone chan struct{}
}

func (p *Producer) open() (*pstream, error) {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := p.c.broker.PublishStream(ctx, grpc.WaitForReady(true))
	if err != nil {
		cancel()
		return nil, err
	}
	ps := &pstream{s: s, cancel: cancel, inflight: make(chan *batch, p.cfg.Window), recvDone: make(chan struct{})}
	go ps.recv()
	return ps, nil
}

// recv answers batches in order. After an error every later batch fails
// with it too.
func (ps *pstream) recv() {
	defer close(ps.recvDone)
	var failed error
	for b := range ps.inflight {
		if failed == nil {
			resp, err := ps.s.Recv()
			if err == nil && len(resp.Results) != len(b.items) {
				err = errMismatch
			}
			if err != nil {
				failed = err
				ps.cancel()
			} else {
				for i, it := range b.items {
					r := resp.Results[i]
					it.done(r.Id, resultError(r))
				}
				continue
			}
		}
		for _, it := range b.items {
			it.done("", failed)
		}
	}
}

// close ends the stream after every answer has arrived.
func (ps *pstream) close() {
	close(ps.inflight)
	_ = ps.s.CloseSend()
	<-ps.recvDone
	ps.cancel()
}

func (p *Producer) run() {
	defer close(p.done)
	var cur *pstream
	defer func() {
		if cur != nil {
			cur.close()
		}
	}()
	for first := range p.in {
		b := &batch{items: []*pending{first}}
	gather:
		for len(b.items) < p.cfg.MaxBatch {
			select {
			case it, ok := <-p.in:
				if !ok {
					break gather
				}
				b.items = append(b.items, it)
			default:
				break gather
			}
		}
		if cur == nil {
			var err error
			if cur, err = p.open(); err != nil {
				for _, it := range b.items {
					it.done("", err)
				}
				continue
			}
		}
		req := &pb.PublishRequest{Messages: make([]*pb.Message, len(b.items))}
		for i, it := range b.items {
			req.Messages[i] = it.m
		}
		cur.inflight <- b
		if err := cur.s.Send(req); err != nil {
			// The receiver fails this batch and any other still waiting.
			cur.cancel()
			cur.close()
			cur = nil
		}
	}
}

type mismatchError struct{}

func (mismatchError) Error() string {
	return "harbinger: broker answered a batch with the wrong number of ids"
}

var errMismatch = mismatchError{}
