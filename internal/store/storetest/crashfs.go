// Package storetest holds test support for the store and its users: a file
// layer that simulates a power cut.
package storetest

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/harbinger-mq/harbinger/internal/store"
)

// CrashFS is an in-memory file system that keeps, beside what readers see,
// what a power cut would leave: the bytes of each file as of its last
// fsync, and the directory's entries as of its last directory sync. It
// takes the approach of LazyFS: Sync moves a file's pending writes to its
// durable image, and a cut builds the file system a reboot would find.
//
// A cut is taken at a chosen count of operations (CutAt): the image is
// built at that moment, before the operation applies, and the file system
// goes on serving the process as if nothing happened, so a test can run a
// workload straight through and then recover from the image.
type CrashFS struct {
	mu    sync.Mutex
	live  map[string]*file // what the running process sees
	saved map[string]*file // the directory's entries as of the last SyncDir
	ops   int

	cutAt int
	mode  CutMode
	rng   *rand.Rand
	image *CrashFS
}

// CutMode says what a cut keeps of the writes that were not fsynced.
type CutMode int

const (
	// LoseUnsynced keeps only what was fsynced.
	LoseUnsynced CutMode = iota
	// TornUnsynced also keeps a random part of the writes since the last
	// fsync, in any order, 512-byte sector by sector, one sector of them
	// torn (a prefix of it written): later writes may survive where
	// earlier ones did not, as the kernel flushes pages in no set order.
	TornUnsynced
)

func (m CutMode) String() string {
	if m == TornUnsynced {
		return "torn-unsynced"
	}
	return "lose-unsynced"
}

// sector is the unit a disk writes atomically, or tears.
const sector = 512

type file struct {
	data    []byte // what a reader sees
	durable []byte // what a power cut leaves
	pending []op   // since the last Sync, in order
}

type op struct {
	write bool  // else a change of size (truncate or allocate)
	off   int64 // write: where
	data  []byte
	size  int64 // size change: to this size
	grow  bool  // size change: only grows (an allocation)
}

// New returns an empty CrashFS.
func New() *CrashFS {
	return &CrashFS{live: map[string]*file{}, saved: map[string]*file{}}
}

// CutAt has the file system take its power-cut image just before its n-th
// operation from now (n >= 1), keeping what mode says of the unsynced
// writes; rng chooses which.
func (c *CrashFS) CutAt(n int, mode CutMode, rng *rand.Rand) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cutAt, c.mode, c.rng, c.image = c.ops+n, mode, rng, nil
}

// Cut reports whether the cut has been taken.
func (c *CrashFS) Cut() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.image != nil
}

// Image is the file system as the cut left it: what a broker restarted
// after the power cut finds. It is nil before the cut.
func (c *CrashFS) Image() *CrashFS {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.image
}

// Ops is the number of operations so far: a test counts a workload's
// operations once, then picks cut points among them.
func (c *CrashFS) Ops() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops
}

// step, with mu held, counts an operation and takes the cut when it is
// due.
func (c *CrashFS) step() {
	c.ops++
	if c.image == nil && c.cutAt > 0 && c.ops >= c.cutAt {
		c.image = c.crash()
	}
}

// crash builds the file system a reboot finds: the saved entries, each
// with its durable bytes and, when torn, part of its pending writes.
func (c *CrashFS) crash() *CrashFS {
	img := New()
	names := make([]string, 0, len(c.saved))
	for name := range c.saved {
		names = append(names, name)
	}
	sort.Strings(names) // the random choices follow the seed alone
	for _, name := range names {
		f := c.saved[name]
		data := slices.Clone(f.durable)
		if c.mode == TornUnsynced {
			data = c.tear(data, f.pending)
		}
		img.live[name] = &file{data: data, durable: slices.Clone(data)}
		img.saved[name] = img.live[name]
	}
	return img
}

// tear applies a random part of pending to data.
func (c *CrashFS) tear(data []byte, pending []op) []byte {
	type piece struct {
		off  int64
		data []byte
	}
	var pieces []piece
	for _, o := range pending {
		if !o.write {
			if c.rng.IntN(2) == 0 {
				data = resize(data, o.size, o.grow)
			}
			continue
		}
		for off := o.off; off < o.off+int64(len(o.data)); {
			end := min((off/sector+1)*sector, o.off+int64(len(o.data)))
			pieces = append(pieces, piece{off, o.data[off-o.off : end-o.off]})
			off = end
		}
	}
	torn := -1
	if len(pieces) > 0 {
		torn = c.rng.IntN(len(pieces))
	}
	for i, p := range pieces {
		if c.rng.IntN(2) == 0 && i != torn {
			continue
		}
		b := p.data
		if i == torn {
			b = b[:c.rng.IntN(len(b)+1)]
		}
		data = writeAt(data, b, p.off)
	}
	return data
}

func resize(data []byte, size int64, grow bool) []byte {
	switch {
	case int64(len(data)) < size:
		return append(data, make([]byte, size-int64(len(data)))...)
	case !grow:
		return data[:size]
	}
	return data
}

func writeAt(data, b []byte, off int64) []byte {
	if end := off + int64(len(b)); end > int64(len(data)) {
		data = append(data, make([]byte, end-int64(len(data)))...)
	}
	copy(data[off:], b)
	return data
}

// OpenFile implements store.FS.
func (c *CrashFS) OpenFile(name string, flag int, _ fs.FileMode) (store.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step()
	f := c.live[name]
	switch {
	case f == nil && flag&os.O_CREATE == 0:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	case f != nil && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrExist}
	case f == nil:
		f = &file{}
		c.live[name] = f
	}
	if flag&os.O_TRUNC != 0 {
		f.data = f.data[:0]
		f.pending = append(f.pending, op{size: 0})
	}
	return &handle{fs: c, f: f, name: name}, nil
}

// ReadFile implements store.FS.
func (c *CrashFS) ReadFile(name string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step()
	f := c.live[name]
	if f == nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return slices.Clone(f.data), nil
}

// ReadDir implements store.FS: the files directly in dir.
func (c *CrashFS) ReadDir(dir string) ([]fs.DirEntry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step()
	var out []fs.DirEntry
	for name, f := range c.live {
		if filepath.Dir(name) == filepath.Clean(dir) {
			out = append(out, entry{name: filepath.Base(name), size: int64(len(f.data))})
		}
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return compare(a.Name(), b.Name()) })
	return out, nil
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Remove implements store.FS; the removal is durable at the next SyncDir.
func (c *CrashFS) Remove(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step()
	if c.live[name] == nil {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	delete(c.live, name)
	return nil
}

// Rename implements store.FS; the new name is durable at the next SyncDir.
func (c *CrashFS) Rename(from, to string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step()
	f := c.live[from]
	if f == nil {
		return &fs.PathError{Op: "rename", Path: from, Err: fs.ErrNotExist}
	}
	delete(c.live, from)
	c.live[to] = f
	return nil
}

// MkdirAll implements store.FS: directories are implied by names.
func (c *CrashFS) MkdirAll(string, fs.FileMode) error { return nil }

// SyncDir implements store.FS: the entries of dir as they are now are what
// a cut keeps.
func (c *CrashFS) SyncDir(dir string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step()
	dir = filepath.Clean(dir)
	for name := range c.saved {
		if filepath.Dir(name) == dir && c.live[name] == nil {
			delete(c.saved, name)
		}
	}
	for name, f := range c.live {
		if filepath.Dir(name) == dir {
			c.saved[name] = f
		}
	}
	return nil
}

type handle struct {
	fs     *CrashFS
	f      *file
	name   string
	closed bool
}

func (h *handle) WriteAt(b []byte, off int64) (int, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if h.closed {
		return 0, fmt.Errorf("write %s: %w", h.name, os.ErrClosed)
	}
	h.fs.step()
	h.f.data = writeAt(h.f.data, b, off)
	h.f.pending = append(h.f.pending, op{write: true, off: off, data: slices.Clone(b)})
	return len(b), nil
}

func (h *handle) Sync() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if h.closed {
		return fmt.Errorf("sync %s: %w", h.name, os.ErrClosed)
	}
	h.fs.step()
	for _, o := range h.f.pending {
		if o.write {
			h.f.durable = writeAt(h.f.durable, o.data, o.off)
		} else {
			h.f.durable = resize(h.f.durable, o.size, o.grow)
		}
	}
	h.f.pending = nil
	return nil
}

func (h *handle) Preallocate(size int64) error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	h.fs.step()
	h.f.data = resize(h.f.data, size, true)
	h.f.pending = append(h.f.pending, op{size: size, grow: true})
	return nil
}

func (h *handle) Truncate(size int64) error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	h.fs.step()
	h.f.data = resize(h.f.data, size, false)
	h.f.pending = append(h.f.pending, op{size: size})
	return nil
}

func (h *handle) Close() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	h.closed = true
	return nil
}

type entry struct {
	name string
	size int64
}

func (e entry) Name() string               { return e.name }
func (e entry) IsDir() bool                { return false }
func (e entry) Type() fs.FileMode          { return 0 }
func (e entry) Info() (fs.FileInfo, error) { return info(e), nil }

type info entry

func (i info) Name() string       { return i.name }
func (i info) Size() int64        { return i.size }
func (i info) Mode() fs.FileMode  { return 0o644 }
func (i info) ModTime() time.Time { return time.Time{} }
func (i info) IsDir() bool        { return false }
func (i info) Sys() any           { return nil }
