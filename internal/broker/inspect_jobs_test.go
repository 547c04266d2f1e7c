package broker

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// WaitingJobs lists the line in the order consumers then receive it.
func TestWaitingJobsInDeliveryOrder(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	// Teach the queue how long "short", "medium" and "long" take, so the
	// default policy reorders what is published next. Its guard keeps
	// long jobs near their FIFO place, so the reordering shows between
	// medium and short jobs: a short job, a small share of a medium one's
	// cost, may overtake it.
	c := tb.sub(t, "q", 1)
	took := map[string]time.Duration{"short": time.Millisecond, "medium": 200 * time.Millisecond, "long": 5 * time.Second}
	for range 40 {
		for _, jt := range []string{"short", "medium", "long"} {
			tb.publish(t, msg("q", jt))
			d := next(t, c)
			if err := c.Ack(d.ID, took[jt]); err != nil {
				t.Fatal(err)
			}
			c.AddCredit(1)
		}
	}
	c.Close()
	var published []string
	for i := range 20 {
		published = append(published, tb.publish(t, msg("q", []string{"medium", "short"}[i%2]))...)
	}
	jobs, err := tb.b.WaitingJobs("q", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != len(published) {
		t.Fatalf("WaitingJobs listed %d, want %d", len(jobs), len(published))
	}
	var listed []string
	for _, j := range jobs {
		listed = append(listed, j.ID)
	}
	if slices.Equal(listed, published) {
		t.Fatalf("the line is in publish order; the predictive queue should have moved short jobs first")
	}
	if jobs[0].JobType != "short" || jobs[0].Cost >= jobs[len(jobs)-1].Cost {
		t.Errorf("first listed %+v, last %+v: want the short job first, cheaper than the last", jobs[0], jobs[len(jobs)-1])
	}
	if few, _ := tb.b.WaitingJobs("q", 3); len(few) != 3 || few[0].ID != listed[0] {
		t.Errorf("WaitingJobs(q, 3) = %+v", few)
	}
	c2 := tb.sub(t, "q", len(published))
	var delivered []string
	for range published {
		delivered = append(delivered, next(t, c2).ID)
	}
	if !slices.Equal(listed, delivered) {
		t.Errorf("listed %v\ndelivered %v", listed, delivered)
	}
	if _, err := tb.b.WaitingJobs("nope", 0); err == nil {
		t.Error("WaitingJobs of a missing queue: no error")
	}
}

func TestInFlightJobsAndWaits(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	if w, err := tb.b.Waits("q"); err == nil {
		t.Errorf("Waits of a missing queue = %+v, nil", w)
	}
	ids := tb.publish(t, msg("q", "a"))
	tb.clk.Advance(10 * time.Second)
	ids = append(ids, tb.publish(t, msg("q", "a"), msg("q", "a"))...)
	tb.clk.Advance(2 * time.Second)
	w, err := tb.b.Waits("q")
	if err != nil {
		t.Fatal(err)
	}
	if w.Waiting != 3 || w.Oldest != 12*time.Second || w.P50 != 2*time.Second || w.P99 != 12*time.Second {
		t.Errorf("Waits = %+v, want 3 waiting, oldest 12s, p50 2s, p99 12s", w)
	}
	c, err := tb.b.Subscribe("q", "worker-7", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first := next(t, c)
	tb.clk.Advance(time.Second)
	second := next(t, c)
	fl, err := tb.b.InFlightJobs("q", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(fl) != 2 || fl[0].ID != first.ID || fl[1].ID != second.ID || fl[0].Consumer != "worker-7" ||
		fl[0].Attempt != 1 || fl[1].Leased.Sub(fl[0].Leased) != time.Second || fl[0].Deadline.Sub(fl[0].Leased) != DefaultLease {
		t.Errorf("InFlightJobs = %+v", fl)
	}
	if fl, _ := tb.b.InFlightJobs("q", 1); len(fl) != 1 || fl[0].ID != first.ID {
		t.Errorf("InFlightJobs(q, 1) = %+v", fl)
	}
	if first.ID != ids[0] {
		t.Errorf("first delivery %s, want the oldest job %s", first.ID, ids[0])
	}
	if w, _ := tb.b.Waits("q"); w.Waiting != 1 || w.Oldest != 3*time.Second {
		t.Errorf("Waits after two deliveries = %+v, want 1 waiting for 3s", w)
	}
}

// Dead letters deleted are gone for good: from the list, from the byte
// budget, and from what a restart recovers.
func TestDeleteDeadLetters(t *testing.T) {
	t.Parallel()
	st := store.NewMemory()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := durable(t, st, clk, Config{})
	defer func() { _ = b.Shutdown(context.Background()) }()
	if _, err := b.Publish(msg("q", "a"), msg("q", "a"), msg("q", "a")); err != nil {
		t.Fatal(err)
	}
	held := b.bytes.Load()
	c, err := b.Subscribe("q", "w", 3)
	if err != nil {
		t.Fatal(err)
	}
	var dead []string
	for range 3 {
		d := next(t, c)
		if err := c.Nack(d.ID, NackDeadLetter, 0, "bad input"); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, d.ID)
	}
	c.Close()
	n, err := b.DeleteDeadLetters("q", []string{dead[1], "no-such-id"})
	if err != nil || n != 1 {
		t.Fatalf("DeleteDeadLetters(one) = %d, %v", n, err)
	}
	dls, _ := b.DeadLetters("q", 0)
	if len(dls) != 2 || dls[0].ID != dead[0] || dls[1].ID != dead[2] {
		t.Fatalf("dead letters after deleting one: %+v", dls)
	}
	if got := b.bytes.Load(); got >= held {
		t.Errorf("bytes held %d after a delete, %d before: not released", got, held)
	}
	if _, err := b.DeleteDeadLetters("nope", nil); err == nil {
		t.Error("DeleteDeadLetters of a missing queue: no error")
	}

	re := durable(t, st, clk, Config{})
	defer func() { _ = re.Shutdown(context.Background()) }()
	dls, _ = re.DeadLetters("q", 0)
	if len(dls) != 2 || dls[0].ID != dead[0] || dls[1].ID != dead[2] {
		t.Fatalf("recovered dead letters: %+v", dls)
	}
	if n, err := re.DeleteDeadLetters("q", nil); err != nil || n != 2 {
		t.Fatalf("DeleteDeadLetters(all) = %d, %v", n, err)
	}
	if dls, _ := re.DeadLetters("q", 0); len(dls) != 0 {
		t.Errorf("dead letters after deleting all: %+v", dls)
	}
}

// Every state is listed: delayed (published to run later) and
// retry-pending (nacked with a delay), soonest due first; ended jobs a
// queue keeps, the most recent first; and RunNow brings a delayed one in.
func TestDelayedRetryDoneListedAndRunNow(t *testing.T) {
	t.Parallel()
	st := store.NewMemory()
	tb := setup(t, Config{Store: st})
	if _, err := tb.b.Declare("q", QueueConfig{KeepDone: 10}); err != nil {
		t.Fatal(err)
	}
	later := tb.publish(t, &Message{Queue: "q", Producer: "p", JobType: "later", Delay: 10 * time.Minute},
		&Message{Queue: "q", Producer: "p", JobType: "sooner", Delay: 5 * time.Minute})
	tb.publish(t, msg("q", "fails"), msg("q", "works"))
	c := tb.sub(t, "q", 2)
	fails, works := next(t, c), next(t, c)
	if err := c.Nack(fails.ID, NackRequeueAfter, time.Minute, "try later"); err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(works.ID, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	delayed, total, err := tb.b.DelayedJobs("q", 0, 0)
	if err != nil || total != 3 || len(delayed) != 3 {
		t.Fatalf("DelayedJobs = %+v, %d, %v; want 3", delayed, total, err)
	}
	want := []struct {
		id    string
		retry bool
		due   time.Duration
	}{{fails.ID, true, time.Minute}, {later[1], false, 5 * time.Minute}, {later[0], false, 10 * time.Minute}}
	for i, w := range want {
		d := delayed[i]
		if d.ID != w.id || d.Retry != w.retry || !d.Due.Equal(tb.b.Now().Add(w.due)) {
			t.Errorf("delayed[%d] = %+v, want id %s retry %v due in %v", i, d, w.id, w.retry, w.due)
		}
	}
	if d := delayed[0]; d.Attempts != 1 {
		t.Errorf("the retry-pending job has %d attempts, want 1", d.Attempts)
	}
	if page, total, _ := tb.b.DelayedJobs("q", 1, 1); total != 3 || len(page) != 1 || page[0].ID != later[1] {
		t.Errorf("DelayedJobs(offset 1, limit 1) = %+v, %d", page, total)
	}
	done, total, err := tb.b.DoneJobs("q", 0, 0)
	if err != nil || total != 1 || done[0].ID != works.ID || done[0].State != JobDone || done[0].Took != 200*time.Millisecond {
		t.Fatalf("DoneJobs = %+v, %d, %v", done, total, err)
	}

	// Run the later one now, and a waiting or unknown id is skipped.
	n, err := tb.b.RunNow("q", []string{later[0], "nope", works.ID})
	if err != nil || n != 1 {
		t.Fatalf("RunNow = %d, %v; want 1", n, err)
	}
	if j, err := tb.b.GetJob("q", later[0]); err != nil || j.State != JobWaiting {
		t.Fatalf("after RunNow the job is %+v, %v; want waiting", j, err)
	}
	c.AddCredit(1)
	if d := next(t, c); d.ID != later[0] {
		t.Errorf("delivered %s, want the job run now %s", d.ID, later[0])
	}
	if _, total, _ := tb.b.DelayedJobs("q", 0, 0); total != 2 {
		t.Errorf("%d delayed after RunNow, want 2", total)
	}
	if j, err := tb.b.FindJob(later[1], nil); err != nil || j.Queue != "q" || j.State != JobDelayed {
		t.Errorf("FindJob = %+v, %v", j, err)
	}
	if _, err := tb.b.FindJob(later[1], func(string) bool { return false }); err == nil {
		t.Error("FindJob found a job in a queue it was not allowed to look in")
	}
}
