package history

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func randomEntry(rng *rand.Rand, now time.Time, keys []string) Entry {
	arr := now.Add(-time.Duration(rng.IntN(5000)) * time.Millisecond)
	start := arr.Add(time.Duration(rng.IntN(int(now.Sub(arr)) + 1)))
	d := now.Sub(start)
	if d == 0 {
		d = time.Microsecond
	}
	return Entry{Arrived: arr, Producer: "p" + fmt.Sprint(rng.IntN(3)), Key: keys[rng.IntN(len(keys))], Size: rng.Uint64N(1 << 20),
		Attempt: 1 + rng.IntN(3), Started: start, Done: now, Duration: d, Outcome: Outcome(1 + rng.IntN(3))}
}

// TestRecordMatchesModel drives the record and the reference with the
// same random adds and checks they keep the same entries: the record's
// kept window is always a suffix of what was added, as short as the caps
// need and no shorter.
func TestRecordMatchesModel(t *testing.T) {
	t.Parallel()
	keys := []string{"send-email", "report.export", "résumé", "発送", "a\xffb", ""}
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 7))
		cfg := Config{MaxBytes: MinMaxBytes + rng.Int64N(8*chunkLen*EntryBytes), MaxAge: time.Duration(1+rng.IntN(600)) * time.Second}
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var all []Entry
		now := t0
		for i := range 20_000 {
			now = now.Add(time.Duration(rng.IntN(200)) * time.Millisecond)
			e := randomEntry(rng, now, keys)
			r.Add(e, now)
			all = append(all, e)
			if i%997 != 0 && i != 19_999 {
				continue
			}
			got := r.Window(time.Time{}, now)
			// The model: the longest suffix within the age that fits a
			// budget, counting whole chunks. The record may waste up to
			// two chunks (a part-used first chunk, a spare), never more,
			// and never keeps more than the model at the full cap.
			suffix := func(budget int64) []Entry {
				keys := map[keyName]bool{}
				var kb int64
				n := 0
				for k := len(all) - 1; k >= 0; k-- {
					e := all[k]
					if e.Done.Before(now.Add(-r.Config().MaxAge)) {
						break
					}
					kn := keyName{e.Producer, e.Key}
					nkb := kb
					if !keys[kn] {
						nkb += keyCost(e.Producer, e.Key)
					}
					if int64((n+1+chunkLen-1)/chunkLen)*chunkLen*EntryBytes+nkb > budget {
						break
					}
					keys[kn], kb, n = true, nkb, n+1
				}
				return all[len(all)-n:]
			}
			most, least := suffix(r.Config().MaxBytes), suffix(r.Config().MaxBytes-2*chunkLen*EntryBytes)
			if len(got) > len(most) || len(got) < len(least) {
				t.Fatalf("seed %d add %d: record keeps %d entries, model %d to %d", seed, i, len(got), len(least), len(most))
			}
			want := all[len(all)-len(got):]
			for k := range got {
				if !sameEntry(got[k], want[k]) {
					t.Fatalf("seed %d add %d entry %d: %+v, want %+v", seed, i, k, got[k], want[k])
				}
			}
			if r.Bytes() > r.Config().MaxBytes {
				t.Fatalf("seed %d: %d bytes over the cap %d", seed, r.Bytes(), r.Config().MaxBytes)
			}
			if int64(len(all)) != int64(r.Len())+r.Dropped {
				t.Fatalf("seed %d: %d added, %d kept + %d dropped", seed, len(all), r.Len(), r.Dropped)
			}
		}
	}
}

func sameEntry(a, b Entry) bool {
	return a.Arrived.Equal(b.Arrived) && a.Started.Equal(b.Started) && a.Done.Equal(b.Done) && a.Duration == b.Duration &&
		a.Producer == b.Producer && a.Key == b.Key && a.Size == b.Size && a.Attempt == b.Attempt && a.Outcome == b.Outcome
}

func TestWindowSince(t *testing.T) {
	t.Parallel()
	r, _ := New(Config{})
	for i := range 5000 {
		now := t0.Add(time.Duration(i) * time.Second)
		r.Add(Entry{Arrived: now.Add(-time.Second), Key: "k", Attempt: 1, Started: now.Add(-time.Second), Done: now, Duration: time.Second, Outcome: Ack}, now)
	}
	now := t0.Add(4999 * time.Second)
	got := r.Window(now.Add(-time.Hour), now)
	if len(got) != 3601 || !got[0].Done.Equal(now.Add(-time.Hour)) {
		t.Fatalf("last hour: %d entries from %v, want 3601 from %v", len(got), got[0].Done, now.Add(-time.Hour))
	}
	// An hour later with nothing new, the 24 h age cap has not struck yet;
	// a day later everything is gone.
	if got := r.Window(time.Time{}, now.Add(time.Hour)); len(got) != 5000 {
		t.Fatalf("%d entries an hour on, want 5000", len(got))
	}
	if got := r.Window(time.Time{}, now.Add(25*time.Hour)); len(got) != 0 || r.Keys() != 0 || r.Bytes() != 0 {
		t.Fatalf("a day on: %d entries, %d keys, %d bytes; want none", len(got), r.Keys(), r.Bytes())
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{Off: true}); err != ErrOff {
		t.Fatalf("off: %v", err)
	}
	for _, c := range []Config{{MaxBytes: 10}, {MaxBytes: MaxMaxBytes + 1}, {MaxAge: time.Millisecond}} {
		if _, err := New(c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// TestRecordBoundedManyKeys is the cap under the load the docs promise:
// 100,000 keys and a million jobs an hour (an hour of them, added at
// their settle times), the record's own count and the Go heap both under
// the default cap all along.
func TestRecordBoundedManyKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("a million entries")
	}
	r, _ := New(Config{})
	peak := fillHour(r, 100_000, 1_000_000, func(i int) {
		if r.Bytes() > r.Config().MaxBytes {
			t.Fatalf("add %d: %d bytes over the cap %d", i, r.Bytes(), r.Config().MaxBytes)
		}
	})
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("kept %d entries of %d keys, %d dropped; counted %d bytes (peak %d); heap in use %d bytes", r.Len(), r.Keys(), r.Dropped, r.Bytes(), peak, ms.HeapInuse)
	if r.Len() < 100_000 {
		t.Fatalf("kept only %d entries", r.Len())
	}
}

// fillHour adds jobs settles spread evenly over an hour, keys drawn from
// nkeys names (one in ten non-ASCII), and returns the peak counted bytes.
func fillHour(r *Record, nkeys, jobs int, check func(i int)) int64 {
	names := make([]string, nkeys)
	for i := range names {
		if i%10 == 0 {
			names[i] = fmt.Sprintf("ジョブ-%06d", i)
		} else {
			names[i] = fmt.Sprintf("job.type-%06d", i)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	step := time.Hour / time.Duration(jobs)
	var peak int64
	for i := range jobs {
		now := t0.Add(time.Duration(i) * step)
		d := time.Duration(1+rng.IntN(2000)) * time.Millisecond
		r.Add(Entry{Arrived: now.Add(-d - time.Second), Producer: "api", Key: names[rng.IntN(nkeys)], Size: 1024, Attempt: 1,
			Started: now.Add(-d), Done: now, Duration: d, Outcome: Ack}, now)
		peak = max(peak, r.Bytes())
		if check != nil {
			check(i)
		}
	}
	return peak
}

// BenchmarkAdd is the cost of recording one settle with 100,000 live keys,
// the cap full (the steady state of a busy queue).
func BenchmarkAdd(b *testing.B) {
	r, _ := New(Config{})
	fillHour(r, 100_000, 400_000, nil)
	names := make([]string, 100_000)
	for i := range names {
		names[i] = fmt.Sprintf("job.type-%06d", i)
	}
	now := t0.Add(2 * time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		now = now.Add(time.Millisecond)
		r.Add(Entry{Arrived: now.Add(-time.Second), Producer: "api", Key: names[i%len(names)], Size: 1024, Attempt: 1,
			Started: now.Add(-time.Second), Done: now, Duration: time.Second, Outcome: Ack}, now)
	}
	b.ReportMetric(float64(r.Bytes()), "record-bytes")
}

// BenchmarkHourManyKeys fills a record with an hour of a million jobs over
// 100,000 keys and reports its counted bytes and the heap it holds.
func BenchmarkHourManyKeys(b *testing.B) {
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		r, _ := New(Config{})
		peak := fillHour(r, 100_000, 1_000_000, nil)
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(peak), "peak-counted-bytes")
		b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse)), "heap-bytes")
		b.ReportMetric(float64(r.Len()), "entries-kept")
		runtime.KeepAlive(r)
	}
}
