package store

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// A frame is a record on disk: its body's length and CRC-32C, then the
// body. A frame cut short (the process died mid-write) or whose CRC does
// not match is detected at replay.
const frameHeader = 8

// maxBody bounds a record body: a full-size payload with its headers and
// envelope, with room to spare.
const maxBody = 1 << 30

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendFrame appends r as a frame to b.
func appendFrame(b []byte, r *Record) []byte {
	start := len(b)
	b = append(b, make([]byte, frameHeader)...)
	b = encode(b, r)
	body := b[start+frameHeader:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(body, castagnoli))
	return b
}

// frameError describes why a frame does not read; torn is true when the
// frame runs past the end of the data, as a write cut short leaves it, and
// end, set when the body's CRC does not match, is where the frame claims
// to end (for a torn write into space allocated ahead, which reads as
// zeros after it).
type frameError struct {
	torn bool
	end  int
	err  error
}

func (e *frameError) Error() string { return e.err.Error() }
func (e *frameError) Unwrap() error { return e.err }

// readFrame reads the frame at the start of b and returns its record and
// length. The record's byte fields are copies: b may be reused.
func readFrame(b []byte) (*Record, int, error) {
	if len(b) < frameHeader {
		return nil, 0, &frameError{torn: true, err: fmt.Errorf("%w: frame header cut short (%d bytes)", ErrCorrupt, len(b))}
	}
	n := binary.LittleEndian.Uint32(b)
	sum := binary.LittleEndian.Uint32(b[4:])
	if n > maxBody {
		return nil, 0, &frameError{err: fmt.Errorf("%w: frame length %d is over the limit", ErrCorrupt, n)}
	}
	end := frameHeader + int(n)
	if end > len(b) {
		return nil, 0, &frameError{torn: true, err: fmt.Errorf("%w: frame of %d bytes cut short at %d", ErrCorrupt, n, len(b)-frameHeader)}
	}
	body := b[frameHeader:end]
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, 0, &frameError{torn: end == len(b), end: end, err: fmt.Errorf("%w: checksum mismatch", ErrCorrupt)}
	}
	r, err := decode(body)
	if err != nil {
		// No end: the CRC matched, so the frame was written whole and is
		// no torn write, even as the log's last.
		return nil, 0, &frameError{err: err}
	}
	if r.Job != nil && r.Job.Payload != nil {
		r.Job.Payload = append([]byte(nil), r.Job.Payload...)
	}
	if r.Data != nil {
		r.Data = append([]byte(nil), r.Data...)
	}
	return r, end, nil
}

// lengthBitFlipped reports whether b starts with a whole frame but for
// one flipped bit in its length: a record written and synced and damaged
// since, not a torn write, whose length is written as it is. Such a
// length can claim the records after it, to the end of the data.
func lengthBitFlipped(b []byte) bool {
	if len(b) < frameHeader {
		return false
	}
	n := binary.LittleEndian.Uint32(b)
	sum := binary.LittleEndian.Uint32(b[4:])
	for bit := range 32 {
		m := n ^ 1<<bit
		if m == 0 || m > maxBody || frameHeader+int(m) > len(b) {
			continue
		}
		if crc32.Checksum(b[frameHeader:frameHeader+int(m)], castagnoli) == sum {
			return true
		}
	}
	return false
}

// endOfRecords reports whether the records of a segment end at off: no
// record is empty, so a zero length there starts the space allocated ahead
// and never written. That space must be zeros to its end; anything else
// after it is an error (a zeroed stretch in the middle of the log).
//
// Fewer than a frame header's bytes of zeros also end the records: a
// segment rotated at a checkpoint a few bytes short of its allocated size
// ends so.
func endOfRecords(data []byte, off int) (bool, error) {
	if len(data)-off < frameHeader {
		return zeroAfter(data, off), nil
	}
	if binary.LittleEndian.Uint32(data[off:]) != 0 {
		return false, nil
	}
	if !zeroAfter(data, off) {
		return true, fmt.Errorf("%w: records after a stretch of zeros", ErrCorrupt)
	}
	return true, nil
}

// zeroAfter reports whether data holds only zeros from from on: what a
// write cut short leaves in space allocated ahead.
func zeroAfter(data []byte, from int) bool {
	if from > len(data) {
		return true
	}
	for _, c := range data[from:] {
		if c != 0 {
			return false
		}
	}
	return true
}
