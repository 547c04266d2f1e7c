package store

import (
	"errors"
	"sync"
	"time"
)

// Store is an ordered log of records. Append is cheap and may be called
// under the caller's locks; Wait, which blocks until records are durable,
// must not be. Implementations are safe for concurrent use.
type Store interface {
	// Append adds records to the end of the log in order and returns the
	// position that Wait takes to wait for them. It encodes the records
	// before it returns and keeps none of them, so the caller may reuse
	// them.
	Append(recs ...*Record) (Pos, error)
	// Wait blocks until every record up to pos is as durable as the
	// store's sync mode promises, or returns the error that stopped it.
	Wait(pos Pos) error
	// Replay calls fn with every record, oldest first. It may be called
	// only before the first Append.
	Replay(fn func(*Record) error) error
	// Mark starts a checkpoint: records appended after it are kept by
	// Compact(mark), records before it are not. The caller then appends
	// the full state of everything live, waits for it, and calls Compact.
	Mark() (Mark, error)
	// Compact drops the records before m.
	Compact(m Mark) error
	// Size is the bytes the log takes.
	Size() int64
	// Stats are the store's counters since it opened.
	Stats() Stats
	// Close flushes what was appended and releases the store.
	Close() error
}

// Pos is a position in the log: the count of records appended before it.
type Pos uint64

// Mark is a checkpoint's start.
type Mark struct{ seg uint64 }

// Stats are what a store has done since it opened, for an operator's
// metrics: how much it wrote, how often it synced and how long that took,
// and how long callers of Wait were kept waiting.
type Stats struct {
	Records uint64 // appended
	Bytes   uint64 // appended, as encoded
	Size    int64  // the log's bytes now (see Store.Size)
	// Syncs are the fsyncs that make appended records durable (not the
	// one that closes a full segment), SyncTime their total duration and
	// SyncHist their durations by LatencyBounds.
	Syncs    uint64
	SyncTime time.Duration
	SyncHist LatencyHist
	// Waits are the Waits that blocked (for a record not yet durable),
	// WaitTime the total time they blocked and WaitHist its distribution.
	Waits    uint64
	WaitTime time.Duration
	WaitHist LatencyHist
}

// LatencyBounds are the upper bounds of a LatencyHist's buckets: from a
// fast disk's fsync to a stalled one's.
var LatencyBounds = [...]time.Duration{
	50 * time.Microsecond, 100 * time.Microsecond, 200 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
	20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond,
	500 * time.Millisecond, time.Second,
}

// LatencyHist counts durations by LatencyBounds: bucket i holds those at
// most LatencyBounds[i] and above the bound before; the last, those above
// every bound.
type LatencyHist [len(LatencyBounds) + 1]uint64

func (h *LatencyHist) add(d time.Duration) {
	i := 0
	for i < len(LatencyBounds) && d > LatencyBounds[i] {
		i++
	}
	h[i]++
}

// ErrClosed is returned by a store's methods after Close.
var ErrClosed = errors.New("store: closed")

// Memory is a Store that keeps its records in memory: what a file store
// would replay after a clean restart, without the disk. It exists for tests
// and for the conformance suite that both stores pass.
type Memory struct {
	mu     sync.Mutex
	segs   [][]byte // encoded frames per segment
	first  uint64   // segment number of segs[0]
	n      Pos
	size   int64
	bytes  uint64
	closed bool
}

// NewMemory returns an empty memory store.
func NewMemory() *Memory { return &Memory{segs: [][]byte{nil}, first: 1} }

// Append implements Store.
func (m *Memory) Append(recs ...*Record) (Pos, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, ErrClosed
	}
	last := len(m.segs) - 1
	for _, r := range recs {
		before := len(m.segs[last])
		m.segs[last] = appendFrame(m.segs[last], r)
		m.size += int64(len(m.segs[last]) - before)
		m.bytes += uint64(len(m.segs[last]) - before)
		m.n++
	}
	return m.n, nil
}

// Wait implements Store: memory is as durable as it gets at once.
func (m *Memory) Wait(Pos) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	return nil
}

// Replay implements Store.
func (m *Memory) Replay(fn func(*Record) error) error {
	m.mu.Lock()
	segs := append([][]byte(nil), m.segs...)
	m.mu.Unlock()
	for _, s := range segs {
		for off := 0; off < len(s); {
			r, n, err := readFrame(s[off:])
			if err != nil {
				return err
			}
			if err := fn(r); err != nil {
				return err
			}
			off += n
		}
	}
	return nil
}

// Mark implements Store.
func (m *Memory) Mark() (Mark, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Mark{}, ErrClosed
	}
	m.segs = append(m.segs, nil)
	return Mark{seg: m.first + uint64(len(m.segs)-1)}, nil
}

// Compact implements Store.
func (m *Memory) Compact(mk Mark) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.first < mk.seg && len(m.segs) > 1 {
		m.size -= int64(len(m.segs[0]))
		m.segs = m.segs[1:]
		m.first++
	}
	return nil
}

// Size implements Store.
func (m *Memory) Size() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.size
}

// Stats implements Store: a memory store never syncs or makes a Wait
// wait.
func (m *Memory) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Stats{Records: uint64(m.n), Bytes: m.bytes, Size: m.size}
}

// Close implements Store.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}
