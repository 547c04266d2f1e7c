//go:build !linux

package bench

import "time"

// preciseSleep falls back to the runtime timer off Linux.
func preciseSleep(d time.Duration) { time.Sleep(d) }

// preciseSleepMethod says how preciseSleep sleeps, for the method line.
const preciseSleepMethod = "on the Go runtime's timer (about a millisecond late off Linux)"
