package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// sample returns one record of every kind, with realistic content:
// kilobytes of payload, non-ASCII text, headers.
func sample(i int) []*Record {
	at := time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC).Add(time.Duration(i) * time.Second)
	id := fmt.Sprintf("job-%d", i)
	payload := make([]byte, 4<<10+i)
	for j := range payload {
		payload[j] = byte(j * 7)
	}
	return []*Record{
		{Kind: KindDeclare, Queue: "媒体", Data: []byte(`{"policy":"fifo"}`)},
		{Kind: KindJob, Queue: "媒体", ID: id, Job: &Job{
			ID: id, Producer: "wéb", JobType: "thumbnail", SizeHint: 1 << 40, Payload: payload,
			Headers: map[string]string{"trace": "abc", "ключ": "значение"}, TTL: time.Hour, MaxAttempts: 5,
			PublishedAt: at, Seq: uint64(i + 1), Tier: 2, Cost: 1500 * time.Millisecond, Long: true, Cold: true,
			Enqueued: at, Expires: at.Add(time.Hour), Attempts: 1, RetryBase: 2 * time.Second, RetryMax: time.Hour,
		}},
		{Kind: KindDeliver, Queue: "媒体", ID: id},
		{Kind: KindDeliver, Queue: "媒体", ID: id, At: at.Add(time.Second)},
		{Kind: KindReturn, Queue: "媒体", ID: id},
		{Kind: KindRetry, Queue: "媒体", ID: id},
		{Kind: KindDelay, Queue: "媒体", ID: id, At: at.Add(time.Minute)},
		{Kind: KindDead, Queue: "媒体", ID: id, At: at, Reason: "nacked: 失败"},
		{Kind: KindRequeue, Queue: "媒体", ID: id, At: at},
		{Kind: KindJob, Queue: "q", ID: id + "d", Job: &Job{ID: id + "d", State: Dead, Reason: "expired", DeadAt: at, Reset: true}},
		{Kind: KindJob, Queue: "q", ID: id + "s", Job: &Job{ID: id + "s", State: Delayed, Until: at.Add(time.Hour), Scheduled: true}},
		{Kind: KindAck, Queue: "媒体", ID: id, Duration: 1234567 * time.Microsecond},
		{Kind: KindRemove, Queue: "q", ID: id + "d"},
		{Kind: KindPredictor, Queue: "媒体", Data: []byte{1, 2, 3}},
		{Kind: KindPause, Queue: "媒体", Data: []byte{1}},
		{Kind: KindUnique, Queue: "媒体", ID: id, Reason: "order-42 ✓", At: at.Add(time.Hour)},
		{Kind: KindSchedule, ID: "nightly", Data: []byte(`{"cron":"0 3 * * *"}`)},
		{Kind: KindRates, Queue: "媒体", Data: []byte(`[{"rule":0,"value":"ünï","tokens":0.5}]`)},
		{Kind: KindDrop, Queue: "媒体"},
	}
}

func replayAll(t *testing.T, s Store) []*Record {
	t.Helper()
	var got []*Record
	if err := s.Replay(func(r *Record) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	return got
}

// The conformance suite: every Store passes it.
func TestConformance(t *testing.T) {
	t.Parallel()
	impls := map[string]func(t *testing.T) Store{
		"memory": func(*testing.T) Store { return NewMemory() },
		"file": func(t *testing.T) Store {
			s, err := OpenFile(t.TempDir(), FileOptions{Logger: quiet, SegmentBytes: 16 << 10})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
	for name, open := range impls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Run("round trip", func(t *testing.T) {
				s := open(t)
				if got := replayAll(t, s); len(got) != 0 {
					t.Fatalf("new store replays %d records", len(got))
				}
				var want []*Record
				for i := range 20 {
					recs := sample(i)
					want = append(want, recs...)
					pos, err := s.Append(recs...)
					if err != nil {
						t.Fatal(err)
					}
					if err := s.Wait(pos); err != nil {
						t.Fatal(err)
					}
				}
				if s.Size() <= 0 {
					t.Fatalf("size = %d", s.Size())
				}
				st := s.Stats()
				// The file log's size counts its sync marks too: at most
				// one a sync.
				marks := (st.Size - int64(st.Bytes)) / markFrame
				if st.Records != uint64(len(want)) || st.Size != s.Size() || st.Size < int64(st.Bytes) ||
					(st.Size-int64(st.Bytes))%markFrame != 0 || uint64(marks) > st.Syncs {
					t.Errorf("stats after %d records in %d bytes: %+v", len(want), s.Size(), st)
				}
				var synced, waited uint64
				for i := range st.SyncHist {
					synced += st.SyncHist[i]
					waited += st.WaitHist[i]
				}
				if synced != st.Syncs || waited != st.Waits || st.Syncs > 0 && st.SyncTime <= 0 || st.Waits > 0 && st.WaitTime <= 0 {
					t.Errorf("histograms disagree with their counts: %+v", st)
				}
				checkReplay(t, s, want)
			})
			t.Run("append keeps no record", func(t *testing.T) {
				s := open(t)
				replayAll(t, s)
				want := sample(3)
				reused := make([]*Record, len(want))
				for i, r := range want {
					c := *r
					if r.Job != nil {
						j := *r.Job
						c.Job = &j
					}
					reused[i] = &c
				}
				pos, err := s.Append(reused...)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range reused { // the caller reuses them at once
					r.ID, r.Reason = "overwritten", "overwritten"
					if r.Job != nil {
						r.Job.ID, r.Job.Payload = "overwritten", nil
					}
				}
				if err := s.Wait(pos); err != nil {
					t.Fatal(err)
				}
				checkReplay(t, s, want)
			})
			t.Run("compact", func(t *testing.T) {
				s := open(t)
				replayAll(t, s)
				old := sample(1)
				if _, err := s.Append(old...); err != nil {
					t.Fatal(err)
				}
				m, err := s.Mark()
				if err != nil {
					t.Fatal(err)
				}
				kept := sample(2)
				pos, err := s.Append(kept...)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Wait(pos); err != nil {
					t.Fatal(err)
				}
				before := s.Size()
				if err := s.Compact(m); err != nil {
					t.Fatal(err)
				}
				if s.Size() >= before {
					t.Fatalf("size %d after compact, %d before", s.Size(), before)
				}
				checkReplay(t, s, kept)
			})
		})
	}
}

// checkReplay replays s's records (for a file store, after reopening it)
// and compares them with want.
func checkReplay(t *testing.T, s Store, want []*Record) {
	t.Helper()
	var got []*Record
	switch s := s.(type) {
	case *Memory:
		got = replayAll(t, s)
	case *FileStore:
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := OpenFile(s.dir, FileOptions{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		got = replayAll(t, r)
	}
	if len(got) != len(want) {
		t.Fatalf("replayed %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("record %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

func openFile(t *testing.T, dir string, opts FileOptions) *FileStore {
	t.Helper()
	opts.Logger = quiet
	s, err := OpenFile(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func writeSome(t *testing.T, s *FileStore, n int) []*Record {
	t.Helper()
	var all []*Record
	for i := range n {
		recs := sample(i)
		pos, err := s.Append(recs...)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(pos); err != nil {
			t.Fatal(err)
		}
		all = append(all, recs...)
	}
	return all
}

// frames lists the offsets of the records in a segment's data, skipping
// sync marks, up to its zeros.
func frames(t *testing.T, data []byte) []int {
	t.Helper()
	var offs []int
	for off := 0; off < len(data); {
		if _, ok := readMark(data[off:]); ok {
			off += markFrame
			continue
		}
		if end, _ := endOfRecords(data, off); end {
			break
		}
		_, n, err := readFrame(data[off:])
		if err != nil {
			t.Fatalf("frame at %d: %v", off, err)
		}
		offs = append(offs, off)
		off += n
	}
	return offs
}

// recordsEnd is where a segment's frames and marks end.
func recordsEnd(data []byte) int {
	off := 0
	for off < len(data) {
		if _, ok := readMark(data[off:]); ok {
			off += markFrame
			continue
		}
		_, n, err := readFrame(data[off:])
		if err != nil {
			break
		}
		off += n
	}
	return off
}

func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	if len(m) == 0 {
		t.Fatal("no segments")
	}
	return m[len(m)-1]
}

// A record cut short by a death mid-write is cut off, whether the segment
// was allocated ahead (the half record is followed by zeros) or grows as it
// is written (a file system without fallocate: the half record ends it).
func TestTornFinalRecordIsCut(t *testing.T) {
	t.Parallel()
	for _, allocated := range []bool{true, false} {
		t.Run(fmt.Sprint("allocated ahead ", allocated), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s := openFile(t, dir, FileOptions{})
			replayAll(t, s)
			want := writeSome(t, s, 3)
			end := s.Size()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			seg := lastSegment(t, dir)
			if st, _ := os.Stat(seg); allocated && st.Size() <= end {
				t.Skip("this file system does not allocate ahead")
			}
			if !allocated {
				if err := os.Truncate(seg, end); err != nil {
					t.Fatal(err)
				}
			}
			// The process died halfway through writing one more record.
			frame := appendFrame(nil, sample(9)[1])
			f, err := os.OpenFile(seg, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(frame[:len(frame)/2], end); err != nil {
				t.Fatal(err)
			}
			f.Close()

			r := openFile(t, dir, FileOptions{})
			if got := replayAll(t, r); len(got) != len(want) {
				t.Fatalf("replayed %d records after a torn write, want %d", len(got), len(want))
			}
			// The log goes on cleanly after the cut.
			more := sample(4)
			pos, _ := r.Append(more...)
			if err := r.Wait(pos); err != nil {
				t.Fatal(err)
			}
			checkReplay(t, r, append(want, more...))
		})
	}
}

// In space allocated ahead, the records end at the first zero length. A
// record after zeros is refused where a sync mark after it says the
// segment was on disk past the zeros (a stretch of confirmed records was
// lost), and cut off and kept beside the log where nothing says so: a
// power cut can leave the unsynced tail's later writes without its
// earlier ones.
func TestRecordsAfterZeros(t *testing.T) {
	t.Parallel()
	for _, where := range []string{"before a mark's claim", "after every claim"} {
		t.Run(where, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s := openFile(t, dir, FileOptions{})
			replayAll(t, s)
			want := writeSome(t, s, 3)
			end := s.Size()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			seg := lastSegment(t, dir)
			data, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			var off int
			if where == "after every claim" {
				// The close mark claims the records; a frame lands 4 KiB
				// past it, zeros between.
				off = int(end) + markFrame
				copy(data[off+4096:], appendFrame(nil, sample(9)[1]))
			} else {
				// The second record zeroed, the marks after it intact.
				recs := frames(t, data)
				off = recs[1]
				clear(data[off:recs[2]])
			}
			if err := os.WriteFile(seg, data, 0o644); err != nil {
				t.Fatal(err)
			}
			r, err := OpenFile(dir, FileOptions{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			var got []*Record
			err = r.Replay(func(rec *Record) error { got = append(got, rec); return nil })
			if where == "before a mark's claim" {
				var ce *CorruptError
				if !errors.As(err, &ce) || ce.Offset != int64(off) {
					t.Fatalf("Replay = %v, want a CorruptError at offset %d", err, off)
				}
				if after, _ := os.ReadFile(seg); !bytes.Equal(after, data) {
					t.Fatal("the refused segment was changed")
				}
				return
			}
			if err != nil || len(got) != len(want) {
				t.Fatalf("Replay = %v with %d records, want the %d confirmed", err, len(got), len(want))
			}
			if kept, _ := os.ReadFile(seg + ".corrupt"); !bytes.Equal(kept, trimZeros(data[off:])) {
				t.Fatalf("kept %d bytes of the cut tail, want its %d without the zeros", len(kept), len(trimZeros(data[off:])))
			}
		})
	}
}

func TestCorruptMiddleIsRefusedOrSalvaged(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{SegmentBytes: 8 << 10})
	replayAll(t, s)
	writeSome(t, s, 10)
	s.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	if len(segs) < 3 {
		t.Fatalf("want several segments, got %d", len(segs))
	}
	// Flip a byte inside the second segment's first record body.
	bad := segs[1]
	data, _ := os.ReadFile(bad)
	data[frameHeader+3] ^= 0xff
	os.WriteFile(bad, data, 0o644)

	r, err := OpenFile(dir, FileOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Replay(func(*Record) error { return nil })
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.File != bad || ce.Offset != 0 || !strings.Contains(err.Error(), "--salvage") {
		t.Fatalf("replay of a corrupt log: %v", err)
	}
	r.Close()

	// Salvage keeps the first segment and sets the rest aside.
	first, _ := os.ReadFile(segs[0])
	want := len(frames(t, first))
	later := make(map[string][]byte)
	for _, p := range segs[2:] {
		later[p], _ = os.ReadFile(p)
	}
	sv := openFile(t, dir, FileOptions{Salvage: true})
	if got := replayAll(t, sv); len(got) != want {
		t.Fatalf("salvaged %d records, want %d", len(got), want)
	}
	// Set aside: what the cut dropped of the bad segment (all of it: the
	// bad record was its first) and every later segment, byte for byte.
	aside, _ := filepath.Glob(filepath.Join(dir, "*.corrupt"))
	if len(aside) != len(segs)-1 {
		t.Fatalf("set aside %d files, want %d", len(aside), len(segs)-1)
	}
	if got, _ := os.ReadFile(bad + ".corrupt"); !bytes.Equal(got, trimZeros(data)) {
		t.Errorf("the bad segment's cut-off part set aside is %d bytes, want its %d", len(got), len(data))
	}
	for p, want := range later {
		if got, _ := os.ReadFile(p + ".corrupt"); !bytes.Equal(got, want) {
			t.Errorf("%s set aside as %d bytes, want %d", filepath.Base(p), len(got), len(want))
		}
	}
	sv.Close()

	// A second salvage keeps what the first set aside: its own go beside.
	next := filepath.Join(dir, filepath.Base(segs[len(segs)-1]))
	// A frame whose CRC is wrong with more after it: damage, not a torn write.
	garbage := append([]byte{4, 0, 0, 0, 1, 2, 3, 4}, "ünïcode \xff and more"...)
	if err := os.WriteFile(next, garbage, 0o644); err != nil {
		t.Fatal(err)
	}
	sv = openFile(t, dir, FileOptions{Salvage: true, Logger: quiet})
	replayAll(t, sv)
	sv.Close()
	if got, _ := os.ReadFile(next + ".corrupt"); !bytes.Equal(got, later[next]) {
		t.Errorf("a second salvage overwrote the first's %s.corrupt", filepath.Base(next))
	}
	if got, _ := os.ReadFile(next + ".corrupt.2"); !bytes.Equal(got, garbage) {
		t.Errorf("the second salvage set aside %q, want %q", got, garbage)
	}
}

func TestSecondOpenIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	openFile(t, dir, FileOptions{})
	if _, err := OpenFile(dir, FileOptions{Logger: quiet}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v", err)
	}
}

// A segment's directory entry is made durable when the segment is made and
// when compaction removes segments, or a power cut could take confirmed
// records with it.
func TestSegmentsSyncTheirDirectory(t *testing.T) {
	t.Parallel()
	ffs := &FaultFS{}
	s := openFile(t, t.TempDir(), FileOptions{FS: ffs})
	replayAll(t, s)
	if n := ffs.DirSyncs(); n != 1 {
		t.Fatalf("%d directory syncs after opening, want 1 (the first segment)", n)
	}
	if _, err := s.Append(sample(1)...); err != nil {
		t.Fatal(err)
	}
	m, err := s.Mark() // starts a new segment
	if err != nil {
		t.Fatal(err)
	}
	pos, _ := s.Append(sample(2)...)
	if err := s.Wait(pos); err != nil {
		t.Fatal(err)
	}
	if n := ffs.DirSyncs(); n != 2 {
		t.Fatalf("%d directory syncs after a rotation, want 2", n)
	}
	if err := s.Compact(m); err != nil {
		t.Fatal(err)
	}
	if n := ffs.DirSyncs(); n != 3 {
		t.Fatalf("%d directory syncs after compaction, want 3", n)
	}
}

func TestGroupCommit(t *testing.T) {
	t.Parallel()
	ffs := &FaultFS{}
	s := openFile(t, t.TempDir(), FileOptions{FS: ffs})
	replayAll(t, s)
	const writers, each = 16, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				pos, err := s.Append(&Record{Kind: KindAck, Queue: "q", ID: fmt.Sprintf("%d-%d", w, i)})
				if err != nil {
					t.Error(err)
					return
				}
				if err := s.Wait(pos); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	n := ffs.Syncs()
	if n >= writers*each {
		t.Fatalf("%d fsyncs for %d confirmed appends: no grouping", n, writers*each)
	}
	t.Logf("%d appends confirmed with %d fsyncs", writers*each, n)
	// The store's own counts: every fsync it did for a record is one the
	// file layer saw (which also sees a rotation's), and a Wait that
	// blocked is one of the confirmed appends.
	st := s.Stats()
	if st.Records != writers*each || st.Syncs == 0 || st.Syncs > uint64(n) || st.Waits > writers*each {
		t.Errorf("stats %+v for %d appends and %d fsyncs", st, writers*each, n)
	}
}

func TestFailedSyncConfirmsNothing(t *testing.T) {
	t.Parallel()
	for _, fault := range []string{"fsync", "write"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			ffs := &FaultFS{}
			s := openFile(t, t.TempDir(), FileOptions{FS: ffs})
			replayAll(t, s)
			pos, _ := s.Append(sample(0)...)
			if err := s.Wait(pos); err != nil {
				t.Fatal(err)
			}
			if fault == "fsync" {
				ffs.FailSync(true)
			} else {
				ffs.FailWrite(true)
			}
			pos, err := s.Append(sample(1)...)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Wait(pos); err == nil || !strings.Contains(err.Error(), "nothing more is accepted") {
				t.Fatalf("wait after a failed %s: %v", fault, err)
			}
			if _, err := s.Append(sample(2)...); err == nil {
				t.Fatal("append accepted after the log failed")
			}
		})
	}
}

// A write or fsync that fails answers its appends with an error, and a
// restart must not bring them back: neither the complete records of a
// short write nor records the page cache still holds after a failed
// fsync. Everything answered before the failure is kept.
func TestFailedRoundIsNotReplayed(t *testing.T) {
	t.Parallel()
	for _, fault := range []string{"fsync", "write"} {
		for _, mode := range []SyncMode{{}, {Interval: time.Nanosecond}} {
			for _, segBytes := range []int64{DefaultSegmentBytes, 16 << 10} {
				t.Run(fmt.Sprintf("%s/interval=%v/segment=%d", fault, mode.Interval, segBytes), func(t *testing.T) {
					t.Parallel()
					dir := t.TempDir()
					ffs := &FaultFS{}
					s := openFile(t, dir, FileOptions{FS: ffs, Sync: mode, SegmentBytes: segBytes})
					replayAll(t, s)
					var answered []string
					for i := range 5 {
						pos, err := s.Append(sample(i)...)
						if err != nil {
							t.Fatal(err)
						}
						if err := s.Wait(pos); err != nil {
							t.Fatal(err)
						}
						for _, r := range sample(i) {
							answered = append(answered, fmt.Sprint(r.Kind, r.ID))
						}
					}
					if fault == "fsync" {
						ffs.FailSyncs(1)
					} else {
						ffs.FailWrite(true)
					}
					// Two appends before the Wait: most often one round.
					// The second is refused if the first round has failed
					// by then.
					pos, err := s.Append(sample(5)...)
					if err != nil {
						t.Fatal(err)
					}
					if p, err := s.Append(sample(6)...); err == nil {
						pos = p
					}
					if err := s.Wait(pos); err == nil {
						t.Fatalf("wait after a failed %s: no error", fault)
					}
					s.Close()
					ffs.FailWrite(false)

					again := openFile(t, dir, FileOptions{SegmentBytes: segBytes})
					var got []string
					for _, r := range replayAll(t, again) {
						got = append(got, fmt.Sprint(r.Kind, r.ID))
					}
					if !slices.Equal(got, answered) {
						t.Errorf("after a failed %s a restart replays %d records, want the %d answered:\n got %v\nwant %v", fault, len(got), len(answered), got, answered)
					}
				})
			}
		}
	}
}

func TestParseSyncMode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"always": 0, "": 0, "interval=100ms": 100 * time.Millisecond} {
		m, err := ParseSyncMode(in)
		if err != nil || m.Interval != want {
			t.Errorf("ParseSyncMode(%q) = %v, %v", in, m, err)
		}
	}
	for _, in := range []string{"sometimes", "interval=", "interval=-1s", "interval=fast"} {
		if _, err := ParseSyncMode(in); err == nil {
			t.Errorf("ParseSyncMode(%q) accepted", in)
		}
	}
}

func FuzzReadFrame(f *testing.F) {
	for _, r := range sample(0) {
		f.Add(appendFrame(nil, r))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := readFrame(b)
		if err != nil {
			return
		}
		if n > len(b) {
			t.Fatalf("frame of %d bytes from %d", n, len(b))
		}
		// What reads must write back the same.
		again, _, err := readFrame(appendFrame(nil, r))
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("re-encoded record differs: %v\n%+v\n%+v", err, r, again)
		}
	})
}

// FuzzDecode reaches the record parser directly: behind a frame its body is
// covered by a checksum, which random bytes almost never match, so
// FuzzReadFrame rarely gets this far. A body decodes or is refused with
// ErrCorrupt, and what decodes encodes to a body that decodes to the same
// record (not always the same bytes: a duplicate header key, say, is kept
// once).
func FuzzDecode(f *testing.F) {
	for _, r := range sample(0) {
		f.Add(encode(nil, r))
	}
	// A job whose body names header k twice: the later value stands.
	one := encode(nil, &Record{Kind: KindJob, Queue: "q", ID: "x", Job: &Job{ID: "x", Headers: map[string]string{"k": "v"}}})
	twice := bytes.Replace(one, []byte{1, 1, 'k', 1, 'v'}, []byte{2, 1, 'k', 1, 'v', 1, 'k', 1, 'w'}, 1)
	if r, err := decode(twice); err != nil || len(r.Job.Headers) != 1 || r.Job.Headers["k"] != "w" {
		f.Fatalf("a header named twice: %v, %+v", err, r)
	}
	f.Add(twice)
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := decode(body)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error without ErrCorrupt: %v", err)
			}
			return
		}
		again, err := decode(encode(nil, r))
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("re-encoded record differs: %v\n%+v\n%+v", err, r, again)
		}
	})
}

// Records nobody waits for (acks, deliveries) take no fsync of their own:
// they are written at once and ride along with the next one that is
// waited for.
func TestUnwaitedRecordsShareTheNextSync(t *testing.T) {
	t.Parallel()
	ffs := &FaultFS{}
	s := openFile(t, t.TempDir(), FileOptions{FS: ffs})
	replayAll(t, s)
	for i := range 500 {
		if _, err := s.Append(&Record{Kind: KindAck, Queue: "q", ID: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	pos, _ := s.Append(sample(0)...)
	if err := s.Wait(pos); err != nil {
		t.Fatal(err)
	}
	if n := ffs.Syncs(); n > 2 {
		t.Fatalf("%d fsyncs for 500 unwaited records and one waited batch", n)
	}
	checkReplay(t, s, append(ackRecords(500), sample(0)...))
}

func ackRecords(n int) []*Record {
	out := make([]*Record, n)
	for i := range out {
		out[i] = &Record{Kind: KindAck, Queue: "q", ID: fmt.Sprint(i)}
	}
	return out
}

// TestGatheringNeverStrands checks the writer's wait for the last fsync's
// cohort of waiters: writers that stop one after another, a store that
// closes and one whose fsync fails while writers wait must each leave no
// Wait blocked and no waiter registered.
func TestGatheringNeverStrands(t *testing.T) {
	t.Parallel()
	for _, end := range []string{"leave", "close", "fail"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			ffs := &FaultFS{}
			s := openFile(t, t.TempDir(), FileOptions{FS: ffs})
			replayAll(t, s)
			const writers = 6
			var confirmed atomic.Int64
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					// In "leave", writer w stops after 50*(w+1) records, so
					// the cohort shrinks round after round.
					for i := 0; end != "leave" || i < 50*(w+1); i++ {
						pos, err := s.Append(&Record{Kind: KindAck, Queue: "q", ID: fmt.Sprintf("%d-%d", w, i)})
						if err == nil {
							err = s.Wait(pos)
						}
						if err != nil {
							if end == "leave" {
								t.Error(err)
							}
							return
						}
						confirmed.Add(1)
					}
				})
			}
			for end != "leave" && confirmed.Load() < 500 {
				runtime.Gosched()
			}
			switch end {
			case "close":
				if err := s.Close(); err != nil {
					t.Error(err)
				}
			case "fail":
				ffs.FailSync(true)
			}
			wg.Wait() // hangs if a Wait is stranded
			s.mu.Lock()
			left := len(s.waits)
			s.mu.Unlock()
			if left != 0 {
				t.Errorf("%d waiters still registered", left)
			}
			if end == "leave" && confirmed.Load() != 50*writers*(writers+1)/2 {
				t.Errorf("%d confirmed, want %d", confirmed.Load(), 50*writers*(writers+1)/2)
			}
		})
	}
}

// TestIntervalSyncFollowsTheClock runs --fsync interval on an injected
// clock: a write is confirmed once written, and fsynced when the interval
// has passed on the clock, not before, also with nothing more appended.
func TestIntervalSyncFollowsTheClock(t *testing.T) {
	t.Parallel()
	ffs := &FaultFS{}
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openFile(t, t.TempDir(), FileOptions{FS: ffs, Sync: SyncMode{Interval: time.Second}, Clock: clk})
	replayAll(t, s)
	want := writeSome(t, s, 1) // the first write is fsynced at once
	base := ffs.Syncs()
	want = append(want, writeSome(t, s, 3)...)
	clk.Advance(999 * time.Millisecond)
	if n := ffs.Syncs(); n != base {
		t.Fatalf("%d fsyncs before the interval passed", n-base)
	}
	clk.Advance(time.Millisecond)
	for ffs.Syncs() == base {
		runtime.Gosched() // the tick woke the writer; wait for its fsync
	}
	if n := clk.Pending(); n != 1 {
		t.Fatalf("%d timers pending after a tick, want the next tick", n)
	}
	checkReplay(t, s, want)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := clk.Pending(); n != 0 {
		t.Fatalf("%d timers pending after Close", n)
	}
}

// sameRecords fails t unless got holds want's records, in order.
func sameRecords(t *testing.T, got, want []*Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("replayed %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("record %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

// A disk that fills up as a checkpoint starts a new segment (whose space
// cannot be allocated) stops the log as a failed write does: the
// checkpoint and later appends fail, Close says why instead of panicking,
// and a restart on a sound disk has every record confirmed before.
func TestFullDiskAtRotationStopsTheLog(t *testing.T) {
	t.Parallel()
	ffs := &FaultFS{}
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{FS: ffs})
	replayAll(t, s)
	want := writeSome(t, s, 2)
	ffs.FailWrite(true)
	m, err := s.Mark()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(m); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Compact after a failed rotation: %v", err)
	}
	if _, err := s.Append(sample(3)...); err == nil {
		t.Fatal("append accepted after the log failed")
	}
	if err := s.Close(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Close after a failed rotation: %v", err)
	}
	ffs.FailWrite(false)
	r := openFile(t, dir, FileOptions{})
	sameRecords(t, replayAll(t, r), want)
}

// fillerJob is a job record whose frame is n bytes long, its payload
// non-ASCII text and invalid UTF-8.
func fillerJob(t *testing.T, n int) *Record {
	t.Helper()
	rec := &Record{Kind: KindJob, Queue: "媒体", ID: "filler", Job: &Job{ID: "filler", Producer: "wéb", JobType: "報告", MaxAttempts: 3}}
	base := len(appendFrame(nil, rec))
	text := []byte(strings.Repeat("\xfeübung 失败 ", n/8+1))
	for p := n - base; p >= n-base-4 && p >= 0; p-- {
		rec.Job.Payload = text[:p]
		if len(appendFrame(nil, rec)) == n {
			return rec
		}
	}
	t.Fatalf("no job record has a frame of %d bytes", n)
	return nil
}

// A checkpoint may start a new segment when the one before is a few bytes,
// fewer than a frame header, short of its allocated size: those zeros end
// its records as a longer stretch of them does, and recovery reads on.
func TestSegmentEndingShortOfAFrameHeader(t *testing.T) {
	t.Parallel()
	const segBytes = 16 << 10
	for gap := 1; gap < frameHeader; gap++ {
		t.Run(fmt.Sprint("gap ", gap), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s := openFile(t, dir, FileOptions{SegmentBytes: segBytes})
			replayAll(t, s)
			want := writeSome(t, s, 1)
			fill := fillerJob(t, segBytes-int(s.Size())-gap)
			pos, err := s.Append(fill)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Wait(pos); err != nil {
				t.Fatal(err)
			}
			want = append(want, fill)
			seg := lastSegment(t, dir)
			if st, _ := os.Stat(seg); st.Size() != segBytes {
				t.Skip("this file system does not allocate ahead")
			}
			if _, err := s.Mark(); err != nil {
				t.Fatal(err)
			}
			more := sample(1)
			pos, err = s.Append(more...)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Wait(pos); err != nil {
				t.Fatal(err)
			}
			checkReplay(t, s, append(want, more...))
		})
	}
}

// A segment a rotation closes, for a checkpoint or for size, gives back
// the space allocated ahead that its records did not fill: only the head
// holds space ahead. (A checkpoint that a crash interrupted, and that the
// next start begins again, otherwise kept three whole segments on disk.)
// Every record replays.
func TestClosedSegmentsGiveBackTheirSpace(t *testing.T) {
	t.Parallel()
	const segBytes = 64 << 10
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{SegmentBytes: segBytes})
	replayAll(t, s)
	want := writeSome(t, s, 3)
	if st, _ := os.Stat(lastSegment(t, dir)); st.Size() != segBytes {
		t.Skip("this file system does not allocate ahead")
	}
	if _, err := s.Mark(); err != nil { // a checkpoint's rotation
		t.Fatal(err)
	}
	want = append(want, writeSome(t, s, 2)...)
	for i := range 5 { // 1.5 segments of 12 KiB jobs: a rotation for size
		fill := fillerJob(t, 12<<10)
		fill.ID = fmt.Sprint("filler-", i)
		fill.Job.ID = fill.ID
		pos, err := s.Append(fill)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(pos); err != nil {
			t.Fatal(err)
		}
		want = append(want, fill)
	}
	want = append(want, writeSome(t, s, 1)...)
	segs, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	if len(segs) != 3 {
		t.Fatalf("%d segments, want 3: %v", len(segs), segs)
	}
	for i, p := range segs {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		end := recordsEnd(data)
		switch {
		case i < len(segs)-1 && len(data) != end:
			t.Errorf("closed segment %s: %d bytes on disk, its records end at %d", filepath.Base(p), len(data), end)
		case i == len(segs)-1 && len(data) != segBytes:
			t.Errorf("head %s: %d bytes on disk, want its %d allocated ahead", filepath.Base(p), len(data), segBytes)
		}
	}
	checkReplay(t, s, want)
}

// With an fsync interval, Wait promises only that records were written,
// so Compact fsyncs the checkpoint's records itself before it deletes the
// segments they replace; if that fsync fails it deletes nothing. Else a
// machine crash soon after a checkpoint loses every job, not only the
// last interval's changes.
func TestCompactSyncsTheCheckpointFirst(t *testing.T) {
	t.Parallel()
	for _, disk := range []string{"sound", "failing fsync"} {
		t.Run(disk, func(t *testing.T) {
			t.Parallel()
			ffs := &FaultFS{}
			clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			dir := t.TempDir()
			s := openFile(t, dir, FileOptions{FS: ffs, Sync: SyncMode{Interval: time.Hour}, Clock: clk})
			replayAll(t, s)
			old := writeSome(t, s, 2)
			m, err := s.Mark()
			if err != nil {
				t.Fatal(err)
			}
			kept := append(sample(7), fillerJob(t, 3000))
			pos, err := s.Append(kept...)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Wait(pos); err != nil { // written; the hour has not passed
				t.Fatal(err)
			}
			before, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
			syncs := ffs.Syncs()
			if disk == "sound" {
				if err := s.Compact(m); err != nil {
					t.Fatal(err)
				}
				if ffs.Syncs() == syncs {
					t.Fatal("Compact deleted segments without fsyncing the checkpoint that replaces them")
				}
				checkReplay(t, s, kept)
				return
			}
			ffs.FailSync(true)
			if err := s.Compact(m); err == nil {
				t.Fatal("Compact succeeded although the checkpoint could not be fsynced")
			}
			if after, _ := filepath.Glob(filepath.Join(dir, "*.wal")); len(after) != len(before) {
				t.Fatalf("%d segments after a Compact that could not fsync, %d before", len(after), len(before))
			}
			s.Close()
			r := openFile(t, dir, FileOptions{})
			sameRecords(t, replayAll(t, r), append(old, kept...))
		})
	}
}

// Only a write cut short is cut off the end of the log. A frame written
// whole and damaged since is refused like damage anywhere else, even in
// the last segment: one flipped bit in a length makes the frame claim the
// confirmed records after it, and a frame whose CRC matches but whose body
// does not decode (a record kind this build does not know) was written
// whole.
func TestLastSegmentDamageIsNotTakenForATornWrite(t *testing.T) {
	t.Parallel()
	for _, damage := range []string{"length bit 22", "length bit 3", "unknown kind"} {
		t.Run(damage, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s := openFile(t, dir, FileOptions{})
			replayAll(t, s)
			writeSome(t, s, 3)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			seg := lastSegment(t, dir)
			data, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			var off int
			var bit int
			if _, err := fmt.Sscanf(damage, "length bit %d", &bit); err == nil {
				// The second record's frame.
				off = frames(t, data)[1]
				binary.LittleEndian.PutUint32(data[off:], binary.LittleEndian.Uint32(data[off:])^1<<bit)
			} else {
				// A newer build's record, written whole and last: no
				// mark follows it.
				frame := appendFrame(nil, &Record{Kind: KindDrop, Queue: "媒体\xff"})
				frame[frameHeader] = byte(kindEnd)
				binary.LittleEndian.PutUint32(frame[4:], crc32.Checksum(frame[frameHeader:], castagnoli))
				off = recordsEnd(data)
				copy(data[off:], frame)
			}
			if err := os.WriteFile(seg, data, 0o644); err != nil {
				t.Fatal(err)
			}
			r, err := OpenFile(dir, FileOptions{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			var ce *CorruptError
			if err := r.Replay(func(*Record) error { return nil }); !errors.As(err, &ce) || ce.File != seg || ce.Offset != int64(off) {
				t.Fatalf("Replay = %v, want a CorruptError at offset %d", err, off)
			}
			if after, _ := os.ReadFile(seg); len(after) != len(data) {
				t.Fatalf("the refused segment was cut from %d to %d bytes", len(data), len(after))
			}
		})
	}
}

// A data directory with less free space than a segment cannot start the
// log; the error says how much it needs.
func TestFullDiskAtStartSaysWhatItNeeds(t *testing.T) {
	t.Parallel()
	ffs := &FaultFS{}
	ffs.FailWrite(true)
	s, err := OpenFile(t.TempDir(), FileOptions{FS: ffs, SegmentBytes: 8 << 20, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Replay(func(*Record) error { return nil })
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "needs 8 MiB free") {
		t.Fatalf("Replay on a full disk = %v, want ENOSPC saying it needs 8 MiB", err)
	}
}
