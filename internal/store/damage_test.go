package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// damageLog writes a log of n confirmed records (every kind, kilobytes of
// payload, text that is not ASCII and not valid UTF-8) across several
// segments of 64 KiB, and either closes it cleanly or leaves it as a
// killed process would (copied while open: what the page cache held). It
// returns the directory and the records.
func damageLog(t *testing.T, n int, closed bool) (string, []*Record) {
	t.Helper()
	dir := t.TempDir()
	s := openFile(t, dir, FileOptions{SegmentBytes: 64 << 10})
	replayAll(t, s)
	var want []*Record
	for i := 0; len(want) < n; i++ {
		recs := sample(i)[:min(n-len(want), 6)]
		pos, err := s.Append(recs...)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(pos); err != nil {
			t.Fatal(err)
		}
		want = append(want, recs...)
	}
	if closed {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return dir, want
	}
	// Killed: a copy of the files as they are, the store still open.
	killed := t.TempDir()
	segs, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	for _, p := range segs {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(killed, filepath.Base(p)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return killed, want
}

// segData reads every segment of dir, oldest first.
func segData(t *testing.T, dir string) ([]string, [][]byte) {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	data := make([][]byte, len(paths))
	for i, p := range paths {
		var err error
		if data[i], err = os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	return paths, data
}

// outcome opens dir and says what recovery did: the records it replayed,
// or the CorruptError it refused with.
func outcome(t *testing.T, dir string) ([]*Record, *CorruptError) {
	t.Helper()
	s, err := OpenFile(dir, FileOptions{Logger: quiet, SegmentBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []*Record
	err = s.Replay(func(r *Record) error { got = append(got, r); return nil })
	var ce *CorruptError
	if errors.As(err, &ce) {
		return nil, ce
	}
	if err != nil {
		t.Fatalf("Replay: %v (neither records nor a CorruptError)", err)
	}
	return got, nil
}

func setLength(b []byte, n uint32) { binary.LittleEndian.PutUint32(b, n) }

// TestRecoveryOfDamagedLogs: each kind of damage a log can suffer either
// recovers every confirmed record or refuses to start, naming the file
// and the offset of the first frame that does not read, and changing
// nothing. Damage anywhere before the last sync mark is refused; only a
// tail no mark claims is cut off, and kept beside the log.
func TestRecoveryOfDamagedLogs(t *testing.T) {
	t.Parallel()
	type target struct {
		seg   int // -1: the last segment
		frame int // index among the segment's records; -1: the last
	}
	cases := []struct {
		name   string
		at     target
		damage func(frame []byte)
		// refused: recovery must refuse at the damaged frame; else it
		// recovers every confirmed record.
		refused bool
	}{
		{"body byte, last segment", target{-1, 3}, func(f []byte) { f[frameHeader+5] ^= 0x40 }, true},
		{"body byte, first segment", target{0, 3}, func(f []byte) { f[frameHeader+5] ^= 0x40 }, true},
		{"first record's body", target{0, 0}, func(f []byte) { f[frameHeader+1] ^= 1 }, true},
		{"first record's length", target{0, 0}, func(f []byte) { f[2] = 0x30 }, true},
		{"zeros then data, last segment", target{-1, 2}, func(f []byte) { clear(f) }, true},
		{"zeros then data, first segment", target{0, 2}, func(f []byte) { clear(f) }, true},
		{"length low bit, middle", target{-1, 2}, func(f []byte) { f[0] ^= 1 }, true},
		{"length bit 22, middle", target{-1, 2}, func(f []byte) { f[2] ^= 0x40 }, true},
		{"length byte 2 set to 0x30, middle", target{-1, 2}, func(f []byte) { f[2] = 0x30 }, true},
		{"length byte 3 set to 0x03, middle", target{-1, 2}, func(f []byte) { f[3] = 0x03 }, true},
		{"length over the limit, middle", target{-1, 2}, func(f []byte) { setLength(f, 0xffffffff) }, true},
		{"length zero, middle", target{-1, 2}, func(f []byte) { setLength(f, 0) }, true},
		{"CRC byte, middle", target{-1, 2}, func(f []byte) { f[5] ^= 0x01 }, true},
		{"CRC byte, last record", target{-1, -1}, func(f []byte) { f[4] ^= 0x80 }, true},
		{"length bit, last record", target{-1, -1}, func(f []byte) { f[1] ^= 0x02 }, true},
		{"huge length, last record", target{-1, -1}, func(f []byte) { f[3] = 0x3f }, true},
		{"body zeroed, last record", target{-1, -1}, func(f []byte) { clear(f[frameHeader:]) }, true},
		{"unknown kind, rewritten whole", target{-1, 1}, func(f []byte) {
			f[frameHeader] = byte(kindEnd)
			binary.LittleEndian.PutUint32(f[4:], crc32.Checksum(f[frameHeader:], castagnoli))
		}, true},
	}
	for _, closed := range []bool{true, false} {
		dir, want := damageLog(t, 300, closed)
		paths, base := segData(t, dir)
		if len(paths) < 3 {
			t.Fatalf("want several segments, got %d", len(paths))
		}
		for _, tc := range cases {
			name := fmt.Sprintf("%s, closed %v", tc.name, closed)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				d := t.TempDir()
				seg := tc.at.seg
				if seg < 0 {
					seg = len(paths) - 1
				}
				offs := frames(t, base[seg])
				i := tc.at.frame
				if i < 0 {
					i = len(offs) - 1
				}
				off := offs[i]
				for k, p := range paths {
					data := bytes.Clone(base[k])
					if k == seg {
						_, n, err := readFrame(data[off:])
						if err != nil {
							t.Fatal(err)
						}
						tc.damage(data[off : off+n])
					}
					if err := os.WriteFile(filepath.Join(d, filepath.Base(p)), data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				bad := filepath.Join(d, filepath.Base(paths[seg]))
				before, _ := os.ReadFile(bad)
				got, ce := outcome(t, d)
				switch {
				case tc.refused && ce == nil:
					t.Fatalf("recovered %d records; want a refusal at %s offset %d", len(got), filepath.Base(bad), off)
				case tc.refused && (ce.File != bad || ce.Offset != int64(off)):
					t.Fatalf("refused at %s offset %d, want %s offset %d: %v", filepath.Base(ce.File), ce.Offset, filepath.Base(bad), off, ce)
				case tc.refused:
					if after, _ := os.ReadFile(bad); !bytes.Equal(after, before) {
						t.Fatal("the refused segment was changed")
					}
				case ce != nil:
					t.Fatalf("refused: %v; want every confirmed record", ce)
				case !reflect.DeepEqual(got, want):
					t.Fatalf("recovered %d records, want the %d confirmed", len(got), len(want))
				}
			})
		}
	}
}

// Truncations: a segment before the last cut short is refused; the last
// one cut at a record's end loses only what the cut removed, and cut
// inside a record keeps the part beside the log.
func TestRecoveryOfTruncatedLogs(t *testing.T) {
	t.Parallel()
	dir, want := damageLog(t, 300, true)
	paths, base := segData(t, dir)
	for _, tc := range []struct {
		name string
		seg  int // -1: the last
		at   func(data []byte, offs []int) int
		// kept: the records that must come back, by count; -1 refused
		kept func(firstInSeg int, offs []int) int
	}{
		{"middle segment, inside a record", 1, func(_ []byte, offs []int) int { return offs[2] + 20 }, func(int, []int) int { return -1 }},
		{"last segment, at a record's end", -1, func(_ []byte, offs []int) int { return offs[3] },
			func(first int, _ []int) int { return first + 3 }},
		{"last segment, inside a record", -1, func(_ []byte, offs []int) int { return offs[3] + 9 },
			func(first int, _ []int) int { return first + 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seg := tc.seg
			if seg < 0 {
				seg = len(paths) - 1
			}
			first := 0
			for k := range seg {
				first += len(frames(t, base[k]))
			}
			offs := frames(t, base[seg])
			cut := tc.at(base[seg], offs)
			d := t.TempDir()
			for k, p := range paths {
				data := base[k]
				if k == seg {
					data = data[:cut]
				}
				if err := os.WriteFile(filepath.Join(d, filepath.Base(p)), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, ce := outcome(t, d)
			if n := tc.kept(first, offs); n < 0 {
				if ce == nil || filepath.Base(ce.File) != filepath.Base(paths[seg]) {
					t.Fatalf("recovered %d records from a log missing the middle of a segment; want a refusal naming it: %v", len(got), ce)
				}
				return
			} else if ce != nil || !reflect.DeepEqual(got, want[:n]) {
				t.Fatalf("got %d records (%v), want the first %d", len(got), ce, n)
			}
		})
	}
}

// The property: a random byte of a random log, set to another value,
// either leaves every confirmed record recoverable or is refused naming
// the file and an offset no later than the damage, with nothing changed.
// No damage silently drops a confirmed record. Logs closed cleanly and
// logs of a killed process alike.
func TestRecoveryOfARandomDamagedByte(t *testing.T) {
	t.Parallel()
	trials := 400
	if testing.Short() {
		trials = 100
	}
	for _, closed := range []bool{true, false} {
		dir, want := damageLog(t, 200, closed)
		paths, base := segData(t, dir)
		rng := rand.New(rand.NewPCG(uint64(len(want)), map[bool]uint64{true: 1, false: 2}[closed]))
		refused, cut := 0, 0
		for trial := range trials {
			seg := rng.IntN(len(paths))
			end := recordsEnd(base[seg])
			pos := rng.IntN(end + markFrame) // the records, and a little of the zeros after them
			d := t.TempDir()
			for k, p := range paths {
				data := base[k]
				if k == seg {
					data = bytes.Clone(data)
					data[pos] ^= byte(1 + rng.IntN(255))
				}
				if err := os.WriteFile(filepath.Join(d, filepath.Base(p)), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			bad := filepath.Join(d, filepath.Base(paths[seg]))
			before, _ := os.ReadFile(bad)
			got, ce := outcome(t, d)
			where := fmt.Sprintf("trial %d (closed %v): byte %d of %s (records end at %d)", trial, closed, pos, filepath.Base(bad), end)
			if ce != nil {
				refused++
				if ce.File != bad || ce.Offset > int64(pos) {
					t.Fatalf("%s: refused at %s offset %d", where, filepath.Base(ce.File), ce.Offset)
				}
				if after, _ := os.ReadFile(bad); !bytes.Equal(after, before) {
					t.Fatalf("%s: the refused segment was changed", where)
				}
				continue
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: recovered %d records, want the %d confirmed", where, len(got), len(want))
			}
			if m, _ := filepath.Glob(filepath.Join(d, "*.corrupt")); len(m) > 0 {
				cut++
			}
		}
		t.Logf("closed %v: %d random damaged bytes: %d refused naming file and offset, %d recovered every record (%d of them cutting a tail no mark claimed)",
			closed, trials, refused, trials-refused, cut)
	}
}
