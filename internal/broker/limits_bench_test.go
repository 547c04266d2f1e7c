package broker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/fair"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// BenchmarkDurableDeliveries drains b.N jobs of eight tenants through 32
// consumers (prefetch 1, acking at once) from a broker on the file store
// with fsync always, with and without limits that never bind: what it
// costs a queue with limits that each delivery waits for its record in the
// log. Reports jobs/s.
func BenchmarkDurableDeliveries(b *testing.B) {
	for _, tc := range []struct {
		name string
		cfg  QueueConfig
	}{
		{"plain", QueueConfig{}},
		{"limits", QueueConfig{GroupBy: "tenant", Limits: Rules{"tenant=1000"}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			st, err := store.OpenFile(b.TempDir(), store.FileOptions{Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			br, err := New(Config{Store: st, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			defer br.Shutdown(context.Background())
			cfg := tc.cfg
			cfg.MaxDepth = b.N + 1
			if _, err := br.Declare("q", cfg); err != nil {
				b.Fatal(err)
			}
			batch := make([]*Message, 0, 500)
			for i := range b.N {
				batch = append(batch, &Message{Queue: "q", Producer: "web", JobType: "mail", Payload: make([]byte, 1024),
					Headers: map[string]string{fair.TenantHeader: fmt.Sprint("tenant-", i%8)}})
				if len(batch) == cap(batch) || i == b.N-1 {
					if _, err := br.Publish(batch...); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			var mu sync.Mutex
			left := b.N
			for i := range 32 {
				c, err := br.Subscribe("q", fmt.Sprint("w", i), 1)
				if err != nil {
					b.Fatal(err)
				}
				wg.Go(func() {
					defer c.Close()
					for {
						mu.Lock()
						if left == 0 {
							mu.Unlock()
							return
						}
						left--
						mu.Unlock()
						d, err := c.Next(context.Background())
						if err != nil {
							b.Error(err)
							return
						}
						if err := c.Ack(d.ID, time.Millisecond); err != nil {
							b.Error(err)
							return
						}
						c.AddCredit(1)
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
		})
	}
}
