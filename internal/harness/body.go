package harness

import (
	"encoding/binary"
	"errors"
	"time"
)

// bodyHeader is the fixed part of every benchmark message body: the
// message's sequence number in its run and the producer's send time.
const bodyHeader = 16

// errBody is returned for a body the harness did not write.
var errBody = errors.New("harness: message body too short")

// EncodeBody writes seq and the send time (Unix nanoseconds) into a body of
// at least size bytes. Every body of a run is distinct, which the Redis
// reliable queue needs to LREM the right entry.
func EncodeBody(seq uint64, sent time.Time, size int) []byte {
	b := make([]byte, max(size, bodyHeader))
	binary.BigEndian.PutUint64(b[0:8], seq)
	binary.BigEndian.PutUint64(b[8:16], uint64(sent.UnixNano()))
	return b
}

// DecodeBody reads what EncodeBody wrote.
func DecodeBody(b []byte) (seq uint64, sent time.Time, err error) {
	if len(b) < bodyHeader {
		return 0, time.Time{}, errBody
	}
	seq = binary.BigEndian.Uint64(b[0:8])
	sent = time.Unix(0, int64(binary.BigEndian.Uint64(b[8:16])))
	return seq, sent, nil
}
