package broker

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// GetJob finds a job in each state it can be in, with what the broker knows
// of it there, and nothing once it is gone; a restarted broker finds the
// same jobs.
func TestGetJobInEveryState(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store, clk *clock.Fake) {
		b := durable(t, st, clk, Config{Queue: QueueConfig{MaxAttempts: 3, Lease: time.Minute}})
		if _, err := b.Declare("q", QueueConfig{Policy: "fifo"}); err != nil { // the first three run
			t.Fatal(err)
		}
		payload := bytes.Repeat([]byte("é\xff"), 2<<10) // 6 KiB, invalid UTF-8 inside
		headers := map[string]string{"trace": "abc", "ключ": "значение"}
		ids, err := b.Publish(
			&Message{Queue: "q", Producer: "wéb", JobType: "run", Payload: payload, Headers: headers},
			&Message{Queue: "q", Producer: "wéb", JobType: "die", Payload: []byte("x")},
			&Message{Queue: "q", Producer: "cron", JobType: "later", Payload: []byte("y"), Delay: time.Hour},
			&Message{Queue: "q", Producer: "wéb", JobType: "done", Payload: []byte("w")},
			&Message{Queue: "q", Producer: "wéb", JobType: "wait", Payload: []byte("z"), TTL: 10 * time.Minute},
		)
		if err != nil {
			t.Fatal(err)
		}
		run, die, later, done, wait := ids[0], ids[1], ids[2], ids[3], ids[4]
		published := clk.Now()
		clk.Advance(time.Second)
		c, err := b.Subscribe("q", "worker-α", 3)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]Delivery{}
		for range 3 {
			d := next(t, c)
			got[d.ID] = d
		}
		if _, ok := got[wait]; ok {
			t.Fatal("the waiting job was delivered; the test needs it waiting")
		}
		if err := c.Ack(done, time.Millisecond); err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Second)
		if err := c.Nack(die, NackDeadLetter, 0, "bad input: ✗"); err != nil {
			t.Fatal(err)
		}
		leased := published.Add(time.Second)

		check := func(t *testing.T, b *Broker, afterRestart bool) {
			t.Helper()
			j, err := b.GetJob("q", run)
			switch {
			case err != nil:
				t.Fatal(err)
			case afterRestart && (j.State != JobWaiting || j.Attempts != 1):
				t.Errorf("the running job after a restart: %+v, want it waiting with its attempt counted", j)
			case !afterRestart && (j.State != JobRunning || j.Consumer != "worker-α" || !j.Leased.Equal(leased) ||
				!j.Deadline.Equal(leased.Add(time.Minute)) || j.Attempts != 1):
				t.Errorf("the running job: %+v", j)
			}
			if !bytes.Equal(j.Payload, payload) || !maps.Equal(j.Headers, headers) || j.Producer != "wéb" || j.JobType != "run" ||
				!j.PublishedAt.Equal(published) || j.MaxAttempts != 3 || j.Queue != "q" || j.ID != run {
				t.Errorf("the running job as published: %+v", j)
			}
			if j, err := b.GetJob("q", die); err != nil || j.State != JobDead || j.Reason != "nacked: bad input: ✗" ||
				!j.DeadAt.Equal(published.Add(3*time.Second)) || j.Attempts != 1 {
				t.Errorf("the dead letter: %+v, %v", j, err)
			}
			if j, err := b.GetJob("q", later); err != nil || j.State != JobDelayed || !j.Due.Equal(published.Add(time.Hour)) {
				t.Errorf("the delayed job: %+v, %v", j, err)
			}
			if j, err := b.GetJob("q", wait); err != nil || j.State != JobWaiting || !j.Enqueued.Equal(published) ||
				!j.Expires.Equal(published.Add(10*time.Minute)) || j.Attempts != 0 || !j.Cold || !j.Long {
				t.Errorf("the waiting job: %+v, %v", j, err)
			}
			if _, err := b.GetJob("q", done); !errors.Is(err, ErrUnknownMessage) {
				t.Errorf("the acked job: %v, want ErrUnknownMessage", err)
			}
			if _, err := b.GetJob("nope", wait); !errors.Is(err, ErrQueueNotFound) {
				t.Errorf("a job of a queue that does not exist: %v", err)
			}
		}
		check(t, b, false)
		check(t, durable(t, st, clk, Config{Queue: QueueConfig{MaxAttempts: 3, Lease: time.Minute}}), true)

		// A running job cancelled stays running, marked, until its worker
		// lets it go.
		if _, err := b.Cancel("q", run); err != nil {
			t.Fatal(err)
		}
		if j, err := b.GetJob("q", run); err != nil || j.State != JobRunning || !j.Cancelled {
			t.Errorf("the running job after a cancel: %+v, %v", j, err)
		}
		// Gone once cancelled; the index follows.
		if _, err := b.Cancel("q", wait); err != nil {
			t.Fatal(err)
		}
		if _, err := b.GetJob("q", wait); !errors.Is(err, ErrUnknownMessage) {
			t.Errorf("the cancelled job: %v", err)
		}
		// And a job published after the index was built is found.
		ids, err = b.Publish(&Message{Queue: "q", JobType: "new"})
		if err != nil {
			t.Fatal(err)
		}
		if j, err := b.GetJob("q", ids[0]); err != nil || j.JobType != "new" {
			t.Errorf("a job published after the first lookup: %+v, %v", j, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c.Close()
		_ = b.Shutdown(ctx)
	})
}

// A queue that keeps its ended jobs (KeepDone) reports the last ones to
// end, acked (with the time its worker reported) or cancelled, and
// forgets the older; not across a restart, which keeps the setting.
func TestGetJobKeepsEndedJobs(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store, clk *clock.Fake) {
		b := durable(t, st, clk, Config{})
		if _, err := b.Declare("q", QueueConfig{Policy: "fifo", KeepDone: 2}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Declare("bad", QueueConfig{KeepDone: MaxKeepDone + 1}); !errors.Is(err, ErrInvalid) {
			t.Errorf("keep_done over its bound: %v", err)
		}
		ids, err := b.Publish(&Message{Queue: "q", Producer: "wéb", JobType: "thumbnail", Payload: make([]byte, 4<<10)},
			&Message{Queue: "q", JobType: "later", Delay: time.Hour}, &Message{Queue: "q", JobType: "third"})
		if err != nil {
			t.Fatal(err)
		}
		c, err := b.Subscribe("q", "w", 1)
		if err != nil {
			t.Fatal(err)
		}
		d := next(t, c)
		clk.Advance(3 * time.Second)
		if err := c.Ack(d.ID, 2500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		ended := clk.Now()
		if j, err := b.GetJob("q", ids[0]); err != nil || j.State != JobDone || j.Took != 2500*time.Millisecond ||
			!j.EndedAt.Equal(ended) || j.Attempts != 1 || j.Producer != "wéb" || j.JobType != "thumbnail" || j.Payload != nil {
			t.Errorf("the acked job: %+v, %v", j, err)
		}
		if _, err := b.Cancel("q", ids[1]); err != nil {
			t.Fatal(err)
		}
		if j, err := b.GetJob("q", ids[1]); err != nil || j.State != JobCancelled || j.Took != 0 {
			t.Errorf("the cancelled job: %+v, %v", j, err)
		}
		c.AddCredit(1)
		if err := c.Ack(next(t, c).ID, time.Second); err != nil {
			t.Fatal(err)
		}
		// Three ended, two kept: the first is gone.
		if _, err := b.GetJob("q", ids[0]); !errors.Is(err, ErrUnknownMessage) {
			t.Errorf("the oldest of three ended jobs with keep_done 2: %v", err)
		}
		if j, err := b.GetJob("q", ids[2]); err != nil || j.State != JobDone {
			t.Errorf("the newest ended job: %+v, %v", j, err)
		}
		r := durable(t, st, clk, Config{})
		if in, err := r.Queue("q"); err != nil || in.Config.KeepDone != 2 {
			t.Errorf("keep_done after a restart: %+v, %v", in.Config, err)
		}
		if _, err := r.GetJob("q", ids[2]); !errors.Is(err, ErrUnknownMessage) {
			t.Errorf("an ended job after a restart: %v, want it forgotten (kept in memory only)", err)
		}
		c.Close()
	})
}
