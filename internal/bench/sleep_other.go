//go:build !linux

package bench

import "time"

// preciseSleep falls back to the runtime timer off Linux.
func preciseSleep(d time.Duration) { time.Sleep(d) }
