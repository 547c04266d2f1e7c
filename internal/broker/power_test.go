package broker

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/store"
	"github.com/harbinger-mq/harbinger/internal/store/storetest"
)

var powerCuts = flag.Int("power-cuts", 0, "power cuts to simulate in TestPowerCutKeepsEveryAnswer (0: a size that suits the build)")

// powerSegment is small, so that checkpoints and rotations happen within
// a short workload.
const powerSegment = 16 << 10

// powerRun is what a workload was told: the contracts a recovered broker
// must honour.
type powerRun struct {
	published map[string]bool            // every id a publish stored, answered or not
	kept      map[string]bool            // publishes answered before the cut
	removed   map[string]string          // ids an answered purge, cancel or deletion dropped, with the call
	paused    map[string]bool            // each queue's pause state as last answered
	attempts  map[string]int             // each queue's MaxAttempts as last declared and answered
	touched   map[string]map[string]bool // queue -> calls made to it after the answers above (their outcome is open)
}

// powerWorkload drives a durable broker on fsys through publishes,
// deliveries, acks, nacks of every kind, purges, cancels, pauses,
// declares, dead-letter requeues and deletions, queue deletions and
// checkpoints (with calls between their batches), one call at a time,
// until fsys has taken its cut. A call answered while the cut had not
// been taken is a promise: what it did must survive.
func powerWorkload(t *testing.T, dir string, fsys *storetest.CrashFS, seed uint64, steps int) (*Broker, *powerRun) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 11))
	st, err := store.OpenFile(dir, store.FileOptions{FS: fsys, SegmentBytes: powerSegment, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := Config{MaxDeadLetters: 8, CheckpointBytes: 1 << 40, Queue: QueueConfig{MaxAttempts: 3, Lease: 10 * time.Second}}
	b := durable(t, st, clk, cfg)
	b.batchJobs = 1 + rng.IntN(3)
	run := &powerRun{published: map[string]bool{}, kept: map[string]bool{}, removed: map[string]string{},
		paused: map[string]bool{}, attempts: map[string]int{}, touched: map[string]map[string]bool{}}
	queues := []string{"a", "b", "ü"}
	answered := func() bool { return !fsys.Cut() }
	touch := func(q, call string) {
		if run.touched[q] == nil {
			run.touched[q] = map[string]bool{}
		}
		run.touched[q][call] = true
	}
	ids := func(q string) map[string]bool {
		out := map[string]bool{}
		for _, v := range view(b) {
			if q == "" || v.Queue == q {
				out[v.ID] = true
			}
		}
		return out
	}
	dropped := func(before map[string]bool, q, call string) {
		after := ids(q)
		for id := range before {
			if !after[id] {
				if answered() {
					run.removed[id] = call
				}
			}
		}
	}
	var cons []*Consumer
	held := map[*Consumer][]string{}
	cancelled := map[string]bool{}
	var step func(depth int)
	step = func(depth int) {
		q := queues[rng.IntN(len(queues))]
		switch op := rng.IntN(20); {
		case op < 7:
			var msgs []*Message
			for range 1 + rng.IntN(3) {
				msgs = append(msgs, &Message{Queue: q, Producer: "wéb", JobType: fmt.Sprint(rng.IntN(3)),
					Payload: []byte(strings.Repeat("ключ\xff", 1+rng.IntN(400))),
					TTL:     time.Duration(rng.IntN(2)) * 40 * time.Second, Delay: time.Duration(rng.IntN(4)/3) * 20 * time.Second})
			}
			res := b.PublishEach(msgs, nil)
			ok := answered()
			for _, r := range res {
				if r.Err == nil {
					run.published[r.ID] = true
					if ok {
						run.kept[r.ID] = true
					}
				}
			}
		case op == 7 && len(cons) < 3:
			c, err := b.Subscribe(q, "w", 2)
			if err == nil {
				cons = append(cons, c)
			}
		case op < 11 && len(cons) > 0:
			c := cons[rng.IntN(len(cons))]
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if d, err := c.Next(ctx); err == nil && !d.Cancel {
				held[c] = append(held[c], d.ID)
			}
		case op < 14 && len(cons) > 0:
			c := cons[rng.IntN(len(cons))]
			if len(held[c]) == 0 {
				return
			}
			id := held[c][0]
			held[c] = held[c][1:]
			switch rng.IntN(5) {
			case 0, 1:
				_ = c.Ack(id, time.Millisecond)
			case 2:
				_ = c.Nack(id, NackDeadLetter, 0, "dead: échec")
			case 3:
				_ = c.Nack(id, NackRequeueAfter, time.Duration(rng.IntN(20))*time.Second, "later")
			case 4:
				_ = c.Nack(id, NackRequeue, 0, "again")
			}
			c.AddCredit(1)
		case op == 14:
			clk.Advance(time.Duration(rng.IntN(15)) * time.Second)
		case op == 15:
			before := ids(q)
			if _, err := b.Purge(q); err == nil {
				dropped(before, q, "purge")
			}
			touch(q, "purge")
		case op == 16:
			for id := range ids(q) {
				// A running job stays with its worker until it settles,
				// and is gone for good: it comes back from no restart.
				cancelled[id] = true
				if _, err := b.Cancel(q, id); err == nil && answered() {
					run.removed[id] = "cancel"
				}
				break
			}
		case op == 17:
			p := rng.IntN(2) == 0
			touch(q, "pause")
			if err := b.Pause(q, p); err == nil && answered() {
				run.paused[q] = p
				delete(run.touched[q], "pause")
			}
		case op == 18:
			n := 2 + rng.IntN(3)
			touch(q, "declare")
			if _, err := b.Declare(q, QueueConfig{MaxAttempts: n, Lease: 10 * time.Second}); err == nil && answered() {
				run.attempts[q] = n
				delete(run.touched[q], "declare")
			}
		default:
			switch rng.IntN(4) {
			case 0:
				touch(q, "requeue")
				_, _ = b.RequeueDeadLetters(q, nil)
			case 1:
				before := ids(q)
				if _, err := b.DeleteDeadLetters(q, nil); err == nil {
					dropped(before, q, "delete dead letters")
				}
			case 2:
				if depth > 0 {
					return
				}
				_ = b.checkpoint(context.Background(), func() {
					for range rng.IntN(3) {
						step(depth + 1)
					}
				})
			case 3:
				before := ids(q)
				touch(q, "delete")
				if _, err := b.DeleteQueue(q, true); err == nil {
					dropped(before, q, "queue deletion")
					if answered() {
						delete(run.paused, q)
						delete(run.attempts, q)
					}
				}
			}
		}
	}
	for i := 0; i < steps && !fsys.Cut(); i++ {
		step(0)
	}
	// Whatever was removed since its publish (by a call answered or not)
	// may be gone: only publishes still held by the live broker must be.
	live := ids("")
	for id := range run.kept {
		if !live[id] || cancelled[id] {
			delete(run.kept, id)
		}
	}
	crash(b)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return b, run
}

// TestPowerCutKeepsEveryAnswer cuts the power at random points of a
// broker's life, keeping only what was fsynced or also a torn part of the
// rest, and recovers a broker from what is left. Every answered publish
// that the broker still held must come back; every job an answered purge,
// cancel or deletion dropped must stay gone; every answered pause and
// declare must hold (unless a later call to the queue was cut short); no
// job that was never published may appear; and the log must always open.
func TestPowerCutKeepsEveryAnswer(t *testing.T) {
	t.Parallel()
	const steps = 150
	probe := storetest.New()
	powerWorkload(t, t.TempDir(), probe, 0, steps)
	total := probe.Ops()
	n := *powerCuts
	if n == 0 {
		n = 1000
		if raceEnabled || testing.Short() {
			n = 100
		}
	}
	rng := rand.New(rand.NewPCG(3, 3))
	for i := range n {
		seed := uint64(i)
		mode := storetest.CutMode(i % 2)
		at := 1 + rng.IntN(total)
		fsys := storetest.New()
		fsys.CutAt(at, mode, rand.New(rand.NewPCG(seed, 5)))
		dir := t.TempDir()
		_, run := powerWorkload(t, dir, fsys, seed, steps)
		img := fsys.Image()
		if img == nil {
			continue
		}
		where := fmt.Sprintf("cut %d (%s at operation %d of %d, seed %d)", i, mode, at, total, seed)
		st, err := store.OpenFile(dir, store.FileOptions{FS: img, SegmentBytes: powerSegment, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		r, err := New(Config{Store: st, Clock: clk, MaxDeadLetters: 8, CheckpointBytes: 1 << 40,
			Logger: slog.New(slog.DiscardHandler), Queue: QueueConfig{MaxAttempts: 3, Lease: 10 * time.Second}})
		if err != nil {
			t.Fatalf("%s: the log a power cut left does not recover: %v", where, err)
		}
		got := map[string]string{}
		for _, v := range view(r) {
			got[v.ID] = v.Queue
		}
		for id := range run.kept {
			if _, ok := got[id]; !ok {
				t.Fatalf("%s: job %s was published and answered, and is lost", where, id)
			}
		}
		for id, call := range run.removed {
			if q, ok := got[id]; ok {
				t.Fatalf("%s: job %s came back in queue %q after an answered %s dropped it", where, id, q, call)
			}
		}
		for id := range got {
			if !run.published[id] {
				t.Fatalf("%s: job %s was never published", where, id)
			}
		}
		for q, p := range run.paused {
			if run.touched[q]["pause"] || run.touched[q]["delete"] {
				continue
			}
			rq := (*r.queues.Load())[q]
			if rq == nil {
				t.Fatalf("%s: queue %q lost after an answered pause", where, q)
			}
			rq.mu.Lock()
			paused := rq.paused
			rq.mu.Unlock()
			if paused != p {
				t.Fatalf("%s: queue %q recovered paused=%v, the answered pause said %v", where, q, paused, p)
			}
		}
		for q, n := range run.attempts {
			if run.touched[q]["declare"] || run.touched[q]["delete"] {
				continue
			}
			rq := (*r.queues.Load())[q]
			if rq == nil {
				t.Fatalf("%s: queue %q lost after an answered declare", where, q)
			}
			rq.mu.Lock()
			got := rq.cfg.MaxAttempts
			rq.mu.Unlock()
			if got != n {
				t.Fatalf("%s: queue %q recovered MaxAttempts %d, the answered declare said %d", where, q, got, n)
			}
		}
		crash(r)
		st.Close()
	}
	t.Logf("%d power cuts at random points of %d file operations", n, total)
}
