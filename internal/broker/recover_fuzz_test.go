package broker

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/store"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// logFromBytes reads a fuzz input as a log: each record takes its kind,
// queue, id and fields from the next bytes, over a few queues and ids so
// that records meet the jobs they name, in orders the broker never writes
// (an ack before its job, a job twice, a delivery of a dead letter, a
// config that does not decode).
func logFromBytes(data []byte, base time.Time) []*store.Record {
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	at := func() time.Time { return base.Add(time.Duration(int8(next())) * time.Minute) }
	var recs []*store.Record
	for len(data) > 0 && len(recs) < 64 {
		r := &store.Record{Kind: store.Kind(next()%15 + 1), Queue: []string{"q", "r", "é\u2028"}[next()%3], ID: fmt.Sprint("j", next()%5)}
		switch r.Kind {
		case store.KindJob:
			j := &store.Job{ID: r.ID, Producer: "p", JobType: fmt.Sprint("t", next()%3), Payload: make([]byte, int(next())*16),
				MaxAttempts: int(next() % 4), Seq: uint64(next()), Tier: int(next() % 8), Cost: time.Duration(next()) * time.Millisecond,
				Long: next()%2 == 0, Reset: next()%4 == 0, Scheduled: next()%4 == 0, Attempts: int(next() % 6), State: store.State(next() % 3),
				PublishedAt: at(), Enqueued: at(), Until: at(), DeadAt: at(), Reason: "why"}
			if next()%2 == 0 {
				j.Expires = at()
				j.TTL = time.Duration(next()) * time.Second
			}
			if next()%4 == 0 {
				j.Headers = map[string]string{"k": "v"}
			}
			r.Job = j
		case store.KindDelay, store.KindDead, store.KindRequeue, store.KindUnique:
			r.At, r.Reason = at(), fmt.Sprint("k", next()%3)
		case store.KindAck:
			r.Duration = time.Duration(int8(next())) * time.Millisecond
		case store.KindDeclare:
			cfg := QueueConfig{Policy: []string{"fifo", "bounded", "weighted", "predictive", "nonsense"}[next()%5], Tiers: int(next() % 6),
				MaxAttempts: int(next() % 4), Lease: time.Duration(next()) * time.Second}
			r.Data, _ = json.Marshal(cfg)
			if next()%8 == 7 {
				r.Data = r.Data[:len(r.Data)/2] // does not decode
			}
		case store.KindPredictor:
			r.Data = []byte{next(), next(), next()}
		case store.KindPause:
			r.Data = []byte{next() % 3}
		case store.KindSchedule:
			s := Schedule{Name: r.ID, Queue: r.Queue, Every: time.Duration(next()) * time.Minute, Start: at()}
			if next()%3 == 0 {
				s.Every, s.Cron = 0, []string{"@hourly", "0 0 30 2 *", "TZ=UTC", "nonsense"}[next()%4]
			}
			if next()%5 != 4 { // else: deleted
				r.Data, _ = json.Marshal(s)
			}
		}
		recs = append(recs, r)
	}
	return recs
}

// byID orders jobs of the same FIFO position by id: a log the broker did
// not write may give two jobs one position, and then their order is not
// what is compared.
func byID(v []jobView) []jobView {
	slices.SortStableFunc(v, func(a, b jobView) int {
		return cmp.Or(strings.Compare(a.Queue, b.Queue), cmp.Compare(a.Seq, b.Seq), strings.Compare(a.ID, b.ID))
	})
	return v
}

// FuzzRecoverLog recovers brokers from logs of valid records in any
// order and content: recovery either refuses with an error or gives a
// broker that works (takes a publish, delivers, acks), and a broker that
// recovered once recovers again, from what it then left in the log, to
// the same jobs.
func FuzzRecoverLog(f *testing.F) {
	for _, s := range []string{
		"\x01\x00\x00\x01\x03\x02\x05\x02\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e",
		"\x02\x00\x01\x00\x05\x00\x10\x02\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x09\x00\x01\x20",
		"\x0d\x01\x02\x00\x10\x05\x0e\x00\x00\x00\x06\x00\x00\x0d",
		"\x02\x00\x00\x00\x08\x01\x10\x03\x01\x01\x01\x02\x02\xff\x00\x00\x00\x00\x01\x07\x01\x00\x00\x00\x05",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		base := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
		st := store.NewMemory()
		if _, err := st.Append(logFromBytes(data, base)...); err != nil {
			t.Fatal(err)
		}
		clk := clock.NewFake(base)
		b, err := New(Config{Store: st, Clock: clk, Logger: discard, Queue: QueueConfig{MaxAttempts: 3}})
		if err != nil {
			t.Logf("refused: %v", err)
			return // refused, with a reason: the operator can salvage or fix
		}
		before := byID(view(b))
		// It works: a publish is delivered and acked.
		if _, err := b.Publish(&Message{Queue: "fresh", Producer: "p", JobType: "t", Payload: []byte("x")}); err != nil {
			t.Fatalf("publish after recovery: %v", err)
		}
		c, err := b.Subscribe("fresh", "w", 1)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		d, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("the published job is not delivered: %v", err)
		}
		if err := c.Ack(d.ID, time.Millisecond); err != nil {
			t.Fatalf("ack after recovery: %v", err)
		}
		c.Close()
		crash(b)
		again, err := New(Config{Store: st, Clock: clk, Logger: discard, Queue: QueueConfig{MaxAttempts: 3}})
		if err != nil {
			t.Fatalf("a log this broker recovered from, and wrote to, does not recover again: %v", err)
		}
		defer crash(again)
		sameView(t, byID(view(again)), before)
	})
}
