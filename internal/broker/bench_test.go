package broker

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
)

func benchBroker(b *testing.B) *Broker {
	br, err := New(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = br.Shutdown(context.Background()) })
	return br
}

// BenchmarkPublishDeliverAck is one job's whole life on one goroutine.
func BenchmarkPublishDeliverAck(b *testing.B) {
	br := benchBroker(b)
	c, err := br.Subscribe("q", "bench", 1)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	payload := make([]byte, 64)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := br.Publish(&Message{Queue: "q", Producer: "p", JobType: "j", Payload: payload}); err != nil {
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
}

// BenchmarkParallelQueues runs publish+deliver+ack on one queue per
// goroutine, showing that queues do not contend.
func BenchmarkParallelQueues(b *testing.B) {
	br := benchBroker(b)
	var mu sync.Mutex
	n := 0
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		mu.Lock()
		n++
		name := "q" + string(rune('a'+n))
		mu.Unlock()
		c, err := br.Subscribe(name, "bench", 1)
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		ctx := context.Background()
		for pb.Next() {
			if _, err := br.Publish(&Message{Queue: name, Producer: "p", JobType: "j"}); err != nil {
				b.Error(err)
				return
			}
			d, err := c.Next(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			_ = c.Ack(d.ID, time.Millisecond)
			c.AddCredit(1)
		}
	})
}
