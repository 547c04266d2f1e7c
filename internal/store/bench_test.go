package store

import (
	"sync"
	"testing"
)

// BenchmarkConfirmedAppends is the durable publish path's floor: writers
// that each wait for their record to be on disk (fsync always) before
// appending the next, as confirming producers do. ns/op is per record.
func BenchmarkConfirmedAppends(b *testing.B) {
	for _, writers := range []int{1, 4} {
		b.Run(map[int]string{1: "writers=1", 4: "writers=4"}[writers], func(b *testing.B) {
			ffs := &FaultFS{}
			s, err := OpenFile(b.TempDir(), FileOptions{FS: ffs, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if err := s.Replay(func(*Record) error { return nil }); err != nil {
				b.Fatal(err)
			}
			rec := sample(1)[0]
			b.ResetTimer()
			var wg sync.WaitGroup
			per := b.N / writers
			for range writers {
				wg.Go(func() {
					for range per {
						pos, err := s.Append(rec)
						if err == nil {
							err = s.Wait(pos)
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(per*writers)/float64(ffs.Syncs()), "records/fsync")
		})
	}
}
