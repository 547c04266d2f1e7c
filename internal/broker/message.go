package broker

import (
	"crypto/rand"
	"encoding/base32"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/harbinger-mq/harbinger/internal/delivery"
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
	// Enqueued is when the job took its place in line: its publish, or
	// when it fell due if it was delayed or held back for a retry.
	Enqueued  time.Time
	Lease     time.Duration
	Tier      int
	Predicted time.Duration
	// Cancel marks not a delivery but a notice: the job ID, which this
	// consumer holds, was cancelled; stop it. Only ID and Queue are set.
	Cancel bool
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

// idGen makes message ids: a random per-process prefix, so ids stay unique
// across restarts, followed by a base-32 counter. They are short (about 12
// bytes, at most 15 for the first 34 billion), so a job keeps its id in
// itself (delivery.Job.SetID).
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

// give gives j the next id, which j keeps in itself: no allocation.
func (g *idGen) give(j *delivery.Job) {
	var buf [8 + 13]byte
	j.SetIDBytes(g.append(buf[:0]))
}

func (g *idGen) append(b []byte) []byte {
	b = append(b, g.prefix[:]...)
	return strconv.AppendUint(b, g.n.Add(1), 32)
}
