//go:build !linux

package harness

import "time"

// preciseSleep falls back to the runtime timer off Linux.
func preciseSleep(d time.Duration) { time.Sleep(d) }

// PreciseSleepMethod says how preciseSleep sleeps, for the method line.
const PreciseSleepMethod = "on the Go runtime's timer (about a millisecond late off Linux)"
