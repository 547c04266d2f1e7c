package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
)

// BenchmarkWaits is the dashboard's per-queue question (how long have the
// waiting jobs waited: oldest, P50, P99) over 1,000,000 waiting jobs
// published ten per millisecond of a fake clock.
func BenchmarkWaits(b *testing.B) {
	const jobs = 1_000_000
	clk := clock.NewFake(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))
	br, err := New(Config{Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]*Message, 0, 10)
	for i := range jobs {
		batch = append(batch, &Message{Queue: "q", Producer: "web", JobType: fmt.Sprint("type-", i%8), Payload: make([]byte, 64)})
		if len(batch) == cap(batch) {
			if _, err := br.Publish(batch...); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
			clk.Advance(time.Millisecond)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		w, err := br.Waits("q")
		if err != nil || w.Waiting != jobs || w.Oldest != 100*time.Second {
			b.Fatalf("%+v %v", w, err)
		}
	}
}
