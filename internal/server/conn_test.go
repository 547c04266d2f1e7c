package server

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/harbinger-mq/harbinger/internal/broker"
)

// connServer serves a broker with ServerOptions and then extra, and
// returns its address.
func connServer(t *testing.T, extra ...grpc.ServerOption) string {
	t.Helper()
	b, err := broker.New(broker.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(append(ServerOptions(broker.Config{}), extra...)...)
	New(b, quiet).Register(gs)
	done := make(chan struct{})
	go func() { _ = gs.Serve(lis); close(done) }()
	t.Cleanup(func() {
		gs.Stop()
		<-done
		_ = b.Shutdown(t.Context())
	})
	return lis.Addr().String()
}

// h2 is the client side of a raw HTTP/2 connection, as a client that
// ignores what the server asks of it would write it: gRPC's own client
// keeps to the server's limits, so it cannot test that the server
// enforces them.
type h2 struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

// HTTP/2 frame types and flags (RFC 9113, section 6).
const (
	h2Data         = 0x0
	h2Headers      = 0x1
	h2RSTStream    = 0x3
	h2Settings     = 0x4
	h2Ping         = 0x6
	h2GoAway       = 0x7
	h2Continuation = 0x9

	h2EndStream  = 0x1
	h2Ack        = 0x1
	h2EndHeaders = 0x4
)

func dialH2(t *testing.T, addr string) *h2 {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	// A bound on every read, so that a server that fails to answer or to
	// close fails the test instead of hanging it.
	if err := conn.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return &h2{t: t, conn: conn, r: bufio.NewReader(conn)}
}

// handshake sends the client preface and an empty SETTINGS frame.
func (c *h2) handshake() {
	c.t.Helper()
	if _, err := io.WriteString(c.conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
		c.t.Fatal(err)
	}
	c.frame(h2Settings, 0, 0, nil)
}

func (c *h2) frame(typ, flags byte, stream uint32, payload []byte) {
	c.t.Helper()
	if err := c.write(typ, flags, stream, payload); err != nil {
		c.t.Fatal(err)
	}
}

func (c *h2) write(typ, flags byte, stream uint32, payload []byte) error {
	hdr := make([]byte, 9, 9+len(payload))
	hdr[0], hdr[1], hdr[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	hdr[3], hdr[4] = typ, flags
	binary.BigEndian.PutUint32(hdr[5:], stream)
	_, err := c.conn.Write(append(hdr, payload...))
	return err
}

// call sends a unary gRPC call of method on stream 1 with an empty request
// message, carrying the header pad of padBytes, its header block split
// into frames of at most 16 KiB. It returns the error of a write the
// server cut off by closing the connection.
func (c *h2) call(method string, padBytes int) error {
	var block []byte
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", "broker"},
		{"content-type", "application/grpc"}, {"te", "trailers"}, {"x-pad", strings.Repeat("p", padBytes)},
	} {
		block = hpackLiteral(block, f[0], f[1])
	}
	const maxFrame = 16 << 10
	for first := true; first || len(block) > 0; first = false {
		n := min(len(block), maxFrame)
		typ, flags := byte(h2Continuation), byte(0)
		if first {
			typ = h2Headers
		}
		if n == len(block) {
			flags |= h2EndHeaders
		}
		if err := c.write(typ, flags, 1, block[:n]); err != nil {
			return err
		}
		block = block[n:]
	}
	return c.write(h2Data, h2EndStream, 1, []byte{0, 0, 0, 0, 0}) // an empty message, uncompressed
}

// hpackLiteral appends a header field as a literal without indexing and
// with a new name, neither string Huffman-coded (RFC 7541, 6.2.2).
func hpackLiteral(b []byte, name, value string) []byte {
	b = append(b, 0)
	for _, s := range []string{name, value} {
		b = hpackInt(b, 7, len(s))
		b = append(b, s...)
	}
	return b
}

// hpackInt appends n with an n-bit prefix (RFC 7541, 5.1); the prefix's
// other bits are zero.
func hpackInt(b []byte, prefix uint, n int) []byte {
	limit := 1<<prefix - 1
	if n < limit {
		return append(b, byte(n))
	}
	b = append(b, byte(limit))
	for n -= limit; n >= 128; n >>= 7 {
		b = append(b, byte(n%128+128))
	}
	return append(b, byte(n))
}

// next reads the next frame, answering SETTINGS and PINGs as a client
// must; it returns io.EOF once the server has closed the connection.
func (c *h2) next() (typ, flags byte, stream uint32, payload []byte, err error) {
	var hdr [9]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return 0, 0, 0, nil, err
	}
	n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
	typ, flags, stream = hdr[3], hdr[4], binary.BigEndian.Uint32(hdr[5:])&(1<<31-1)
	payload = make([]byte, n)
	if _, err := io.ReadFull(c.r, payload); err != nil {
		return 0, 0, 0, nil, err
	}
	// A write the server cut off shows as the next read's end.
	switch {
	case typ == h2Settings && flags&h2Ack == 0:
		_ = c.write(h2Settings, h2Ack, 0, nil)
	case typ == h2Ping && flags&h2Ack == 0:
		_ = c.write(h2Ping, h2Ack, 0, payload)
	}
	return typ, flags, stream, payload, nil
}

// answer reads until the server answers stream 1: "answered" when it
// took the call (its response headers), "refused" when it reset the
// stream or closed the connection instead.
func (c *h2) answer() string {
	c.t.Helper()
	for {
		typ, _, stream, _, err := c.next()
		switch {
		case errors.Is(err, io.EOF) || isReset(err):
			return "refused"
		case err != nil:
			c.t.Fatalf("waiting for the answer to the call: %v", err)
		case stream == 1 && typ == h2Headers:
			return "answered"
		case stream == 1 && typ == h2RSTStream, typ == h2GoAway:
			return "refused"
		}
	}
}

// A call whose metadata is over the limit is refused before anything reads
// it, whatever the client makes of the server's SETTINGS (the stream is
// reset, or, for a header block far over the limit, the connection
// closed); one under it is answered. Before, gRPC's default let 16 MiB of metadata per call in,
// read whole and kept before any interceptor (the token check among them)
// had looked at the call.
func TestOversizedMetadataRefused(t *testing.T) {
	t.Parallel()
	addr := connServer(t) // ServerOptions alone: the default bound
	for _, tc := range []struct {
		pad  int
		want string
	}{
		{1 << 10, "answered"},
		{DefaultMaxHeaderBytes - 1<<10, "answered"},
		{DefaultMaxHeaderBytes + 1<<10, "refused"},
		{1 << 20, "refused"},
		{8 << 20, "refused"},
	} {
		c := dialH2(t, addr)
		c.handshake()
		if err := c.call("/harbinger.v1.Broker/GetLimits", tc.pad); err != nil && !isReset(err) {
			t.Fatal(err)
		}
		if got := c.answer(); got != tc.want {
			t.Errorf("a call with %d bytes of metadata: %s, want %s", tc.pad, got, tc.want)
		}
	}
}

// A connection that sends nothing is closed once the handshake bound has
// passed, and one that shook hands and then makes no call once it has been
// idle for MaxIdle (a GOAWAY first). Before, gRPC's defaults held a silent
// socket for 120 s, and an idle connection for ever.
func TestSilentConnectionsClosed(t *testing.T) {
	t.Parallel()
	addr := connServer(t, ConnOptions(ConnConfig{HandshakeTimeout: 100 * time.Millisecond, MaxIdle: 200 * time.Millisecond})...)

	silent := dialH2(t, addr) // the server's SETTINGS come, then the end
	if n, err := io.Copy(io.Discard, silent.conn); err != nil && !isReset(err) {
		t.Fatalf("a connection that sent nothing: read %d bytes, then %v; want it closed", n, err)
	}

	idle := dialH2(t, addr)
	idle.handshake()
	goaway := false
	for {
		typ, _, _, _, err := idle.next()
		if err != nil {
			if !errors.Is(err, io.EOF) && !isReset(err) {
				t.Fatalf("an idle connection: %v; want it closed", err)
			}
			break
		}
		goaway = goaway || typ == h2GoAway
	}
	if !goaway {
		t.Error("an idle connection was closed without a GOAWAY")
	}
}

// isReset reports whether err is a connection reset, which a read may
// meet instead of EOF when the server closes with data unread.
func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !errors.Is(err, os.ErrDeadlineExceeded)
}

func TestConnConfigDefaults(t *testing.T) {
	t.Parallel()
	got := ConnConfig{}.WithDefaults()
	want := ConnConfig{HandshakeTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10, MaxIdle: 5 * time.Minute}
	if got != want {
		t.Fatalf("defaults %+v, want %+v", got, want)
	}
	if set := (ConnConfig{HandshakeTimeout: time.Second, MaxHeaderBytes: 1, MaxIdle: time.Hour}); set.WithDefaults() != set {
		t.Fatalf("WithDefaults changed a set config: %+v", set.WithDefaults())
	}
}
