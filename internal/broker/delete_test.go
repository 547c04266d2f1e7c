package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/delivery"
	"github.com/harbinger-mq/harbinger/internal/store"
)

func TestDeleteQueueRefusesWhatItWouldLose(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{Queue: QueueConfig{MaxAttempts: 1}})
	b := tb.b
	if _, err := b.DeleteQueue("nope", true); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("deleting a queue that does not exist: %v", err)
	}
	// One job in each state: running, dead, delayed, waiting.
	tb.publish(t, msg("q", "run"), msg("q", "die"))
	c := tb.sub(t, "q", 2)
	next(t, c)
	if err := c.Nack(next(t, c).ID, NackDeadLetter, 0, "bad"); err != nil {
		t.Fatal(err)
	}
	tb.publish(t, &Message{Queue: "q", JobType: "later", Payload: make([]byte, 4<<10), Delay: time.Hour}, msg("q", "wait"))
	_, err := b.DeleteQueue("q", false)
	var inUse *QueueInUseError
	if !errors.As(err, &inUse) || inUse.Held != (QueueDeleted{Waiting: 1, Delayed: 1, Running: 1, Dead: 1, Consumers: 1}) {
		t.Fatalf("deleting a queue that holds one job of each state: %v", err)
	}
	if !strings.Contains(err.Error(), "1 waiting, 1 delayed, 1 running and 1 dead-lettered") || !strings.Contains(err.Error(), "force") {
		t.Errorf("the refusal does not say what the queue holds and how to delete it anyway: %v", err)
	}
	if in, err := b.Queue("q"); err != nil || in.Ready != 1 || in.InFlight != 1 {
		t.Fatalf("a refused delete changed the queue: %+v, %v", in, err)
	}

	// A schedule's next tick would create the queue again: refused even
	// with force, and the error names the schedule.
	if _, err := b.DeclareSchedule(Schedule{Name: "nightly-報告", Queue: "reports", Every: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Declare("reports", QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.DeleteQueue("reports", true); !errors.Is(err, ErrQueueInUse) || !strings.Contains(err.Error(), "nightly-報告") {
		t.Fatalf("deleting a queue a schedule publishes to: %v", err)
	}
	if err := b.DeleteSchedule("nightly-報告"); err != nil {
		t.Fatal(err)
	}
	if d, err := b.DeleteQueue("reports", false); err != nil || d != (QueueDeleted{}) {
		t.Fatalf("deleting an empty queue: %+v, %v", d, err)
	}
}

func TestDeleteQueueForced(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{MaxBytes: 1 << 20})
	b := tb.b
	if _, err := b.Declare("q", QueueConfig{Policy: "fifo", MaxDepth: 50}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		tb.publish(t, &Message{Queue: "q", Producer: "wéb", JobType: fmt.Sprint("t", i%3), Payload: make([]byte, 1<<10),
			UniqueKey: fmt.Sprint("k", i), UniqueFor: time.Hour})
	}
	tb.publish(t, &Message{Queue: "other", Payload: []byte("stays")})
	held := tb.sub(t, "q", 2)
	d1, d2 := next(t, held), next(t, held)
	if err := held.Ack(d1.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	// A second consumer blocked in Next when the queue goes.
	idle := tb.sub(t, "q", 1)
	got := make(chan error, 1)
	go func() {
		for {
			if _, err := idle.Next(context.Background()); err != nil {
				got <- err
				return
			}
		}
	}()

	d, err := b.DeleteQueue("q", true)
	if err != nil || d != (QueueDeleted{Waiting: 18, Running: 1, Consumers: 2}) {
		t.Fatalf("forced delete: %+v, %v", d, err)
	}
	if err := <-got; !errors.Is(err, ErrQueueDeleted) {
		t.Errorf("a consumer waiting in Next: %v, want ErrQueueDeleted", err)
	}
	if _, err := held.Next(context.Background()); !errors.Is(err, ErrQueueDeleted) {
		t.Errorf("Next after the delete: %v", err)
	}
	if err := held.Ack(d2.ID, time.Second); !errors.Is(err, ErrUnknownMessage) {
		t.Errorf("acking a job of a deleted queue: %v", err)
	}
	if err := held.Nack(d2.ID, NackRequeue, 0, ""); !errors.Is(err, ErrUnknownMessage) {
		t.Errorf("nacking a job of a deleted queue: %v", err)
	}
	held.Return(d2.ID)
	held.Close() // a second close changes nothing
	if _, err := b.Queue("q"); !errors.Is(err, ErrQueueNotFound) {
		t.Errorf("the deleted queue is still listed: %v", err)
	}
	if st := b.Stats(); st.Consumers != 0 || st.InFlight != 0 || st.Queues != 1 {
		t.Errorf("after the delete: %+v", st)
	}
	other, err := b.Queue("other")
	if err != nil || other.Ready != 1 {
		t.Fatalf("the other queue: %+v, %v", other, err)
	}
	if held := b.bytes.Load(); held != int64(jobSize(jobOf(t, b, "other"), namesOf(jobOf(t, b, "other")), "other")) {
		t.Errorf("the budget holds %d bytes after the delete, only the other queue's job should remain", held)
	}

	// The name is free: a publish creates a new queue with the broker's
	// defaults, its unique keys gone.
	tb.publish(t, &Message{Queue: "q", Producer: "wéb", JobType: "t0", Payload: []byte("again"), UniqueKey: "k0", UniqueFor: time.Hour})
	in, err := b.Queue("q")
	if err != nil || in.Ready != 1 || in.Config.Policy == "fifo" || in.Published != 1 {
		t.Fatalf("the queue published to after its delete: %+v, %v", in, err)
	}
	c := tb.sub(t, "q", 1)
	if got := next(t, c); string(got.Payload) != "again" {
		t.Errorf("delivered %q from the new queue", got.Payload)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.Close()
	if err := b.Shutdown(ctx); err != nil {
		t.Errorf("shutdown after a delete waited for jobs that were dropped: %v", err)
	}
}

// jobOf finds the one job of queue name.
func jobOf(t *testing.T, b *Broker, name string) *delivery.Job {
	t.Helper()
	q, err := b.lookup(name, false)
	if err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.line.Peek(b.clk.Now(), 1)[0]
}

func namesOf(j *delivery.Job) delivery.Names {
	return delivery.Names{Producer: j.Producer(), JobType: j.JobType()}
}

func TestDeleteQueueSurvivesRestart(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store, clk *clock.Fake) {
		b := durable(t, st, clk, Config{})
		if _, err := b.Declare("q", QueueConfig{Policy: "fifo"}); err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			if _, err := b.Publish(&Message{Queue: "q", JobType: "ünïcode", Payload: make([]byte, 2<<10), UniqueKey: fmt.Sprint(i), UniqueFor: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		c, err := b.Subscribe("q", "w", 1)
		if err != nil {
			t.Fatal(err)
		}
		d := next(t, c)
		if err := c.Ack(d.ID, 3*time.Second); err != nil { // the predictor learns
			t.Fatal(err)
		}
		if err := b.Pause("q", true); err != nil {
			t.Fatal(err)
		}
		if _, err := b.DeleteQueue("q", true); err != nil {
			t.Fatal(err)
		}
		r := durable(t, st, clk, Config{})
		if _, err := r.Queue("q"); !errors.Is(err, ErrQueueNotFound) {
			t.Fatalf("the deleted queue came back at restart: %v", err)
		}
		// Published to again: the new queue, and only it, survives a
		// checkpoint and a restart.
		if _, err := r.Publish(&Message{Queue: "q", Payload: []byte("new"), UniqueKey: "0", UniqueFor: time.Hour}); err != nil {
			t.Fatalf("the unique key of a deleted queue is still taken: %v", err)
		}
		if err := r.Checkpoint(context.Background()); err != nil {
			t.Fatal(err)
		}
		in, err := durable(t, st, clk, Config{}).Queue("q")
		if err != nil || in.Ready != 1 || in.Paused || in.Config.Policy == "fifo" || in.Predictor.Keys != 0 {
			t.Fatalf("the queue created after the delete, restarted: %+v, %v", in, err)
		}
	})
}

// Publishes racing with deletes: every publish the broker accepted is
// either in the queue at the end or counted by the delete that dropped
// it. None goes into a queue object that was already deleted.
func TestDeleteQueueRacingPublishes(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	b := tb.b
	const producers, each = 4, 300
	var accepted sync.Map
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				ids, err := b.Publish(&Message{Queue: "q", Producer: fmt.Sprint("p", p), Payload: make([]byte, 1<<10)})
				if err == nil {
					accepted.Store(ids[0], i)
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	dropped, deletes := 0, 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		d, err := b.DeleteQueue("q", true)
		if err != nil && !errors.Is(err, ErrQueueNotFound) {
			t.Fatal(err)
		}
		if err == nil {
			deletes++
		}
		dropped += d.Waiting
	}
	t.Logf("%d deletes", deletes)
	n := 0
	accepted.Range(func(any, any) bool { n++; return true })
	left := 0
	if in, err := b.Queue("q"); err == nil {
		left = in.Ready
	}
	if n != producers*each {
		t.Errorf("%d of %d publishes accepted", n, producers*each)
	}
	if dropped+left != n {
		t.Errorf("%d publishes accepted, %d dropped by deletes and %d left: %d lost", n, dropped, left, n-dropped-left)
	}
}
