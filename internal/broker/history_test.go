package broker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/history"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// TestHistoryRecordsSettles runs jobs of many keys through acks, a retry
// and a dead letter, and finds each settle in the history with its times,
// key, size, attempt and outcome, and nothing of its payload.
func TestHistoryRecordsSettles(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{Queue: QueueConfig{MaxAttempts: 2}})
	c := tb.sub(t, "q", 1)
	keys := []string{"send-email", "report.export", "発送-ジョブ", "émoji-🚀"}
	var want []history.Entry
	for i := range 40 {
		key := keys[i%len(keys)]
		tb.publish(t, &Message{Queue: "q", Producer: "api", JobType: key, Payload: []byte("secret payload"), SizeHint: uint64(100 + i),
			Headers: map[string]string{"h": "secret header"}})
		arrived := tb.clk.Now()
		tb.clk.Advance(10 * time.Millisecond)
		d := next(t, c)
		started := tb.clk.Now()
		dur := time.Duration(1+i) * time.Millisecond
		tb.clk.Advance(dur)
		if err := c.Ack(d.ID, dur); err != nil {
			t.Fatal(err)
		}
		c.AddCredit(1)
		want = append(want, history.Entry{Arrived: arrived, Producer: "api", Key: key, Size: uint64(100 + i), Attempt: 1,
			Started: started, Done: tb.clk.Now(), Duration: dur, Outcome: history.Ack})
	}
	// A job nacked twice: requeued, then dead at its last attempt.
	tb.publish(t, &Message{Queue: "q", JobType: "flaky"})
	for attempt := 1; attempt <= 2; attempt++ {
		arrived := tb.clk.Now()
		if attempt == 2 {
			arrived = want[len(want)-1].Done
		}
		d := next(t, c)
		tb.clk.Advance(time.Millisecond)
		if err := c.Nack(d.ID, NackRequeue, 0, "boom"); err != nil {
			t.Fatal(err)
		}
		c.AddCredit(1)
		out := history.Nack
		if attempt == 2 {
			out = history.Dead
		}
		want = append(want, history.Entry{Arrived: arrived, Producer: "", Key: "flaky", Attempt: attempt,
			Started: tb.clk.Now().Add(-time.Millisecond), Done: tb.clk.Now(), Outcome: out})
	}
	h, got, err := tb.b.History("q", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if h.Queue != "q" || h.Jobs != len(want) || h.WorkersSeen != 1 || h.Policy != DefaultPolicy {
		t.Fatalf("header %+v", h)
	}
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Key != w.Key || g.Producer != w.Producer || g.Size != w.Size && w.Key != "flaky" || g.Attempt != w.Attempt || g.Outcome != w.Outcome ||
			g.Duration != w.Duration || !g.Done.Equal(w.Done) || !g.Started.Equal(w.Started) || w.Key != "flaky" && !g.Arrived.Equal(w.Arrived) {
			t.Fatalf("entry %d: %+v\nwant %+v", i, g, w)
		}
	}
	// A window: the last millisecond holds only the dead letter's nack and the
	// retry before it.
	if _, es, _ := tb.b.History("q", tb.clk.Now().Add(-time.Millisecond)); len(es) != 2 {
		t.Fatalf("last millisecond: %d entries, want 2", len(es))
	}
	if _, _, err := tb.b.History("nope", time.Time{}); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("unknown queue: %v", err)
	}
}

func TestHistoryOff(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{History: history.Config{Off: true}})
	c := tb.sub(t, "q", 1)
	tb.publish(t, &Message{Queue: "q", JobType: "a"})
	if err := c.Ack(next(t, c).ID, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tb.b.History("q", time.Time{}); !errors.Is(err, ErrHistoryOff) {
		t.Fatalf("err = %v, want ErrHistoryOff", err)
	}
}

// TestHistorySurvivesCleanRestart saves the record at shutdown and finds
// it after a restart on the same log.
func TestHistorySurvivesCleanRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := store.OpenFile(dir, store.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tb := setup(t, Config{})
	b := durable(t, st, tb.clk, Config{})
	c, err := b.Subscribe("q", "w", 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if _, err := b.Publish(&Message{Queue: "q", JobType: fmt.Sprintf("k%d", i%30)}); err != nil {
			t.Fatal(err)
		}
		d := next(t, c)
		tb.clk.Advance(time.Millisecond)
		if err := c.Ack(d.ID, time.Millisecond); err != nil {
			t.Fatal(err)
		}
		c.AddCredit(1)
	}
	c.Close()
	_, before, _ := b.History("q", time.Time{})
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.SaveHistory(dir); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st2, err := store.OpenFile(dir, store.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st2.Close() })
	b2 := durable(t, st2, tb.clk, Config{})
	t.Cleanup(func() { _ = b2.Shutdown(context.Background()) })
	n, err := b2.LoadHistory(dir)
	if err != nil || n != 300 {
		t.Fatalf("loaded %d, %v; want 300", n, err)
	}
	_, after, _ := b2.History("q", time.Time{})
	if len(after) != len(before) {
		t.Fatalf("%d entries after the restart, %d before", len(after), len(before))
	}
	for i := range before {
		if !after[i].Done.Equal(before[i].Done) || after[i].Key != before[i].Key || after[i].Duration != before[i].Duration {
			t.Fatalf("entry %d: %+v, before %+v", i, after[i], before[i])
		}
	}
}

// BenchmarkAckHistory is BenchmarkPublishDeliverAck with the history on
// (the default) and off: the record's cost per job.
func BenchmarkAckHistory(b *testing.B) {
	for _, off := range []bool{false, true} {
		b.Run(fmt.Sprintf("off=%v", off), func(b *testing.B) {
			br, err := New(Config{History: history.Config{Off: off}, Logger: benchBroker(b).log})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = br.Shutdown(context.Background()) })
			c, err := br.Subscribe("q", "bench", 1)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			payload := make([]byte, 64)
			keys := make([]string, 1000)
			for i := range keys {
				keys[i] = fmt.Sprintf("job-%d", i)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				if _, err := br.Publish(&Message{Queue: "q", Producer: "p", JobType: keys[i%len(keys)], Payload: payload}); err != nil {
					b.Fatal(err)
				}
				d, err := c.Next(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Ack(d.ID, time.Millisecond); err != nil {
					b.Fatal(err)
				}
				c.AddCredit(1)
			}
		})
	}
}

// TestHistoryFileUnderCap fills a queue's record to its default cap with
// a million jobs an hour of 100,000 keys and saves it: the file on disk
// is smaller than the record's cap, and loads back whole.
func TestHistoryFileUnderCap(t *testing.T) {
	if testing.Short() {
		t.Skip("a million entries")
	}
	t.Parallel()
	dir := t.TempDir()
	st, err := store.OpenFile(dir, store.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clk := setup(t, Config{}).clk
	b := durable(t, st, clk, Config{})
	if _, err := b.Declare("busy", QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	q, _ := b.lockQueue("busy", false)
	rng := rand.New(rand.NewPCG(1, 1))
	start := clk.Now().Add(-time.Hour)
	for i := range 1_000_000 {
		done := start.Add(time.Duration(i) * (time.Hour / 1_000_000))
		d := time.Duration(1+rng.IntN(2000)) * time.Millisecond
		q.record.Add(history.Entry{Arrived: done.Add(-d - time.Duration(rng.IntN(1000))*time.Millisecond), Producer: "api",
			Key: fmt.Sprintf("job.type-%06d", rng.IntN(100_000)), Size: uint64(rng.IntN(1 << 20)), Attempt: 1,
			Started: done.Add(-d), Done: done, Duration: d, Outcome: history.Ack}, done)
	}
	kept, counted := q.record.Len(), q.record.Bytes()
	q.mu.Unlock()
	began := time.Now()
	if err := b.SaveHistory(dir); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	fi, err := os.Stat(historyFile(dir, "busy"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d entries, %d bytes counted in memory, %d bytes on disk, saved in %v", kept, counted, fi.Size(), took)
	if limit := b.Config().History.MaxBytes; fi.Size() > limit || counted > limit {
		t.Fatalf("%d bytes on disk, %d in memory; the cap is %d", fi.Size(), counted, limit)
	}
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st2, err := store.OpenFile(dir, store.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st2.Close() })
	b2 := durable(t, st2, clk, Config{})
	t.Cleanup(func() { _ = b2.Shutdown(context.Background()) })
	if n, err := b2.LoadHistory(dir); err != nil || n != kept {
		t.Fatalf("loaded %d, %v; want %d", n, err, kept)
	}
}

// TestSaveHistoryEvery saves on the broker's clock, and not after stop.
func TestSaveHistoryEvery(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tb := setup(t, Config{})
	c := tb.sub(t, "q", 1)
	tb.publish(t, &Message{Queue: "q", JobType: "a"})
	if err := c.Ack(next(t, c).ID, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	stop := tb.b.SaveHistoryEvery(dir, time.Minute)
	file := historyFile(dir, "q")
	tb.clk.Advance(59 * time.Second)
	if _, err := os.Stat(file); err == nil {
		t.Fatal("saved before the interval")
	}
	tb.clk.Advance(time.Second)
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatalf("not saved after the interval: %v", err)
	}
	stop()
	if n := tb.clk.Pending(); n != 0 {
		// The broker's own timers: none is armed on an idle queue.
		t.Fatalf("%d timers still armed after stop", n)
	}
	tb.clk.Advance(time.Hour)
	if fi2, _ := os.Stat(file); !fi2.ModTime().Equal(fi.ModTime()) {
		t.Fatal("saved after stop")
	}
}

// TestHistoryTotalCap: every queue's history together stays under the
// broker's total; the queue recording past it sheds its own oldest, a
// quiet queue keeps its record, and a deleted queue's history is given
// back.
func TestHistoryTotalCap(t *testing.T) {
	t.Parallel()
	perQueue := int64(history.MinMaxBytes * 4)
	tb := setup(t, Config{History: history.Config{MaxBytes: perQueue, MaxTotalBytes: perQueue * 3 / 2}})
	fill := func(name string, n int) {
		c := tb.sub(t, name, 1)
		for i := range n {
			tb.publish(t, &Message{Queue: name, JobType: fmt.Sprintf("k%d", i%100)})
			if err := c.Ack(next(t, c).ID, time.Millisecond); err != nil {
				t.Fatal(err)
			}
			c.AddCredit(1)
			if total := tb.b.HistoryBytes(); total > perQueue*3/2 {
				t.Fatalf("%s, ack %d: %d history bytes over the total %d", name, i, total, perQueue*3/2)
			}
		}
	}
	fill("quiet", 3000)
	_, quiet, _ := tb.b.History("quiet", time.Time{})
	fill("busy", 20_000)
	_, quietAfter, _ := tb.b.History("quiet", time.Time{})
	_, busy, _ := tb.b.History("busy", time.Time{})
	if len(quietAfter) != len(quiet) || len(busy) == 0 || len(busy) >= 20_000 {
		t.Fatalf("quiet kept %d of %d; busy kept %d", len(quietAfter), len(quiet), len(busy))
	}
	before := tb.b.HistoryBytes()
	if _, err := tb.b.DeleteQueue("quiet", true); err != nil {
		t.Fatal(err)
	}
	if after := tb.b.HistoryBytes(); after >= before || after > perQueue {
		t.Fatalf("after deleting a queue: %d history bytes, %d before", after, before)
	}
}
