//go:build race

package sim

// raceEnabled lets the slowest tests do less under the race detector, which
// slows the simulator about tenfold.
const raceEnabled = true
