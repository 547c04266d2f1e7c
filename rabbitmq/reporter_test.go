package rabbitmq

import (
	"testing"
	"time"
)

// fakeRemote is a predictor in another process as far as startReporter
// can tell.
type fakeRemote struct{ Predictor }

func (fakeRemote) remote() {}

// A consumer's reports to a remote predictor go out reportCalls at a time:
// while that many calls wait for their answers, the next report still
// starts; none is dropped, and stop waits for all of them.
func TestReporterCallsInParallel(t *testing.T) {
	t.Parallel()
	r := startReporter(fakeRemote{})
	if r == nil {
		t.Fatal("no reporter for a remote predictor")
	}
	started := make(chan int, reportBuffer)
	release := make(chan struct{})
	done := make(chan int, reportBuffer)
	const reports = 3 * reportCalls
	for i := range reports {
		if !r.send(func() {
			started <- i
			<-release
			done <- i
		}) {
			t.Fatalf("report %d refused with %d queued, buffer %d", i, i, reportBuffer)
		}
	}
	timeout := time.NewTimer(20 * time.Second)
	defer timeout.Stop()
	for range reportCalls {
		select {
		case <-started:
		case <-timeout.C:
			t.Fatalf("fewer than %d reports in flight at once", reportCalls)
		}
	}
	select {
	case i := <-started:
		t.Fatalf("report %d started while %d were in flight, want at most %d", i, reportCalls, reportCalls)
	default:
	}
	close(release)
	r.stop()
	if len(done) != reports {
		t.Fatalf("stop returned after %d of %d reports", len(done), reports)
	}
}
