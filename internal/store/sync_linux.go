package store

import "syscall"

// Sync is fdatasync: the data and the metadata reading it back needs (the
// size, when a write went past the space allocated ahead), without the
// rest (times), which a preallocated segment would otherwise still cost.
func (f osFile) Sync() error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}

// Preallocate reserves size bytes with fallocate, so that appends within
// them change no file size; a file system that cannot allocate ahead
// (EOPNOTSUPP) is left to grow as it is written.
func (f osFile) Preallocate(size int64) error {
	for {
		err := syscall.Fallocate(int(f.Fd()), 0, 0, size)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EOPNOTSUPP, syscall.ENOSYS:
			return nil
		}
		return err
	}
}
