package store

import (
	"bytes"
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
	// whole: the CRC matched, so the frame was written whole; it does
	// not decode (a kind from a newer build, or damage before the CRC was
	// computed), and is no torn write wherever it is.
	whole bool
	err   error
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
		return nil, 0, &frameError{whole: true, err: err}
	}
	if r.Job != nil && r.Job.Payload != nil {
		r.Job.Payload = append([]byte(nil), r.Job.Payload...)
	}
	if r.Data != nil {
		r.Data = append([]byte(nil), r.Data...)
	}
	return r, end, nil
}

// A sync mark is a frame of the log's own, never replayed as a record: it
// says that the segment it is in was fsynced up to a stated offset before
// the mark was written. The flusher puts one at the start of the first
// write after each fsync, and Close puts a last one (closed set) after
// the final fsync, claiming the whole segment. Recovery uses them to tell
// a torn tail from damage: bytes before an offset some mark claims were
// on disk once, so a frame there that does not read was damaged since,
// while bytes after every claim may be a power cut's unordered writes.
//
// Its body is fixed: kindMark, a flags byte, the offset (8 bytes, little
// endian). A fixed size lets recovery look for marks past a frame that
// does not read, where the chain of lengths is broken.
const (
	kindMark  = 0xff
	markBody  = 10
	markFrame = frameHeader + markBody
)

// syncMark is a mark's content.
type syncMark struct {
	synced int64 // the segment was fsynced up to here
	closed bool  // written by Close: nothing was appended after it
}

// appendMark appends m as a frame to b.
func appendMark(b []byte, m syncMark) []byte {
	start := len(b)
	b = binary.LittleEndian.AppendUint32(b, markBody)
	b = binary.LittleEndian.AppendUint32(b, 0)
	var flags byte
	if m.closed {
		flags = 1
	}
	b = append(b, kindMark, flags)
	b = binary.LittleEndian.AppendUint64(b, uint64(m.synced))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(b[start+frameHeader:], castagnoli))
	return b
}

// readMark reads the mark at the start of b, if there is a whole one.
func readMark(b []byte) (syncMark, bool) {
	if len(b) < markFrame || binary.LittleEndian.Uint32(b) != markBody || b[frameHeader] != kindMark || b[frameHeader+1] > 1 {
		return syncMark{}, false
	}
	body := b[frameHeader:markFrame]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return syncMark{}, false
	}
	return syncMark{synced: int64(binary.LittleEndian.Uint64(body[2:])), closed: body[1] == 1}, true
}

// markPrefix is how every mark frame starts: its length.
var markPrefix = []byte{markBody, 0, 0, 0}

// syncedPast reports whether a mark in data after off claims that the
// segment was fsynced past off: then the bytes at off were on disk and
// any damage there happened since. Only marks at or after from are looked
// for; a mark's claim never reaches past itself, so a claim past off
// comes from a mark after it. The search costs one scan of data.
func syncedPast(data []byte, from, off int) (int, bool) {
	for p := from; p+markFrame <= len(data); {
		i := bytes.Index(data[p:], markPrefix)
		if i < 0 {
			break
		}
		p += i
		if m, ok := readMark(data[p:]); ok && m.synced > int64(off) && m.synced <= int64(p) {
			return p, true
		}
		p++
	}
	return 0, false
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
