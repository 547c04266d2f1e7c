package delivery

import (
	"strconv"
	"testing"
)

// BenchmarkSnapshot is the part of a checkpoint that holds a queue's lock
// for the whole queue: listing 1,000,000 waiting jobs.
func BenchmarkSnapshot(b *testing.B) {
	cfg := modelConfig()
	cfg.MaxDepth = 2_000_000
	l := newLine(b, cfg)
	for i := range 1_000_000 {
		j := newJob(strconv.Itoa(i), make([]byte, 64))
		if _, err := l.Admit(j, Names{"p", "t"}, t0, t0); err != nil {
			b.Fatal(err)
		}
		l.Commit(j, t0)
		l.Fx.Clear()
	}
	b.ReportAllocs()
	for b.Loop() {
		if n := l.Snapshot().Len(); n != 1_000_000 {
			b.Fatalf("%d jobs listed", n)
		}
	}
}

// BenchmarkCancel cancels waiting jobs by id in a queue of 100,000, each
// replaced by a new one so that the queue keeps its size. The first
// Cancel builds the index by id; each after it is a lookup.
func BenchmarkCancel(b *testing.B) {
	cfg := modelConfig()
	cfg.MaxDepth = 1_000_000
	l := newLine(b, cfg)
	n := 0
	add := func() {
		j := newJob(strconv.Itoa(n), make([]byte, 64))
		n++
		if _, err := l.Admit(j, Names{"p", "t"}, t0, t0); err != nil {
			b.Fatal(err)
		}
		l.Commit(j, t0)
		l.Fx.Clear()
	}
	for range 100_000 {
		add()
	}
	next := 0
	for b.Loop() {
		if _, err := l.Cancel(strconv.Itoa(next), t0); err != nil {
			b.Fatal(err)
		}
		next++
		l.Fx.Clear()
		add()
	}
}
