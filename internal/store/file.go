package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
)

// SyncMode says when the file store calls fsync.
type SyncMode struct {
	// Interval is 0 for fsync before every answer (always), or how often
	// the log is fsynced; with an interval, Wait returns once records are
	// written to the operating system, so a crash of the process loses
	// nothing and a crash of the machine loses at most Interval.
	Interval time.Duration
}

// ParseSyncMode reads "always" or "interval=DURATION".
func ParseSyncMode(s string) (SyncMode, error) {
	if s == "always" || s == "" {
		return SyncMode{}, nil
	}
	if v, ok := strings.CutPrefix(s, "interval="); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return SyncMode{}, fmt.Errorf("store: fsync interval must be a positive duration such as 100ms, got %q", v)
		}
		return SyncMode{Interval: d}, nil
	}
	return SyncMode{}, fmt.Errorf("store: fsync mode must be always or interval=DURATION, got %q", s)
}

func (m SyncMode) String() string {
	if m.Interval == 0 {
		return "always"
	}
	return "interval=" + m.Interval.String()
}

// FileOptions configure a file store; zero fields take their defaults.
type FileOptions struct {
	Sync SyncMode
	// SegmentBytes is the size past which a new segment file starts;
	// default 64 MiB.
	SegmentBytes int64
	// Salvage makes Open keep what is readable of a log with a corrupt
	// record in the middle: the corrupt segment is cut at the bad record
	// and every later segment is set aside (renamed *.corrupt). Without
	// it, Open refuses such a log and names the file and offset.
	Salvage bool
	// FS is the file layer; default the operating system's. Tests inject
	// write and fsync failures through it.
	FS FS
	// Logger gets recovery warnings; default slog.Default.
	Logger *slog.Logger
	// Clock times the interval mode's fsyncs, the gathering of waiters
	// and the log's latency counters; default the wall clock.
	Clock clock.Clock
}

// DefaultSegmentBytes is the default FileOptions.SegmentBytes.
const DefaultSegmentBytes = 64 << 20

// FS is the part of a file system the file store uses.
type FS interface {
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	ReadFile(name string) ([]byte, error)
	ReadDir(name string) ([]fs.DirEntry, error)
	Remove(name string) error
	Rename(from, to string) error
	MkdirAll(name string, perm fs.FileMode) error
	// SyncDir makes the directory's entries durable: a file created in it
	// or removed from it.
	SyncDir(name string) error
}

// File is the part of a file the file store uses. Segments are written at
// offsets into space allocated ahead (Preallocate), so that making a write
// durable (Sync) need not also change the file's size on disk.
type File interface {
	io.WriterAt
	// Sync makes what was written durable: its data and whatever reading
	// it back needs (fdatasync where there is one).
	Sync() error
	// Preallocate reserves size bytes of zeros for the file, where the
	// system can; elsewhere it does nothing.
	Preallocate(size int64) error
	Truncate(size int64) error
	Close() error
}

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// osFile is an operating system file with the durability calls the store
// uses (see sync_linux.go).
type osFile struct{ *os.File }

func (osFS) ReadFile(name string) ([]byte, error)         { return os.ReadFile(name) }
func (osFS) ReadDir(name string) ([]fs.DirEntry, error)   { return os.ReadDir(name) }
func (osFS) Remove(name string) error                     { return os.Remove(name) }
func (osFS) Rename(from, to string) error                 { return os.Rename(from, to) }
func (osFS) MkdirAll(name string, perm fs.FileMode) error { return os.MkdirAll(name, perm) }

func (osFS) SyncDir(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// File is a Store on disk: a write-ahead log of segment files in one
// directory, written by one goroutine that commits in groups: every record
// appended while the previous write and fsync ran goes out in the next one.
type FileStore struct {
	dir  string
	opts FileOptions
	fs   FS
	log  *slog.Logger
	lock *os.File // flock held while open

	mu       sync.Mutex
	work     *sync.Cond // the flusher waits on it for records, waiters, checkpoints, ticks or Close
	progress *sync.Cond // broadcast when durable or the head segment moves, or err is set
	buf      []byte     // frames appended and not yet written
	marks    []pending  // checkpoints requested: rotate once buf reaches off
	appended Pos
	durable  Pos   // what Wait reports as done: synced (always) or written (interval)
	written  Pos   // handed to the operating system
	synced   Pos   // fsynced
	wanted   Pos   // the highest position a Wait asked for
	waits    []Pos // positions blocked Waits wait for and the flusher has not released
	err      error // sticky: the store failed or closed
	closing  bool
	started  bool         // the flusher runs (it closes done)
	syncWant Pos          // Compact needs everything up to here fsynced
	size     int64        // bytes in segment files, written or buffered
	sizeNow  atomic.Int64 // size, for Size without the lock
	replayed bool
	tick     bool        // interval mode: time to fsync what was written
	tickT    clock.Timer // interval mode: the next tick
	gathered bool        // the flusher's wait for the last round's waiters is over
	gatherN  uint64
	stats    Stats // Records, Bytes, Syncs and Waits so far (Size is size)

	// Owned by the flusher.
	seg      File
	segN     uint64
	segSize  int64            // bytes of records in the head segment: where the next write goes
	segs     []uint64         // segment numbers on disk, oldest first (guarded by mu)
	segBytes map[uint64]int64 // bytes of records in each segment but the head (guarded by mu)
	headSize int64            // the head's records as Replay found them
	// The head was fsynced up to syncedOff; markedOff is the offset the
	// last sync mark written to it claims (see appendMark).
	syncedOff, markedOff int64
	// The end of the last round whose records were answered (synced with
	// fsync always, written with an interval): where a failed round's
	// records are cut back to (see cutBack).
	okSeg uint64
	okOff int64
	spare []byte
	mark  []byte // the flusher's buffer for a sync mark
	done  chan struct{}
}

type pending struct {
	off int    // bytes of buf that go before the rotation
	seg uint64 // the segment the rotation starts
}

// maxSpare bounds the write buffer the flusher keeps for its next round:
// a larger one, grown by a burst of appends, is given back to the garbage
// collector rather than held for the life of the process.
const maxSpare = 1 << 20

// ErrLocked is returned by OpenFile when another process holds the
// directory.
var ErrLocked = errors.New("store: data directory in use")

// OpenFile opens (creating if needed) the log in dir, takes its lock,
// checks every segment and truncates a torn final record.
func OpenFile(dir string, opts FileOptions) (*FileStore, error) {
	if opts.FS == nil {
		opts.FS = osFS{}
	}
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = DefaultSegmentBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if err := opts.FS.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("store: create data directory: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("store: open lock file: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("%w: %s is held by another broker (is one already running with this data directory?)", ErrLocked, dir)
	}
	s := &FileStore{dir: dir, opts: opts, fs: opts.FS, log: opts.Logger, lock: lock, done: make(chan struct{}), segBytes: map[uint64]int64{}}
	s.work = sync.NewCond(&s.mu)
	s.progress = sync.NewCond(&s.mu)
	if err := s.scan(); err != nil {
		s.unlock()
		return nil, err
	}
	return s, nil
}

func (s *FileStore) unlock() {
	_ = syscall.Flock(int(s.lock.Fd()), syscall.LOCK_UN)
	s.lock.Close()
}

func (s *FileStore) segPath(n uint64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%016d.wal", n))
}

// scan lists the segments, without reading them.
func (s *FileStore) scan() error {
	ents, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("store: read data directory: %w", err)
	}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".wal")
		if !ok || e.IsDir() {
			continue
		}
		n, err := strconv.ParseUint(name, 10, 64)
		if err != nil {
			continue
		}
		s.segs = append(s.segs, n)
	}
	slices.Sort(s.segs)
	return nil
}

// CorruptError names where a log is unreadable.
type CorruptError struct {
	File   string
	Offset int64
	Err    error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("store: %s is corrupt at offset %d: %v; start with --salvage to keep the records before it and set the rest aside", e.File, e.Offset, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// Replay implements Store. It reads every segment in order. A frame of
// the last segment that does not read, with no sync mark after it
// claiming it was fsynced, is a torn tail (a death or power cut
// mid-write): it and what follows are cut off with a warning and kept in
// a *.corrupt file beside the segment. Any other bad frame is a
// *CorruptError naming the file and offset (or, with Salvage, the end of
// the log). Then it opens the last segment for appending.
func (s *FileStore) Replay(fn func(*Record) error) error {
	s.mu.Lock()
	if s.replayed {
		s.mu.Unlock()
		return errors.New("store: Replay may be called once, before the first Append")
	}
	s.replayed = true
	segs := slices.Clone(s.segs)
	s.mu.Unlock()
	for i := 0; i < len(segs); i++ {
		path := s.segPath(segs[i])
		data, err := s.fs.ReadFile(path)
		if err != nil {
			return fmt.Errorf("store: read %s: %w", path, err)
		}
		off := 0
		for off < len(data) {
			if _, ok := readMark(data[off:]); ok {
				off += markFrame
				continue
			}
			end, err := endOfRecords(data, off)
			if end && err == nil {
				// The rest is the segment's space allocated ahead, never
				// written.
				data = data[:off]
				break
			}
			var r *Record
			fl := 0
			if err == nil {
				r, fl, err = readFrame(data[off:])
			}
			if err != nil {
				last := i == len(segs)-1
				switch {
				case last && s.tornTail(data, off, err):
					tail := trimZeros(data[off:])
					s.log.Warn("store: cutting off a torn tail (the broker or machine stopped mid-write; no sync mark says it was ever on disk, so nothing in it was confirmed)",
						"file", path, "offset", off, "bytes", len(tail), "err", err)
					if len(tail) > 0 {
						// Kept: a tail whose last fsync was answered and
						// whose mark had not followed yet may hold
						// confirmed records damaged since.
						if err := s.setAside(path, tail); err != nil {
							return fmt.Errorf("store: keeping the torn tail: %w", err)
						}
					}
				case !s.opts.Salvage:
					return &CorruptError{File: path, Offset: int64(off), Err: err}
				default:
					s.log.Error("store: salvage: cutting the log at a corrupt record and setting what follows aside",
						"file", path, "offset", off, "err", err)
					// What the cut drops is kept beside the log, as the
					// later segments are, for whoever checks what was lost.
					if err := s.setAside(path, trimZeros(data[off:])); err != nil {
						return fmt.Errorf("store: salvage: %w", err)
					}
					for _, later := range segs[i+1:] {
						p := s.segPath(later)
						name, err := s.asideName(p)
						if err == nil {
							err = s.fs.Rename(p, name)
						}
						if err != nil {
							return fmt.Errorf("store: salvage: %w", err)
						}
					}
					if err := s.fs.SyncDir(s.dir); err != nil {
						return fmt.Errorf("store: salvage: %w", err)
					}
					s.mu.Lock()
					s.segs = s.segs[:i+1]
					s.mu.Unlock()
					segs = segs[:i+1]
				}
				if err := s.truncate(path, int64(off)); err != nil {
					return err
				}
				data = data[:off]
				break
			}
			if err := fn(r); err != nil {
				return err
			}
			off += fl
		}
		s.size += int64(len(data))
		s.mu.Lock()
		s.segBytes[segs[i]] = int64(len(data))
		s.mu.Unlock()
		s.headSize = int64(len(data))
	}
	s.sizeNow.Store(s.size)
	return s.openHead()
}

// tornTail reports whether err, for the frame at off of the last segment,
// may be a write cut short: by the process dying (a frame cut short, or
// whose CRC fails, before zeros) or by a power cut, which keeps what was
// fsynced and any part of what was written after it, in any order, so
// that zeros or a torn frame can come before whole ones. It is not when
// a sync mark after off says the segment was fsynced past off (the bytes
// were on disk and were damaged since), when the frame's CRC matches (it
// was written whole), or when the frame reads but for one flipped bit
// of its length (a length damaged after it was written, which would
// otherwise swallow the records after it).
func (s *FileStore) tornTail(data []byte, off int, err error) bool {
	var fe *frameError
	if errors.As(err, &fe) && fe.whole {
		return false
	}
	if _, ok := syncedPast(data, off+1, off); ok {
		return false
	}
	return !lengthBitFlipped(data[off:])
}

// trimZeros is b without its trailing zeros: a segment's space allocated
// ahead and never written.
func trimZeros(b []byte) []byte {
	n := len(b)
	for n > 0 && b[n-1] == 0 {
		n--
	}
	return b[:n]
}

// asideName claims a name for setting path aside that no earlier salvage
// used, path.corrupt or else path.corrupt.2, .3 and so on, by creating it
// empty: a second salvage must not overwrite what the first kept.
func (s *FileStore) asideName(path string) (string, error) {
	for n := 1; ; n++ {
		name := path + ".corrupt"
		if n > 1 {
			name += "." + strconv.Itoa(n)
		}
		f, err := s.fs.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		return name, f.Close()
	}
}

// setAside writes data, the part of the segment at path that a salvage
// cuts off, to a file of its own beside it.
func (s *FileStore) setAside(path string, data []byte) error {
	name, err := s.asideName(path)
	if err != nil {
		return err
	}
	f, err := s.fs.OpenFile(name, os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func (s *FileStore) truncate(path string, size int64) error {
	f, err := s.fs.OpenFile(path, os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("store: open %s to truncate: %w", path, err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("store: truncate %s: %w", path, err)
	}
	return f.Sync()
}

// openHead opens the newest segment for appending, or creates the first,
// and starts the flusher.
func (s *FileStore) openHead() error {
	s.mu.Lock()
	if len(s.segs) == 0 {
		s.segs = append(s.segs, 1)
	}
	n := s.segs[len(s.segs)-1]
	delete(s.segBytes, n)
	s.mu.Unlock()
	f, err := s.fs.OpenFile(s.segPath(n), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("store: open segment: %w", err)
	}
	if err := f.Preallocate(s.opts.SegmentBytes); err != nil {
		f.Close()
		return s.allocError(err)
	}
	if err := s.fs.SyncDir(s.dir); err != nil { // the segment may be new
		f.Close()
		return fmt.Errorf("store: sync data directory: %w", err)
	}
	// What the last run wrote may have reached only the page cache; once
	// it is synced, the first write's mark says so, and damage to it
	// from then on is told from a torn write.
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("store: sync segment: %w", err)
	}
	s.seg, s.segN, s.segSize = f, n, s.headSize
	s.syncedOff, s.markedOff = s.headSize, 0
	s.okSeg, s.okOff = n, s.headSize
	s.mu.Lock()
	s.started = true
	s.mu.Unlock()
	go s.flush()
	if iv := s.opts.Sync.Interval; iv > 0 {
		s.mu.Lock()
		s.armTick(iv)
		s.mu.Unlock()
	}
	return nil
}

// allocError says what a segment's allocation needs when the disk is too
// full for it: every segment takes its full size at once.
func (s *FileStore) allocError(err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("store: allocate segment: the log needs %d MiB free in %s for a segment (each is allocated whole, ahead of its records): %w",
			s.opts.SegmentBytes>>20, s.dir, err)
	}
	return fmt.Errorf("store: allocate segment: %w", err)
}

// armTick, with mu held, has the flusher woken after iv, and again every
// iv until the store closes, so that what it wrote is fsynced within the
// interval even when nothing more is appended.
func (s *FileStore) armTick(iv time.Duration) {
	s.tickT = s.opts.Clock.AfterFunc(iv, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closing || s.err != nil {
			return
		}
		s.tick = true
		s.work.Signal()
		s.armTick(iv)
	})
}

// Append implements Store.
func (s *FileStore) Append(recs ...*Record) (Pos, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, s.err
	}
	if !s.replayed {
		return 0, errors.New("store: Append before Replay")
	}
	before := len(s.buf)
	for _, r := range recs {
		s.buf = appendFrame(s.buf, r)
	}
	s.addSize(int64(len(s.buf) - before))
	s.stats.Bytes += uint64(len(s.buf) - before)
	s.stats.Records += uint64(len(recs))
	s.appended += Pos(len(recs))
	s.work.Signal()
	return s.appended, nil
}

// Wait implements Store.
func (s *FileStore) Wait(pos Pos) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.durable >= pos {
		return nil
	}
	if s.err != nil {
		return s.err
	}
	if pos > s.appended {
		// Nothing would ever release it.
		return fmt.Errorf("store: Wait for position %d, past the %d records appended", pos, s.appended)
	}
	s.wanted = max(s.wanted, pos)
	s.waits = append(s.waits, pos)
	s.work.Signal() // it may owe an fsync for pos, or be gathering waiters
	start := s.opts.Clock.Now()
	for s.durable < pos && s.err == nil {
		s.progress.Wait()
	}
	took := s.opts.Clock.Now().Sub(start)
	s.stats.Waits++
	s.stats.WaitTime += took
	s.stats.WaitHist.add(took)
	if s.durable >= pos {
		return nil
	}
	return s.err
}

// Mark implements Store.
func (s *FileStore) Mark() (Mark, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return Mark{}, s.err
	}
	next := s.segs[len(s.segs)-1] + 1
	if len(s.marks) > 0 {
		next = s.marks[len(s.marks)-1].seg + 1
	}
	s.marks = append(s.marks, pending{off: len(s.buf), seg: next})
	s.work.Signal()
	return Mark{seg: next}, nil
}

// Compact implements Store: it deletes the segments before m, once the
// flusher has moved past them.
func (s *FileStore) Compact(m Mark) error {
	s.mu.Lock()
	for s.err == nil && s.segN < m.seg {
		s.progress.Wait()
	}
	// The records after the mark replace those before it, so they must be
	// on disk before the segments holding the old ones go, also where Wait
	// promised only that they were written (an fsync interval): else a
	// machine crash in the interval loses every job, not the interval's.
	target := s.written
	if s.err == nil && s.synced < target {
		s.syncWant = max(s.syncWant, target)
		s.work.Signal()
	}
	for s.err == nil && s.synced < target {
		s.progress.Wait()
	}
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return err
	}
	var drop []uint64
	for len(s.segs) > 0 && s.segs[0] < m.seg {
		drop = append(drop, s.segs[0])
		s.segs = s.segs[1:]
	}
	s.mu.Unlock()
	for _, n := range drop {
		p := s.segPath(n)
		if err := s.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("store: remove %s: %w", p, err)
		}
		s.mu.Lock()
		s.addSize(-s.segBytes[n])
		delete(s.segBytes, n)
		s.mu.Unlock()
	}
	if len(drop) == 0 {
		return nil
	}
	return s.fs.SyncDir(s.dir)
}

// addSize, with mu held, counts n more bytes in the log.
func (s *FileStore) addSize(n int64) {
	s.size += n
	s.sizeNow.Store(s.size)
}

// Size implements Store. It takes no lock: callers check it after every
// append to see whether a checkpoint is due.
func (s *FileStore) Size() int64 { return s.sizeNow.Load() }

// Stats implements Store.
func (s *FileStore) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Size = s.size
	return st
}

// Close implements Store: it writes and syncs what was appended, then
// releases the directory.
func (s *FileStore) Close() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closing = true
	if s.tickT != nil {
		s.tickT.Stop()
	}
	// Not s.seg: a failed rotation clears it, and the flusher, which
	// closes done itself, may be the one clearing it.
	started := s.started
	s.work.Signal()
	s.mu.Unlock()
	var err error
	if started {
		<-s.done
		s.mu.Lock()
		if !errors.Is(s.err, ErrClosed) {
			err = s.err
		}
		s.mu.Unlock()
	} else {
		close(s.done)
	}
	s.unlock()
	return err
}

// flush is the one writer: it takes everything appended since its last
// round, writes it, syncs (per the sync mode) and tells the waiters.
//
// With fsync always it also gathers: when the last fsync released several
// waiters (publishers each waiting for their record), the next round
// waits for as many to be waiting again, or for at most as long as that
// fsync took, before it starts. Publishers that wait for each answer
// before their next publish come back one round trip after their release;
// without the wait, the first of them to come back starts an fsync alone
// and the rest wait through it for the one after, so the publishers split
// into cohorts that take turns and each fsync carries a fraction of them.
// A lone publisher is never delayed, and the wait costs at most one fsync
// time, once, when the number of publishers falls.
func (s *FileStore) flush() {
	defer close(s.done)
	defer func() {
		if s.seg != nil {
			s.seg.Close()
		}
	}()
	var lastSync time.Time
	var syncTook time.Duration // how long the last fsync took
	cohort := 0                // the gather target: waiters recent fsyncs released
	dirty := false             // written since the last fsync
	always := s.opts.Sync.Interval == 0
	// owed: someone waits for a record that is written but not fsynced
	// (a Wait with fsync always, or a Compact).
	owed := func() bool {
		return (always && s.wanted > s.synced || s.syncWant > s.synced) && s.written > s.synced
	}
	for {
		s.mu.Lock()
		for len(s.buf) == 0 && len(s.marks) == 0 && !s.closing && s.err == nil && !(dirty && s.tick) && !owed() {
			s.work.Wait()
		}
		if always && cohort > 1 && len(s.waits) < cohort && s.wanted > s.synced && !s.closing && s.err == nil {
			s.gather(syncTook, cohort)
		}
		s.tick = false
		if s.err != nil {
			s.mu.Unlock()
			return
		}
		if len(s.buf) == 0 && len(s.marks) == 0 && s.closing {
			err := s.closeHead()
			if err == nil {
				err = ErrClosed
			}
			s.err = err
			s.waits = nil
			s.progress.Broadcast()
			s.mu.Unlock()
			return
		}
		buf, marks, upto := s.buf, s.marks, s.appended
		s.buf, s.marks = s.spare[:0], nil
		s.mu.Unlock()

		err := s.write(buf, marks)
		dirty = dirty || len(buf) > 0
		s.mu.Lock()
		s.written = upto
		// With fsync always, only a record somebody waits for (a publish)
		// is worth an fsync of its own; acks and deliveries written
		// meanwhile ride along with the next one, in log order. A wait
		// for a record still in the buffer (appended after this round took
		// it) does not count: the next round writes it, and one fsync
		// then covers both.
		waited := always && slices.ContainsFunc(s.waits, func(p Pos) bool { return p <= upto })
		sync := dirty && (waited || s.syncWant > s.synced || !always && s.opts.Clock.Now().Sub(lastSync) >= s.opts.Sync.Interval)
		s.mu.Unlock()
		if err == nil && sync {
			start := s.opts.Clock.Now()
			err = s.seg.Sync()
			lastSync = s.opts.Clock.Now()
			syncTook = lastSync.Sub(start)
			dirty = false
			if err == nil {
				// Claimed before anyone is answered: a record confirmed
				// by this fsync and damaged later, with the process
				// killed before it wrote again, is told from a torn write.
				s.syncedOff = s.segSize
				err = s.claim()
			}
		}
		s.mu.Lock()
		if err == nil && sync {
			s.stats.Syncs++
			s.stats.SyncTime += syncTook
			s.stats.SyncHist.add(syncTook)
		}
		if cap(buf) <= maxSpare {
			s.spare = buf
		} else {
			s.spare = nil // a burst's buffer is not kept for good
		}
		if err != nil {
			s.err = fmt.Errorf("store: log write failed, nothing more is accepted until restart: %w", err)
			s.log.Error("store: log write failed", "err", err)
			s.waits = nil
			s.mu.Unlock()
			cerr := s.cutBack()
			s.mu.Lock()
			if cerr != nil {
				s.log.Error("store: the records of the failed write could not be cut from the log; a restart may bring back appends that were answered with an error", "err", cerr)
			}
		} else {
			if sync {
				s.synced = upto
			}
			if always {
				s.durable = s.synced
			} else {
				s.durable = upto
			}
			if sync || !always {
				s.okSeg, s.okOff = s.segN, s.segSize
			}
			n := len(s.waits)
			s.waits = slices.DeleteFunc(s.waits, func(p Pos) bool { return p <= s.durable })
			if sync {
				// The largest recent cohort: one round that missed a
				// waiter lowers the target by one, not to what it got.
				cohort = max(n-len(s.waits), cohort-1)
			}
		}
		s.progress.Broadcast()
		s.mu.Unlock()
		if err != nil {
			return
		}
		if sync {
			// Let the writers just released run before the next round:
			// in this process they append their next records at once.
			runtime.Gosched()
		}
	}
}

// cutBack takes out of the log what was written after the last answered
// round, once a write or an fsync has failed: those appends were answered
// with an error, and a restart must not bring them back from the page
// cache (after a failed fsync the kernel may still hold the pages, and
// keep them only until it evicts them) or from a part of a short write.
// Segments a failed round started are emptied, and the segment the
// answered records end in is truncated there and synced; a truncation is
// a change of the file's size, which an fsync that failed for the data
// itself may still make durable. The flusher calls it once, as it stops.
func (s *FileStore) cutBack() error {
	s.mu.Lock()
	later := slices.DeleteFunc(slices.Clone(s.segs), func(n uint64) bool { return n <= s.okSeg })
	s.mu.Unlock()
	var errs []error
	for _, n := range later {
		if n == s.segN && s.seg != nil {
			continue // the head: below
		}
		if err := s.truncate(s.segPath(n), 0); err != nil {
			errs = append(errs, err)
		}
	}
	switch {
	case s.seg == nil:
		errs = append(errs, s.truncate(s.segPath(s.okSeg), s.okOff))
	case s.segN == s.okSeg:
		errs = append(errs, s.cutHead(s.okOff))
	default:
		errs = append(errs, s.cutHead(0), s.truncate(s.segPath(s.okSeg), s.okOff))
	}
	return errors.Join(errs...)
}

// cutHead truncates the head segment to size and syncs it.
func (s *FileStore) cutHead(size int64) error {
	if err := s.seg.Truncate(size); err != nil {
		return fmt.Errorf("store: truncate segment %d: %w", s.segN, err)
	}
	if err := s.seg.Sync(); err != nil {
		return fmt.Errorf("store: sync segment %d: %w", s.segN, err)
	}
	s.segSize = min(s.segSize, size)
	return nil
}

// gather waits, with mu held, until n waiters wait, for at most d, or
// until the store closes or fails. Appends and Waits wake it.
func (s *FileStore) gather(d time.Duration, n int) {
	s.gatherN++
	round := s.gatherN
	s.gathered = false
	t := s.opts.Clock.AfterFunc(d, func() {
		s.mu.Lock()
		if s.gatherN == round {
			s.gathered = true
			s.work.Signal()
		}
		s.mu.Unlock()
	})
	for len(s.waits) < n && !s.gathered && !s.closing && s.err == nil {
		s.work.Wait()
	}
	t.Stop()
}

func (s *FileStore) write(buf []byte, marks []pending) error {
	off := 0
	for _, m := range marks {
		if err := s.writeSeg(buf[off:m.off]); err != nil {
			return err
		}
		off = m.off
		// A rotation for size may have taken m.seg already; then the
		// checkpoint starts later and Compact keeps a little more.
		if err := s.rotate(max(m.seg, s.segN+1)); err != nil {
			return err
		}
	}
	if err := s.writeSeg(buf[off:]); err != nil {
		return err
	}
	if s.segSize >= s.opts.SegmentBytes && len(buf) > 0 {
		return s.rotate(s.segN + 1)
	}
	return nil
}

func (s *FileStore) writeSeg(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if err := s.claim(); err != nil {
		return err
	}
	n, err := s.seg.WriteAt(b, s.segSize)
	s.segSize += int64(n)
	return err
}

// claim, in the flusher without mu, writes a sync mark for what was
// fsynced of the head since the last mark, if anything was. The mark
// itself is made durable by the next fsync; until then it only helps
// against a process killed, whose writes the page cache keeps.
func (s *FileStore) claim() error {
	if s.syncedOff <= s.markedOff {
		return nil
	}
	err := s.writeMark(syncMark{synced: s.syncedOff})
	s.mu.Lock()
	s.addSize(markFrame)
	s.mu.Unlock()
	return err
}

// writeMark writes a sync mark at the head's end (see appendMark); the
// caller counts its bytes in the log's size.
func (s *FileStore) writeMark(m syncMark) error {
	s.mark = appendMark(s.mark[:0], m)
	n, err := s.seg.WriteAt(s.mark, s.segSize)
	s.segSize += int64(n)
	if err == nil {
		s.markedOff = m.synced
	}
	return err
}

// closeHead, with mu held, syncs the head, then writes a closing mark
// that claims all of it and syncs that: a log closed cleanly is claimed to
// its end, so any damage to it later is told from a torn write.
func (s *FileStore) closeHead() error {
	if err := s.seg.Sync(); err != nil {
		return err
	}
	s.syncedOff = s.segSize
	err := s.writeMark(syncMark{synced: s.segSize, closed: true})
	s.addSize(markFrame)
	if err != nil {
		return err
	}
	return s.seg.Sync()
}

// rotate syncs and closes the current segment and starts segment n. The
// closed segment gives back the space allocated ahead that its records
// did not fill, so that only the head holds space ahead: a checkpoint
// started right after a restart that interrupted one would otherwise
// keep three whole segments on disk until it ends.
func (s *FileStore) rotate(n uint64) error {
	if err := s.seg.Sync(); err != nil {
		return err
	}
	if err := s.seg.Truncate(s.segSize); err != nil {
		return err
	}
	if err := s.seg.Close(); err != nil {
		return err
	}
	f, err := s.fs.OpenFile(s.segPath(n), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		s.seg = nil
		return err
	}
	if err := f.Preallocate(s.opts.SegmentBytes); err != nil {
		f.Close()
		s.seg = nil
		return s.allocError(err)
	}
	// Records confirmed in the new segment must not vanish with its
	// directory entry.
	if err := s.fs.SyncDir(s.dir); err != nil {
		f.Close()
		s.seg = nil
		return err
	}
	s.mu.Lock()
	s.segBytes[s.segN] = s.segSize
	s.seg, s.segN, s.segSize = f, n, 0
	s.syncedOff, s.markedOff = 0, 0
	s.segs = append(s.segs, n)
	s.progress.Broadcast()
	s.mu.Unlock()
	return nil
}

// Dir is the store's data directory.
func (s *FileStore) Dir() string { return s.dir }
