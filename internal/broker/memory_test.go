package broker

import (
	"fmt"
	"runtime"
	"testing"
)

// TestHeapPerWaitingJob reports the heap a waiting 64-byte job costs in
// memory mode (an in-process figure: RSS out of process is bench cost's).
// It fails only if the cost grows past a generous bound.
func TestHeapPerWaitingJob(t *testing.T) {
	const jobs = 100_000
	b, _ := New(Config{})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	batch := make([]*Message, 0, 1000)
	for i := range jobs {
		batch = append(batch, &Message{Queue: "q", Producer: fmt.Sprint("web-", i%4), JobType: fmt.Sprint("type-", i%8), Payload: make([]byte, 64)})
		if len(batch) == cap(batch) {
			if _, err := b.Publish(batch...); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / jobs
	t.Logf("heap per waiting 64-byte job: %.0f bytes", per)
	if per > 1024 {
		t.Fatalf("a waiting job costs %.0f bytes of heap", per)
	}
	runtime.KeepAlive(b)
}
