package store

import (
	"fmt"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// FaultFS is the operating system's file layer with failures on demand,
// for tests of what the broker does when its disk fails: a write that
// finds the disk full, an fsync that reports an I/O error. It counts
// fsyncs, so tests can see commits being grouped.
type FaultFS struct {
	osFS
	syncs     atomic.Int64
	dirSyncs  atomic.Int64
	failSync  atomic.Bool
	failSyncs atomic.Int64 // the next fsyncs to fail, one by one
	failWrite atomic.Bool
	hold      atomic.Pointer[syncHold]
}

// syncHold is a hold on fsyncs (HoldSyncs).
type syncHold struct {
	gate chan struct{} // closed by the release
	held chan struct{} // a value as each fsync starts to wait
}

// HoldSyncs makes every later fsync of a file wait, before it reaches the
// disk, until release is called; held receives a value as each one starts
// to wait (dropped while one is unread). For tests of what must wait for
// an fsync: nothing that does is answered while one is held.
func (f *FaultFS) HoldSyncs() (held <-chan struct{}, release func()) {
	h := &syncHold{gate: make(chan struct{}), held: make(chan struct{}, 1)}
	f.hold.Store(h)
	var once sync.Once
	return h.held, func() {
		once.Do(func() {
			f.hold.CompareAndSwap(h, nil)
			close(h.gate)
		})
	}
}

// FailSync makes every later fsync fail (or succeed again, with false).
func (f *FaultFS) FailSync(on bool) { f.failSync.Store(on) }

// FailSyncs makes the next n fsyncs fail and those after them succeed, as
// Linux reports a writeback error to one fsync and not again.
func (f *FaultFS) FailSyncs(n int) { f.failSyncs.Store(int64(n)) }

// syncFails reports whether this fsync is to fail.
func (f *FaultFS) syncFails() bool {
	if f.failSync.Load() {
		return true
	}
	for {
		n := f.failSyncs.Load()
		if n <= 0 {
			return false
		}
		if f.failSyncs.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// FailWrite makes every later write, and every allocation of a new
// segment's space, fail with ENOSPC, as a full disk does (or succeed
// again). A write that fails writes the first half of its bytes, as one
// that fills the disk writes what fits.
func (f *FaultFS) FailWrite(on bool) { f.failWrite.Store(on) }

// Syncs is the number of fsyncs so far.
func (f *FaultFS) Syncs() int64 { return f.syncs.Load() }

// DirSyncs is the number of directory syncs so far.
func (f *FaultFS) DirSyncs() int64 { return f.dirSyncs.Load() }

// SyncDir implements FS, failing as fsyncs do.
func (f *FaultFS) SyncDir(name string) error {
	f.dirSyncs.Add(1)
	if f.syncFails() {
		return fmt.Errorf("fsync %s: %w", name, syscall.EIO)
	}
	return f.osFS.SyncDir(name)
}

// OpenFile implements FS.
func (f *FaultFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	file, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{osFile: osFile{file}, fs: f}, nil
}

type faultFile struct {
	osFile
	fs *FaultFS
}

func (f *faultFile) WriteAt(b []byte, off int64) (int, error) {
	if f.fs.failWrite.Load() {
		n, err := f.osFile.WriteAt(b[:len(b)/2], off)
		if err == nil {
			err = fmt.Errorf("write %s: %w", f.Name(), syscall.ENOSPC)
		}
		return n, err
	}
	return f.osFile.WriteAt(b, off)
}

func (f *faultFile) Preallocate(size int64) error {
	if f.fs.failWrite.Load() {
		return fmt.Errorf("fallocate %s: %w", f.Name(), syscall.ENOSPC)
	}
	return f.osFile.Preallocate(size)
}

func (f *faultFile) Sync() error {
	if h := f.fs.hold.Load(); h != nil {
		select {
		case h.held <- struct{}{}:
		default:
		}
		<-h.gate
	}
	f.fs.syncs.Add(1)
	if f.fs.syncFails() {
		return fmt.Errorf("fsync %s: %w", f.Name(), syscall.EIO)
	}
	return f.osFile.Sync()
}
