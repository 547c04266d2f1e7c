package broker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/store"
)

// BenchmarkRecover replays a log of 1,000,000 waiting 64-byte jobs (spread
// over 8 keys in 2 queues) into a new broker: the time a restart takes
// before the broker serves. Run it with
//
//	go test -run '^$' -bench BenchmarkRecover -benchtime 3x ./internal/broker/
func BenchmarkRecover(b *testing.B) {
	const jobs = 1_000_000
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := b.TempDir()
	st, err := store.OpenFile(dir, store.FileOptions{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Replay(func(*store.Record) error { return nil }); err != nil {
		b.Fatal(err)
	}
	_ = st.Close()
	st, _ = store.OpenFile(dir, store.FileOptions{Logger: quiet})
	br, err := New(Config{Store: st, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 64)
	batch := make([]*Message, 0, 1000)
	for i := range jobs {
		batch = append(batch, &Message{Queue: fmt.Sprint("q", i%2), Producer: "web", JobType: fmt.Sprint("type-", i%8), Payload: payload})
		if len(batch) == cap(batch) {
			if _, err := br.Publish(batch...); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	_ = br.Shutdown(context.Background())
	size := st.Size()
	_ = st.Close()
	br = nil
	runtime.GC()

	b.ResetTimer()
	for b.Loop() {
		st, err := store.OpenFile(dir, store.FileOptions{Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		r, err := New(Config{Store: st, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "s/recovery")
		if in, _ := r.Queue("q0"); in.Ready != jobs/2 {
			b.Fatalf("recovered %d jobs in q0, want %d", in.Ready, jobs/2)
		}
		b.StopTimer()
		_ = r.Shutdown(context.Background())
		_ = st.Close()
		runtime.GC()
		b.StartTimer()
	}
	b.ReportMetric(float64(size)/jobs, "log-bytes/job")
}

// BenchmarkCheckpointStall checkpoints a queue of 1,000,000 waiting 64-byte
// jobs while a producer keeps publishing to it, one confirmed message at a
// time, and reports the checkpoint's time and the longest publish: how
// long the checkpoint kept the queue from taking work.
func BenchmarkCheckpointStall(b *testing.B) {
	const jobs = 1_000_000
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.OpenFile(b.TempDir(), store.FileOptions{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	br, err := New(Config{Store: st, Logger: quiet, CheckpointBytes: 1 << 40, Queue: QueueConfig{MaxDepth: 2 * jobs}})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Shutdown(context.Background())
	payload := make([]byte, 64)
	batch := make([]*Message, 0, 1000)
	for i := range jobs {
		batch = append(batch, &Message{Queue: "q", Producer: "web", JobType: fmt.Sprint("type-", i%8), Payload: payload})
		if len(batch) == cap(batch) {
			if _, err := br.Publish(batch...); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	var worst time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		stop, done := make(chan struct{}), make(chan struct{})
		var longest time.Duration
		go func() {
			defer close(done)
			for {
				start := time.Now()
				if _, err := br.Publish(&Message{Queue: "q", Producer: "web", JobType: "live", Payload: payload}); err != nil {
					b.Error(err)
					return
				}
				longest = max(longest, time.Since(start))
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
		if err := br.Checkpoint(context.Background()); err != nil {
			b.Fatal(err)
		}
		close(stop)
		<-done
		worst = max(worst, longest)
	}
	b.ReportMetric(float64(worst)/float64(time.Millisecond), "max-publish-ms")
}
