package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/client"
)

// TestKill9AdminAnswersAreDurable: every admin write is answered only once
// it is on disk, as a publish is. Each is issued against a real broker
// process, which is SIGKILLed the moment the answer arrives, and the
// restarted broker must show the write. A purge of 20,000 waiting jobs
// used to come back in part: its records were still in the log's buffer.
func TestKill9AdminAnswersAreDurable(t *testing.T) {
	if testing.Short() {
		t.Skip("kill test skipped in -short mode")
	}
	t.Parallel()
	dir := t.TempDir()
	addr := freePort(t)
	args := []string{"serve", "-grpc-addr", addr, "-http-addr", "off", "-data-dir", dir, "-log-level", "warn"}
	proc := startChild(t, args...)
	defer func() { proc.kill() }()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := client.Dial(ctx, addr, client.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	restart := func() {
		t.Helper()
		proc.kill()
		proc = startChild(t, args...)
		waitServing(ctx, t, addr)
	}
	fill := func(queue string, n int) []string {
		t.Helper()
		var ids []string
		payload := []byte(strings.Repeat("работа ", 40))
		for len(ids) < n {
			msgs := make([]*client.Message, min(500, n-len(ids)))
			for i := range msgs {
				msgs[i] = &client.Message{Queue: queue, Producer: "admin-kill", Payload: payload}
			}
			got, err := cl.Publish(ctx, msgs...)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, got...)
		}
		return ids
	}
	queue := func(name string) *pb.QueueInfo {
		t.Helper()
		q, err := cl.Queue(ctx, name)
		if err != nil {
			t.Fatalf("queue %s after the kill: %v", name, err)
		}
		return q
	}

	for round := range 3 {
		name := fmt.Sprintf("purge-%d", round)
		fill(name, 20_000)
		// Publishes to another queue keep the log's writer in one fsync
		// after another, so that an answer given before the purge's
		// records are written would be given before they reach even the
		// page cache.
		busy, stopBusy := context.WithCancel(ctx)
		go func() {
			for busy.Err() == nil {
				_, _ = cl.Publish(busy, &client.Message{Queue: "busy", Payload: make([]byte, 64<<10)})
			}
		}()
		n, err := cl.PurgeQueue(ctx, name)
		stopBusy()
		if err != nil || n != 20_000 {
			t.Fatalf("purge: %d, %v", n, err)
		}
		restart()
		if q := queue(name); q.Ready != 0 {
			t.Fatalf("round %d: %d of 20,000 purged jobs came back after the kill", round, q.Ready)
		}
	}

	ids := fill("cancel", 3)
	if _, err := cl.CancelJob(ctx, "cancel", ids[1]); err != nil {
		t.Fatal(err)
	}
	restart()
	if _, err := cl.GetJob(ctx, "cancel", ids[1]); err == nil {
		t.Fatal("a cancelled job came back after the kill")
	}

	fill("paused", 1)
	if _, err := cl.PauseQueue(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	restart()
	if !queue("paused").Paused {
		t.Fatal("a paused queue was resumed by the kill")
	}
	if _, err := cl.ResumeQueue(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	restart()
	if queue("paused").Paused {
		t.Fatal("a resumed queue was paused again by the kill")
	}

	// A declare with settings, of a queue nothing else created.
	if _, err := cl.DeclareQueue(ctx, "declared", &pb.QueueConfig{MaxAttempts: 7, Lease: durationpb.New(42 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	restart()
	if c := queue("declared").GetConfig(); c.GetMaxAttempts() != 7 || c.GetLease().AsDuration() != 42*time.Second {
		t.Fatalf("declared queue after the kill: %v", c)
	}

	// Dead letters: requeue some, delete the rest.
	if _, err := cl.DeclareQueue(ctx, "dead", &pb.QueueConfig{MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	fill("dead", 4)
	wctx, stop := context.WithCancel(ctx)
	failed := make(chan struct{}, 4)
	go cl.RunWorker(wctx, client.WorkerConfig{Queue: "dead"}, func(context.Context, *client.Delivery) error {
		failed <- struct{}{}
		return fmt.Errorf("failing on purpose")
	})
	for range 4 {
		<-failed
	}
	stop()
	for queue("dead").DeadLetters != 4 {
		select {
		case <-ctx.Done():
			t.Fatal("the failed jobs were never dead-lettered")
		case <-time.After(10 * time.Millisecond):
		}
	}
	dead, err := cl.ListDeadLetters(ctx, "dead", 10)
	if err != nil || len(dead) != 4 {
		t.Fatalf("dead letters: %v, %v", dead, err)
	}
	if n, err := cl.RequeueDeadLetters(ctx, "dead", dead[0].GetId()); err != nil || n != 1 {
		t.Fatalf("requeue: %d, %v", n, err)
	}
	if n, err := cl.DeleteDeadLetters(ctx, "dead"); err != nil || n != 3 {
		t.Fatalf("delete dead letters: %d, %v", n, err)
	}
	restart()
	if q := queue("dead"); q.DeadLetters != 0 || q.Ready != 1 {
		t.Fatalf("after the kill: %d dead letters and %d ready, want 0 and the requeued 1", q.DeadLetters, q.Ready)
	}

	if _, err := cl.DeleteQueue(ctx, "cancel", true); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.DeclareSchedule(ctx, &pb.Schedule{Name: "nightly", Queue: "reports", Cron: "0 3 * * *"}); err != nil {
		t.Fatal(err)
	}
	restart()
	if err := cl.DeleteSchedule(ctx, "nightly"); err != nil {
		t.Fatal(err)
	}
	restart()
	if _, err := cl.Queue(ctx, "cancel"); err == nil {
		t.Fatal("a deleted queue came back after the kill")
	}
	if list, err := cl.ListSchedules(ctx); err != nil || len(list) != 0 {
		t.Fatalf("schedules after the kill: %v, %v (the deleted one came back)", list, err)
	}
	if err := proc.stop(); err != nil {
		t.Errorf("final shutdown: %v", err)
	}
}
