//go:build !linux

package store

// Sync is the system's fsync.
func (f osFile) Sync() error { return f.File.Sync() }

// Preallocate does nothing here: the file grows as it is written.
func (f osFile) Preallocate(size int64) error { return nil }
