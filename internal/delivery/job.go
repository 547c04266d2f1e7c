package delivery

import (
	"math"
	"time"
	"unsafe"

	"github.com/harbinger-mq/harbinger/internal/predict"
	"github.com/harbinger-mq/harbinger/internal/sched"
)

// Job is one job a Line holds, from its publish until it is acked, dropped
// or its dead letter is deleted. The exported fields, and what SetID,
// SetSizeHint and SetOptions set, are the job as it was published and are
// set before Admit; the Line does not change them, except that Admit fills
// in the queue's defaults. Everything else is the Line's.
//
// A waiting job is held by the million, so the Job is packed: small fields
// together, and only what a stored job needs (a publish's delay, unique key
// and queue name live elsewhere).
type Job struct {
	// The job's id, kept in the job itself rather than in a string of its
	// own: ID returns a string that points here (see SetID).
	id    [maxInlineID]byte
	idLen uint8 // bytes of id in use; longID when the id is among the options
	// Who published it, what kind it is and the options it carries, one
	// pointer for the three (see meta); nil for a job with none.
	m *meta
	// The payload as a pointer and a length rather than a slice: a slice's
	// capacity is a word no job needs (see Payload).
	payload    *byte
	payloadLen uint32 // a payload is far below 4 GiB (the broker's MaxPayloadLimit)
	// When it took its place in line, as milliseconds after its publish
	// plus one; 0 when that was its publish, or when the time is among
	// its options instead (see setEnqueued).
	enqueuedMS uint32
	// MaxAttempts is the deliveries the job may have; 0 takes the queue's
	// default (the broker's limit is 10,000, SetMaxAttempts clamps).
	MaxAttempts int16
	attempt     uint16 // deliveries so far; below MaxAttempts + 1
	// deaths counts the times the job was dead-lettered, modulo 65,536:
	// Snapshot only asks whether it died again since.
	deaths uint16
	flags  jobFlags
	// The tier the predictor gave (see Prediction; the item's Tier is the
	// level it was pushed at, clamped to the scheduler's levels).
	predTier int8

	item      sched.Item // jobOf finds the job from it
	published int64      // PublishedAt as Unix nanoseconds
	// When a job's lease ends (in flight), when it is due (delayed) and
	// when it died (dead) is kept in its item's parked word (see
	// sched.Item.Parked), and its place in the lease or delayed heap in
	// its item's parked index (sched.Item.ParkedIndex), which the
	// scheduler uses only while the job waits: see deadline and heapIdx.
	// Who holds a job in flight and since when are the Line's (held), not
	// every waiting job's.
}

// jobFlags are a job's yes-or-no states, one bit each.
type jobFlags uint8

const (
	flagScheduled jobFlags = 1 << iota // published to run later and not yet due: not yet in line
	flagCancelled                      // cancelled while running: dropped when it settles
	flagDead                           // a dead letter; its deadline is when it died
	flagGone                           // released: the Line holds it no more
	flagStale                          // to be classified afresh at its next push (see Line.Stale)
	flagPredCold                       // what the predictor said beyond the item's Cost and Long
	flagPredGated
	flagPredMade
)

func (j *Job) is(f jobFlags) bool { return j.flags&f != 0 }

func (j *Job) set(f jobFlags, on bool) {
	if on {
		j.flags |= f
	} else {
		j.flags &^= f
	}
}

// deadline is the job's lease end, due time or death time (Unix
// nanoseconds), 0 while it waits in line (the word is the scheduler's
// then).
func (j *Job) deadline() int64 {
	if j.item.Queued() {
		return 0
	}
	return j.item.Parked()
}

// setDeadline sets what deadline returns; the job must not be in line.
func (j *Job) setDeadline(n int64) { j.item.SetParked(n) }

// SetMaxAttempts sets MaxAttempts from n, clamped to what it holds.
func (j *Job) SetMaxAttempts(n int) { j.MaxAttempts = int16(min(max(n, 0), math.MaxInt16)) }

// Payload is the job's body. The caller must not change it.
func (j *Job) Payload() []byte { return unsafe.Slice(j.payload, j.payloadLen) }

// SetPayload sets the job's body, which the job keeps (no copy). Set it
// before Admit (or SetSizeHint), and never after.
func (j *Job) SetPayload(p []byte) {
	if uint64(len(p)) > math.MaxUint32 {
		panic("delivery: a payload of 4 GiB or more") // the broker's limits refuse far smaller ones
	}
	j.payload, j.payloadLen = unsafe.SliceData(p), uint32(len(p))
}

// Names are who published a job and what kind it is.
type Names struct {
	Producer, JobType string
}

// meta is what a job says of itself besides its payload: its names and
// its options. Most jobs carry no options, and the jobs of one producer
// and job type that carry none share one meta, which their Line keeps
// (up to Config.MaxNames of them; see Admit). A job with options has a
// meta of its own. A meta is never changed once a job points at it:
// setOptions makes a new one, so a shared meta is only ever read.
type meta struct {
	names Names
	opts  options
}

// noOptions are the options of a job without a meta: read, never written.
var noOptions options

// opt is the job's options, to read.
func (j *Job) opt() *options {
	if j.m == nil {
		return &noOptions
	}
	return &j.m.opts
}

// Producer is who published the job.
func (j *Job) Producer() string {
	if j.m == nil {
		return ""
	}
	return j.m.names.Producer
}

// JobType is the job's kind, as its producer named it.
func (j *Job) JobType() string {
	if j.m == nil {
		return ""
	}
	return j.m.names.JobType
}

// options are the settings a job may carry of its own, in its meta. Most
// jobs carry none.
type options struct {
	headers             map[string]string
	ttl                 time.Duration
	retryBase, retryMax time.Duration
	// A size hint other than the payload's size (see SetSizeHint).
	sizeHint uint64
	sized    bool
	// An id too long to keep in the job (see SetID).
	id string
	// When it took its place in line, when that was neither its publish
	// nor within Job.enqueuedMS's reach (Unix nanoseconds; 0 is none; see
	// setEnqueued).
	enqueued int64
}

func (o *options) isZero() bool {
	return len(o.headers) == 0 && o.ttl == 0 && o.retryBase == 0 && o.retryMax == 0 && !o.sized && o.id == "" && o.enqueued == 0
}

// maxInlineID is the longest id a job keeps in itself: the broker's are
// 9 to 15 bytes up to 34 billion jobs a run (see broker's idGen). Longer
// ones take a place among the options.
const maxInlineID = 15

// longID marks a job whose id is in its options.
const longID = 0xff

// SetID sets the job's id. Set it once, before Admit (or Restore): the
// strings ID has returned point into the job and must not change.
func (j *Job) SetID(id string) {
	if len(id) <= maxInlineID {
		j.idLen = uint8(copy(j.id[:], id))
		j.dropLongID()
		return
	}
	o := *j.opt()
	o.id = id
	j.setOptions(o)
	j.idLen = longID
}

// SetIDBytes is SetID from bytes, for an id built in a buffer: an id the
// job keeps in itself costs no allocation.
func (j *Job) SetIDBytes(id []byte) {
	if len(id) <= maxInlineID {
		j.idLen = uint8(copy(j.id[:], id))
		j.dropLongID()
		return
	}
	j.SetID(string(id))
}

// dropLongID forgets an id kept among the options.
func (j *Job) dropLongID() {
	if j.opt().id != "" {
		o := *j.opt()
		o.id = ""
		j.setOptions(o)
	}
}

// ID is the job's id. It allocates nothing: the string points into the
// job (or its options), which it keeps alive.
func (j *Job) ID() string {
	if j.idLen == longID {
		return j.m.opts.id
	}
	return unsafe.String(&j.id[0], int(j.idLen))
}

// SetOptions sets the job's headers, TTL (0 takes the queue's default)
// and retry backoff (0 takes the queue's). It keeps the size hint and id.
func (j *Job) SetOptions(headers map[string]string, ttl, retryBase, retryMax time.Duration) {
	o := *j.opt()
	o.headers, o.ttl, o.retryBase, o.retryMax = headers, ttl, retryBase, retryMax
	j.setOptions(o)
}

// setOptions gives the job a meta of its own holding o and its names, or,
// when o is all defaults, keeps the meta it has if that holds no options
// (and then allocates nothing).
func (j *Job) setOptions(o options) {
	var n Names
	if j.m != nil {
		n = j.m.names
	}
	if o.isZero() {
		if n == (Names{}) {
			j.m = nil
			return
		}
		if j.m.opts.isZero() {
			return
		}
	}
	j.m = &meta{names: n, opts: o}
}

// SetSizeHint sets what the predictor's size bucket reads for the job. Set
// Payload first: a hint equal to the payload's size (the broker's default)
// costs the job nothing, any other takes a place among its options.
func (j *Job) SetSizeHint(n uint64) {
	o := *j.opt()
	o.sizeHint, o.sized = n, n != uint64(j.payloadLen)
	j.setOptions(o)
}

// SizeHint is what the predictor's size bucket reads: the payload's size
// unless SetSizeHint said otherwise.
func (j *Job) SizeHint() uint64 {
	if o := j.opt(); o.sized {
		return o.sizeHint
	}
	return uint64(j.payloadLen)
}

// Headers are the job's headers; the caller must not change them.
func (j *Job) Headers() map[string]string { return j.opt().headers }

// TTL is the job's time to live once due; 0 is none.
func (j *Job) TTL() time.Duration { return j.opt().ttl }

// RetryBase and RetryMax are the job's own retry backoff; 0 takes the
// queue's.
func (j *Job) RetryBase() time.Duration { return j.opt().retryBase }

// RetryMax: see RetryBase.
func (j *Job) RetryMax() time.Duration { return j.opt().retryMax }

// jobOf is the job whose scheduler item it is. Every item a Line pushes
// is the item field of a Job, so the job starts that field's offset before
// it: the item needs no reference back to its job, which saves every
// waiting job 16 bytes.
func jobOf(it *sched.Item) *Job {
	return (*Job)(unsafe.Add(unsafe.Pointer(it), -int(unsafe.Offsetof(Job{}.item))))
}

// Holder names who holds a delivered job: a consumer, as the caller
// attached it. The zero Holder holds nothing.
type Holder uint64

// Attempt is the number of deliveries so far (1 during the first).
func (j *Job) Attempt() int { return int(j.attempt) }

// Seq is the job's place in its queue's order: when it joined the line.
// A job published to run later joins when it comes due, and a requeued
// dead letter or a job that comes back to a redeclared queue joins again,
// at the back; a retry keeps its place.
func (j *Job) Seq() uint64 { return j.item.ID }

// Tier is the tier the job was given.
func (j *Job) Tier() int { return int(j.item.Tier) }

// Level is the level the job waits at now, after any aging.
func (j *Job) Level() int { return j.item.Level() }

// Cost is the job's predicted duration.
func (j *Job) Cost() time.Duration { return j.item.Cost }

// Long reports whether the job was predicted far longer than typical.
func (j *Job) Long() bool { return j.item.Long }

// Prediction is what the predictor said of the job when it took its place.
func (j *Job) Prediction() predict.Prediction {
	return predict.Prediction{Cost: j.item.Cost, Tier: int(j.predTier), Cold: j.is(flagPredCold),
		SpreadGated: j.is(flagPredGated), Long: j.item.Long, Made: j.is(flagPredMade)}
}

// setPrediction keeps what Prediction needs beyond the item, which
// Classify has already given pr's Cost and Long.
func (j *Job) setPrediction(pr predict.Prediction) {
	j.predTier = int8(min(max(pr.Tier, math.MinInt8), math.MaxInt8))
	j.set(flagPredCold, pr.Cold)
	j.set(flagPredGated, pr.SpreadGated)
	j.set(flagPredMade, pr.Made)
}

// Enqueued is when the job took its place in line; zero for a job
// published to run later that is not yet due.
func (j *Job) Enqueued() time.Time {
	if j.is(flagScheduled) {
		return time.Time{}
	}
	return fromNanos(j.enqueued())
}

// enqueued is when the job took its place in line, as Unix nanoseconds:
// for most jobs when they were published.
func (j *Job) enqueued() int64 {
	if e := j.opt().enqueued; e != 0 {
		return e
	}
	if j.enqueuedMS > 0 {
		return j.published + int64(j.enqueuedMS-1)*int64(time.Millisecond)
	}
	return j.published
}

// setEnqueued sets what enqueued returns. The publish costs nothing; a
// later time (a job published to run later, once due; a requeued dead
// letter) is kept to the millisecond after the publish, up to 49 days
// after it; any other among the job's options. Set it while the job is
// out of line (Line.waits counts it by this time).
func (j *Job) setEnqueued(n int64) {
	var ms uint32
	var exact int64
	switch d := n - j.published; {
	case d == 0:
	case d > 0 && d/int64(time.Millisecond) < math.MaxUint32-1:
		ms = uint32(d/int64(time.Millisecond)) + 1
	default:
		exact = n
	}
	j.enqueuedMS = ms
	if j.opt().enqueued != exact {
		o := *j.opt()
		o.enqueued = exact
		j.setOptions(o)
	}
}

// Expires is when the job's TTL runs out; zero is never.
func (j *Job) Expires() time.Time { return j.item.Expires() }

// Deadline is, for a job in flight, when its lease ends, and for a delayed
// one, when it is due.
func (j *Job) Deadline() time.Time { return fromNanos(j.deadline()) }

// PublishedAt is when the job was published.
func (j *Job) PublishedAt() time.Time { return fromNanos(j.published) }

// SetPublishedAt sets when the job was published, for a job the caller
// builds before Admit sets it.
func (j *Job) SetPublishedAt(t time.Time) { j.published = nanos(t) }

// nanos is t as Unix nanoseconds, 0 for the zero time: a third of a
// time.Time's size, for fields every job carries.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// fromNanos is nanos's time, in UTC (as the log decodes times).
func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// Scheduled reports whether the job waits for its run-at time and has not
// yet been in line.
func (j *Job) Scheduled() bool { return j.is(flagScheduled) }

// Cancelled reports whether the job was cancelled while it ran.
func (j *Job) Cancelled() bool { return j.is(flagCancelled) }

// heapIdx is the job's index in the leases or delayed heap, -1 when in
// neither. It is kept in its item's parked index (sched.Item.ParkedIndex),
// which the scheduler uses only while the job waits in line.
func (j *Job) heapIdx() int {
	if j.item.Queued() {
		return -1
	}
	return int(*j.item.ParkedIndex())
}

func (j *Job) setHeapIdx(i int) { *j.item.ParkedIndex() = int32(i) }

// timeHeap orders jobs by deadline: in-flight ones by lease end, delayed
// ones by due time. A job is in at most one at a time, and never while it
// waits in line, so both share its deadline and heapIdx.
type timeHeap []*Job

func (h *timeHeap) push(j *Job) {
	if j.item.Queued() {
		panic("delivery: a job waiting in line pushed to a time heap") // a bug here, not bad input
	}
	j.setHeapIdx(len(*h))
	*h = append(*h, j)
	h.up(len(*h) - 1)
}

func (h *timeHeap) min() *Job {
	if len(*h) == 0 {
		return nil
	}
	return (*h)[0]
}

func (h *timeHeap) remove(j *Job) {
	s := *h
	i := j.heapIdx()
	if i < 0 || i >= len(s) || s[i] != j {
		return
	}
	last := len(s) - 1
	if i != last {
		h.swap(i, last)
	}
	s[last] = nil
	*h = s[:last]
	j.setHeapIdx(-1)
	if i != last {
		h.fix(i)
	}
}

func (h *timeHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h timeHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].setHeapIdx(i)
	h[j].setHeapIdx(j)
}

func (h timeHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if h[j].item.Parked() >= h[i].item.Parked() {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h timeHeap) down(i0 int) bool {
	i, n := i0, len(h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && h[r].item.Parked() < h[l].item.Parked() {
			j = r
		}
		if h[j].item.Parked() >= h[i].item.Parked() {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
