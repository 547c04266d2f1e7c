package server

import (
	"time"

	"github.com/harbinger-mq/harbinger/internal/history"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
)

// historyChunk is the most bytes of a history file one message carries,
// well under any gRPC message limit.
const historyChunk = 256 << 10

// ExportHistory streams the queue's history file in chunks.
func (a *adminServer) ExportHistory(req *pb.ExportHistoryRequest, stream pb.Admin_ExportHistoryServer) error {
	var since time.Time
	if w := req.GetWindow(); w != nil {
		if err := w.CheckValid(); err != nil || w.AsDuration() < 0 {
			return invalidArg("window must be a positive duration or unset, got %v", w)
		}
		if d := w.AsDuration(); d > 0 {
			since = a.s.b.Now().Add(-d)
		}
	}
	h, es, err := a.s.b.History(req.GetQueue(), since)
	if err != nil {
		return toStatus(err)
	}
	cw := &chunkWriter{send: func(p []byte) error { return stream.Send(&pb.HistoryChunk{Data: p}) }}
	if err := history.Encode(cw, h, es); err != nil {
		return toStatus(err)
	}
	return cw.flush()
}

// chunkWriter sends what is written to it in chunks of historyChunk bytes.
type chunkWriter struct {
	buf  []byte
	send func([]byte) error
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), historyChunk-len(c.buf))
		c.buf = append(c.buf, p[:k]...)
		p = p[k:]
		if len(c.buf) == historyChunk {
			if err := c.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (c *chunkWriter) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	err := c.send(c.buf)
	c.buf = nil // the message owns the bytes until it is sent
	return err
}
