package harness

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPreciseSleepNeverShort: every sleep, sequential (a pooled timer
// re-armed) or concurrent (one timer each), lasts at least what was asked.
func TestPreciseSleepNeverShort(t *testing.T) {
	for _, d := range []time.Duration{time.Nanosecond, 40 * time.Microsecond, 400 * time.Microsecond, 1500 * time.Microsecond} {
		for range 20 {
			start := time.Now()
			preciseSleep(d)
			if got := time.Since(start); got < d {
				t.Fatalf("preciseSleep(%v) returned after %v", d, got)
			}
		}
	}
	var wg sync.WaitGroup
	short := make(chan time.Duration, 64)
	for i := range 64 {
		wg.Go(func() {
			d := time.Duration(100+i*10) * time.Microsecond
			start := time.Now()
			preciseSleep(d)
			if got := time.Since(start); got < d {
				short <- got
			}
		})
	}
	wg.Wait()
	close(short)
	for got := range short {
		t.Errorf("a concurrent sleep returned early, after %v", got)
	}
	preciseSleep(0)
	preciseSleep(-time.Second) // returns at once, never blocks
}

// TestPreciseSleepParks: a goroutine in preciseSleep is parked on the
// poller ("IO wait"), not in a system call that holds its P, so other
// goroutines run meanwhile however many sleep at once.
func TestPreciseSleepParks(t *testing.T) {
	const d = time.Second // long enough to be seen asleep on a loaded machine
	done := make(chan time.Duration)
	go func() {
		start := time.Now()
		preciseSleep(d)
		done <- time.Since(start)
	}()
	buf := make([]byte, 1<<20)
	for {
		select {
		case took := <-done:
			t.Fatalf("the sleep (%v) ended before it was seen parked", took)
		default:
		}
		n := runtime.Stack(buf, true)
		if n == len(buf) { // cut short: look again with room for every goroutine
			buf = make([]byte, 2*len(buf))
			continue
		}
		stacks := string(buf[:n])
		for g := range strings.SplitSeq(stacks, "\n\n") {
			if !strings.Contains(g, "harness.preciseSleep") {
				continue
			}
			if strings.Contains(g, "[syscall") {
				t.Fatalf("the sleeping goroutine is in a system call:\n%s", g)
			}
			if strings.Contains(g, "[IO wait") {
				if took := <-done; took < d {
					t.Fatalf("preciseSleep(%v) returned after %v", d, took)
				}
				return
			}
		}
		runtime.Gosched()
	}
}
