package broker

import (
	"crypto/rand"
	"encoding/base32"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/harbinger-mq/harbinger/internal/predict"
	"github.com/harbinger-mq/harbinger/internal/sched"
)

// Message is one job. Callers fill the exported fields up to Delay before
// Publish; the broker owns the Message from then on and sets the rest.
type Message struct {
	Queue    string
	Producer string
	JobType  string
	SizeHint uint64 // 0 means the payload size
	Payload  []byte
	Headers  map[string]string
	TTL      time.Duration // 0 takes the queue's default TTL; counted from when the job is due
	// MaxAttempts is the deliveries before the job is dead-lettered; 0 takes
	// the queue's default.
	MaxAttempts int
	// RunAt, when in the future, keeps the job invisible until then; it
	// then takes its place in line as if published at that moment.
	RunAt time.Time
	// Delay is RunAt relative to the publish, on the broker's clock.
	Delay time.Duration
	// RetryBase and RetryMax, when set, replace the queue's retry backoff
	// for this job (see QueueConfig.RetryBase).
	RetryBase, RetryMax time.Duration
	// UniqueKey, when set, makes the publish idempotent for UniqueFor: a
	// second publish to the queue with the same key inside the window
	// stores nothing and answers with the first job's id, whether that job
	// is waiting, running or finished.
	UniqueKey string
	UniqueFor time.Duration

	// Set by the broker.
	ID          string
	PublishedAt time.Time

	item sched.Item
	gen  uint64 // scheduler generation item was last pushed to
	pred predict.Prediction

	// Guarded by the queue's mutex. A waiting job is held by the million,
	// so its fields are packed: small ones together, times as integers
	// where only the queue reads them.
	attempt   int32 // deliveries so far
	size      int32 // bytes charged to the broker's budget (below MaxRequestBytes)
	heapIdx   int32 // in q.leases or q.delayed
	scheduled bool  // published to run later and not yet due: not yet in line
	cancelled bool  // cancelled while running: dropped when it settles
	// While in flight or delayed.
	owner    *Consumer
	deadline time.Time // in flight: the lease's end; delayed: when it is due
	leased   int64     // when the current delivery started (Unix nanoseconds)
}

// Delivery is a job handed to a consumer under a lease. It is a copy, safe
// to read without locks; Payload and Headers are shared and must not be
// modified.
type Delivery struct {
	ID          string
	Queue       string
	Producer    string
	JobType     string
	SizeHint    uint64
	Payload     []byte
	Headers     map[string]string
	Attempt     int // 1 for the first delivery
	PublishedAt time.Time
	Lease       time.Duration
	Tier        int
	Predicted   time.Duration
	// Cancel marks not a delivery but a notice: the job ID, which this
	// consumer holds, was cancelled; stop it. Only ID and Queue are set.
	Cancel bool
}

func (m *Message) delivery(lease time.Duration) Delivery {
	return Delivery{
		ID: m.ID, Queue: m.Queue, Producer: m.Producer, JobType: m.JobType,
		SizeHint: m.SizeHint, Payload: m.Payload, Headers: m.Headers,
		Attempt: int(m.attempt), PublishedAt: m.PublishedAt, Lease: lease,
		Tier: m.item.Tier, Predicted: m.pred.Cost,
	}
}

// DeadLetter is a job that ran out of attempts, expired or was nacked to the
// dead-letter list.
type DeadLetter struct {
	ID          string
	Queue       string
	Producer    string
	JobType     string
	Payload     []byte
	Headers     map[string]string
	Attempts    int
	Reason      string
	PublishedAt time.Time
	DeadAt      time.Time
}

type deadLetter struct {
	m      *Message
	reason string
	at     time.Time
}

func (d deadLetter) public() DeadLetter {
	m := d.m
	return DeadLetter{
		ID: m.ID, Queue: m.Queue, Producer: m.Producer, JobType: m.JobType,
		Payload: m.Payload, Headers: m.Headers, Attempts: int(m.attempt),
		Reason: d.reason, PublishedAt: m.PublishedAt, DeadAt: d.at,
	}
}

// idGen makes message ids: a random per-process prefix, so ids stay unique
// across restarts, followed by a base-32 counter. They are short (about 12
// bytes) and cost one allocation.
type idGen struct {
	prefix [8]byte
	n      atomic.Uint64
}

func newIDGen() *idGen {
	var raw [5]byte
	_, _ = rand.Read(raw[:])
	g := &idGen{}
	base32.HexEncoding.WithPadding(base32.NoPadding).Encode(g.prefix[:], raw[:])
	for i, c := range g.prefix {
		if c >= 'A' && c <= 'Z' {
			g.prefix[i] = c + 'a' - 'A'
		}
	}
	return g
}

func (g *idGen) next() string {
	var buf [8 + 13]byte
	b := append(buf[:0], g.prefix[:]...)
	b = strconv.AppendUint(b, g.n.Add(1), 32)
	return string(b)
}

// timeHeap orders messages by deadline: in-flight ones by lease deadline,
// delayed ones by due time. A message is in at most one heap at a time, so
// both share its deadline and heapIdx.
type timeHeap []*Message

func (h *timeHeap) push(m *Message) {
	m.heapIdx = int32(len(*h))
	*h = append(*h, m)
	h.up(int(m.heapIdx))
}

func (h *timeHeap) min() *Message {
	if len(*h) == 0 {
		return nil
	}
	return (*h)[0]
}

func (h *timeHeap) remove(m *Message) {
	s := *h
	i := int(m.heapIdx)
	if i < 0 || i >= len(s) || s[i] != m {
		return
	}
	last := len(s) - 1
	if i != last {
		h.swap(i, last)
	}
	s[last] = nil
	*h = s[:last]
	m.heapIdx = -1
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
	h[i].heapIdx = int32(i)
	h[j].heapIdx = int32(j)
}

func (h timeHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h[j].deadline.Before(h[i].deadline) {
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
		if r := l + 1; r < n && h[r].deadline.Before(h[l].deadline) {
			j = r
		}
		if !h[j].deadline.Before(h[i].deadline) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
