package store

import (
	"fmt"
	"io/fs"
	"os"
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
	failWrite atomic.Bool
}

// FailSync makes every later fsync fail (or succeed again, with false).
func (f *FaultFS) FailSync(on bool) { f.failSync.Store(on) }

// FailWrite makes every later write, and every allocation of a new
// segment's space, fail with ENOSPC, as a full disk does (or succeed
// again).
func (f *FaultFS) FailWrite(on bool) { f.failWrite.Store(on) }

// Syncs is the number of fsyncs so far.
func (f *FaultFS) Syncs() int64 { return f.syncs.Load() }

// DirSyncs is the number of directory syncs so far.
func (f *FaultFS) DirSyncs() int64 { return f.dirSyncs.Load() }

// SyncDir implements FS, failing as fsyncs do.
func (f *FaultFS) SyncDir(name string) error {
	f.dirSyncs.Add(1)
	if f.failSync.Load() {
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
		return 0, fmt.Errorf("write %s: %w", f.Name(), syscall.ENOSPC)
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
	f.fs.syncs.Add(1)
	if f.fs.failSync.Load() {
		return fmt.Errorf("fsync %s: %w", f.Name(), syscall.EIO)
	}
	return f.osFile.Sync()
}
