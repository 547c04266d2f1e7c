package trace

import (
	"testing"
	"time"
)

// FuzzLoad feeds arbitrary file contents to Load: it may reject them, but
// must never panic, and what it accepts must generate a sane job stream.
func FuzzLoad(f *testing.F) {
	inv, run := invSheet(baseFns...), runSheet(baseFns...)
	f.Add(inv.bytes(f), run.bytes(f))
	f.Add(invSheet(baseFns[0]).bytes(f), runSheet(baseFns[1]).bytes(f))
	f.Add([]byte("HashFunction,HashApp,HashOwner\n"), []byte("\"a\nb\",1\n"))
	f.Add([]byte{}, []byte{})

	f.Fuzz(func(t *testing.T, inv, run []byte) {
		dir := writeDir(t, inv, run)
		tr, err := Load(dir, Options{StartMinute: 1, Minutes: 3, Seeds: []uint64{9}})
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		types := tr.Types()
		if len(types) == 0 || tr.Workers() < 1 || !(tr.OfferedLoad() >= 0) {
			t.Fatalf("accepted trace with %d types, %d workers, load %v", len(types), tr.Workers(), tr.OfferedLoad())
		}
		_, _ = tr.Name(), tr.Describe()
		if tr.jobs > 10_000 {
			return // valid, but too many jobs to generate on every fuzz input
		}
		jobs := tr.Generate(9)
		if int64(len(jobs)) != tr.jobs {
			t.Fatalf("%d jobs, want %d", len(jobs), tr.jobs)
		}
		end := time.Duration(tr.windowSeconds() * float64(time.Second))
		for i, j := range jobs {
			if j.Seq != i || j.Type < 0 || j.Type >= len(types) || j.Arrival < 0 || j.Arrival >= end ||
				j.Duration < time.Microsecond || (i > 0 && j.Arrival < jobs[i-1].Arrival) {
				t.Fatalf("job %d = %+v", i, j)
			}
		}
	})
}
