package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"
)

// The bare-tcp arm measures what a message would cost Harbinger's shape of
// queue without gRPC. Its server keeps one slice of waiting messages per
// queue, as the bare gRPC queue does, and speaks the same three steps
// (a publish answered once the message is in line, a delivery pushed to a
// prefetch-1 consumer, an ack that frees it for the next) over plain TCP
// in length-prefixed frames, answering the way Redis does: one reply per
// request, written out when no further request is waiting in the read
// buffer. There is no HTTP/2 framing, flow control or per-stream goroutine;
// the Go runtime, the loopback and the process boundary are the same. It is
// a measurement of what a framed protocol of Harbinger's own would lift,
// not a broker: no scheduling, predictor, leases, auth or store.

// Frame kinds. A frame is its kind, a 4-byte big-endian length and that
// many bytes.
const (
	tcpUse      = 'U' // client: publish to the queue named in the frame from now on
	tcpPublish  = 'P' // client: a message's body; answered tcpOK
	tcpOK       = 'O' // server: the publish is in line
	tcpConsume  = 'C' // client: consume the queue named (prefetch 1)
	tcpDelivery = 'D' // server: an 8-byte delivery id, then the body
	tcpAck      = 'A' // client: the 8-byte id of the delivery done
)

// maxTCPFrame bounds a frame's length: a benchmark body is far smaller.
const maxTCPFrame = 16 << 20

func writeFrame(w *bufio.Writer, kind byte, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	var hdr [5]byte
	hdr[0] = kind
	binary.BigEndian.PutUint32(hdr[1:], uint32(n))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	for _, p := range parts {
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	return nil
}

// readFrame reads one frame into buf (grown as needed) and returns its
// kind and body, which aliases buf.
func readFrame(r *bufio.Reader, buf []byte) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxTCPFrame {
		return 0, nil, fmt.Errorf("bench: a frame of %d bytes, over %d", n, maxTCPFrame)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	_, err := io.ReadFull(r, buf)
	return hdr[0], buf, err
}

// BareTCPServer is the bare-tcp arm's server.
type BareTCPServer struct {
	mu     sync.Mutex
	queues map[string]*tcpQueue
}

type tcpQueue struct {
	msgs [][]byte   // waiting, oldest first from head
	head int        // msgs[:head] are delivered
	idle []*tcpConn // consumers with nothing in flight, waiting for a message
}

type tcpConn struct {
	s  *BareTCPServer
	c  net.Conn
	r  *bufio.Reader
	mu sync.Mutex // guards w: a publisher's goroutine may write a delivery
	w  *bufio.Writer

	// Guarded by s.mu.
	q      *tcpQueue
	nextID uint64
	held   []byte // the delivery in flight, nil when none
	heldID uint64
}

// ServeBareTCP serves a BareTCPServer on addr until ctx ends; ready, if not
// nil, is called with the address once it listens.
func ServeBareTCP(ctx context.Context, addr string, ready func(addr string)) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(lis.Addr().String())
	}
	s := &BareTCPServer{queues: map[string]*tcpQueue{}}
	stop := context.AfterFunc(ctx, func() { lis.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := lis.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Go(func() {
			closeOnDone := context.AfterFunc(ctx, func() { c.Close() })
			defer closeOnDone()
			s.serve(c)
		})
	}
}

func (s *BareTCPServer) queue(name string) *tcpQueue {
	q := s.queues[name]
	if q == nil {
		q = &tcpQueue{}
		s.queues[name] = q
	}
	return q
}

func (s *BareTCPServer) serve(nc net.Conn) {
	c := &tcpConn{s: s, c: nc, r: bufio.NewReaderSize(nc, 64<<10), w: bufio.NewWriterSize(nc, 64<<10)}
	defer c.close()
	var pub *tcpQueue
	var buf []byte
	for {
		kind, body, err := readFrame(c.r, buf)
		if err != nil {
			return
		}
		buf = body[:0]
		switch kind {
		case tcpUse:
			s.mu.Lock()
			pub = s.queue(string(body))
			s.mu.Unlock()
		case tcpPublish:
			if pub == nil {
				return
			}
			s.publish(pub, append([]byte(nil), body...), false)
			if err := c.reply(tcpOK); err != nil {
				return
			}
		case tcpConsume:
			s.mu.Lock()
			c.q = s.queue(string(body))
			s.mu.Unlock()
			if err := c.next(); err != nil {
				return
			}
		case tcpAck:
			s.mu.Lock()
			if len(body) == 8 && c.held != nil && binary.BigEndian.Uint64(body) == c.heldID {
				c.held = nil
			}
			s.mu.Unlock()
			if err := c.next(); err != nil {
				return
			}
		default:
			return
		}
	}
}

// reply writes an empty frame of kind, flushed once no further request
// waits in the read buffer (a pipelining client gets its replies together).
func (c *tcpConn) reply(kind byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := writeFrame(c.w, kind); err != nil {
		return err
	}
	if c.r.Buffered() == 0 {
		return c.w.Flush()
	}
	return nil
}

// publish puts body in line, or hands it straight to an idle consumer;
// front puts it first in line (a delivery given back).
func (s *BareTCPServer) publish(q *tcpQueue, body []byte, front bool) {
	s.mu.Lock()
	if len(q.idle) == 0 {
		if front {
			q.msgs = append(q.msgs[:q.head], append([][]byte{body}, q.msgs[q.head:]...)...)
		} else {
			q.msgs = append(q.msgs, body)
		}
		s.mu.Unlock()
		return
	}
	c := q.idle[0]
	q.idle = q.idle[1:]
	id := c.take(body)
	s.mu.Unlock()
	_ = c.deliver(id, body) // a failed write ends that consumer's connection
}

// take makes body c's delivery in flight; s.mu is held.
func (c *tcpConn) take(body []byte) uint64 {
	c.nextID++
	c.held, c.heldID = body, c.nextID
	return c.nextID
}

// next gives c its next delivery if it has none in flight and one waits,
// or marks it idle.
func (c *tcpConn) next() error {
	s := c.s
	s.mu.Lock()
	q := c.q
	if q == nil || c.held != nil {
		s.mu.Unlock()
		return nil
	}
	if q.head == len(q.msgs) {
		q.idle = append(q.idle, c)
		s.mu.Unlock()
		return nil
	}
	body := q.msgs[q.head]
	q.msgs[q.head] = nil
	q.head++
	if q.head == len(q.msgs) {
		q.msgs, q.head = q.msgs[:0], 0
	}
	id := c.take(body)
	s.mu.Unlock()
	return c.deliver(id, body)
}

func (c *tcpConn) deliver(id uint64, body []byte) error {
	var idb [8]byte
	binary.BigEndian.PutUint64(idb[:], id)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := writeFrame(c.w, tcpDelivery, idb[:], body); err != nil {
		return err
	}
	return c.w.Flush()
}

// close ends c: a consumer's delivery in flight goes back to the front of
// its queue (or to an idle consumer), as a broker would redeliver it.
func (c *tcpConn) close() {
	c.c.Close()
	s := c.s
	s.mu.Lock()
	q, held := c.q, c.held
	if q != nil {
		for i, o := range q.idle {
			if o == c {
				q.idle = append(q.idle[:i], q.idle[i+1:]...)
				break
			}
		}
	}
	c.held = nil
	s.mu.Unlock()
	if held != nil {
		s.publish(q, held, true)
	}
}

// BareTCPCommand is the hidden `harbinger-lab bench` subcommand that serves a
// BareTCPServer; it prints bareTCPListening and the address once it listens.
const BareTCPCommand = "bare-tcp-server"

const bareTCPListening = "bare-tcp-server: listening on "

// BareTCPReady is the line the bare TCP server prints once it listens on
// addr.
func BareTCPReady(addr string) string { return bareTCPListening + addr }

// BareTCPDriver runs the bare-tcp arm: a fresh BareTCPServer process (the
// harbinger binary's hidden subcommand) per queue.
type BareTCPDriver struct {
	bin string
}

// NewBareTCP returns a driver that starts bin as the server.
func NewBareTCP(bin string) *BareTCPDriver { return &BareTCPDriver{bin: bin} }

// Broker implements Driver.
func (d *BareTCPDriver) Broker() string { return BareTCP }

// Version implements Driver.
func (d *BareTCPDriver) Version(context.Context) string {
	return "bare TCP queue server from this build, its own process"
}

// Close implements Driver.
func (d *BareTCPDriver) Close() error { return nil }

// Setup implements Driver: only FIFO, the bare queue's one order.
func (d *BareTCPDriver) Setup(ctx context.Context, spec QueueSpec) (Queue, error) {
	if spec.Policy != PolicyFIFO {
		return nil, fmt.Errorf("%w: bare-tcp %s", ErrPolicy, spec.Policy)
	}
	p, err := StartProcess(ctx, BareTCP, d.bin, []string{"bench", BareTCPCommand, "--addr", "127.0.0.1:0"},
		func(line string) (string, bool) { return strings.CutPrefix(line, bareTCPListening) }, nil)
	if err != nil {
		return nil, err
	}
	return &BareTCPQueue{p: p, name: spec.Name}, nil
}

// BareTCPQueue is one run's queue on its own bare TCP server.
type BareTCPQueue struct {
	p    *BrokerProcess
	name string
}

// BrokerPID implements brokerPID.
func (q *BareTCPQueue) BrokerPID() int { return q.p.PID() }

// Teardown implements Queue: stops the queue's server.
func (q *BareTCPQueue) Teardown(context.Context) error { return q.p.Stop() }

type tcpClient struct {
	c   net.Conn
	r   *bufio.Reader
	w   *bufio.Writer
	buf []byte
}

func (q *BareTCPQueue) dial(ctx context.Context) (*tcpClient, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", q.p.Addr())
	if err != nil {
		return nil, err
	}
	return &tcpClient{c: c, r: bufio.NewReaderSize(c, 64<<10), w: bufio.NewWriterSize(c, 64<<10)}, nil
}

// send writes one frame and flushes it.
func (t *tcpClient) send(kind byte, parts ...[]byte) error {
	if err := writeFrame(t.w, kind, parts...); err != nil {
		return err
	}
	return t.w.Flush()
}

// NewPublisher implements Queue: a connection per producer, each publish
// waiting for its answer (as the Redis arm's LPUSH does).
func (q *BareTCPQueue) NewPublisher(ctx context.Context) (Publisher, error) {
	t, err := q.dial(ctx)
	if err != nil {
		return nil, err
	}
	if err := writeFrame(t.w, tcpUse, []byte(q.name)); err != nil {
		t.c.Close()
		return nil, err
	}
	return &tcpPublisher{t: t}, nil
}

type tcpPublisher struct{ t *tcpClient }

func (p *tcpPublisher) Publish(ctx context.Context, m Message) error {
	if dl, ok := ctx.Deadline(); ok {
		p.t.c.SetDeadline(dl)
	} else {
		p.t.c.SetDeadline(time.Time{})
	}
	if err := p.t.send(tcpPublish, m.Body); err != nil {
		return err
	}
	kind, _, err := readFrame(p.t.r, p.t.buf)
	if err == nil && kind != tcpOK {
		err = fmt.Errorf("bench: bare-tcp answered a publish with frame %q", kind)
	}
	return err
}

func (p *tcpPublisher) Close() error { return p.t.c.Close() }

// Work implements Queue: one connection, prefetch 1; the ack of each
// delivery frees the worker for the next, which the server pushes.
func (q *BareTCPQueue) Work(ctx context.Context, worker int, ready func(), h Handler) error {
	t, err := q.dial(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer t.c.Close()
	stop := context.AfterFunc(ctx, func() { t.c.Close() })
	defer stop()
	if err := t.send(tcpConsume, []byte(q.name)); err != nil {
		return nil
	}
	if ready != nil {
		ready()
	}
	for {
		kind, body, err := readFrame(t.r, t.buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("bench: bare-tcp worker %d: %w", worker, err)
		}
		t.buf = body[:0]
		if kind != tcpDelivery || len(body) < 8 {
			return fmt.Errorf("bench: bare-tcp sent a worker frame %q of %d bytes", kind, len(body))
		}
		id := body[:8:8]
		if h(ctx, body[8:]) != nil || ctx.Err() != nil {
			// A failure or a stop: the connection ends and the server
			// puts the delivery back in line.
			return nil
		}
		if err := t.send(tcpAck, id); err != nil {
			return nil
		}
	}
}
