// Package history owns a queue's recorded history: a bounded rolling record
// of every settled delivery (when the job took its place in line, its key,
// size hint and attempt; when it was handed out, how long its handler
// said it ran, when it settled and how), and the versioned JSON Lines
// format that exports it and that the simulator replays. It never holds
// payloads or headers. The record is a pure structure: it takes now as an
// argument, starts no goroutines and holds no locks; the broker calls it
// under the queue's lock.
package history

import (
	"errors"
	"fmt"
	"time"
)

// Defaults for Config. A settled delivery costs EntryBytes in the record,
// and each distinct key KeyBytes plus its text; 16 MiB holds about 300,000
// deliveries of a queue with a few hundred keys: an hour of 80 jobs a
// second. A busier queue keeps a shorter window; MaxBytes raises it.
const (
	DefaultMaxBytes = 16 << 20
	DefaultMaxAge   = 24 * time.Hour
	// DefaultMaxTotalBytes bounds every queue's record together: 16
	// queues' worth at the default cap.
	DefaultMaxTotalBytes = 256 << 20
	// MinMaxBytes is the smallest cap: one chunk of entries and a key.
	MinMaxBytes = chunkLen*EntryBytes + 4096
	// MaxMaxBytes bounds the cap of one queue's record.
	MaxMaxBytes = 16 << 30
)

// Config bounds one queue's record. The zero value takes the defaults.
type Config struct {
	// Off turns the record off: nothing is kept.
	Off bool `yaml:"off"`
	// MaxBytes bounds the record's memory, entries and key texts; the
	// oldest entries are dropped past it.
	MaxBytes int64 `yaml:"max_bytes"`
	// MaxAge drops entries that settled longer ago.
	MaxAge time.Duration `yaml:"max_age"`
	// MaxTotalBytes bounds the records of every queue of a broker
	// together: past it, the queue recording sheds its own oldest entries
	// (the broker applies it; a Record alone has only MaxBytes).
	MaxTotalBytes int64 `yaml:"max_total_bytes"`
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MaxAge == 0 {
		c.MaxAge = DefaultMaxAge
	}
	if c.MaxTotalBytes == 0 {
		c.MaxTotalBytes = DefaultMaxTotalBytes
	}
	return c
}

// Validate checks a config that WithDefaults has filled.
func (c Config) Validate() error {
	switch {
	case c.MaxBytes < MinMaxBytes || c.MaxBytes > MaxMaxBytes:
		return fmt.Errorf("history: max bytes %d must be between %d and %d", c.MaxBytes, int64(MinMaxBytes), int64(MaxMaxBytes))
	case c.MaxAge < time.Second:
		return fmt.Errorf("history: max age %v must be at least a second", c.MaxAge)
	case c.MaxTotalBytes < MinMaxBytes:
		return fmt.Errorf("history: max total bytes %d must be at least %d", c.MaxTotalBytes, int64(MinMaxBytes))
	}
	return nil
}

// Outcome is how a delivery settled.
type Outcome uint8

// Outcomes. A lease that ran out is not recorded: no handler reported a
// duration for it.
const (
	Ack  Outcome = iota + 1 // done
	Nack                    // failed and requeued or held back for a retry
	Dead                    // failed and dead-lettered
)

var outcomeNames = [...]string{Ack: "ack", Nack: "nack", Dead: "dead"}

// String is the outcome's name in the file format.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && outcomeNames[o] != "" {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", o)
}

// Entry is one settled delivery.
type Entry struct {
	// Arrived is when the job took its place in line for this attempt: its
	// publish, or when it fell due after a delay or a retry's backoff.
	Arrived time.Time
	// Producer and Key (the job type) are the predictor's key for it.
	Producer string
	Key      string
	Size     uint64 // the size hint
	Attempt  int    // 1 for the first delivery
	// Started is when the broker handed it out, Done when it settled.
	Started time.Time
	Done    time.Time
	// Duration is the handler's run time as its worker measured it (0
	// for a nack, which carries none).
	Duration time.Duration
	Outcome  Outcome
}

// Latency is the job's time from its place in line to its settle: what a
// policy changes.
func (e *Entry) Latency() time.Duration { return e.Done.Sub(e.Arrived) }

// EntryBytes is what one entry costs the record; KeyBytes what a distinct
// key costs besides its text.
const (
	EntryBytes = 48
	KeyBytes   = 96
)

// chunkLen is the entries per chunk: the record grows and shrinks a chunk
// at a time, so its memory is what it counts.
const chunkLen = 1024

// entry is an Entry as the record keeps it: 48 bytes.
type entry struct {
	arrived, started, done int64 // Unix nanoseconds
	dur                    int64
	size                   uint64
	key                    uint32 // index into Record.keys
	attempt                uint16
	outcome                Outcome
}

type chunk [chunkLen]entry

type keyInfo struct {
	producer, key string
	refs          int
}

type keyName struct{ producer, key string }

// Record is one queue's rolling history, bounded by Config.MaxBytes and
// Config.MaxAge. It is not safe for concurrent use.
type Record struct {
	cfg    Config
	chunks []*chunk // the first holds the oldest entries from head
	head   int      // first live entry in chunks[0]
	n      int      // live entries
	keys   []keyInfo
	free   []uint32 // unused indices into keys
	index  map[keyName]uint32
	keyB   int64 // bytes charged for keys
	spare  *chunk
	// Dropped counts the entries dropped for the cap or their age.
	Dropped int64
}

// ErrOff is returned by New for a config that turns the record off.
var ErrOff = errors.New("history: the record is off")

// New makes an empty record. cfg is filled with its defaults first.
func New(cfg Config) (*Record, error) {
	cfg = cfg.WithDefaults()
	if cfg.Off {
		return nil, ErrOff
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Record{cfg: cfg, index: map[keyName]uint32{}}, nil
}

// Config is the record's config, defaults filled.
func (r *Record) Config() Config { return r.cfg }

// Len is the number of entries held.
func (r *Record) Len() int { return r.n }

// Keys is the number of distinct keys held.
func (r *Record) Keys() int { return len(r.index) }

// Bytes is the memory the record counts: its chunks of entries (the
// spare included) and its keys.
func (r *Record) Bytes() int64 {
	c := len(r.chunks)
	if r.spare != nil {
		c++
	}
	return int64(c)*chunkLen*EntryBytes + r.keyB
}

// Add records e, which settled at now, and drops what the caps no longer
// allow. Entries are kept in the order they are added.
func (r *Record) Add(e Entry, now time.Time) {
	k := r.keyOf(e.Producer, e.Key)
	last := r.n + r.head
	if last == len(r.chunks)*chunkLen {
		c := r.spare
		r.spare = nil
		if c == nil {
			c = new(chunk)
		}
		r.chunks = append(r.chunks, c)
	}
	r.chunks[last/chunkLen][last%chunkLen] = entry{
		arrived: unixNano(e.Arrived), started: unixNano(e.Started), done: unixNano(e.Done),
		dur: int64(e.Duration), size: e.Size, key: k, attempt: uint16(min(max(e.Attempt, 0), 65535)), outcome: e.Outcome,
	}
	r.n++
	r.trim(now)
}

// ShrinkTo drops the oldest entries until the record counts at most n
// bytes, or holds nothing.
func (r *Record) ShrinkTo(n int64) {
	if r.spare != nil && r.Bytes() > n {
		r.spare = nil
	}
	for r.n > 0 && r.Bytes() > n {
		r.dropFirst()
		if r.spare != nil && r.Bytes() > n {
			r.spare = nil
		}
	}
}

// Trim drops the entries older than the record's MaxAge at now.
func (r *Record) Trim(now time.Time) { r.trim(now) }

func (r *Record) trim(now time.Time) {
	if r.spare != nil && r.Bytes() > r.cfg.MaxBytes {
		r.spare = nil // a spare chunk is memory too: kept only within the cap
	}
	oldest := now.Add(-r.cfg.MaxAge).UnixNano()
	for r.n > 0 && (r.Bytes() > r.cfg.MaxBytes || r.at(0).done < oldest) {
		r.dropFirst()
	}
}

func (r *Record) at(i int) *entry {
	i += r.head
	return &r.chunks[i/chunkLen][i%chunkLen]
}

func (r *Record) dropFirst() {
	e := r.at(0)
	r.unref(e.key)
	r.head++
	r.n--
	r.Dropped++
	if r.head == chunkLen || r.n == 0 {
		c := r.chunks[0]
		copy(r.chunks, r.chunks[1:])
		r.chunks[len(r.chunks)-1] = nil
		r.chunks = r.chunks[:len(r.chunks)-1]
		r.head = 0
		switch {
		case r.n == 0:
			r.spare = nil
		case r.Bytes()+chunkLen*EntryBytes <= r.cfg.MaxBytes:
			r.spare = c
		}
	}
}

func (r *Record) keyOf(producer, key string) uint32 {
	kn := keyName{producer, key}
	if i, ok := r.index[kn]; ok {
		r.keys[i].refs++
		return i
	}
	var i uint32
	if n := len(r.free); n > 0 {
		i = r.free[n-1]
		r.free = r.free[:n-1]
	} else {
		i = uint32(len(r.keys))
		r.keys = append(r.keys, keyInfo{})
	}
	r.keys[i] = keyInfo{producer: producer, key: key, refs: 1}
	r.index[kn] = i
	r.keyB += keyCost(producer, key)
	return i
}

func (r *Record) unref(i uint32) {
	k := &r.keys[i]
	if k.refs--; k.refs > 0 {
		return
	}
	delete(r.index, keyName{k.producer, k.key})
	r.keyB -= keyCost(k.producer, k.key)
	*k = keyInfo{}
	r.free = append(r.free, i)
}

func keyCost(producer, key string) int64 { return KeyBytes + int64(len(producer)+len(key)) }

// Window returns the entries that settled at or after since, oldest
// first, after dropping those past the record's age at now.
func (r *Record) Window(since, now time.Time) []Entry {
	r.trim(now)
	from := unixNano(since)
	// Entries are in the order they settled, near enough: find the first
	// at or after since by a binary search on done.
	lo, hi := 0, r.n
	for lo < hi {
		m := (lo + hi) / 2
		if r.at(m).done < from {
			lo = m + 1
		} else {
			hi = m
		}
	}
	out := make([]Entry, 0, r.n-lo)
	for i := lo; i < r.n; i++ {
		e := r.at(i)
		k := &r.keys[e.key]
		out = append(out, Entry{
			Arrived: fromNano(e.arrived), Producer: k.producer, Key: k.key, Size: e.size, Attempt: int(e.attempt),
			Started: fromNano(e.started), Done: fromNano(e.done), Duration: time.Duration(e.dur), Outcome: e.outcome,
		})
	}
	return out
}

// Reset empties the record.
func (r *Record) Reset() {
	*r = Record{cfg: r.cfg, index: map[keyName]uint32{}}
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
