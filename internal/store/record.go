// Package store owns what the broker keeps across a restart: an ordered log
// of records that describe every change to its jobs, queues and predictors,
// and the two places it can live: memory (for tests and the in-memory
// broker's conformance) and a write-ahead log of segment files on disk. The
// broker appends records under its queue locks, waits for their durability
// outside them, and rebuilds its state on start by replaying them.
package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// Kind says what a record does.
type Kind uint8

// Record kinds. A job's life in the log starts with KindJob (its full
// state, written at publish and again at each checkpoint) and ends with
// KindAck or KindRemove; the kinds between change one field of its state.
// Records that name a job the replay does not know are ignored: they
// belonged to a job whose earlier records a checkpoint dropped.
const (
	// KindDeclare sets a queue's config (Data) and creates the queue.
	KindDeclare Kind = iota + 1
	// KindJob upserts a job's full state (Job).
	KindJob
	// KindDeliver counts one delivery of ID: a job that was delivered
	// and not settled when the broker stopped comes back ready with the
	// attempt counted. At, when set, is when it started (written by a
	// queue with rate limits, whose buckets recovery rebuilds from it).
	KindDeliver
	// KindReturn takes back a delivery that never reached its consumer,
	// or that the broker cut short: the attempt is not counted.
	KindReturn
	// KindRetry puts a delivered job back in line (a nack, a lease that
	// expired, a consumer that went away), its attempt counted.
	KindRetry
	// KindDelay holds a job back until At, then it is ready again.
	KindDelay
	// KindDead moves a job to the dead-letter list with Reason at At.
	KindDead
	// KindRequeue moves a dead letter back in line at At with fresh
	// attempts and no TTL.
	KindRequeue
	// KindAck ends a job: it was done, in Duration (zero when the
	// predictor did not learn from it). Recovery teaches the duration to
	// the queue's predictor again if it came after the last KindPredictor.
	KindAck
	// KindRemove ends a job: purged, or a dead letter dropped.
	KindRemove
	// KindPredictor replaces a queue's predictor state (Data).
	KindPredictor
	// KindPause pauses (Data is {1}) or resumes ({0}) a queue.
	KindPause
	// KindUnique gives unique key Reason to job ID until At.
	KindUnique
	// KindSchedule sets periodic schedule ID to Data (JSON); empty Data
	// deletes it.
	KindSchedule
	// KindDrop deletes a queue with everything it held: its config, jobs,
	// predictor, pause state and unique keys. Records for the same name
	// after it belong to a new queue.
	KindDrop
	// KindRates replaces a queue's rate-limit buckets (Data, as the
	// delivery package writes them): the deliveries after it, with their
	// start times, take tokens from them at recovery.
	KindRates
	kindEnd
)

var kindNames = [...]string{"", "declare", "job", "deliver", "return", "retry", "delay", "dead", "requeue", "ack", "remove", "predictor", "pause", "unique", "schedule", "drop", "rates"}

func (k Kind) String() string {
	if k > 0 && k < kindEnd {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// State is where a job stands.
type State uint8

// Job states.
const (
	Ready State = iota
	Delayed
	Dead
)

// Record is one entry of the log.
type Record struct {
	Kind     Kind
	Queue    string
	ID       string        // the job's id; empty for queue records
	At       time.Time     // KindDelay: until; KindDead, KindRequeue: when; KindDeliver: when it started, or zero
	Reason   string        // KindDead
	Data     []byte        // KindDeclare, KindPredictor, KindPause, KindSchedule, KindRates
	Job      *Job          // KindJob
	Duration time.Duration // KindAck
}

// Job is a job's full state, as the broker holds it.
type Job struct {
	ID          string
	Producer    string
	JobType     string
	SizeHint    uint64
	Payload     []byte
	Headers     map[string]string
	TTL         time.Duration
	MaxAttempts int
	PublishedAt time.Time
	RetryBase   time.Duration
	RetryMax    time.Duration

	Seq  uint64 // order of arrival in its queue: FIFO position
	Tier int
	Cost time.Duration
	Long bool
	// Cold: the predictor had too few observations of its key to trust
	// (Cost is then the typical cost).
	Cold bool
	// Reset: the job is to be classified afresh when it is next in line
	// (its queue was redeclared while it was out of line).
	Reset bool
	// Scheduled: published to run at Until and not yet due; it takes its
	// place in line (FIFO position, tier, expiry) when it comes due.
	Scheduled bool
	Enqueued  time.Time
	Expires   time.Time

	Attempts int
	State    State
	Until    time.Time // Delayed: when it is ready again
	Reason   string    // Dead
	DeadAt   time.Time // Dead
}

// ErrCorrupt is wrapped by the errors of a record that does not decode.
var ErrCorrupt = errors.New("store: corrupt record")

// encode appends r's body (without the frame) to b.
func encode(b []byte, r *Record) []byte {
	b = append(b, byte(r.Kind))
	b = appendString(b, r.Queue)
	b = appendString(b, r.ID)
	switch r.Kind {
	case KindDelay, KindRequeue:
		b = appendTime(b, r.At)
	case KindDeliver:
		if !r.At.IsZero() { // optional: a log written without it reads the same
			b = appendTime(b, r.At)
		}
	case KindDead, KindUnique:
		b = appendTime(b, r.At)
		b = appendString(b, r.Reason)
	case KindDeclare, KindPredictor, KindPause, KindSchedule, KindRates:
		b = appendBytes(b, r.Data)
	case KindJob:
		b = encodeJob(b, r.Job)
	case KindAck:
		b = binary.AppendVarint(b, int64(r.Duration))
	}
	return b
}

func encodeJob(b []byte, j *Job) []byte {
	b = appendString(b, j.Producer)
	b = appendString(b, j.JobType)
	b = binary.AppendUvarint(b, j.SizeHint)
	b = appendBytes(b, j.Payload)
	b = binary.AppendUvarint(b, uint64(len(j.Headers)))
	for k, v := range j.Headers {
		b = appendString(b, k)
		b = appendString(b, v)
	}
	b = binary.AppendVarint(b, int64(j.TTL))
	b = binary.AppendUvarint(b, uint64(j.MaxAttempts))
	b = appendTime(b, j.PublishedAt)
	b = binary.AppendUvarint(b, j.Seq)
	b = binary.AppendUvarint(b, uint64(j.Tier))
	b = binary.AppendVarint(b, int64(j.Cost))
	var flags byte
	if j.Long {
		flags |= 1
	}
	if j.Reset {
		flags |= 2
	}
	if j.Scheduled {
		flags |= 4
	}
	if j.Cold {
		flags |= 8
	}
	b = append(b, flags, byte(j.State))
	b = appendTime(b, j.Enqueued)
	b = appendTime(b, j.Expires)
	b = binary.AppendUvarint(b, uint64(j.Attempts))
	b = appendTime(b, j.Until)
	b = appendString(b, j.Reason)
	b = appendTime(b, j.DeadAt)
	b = binary.AppendVarint(b, int64(j.RetryBase))
	b = binary.AppendVarint(b, int64(j.RetryMax))
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// appendTime writes t as Unix nanoseconds; the zero time is 0.
func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return binary.AppendVarint(b, 0)
	}
	return binary.AppendVarint(b, t.UnixNano())
}

// decoder reads a record body; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorrupt, what)
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad number")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad number")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("length past the end")
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) string() string { return string(d.bytes()) }

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("short record")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) time() time.Time {
	ns := d.varint()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

func (d *decoder) int() int {
	v := d.uvarint()
	if v > math.MaxInt32 {
		d.fail("number out of range")
		return 0
	}
	return int(v)
}

// decode parses a record body. Byte fields alias body, so the caller must
// not reuse it while the record is in use.
func decode(body []byte) (*Record, error) {
	d := &decoder{b: body}
	r := &Record{Kind: Kind(d.byte())}
	if d.err == nil && (r.Kind == 0 || r.Kind >= kindEnd) {
		return nil, fmt.Errorf("%w: unknown kind %d", ErrCorrupt, r.Kind)
	}
	r.Queue = d.string()
	r.ID = d.string()
	switch r.Kind {
	case KindDelay, KindRequeue:
		r.At = d.time()
	case KindDeliver:
		if d.err == nil && len(d.b) > 0 {
			r.At = d.time()
		}
	case KindDead, KindUnique:
		r.At = d.time()
		r.Reason = d.string()
	case KindDeclare, KindPredictor, KindPause, KindSchedule, KindRates:
		r.Data = d.bytes()
	case KindJob:
		r.Job = decodeJob(d, r.ID)
	case KindAck:
		r.Duration = time.Duration(d.varint())
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return nil, d.err
	}
	return r, nil
}

func decodeJob(d *decoder, id string) *Job {
	j := &Job{ID: id}
	j.Producer = d.string()
	j.JobType = d.string()
	j.SizeHint = d.uvarint()
	j.Payload = d.bytes()
	if n := d.uvarint(); n > 0 && d.err == nil {
		if n > uint64(len(d.b)) {
			d.fail("header count past the end")
			return j
		}
		j.Headers = make(map[string]string, n)
		for range n {
			k := d.string()
			j.Headers[k] = d.string()
		}
	}
	j.TTL = time.Duration(d.varint())
	j.MaxAttempts = d.int()
	j.PublishedAt = d.time()
	j.Seq = d.uvarint()
	j.Tier = d.int()
	j.Cost = time.Duration(d.varint())
	flags := d.byte()
	j.Long, j.Reset, j.Scheduled, j.Cold = flags&1 != 0, flags&2 != 0, flags&4 != 0, flags&8 != 0
	if flags > 15 {
		d.fail("unknown job flags")
	}
	j.State = State(d.byte())
	if j.State > Dead {
		d.fail("unknown job state")
	}
	j.Enqueued = d.time()
	j.Expires = d.time()
	j.Attempts = d.int()
	j.Until = d.time()
	j.Reason = d.string()
	j.DeadAt = d.time()
	j.RetryBase = time.Duration(d.varint())
	j.RetryMax = time.Duration(d.varint())
	return j
}
