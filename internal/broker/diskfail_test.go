package broker

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// errDisk is what a full disk says.
var errDisk = errors.New("write log-000001: no space left on device")

// faultyStore is a store whose disk fails on demand: while failAppend is
// set Append refuses records, and while failWait is set Wait reports that
// what was appended did not reach the disk.
type faultyStore struct {
	store.Store
	failAppend, failWait atomic.Bool
}

func (s *faultyStore) Append(recs ...*store.Record) (store.Pos, error) {
	if s.failAppend.Load() {
		return 0, errDisk
	}
	return s.Store.Append(recs...)
}

func (s *faultyStore) Wait(pos store.Pos) error {
	if s.failWait.Load() {
		return errDisk
	}
	return s.Store.Wait(pos)
}

// A disk that fails under a durable broker: each operation that could not
// be made durable says so (ErrNotDurable, with the disk's own error) and
// says what did happen, so that the caller knows whether to do it again.
// A publish refused before it changed anything leaves no job behind; a
// delete the log refused leaves the queue as it was; a delete logged but
// not synced has happened, and its error says what it dropped.
func TestDiskFailures(t *testing.T) {
	t.Parallel()
	st := &faultyStore{Store: store.NewMemory()}
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := durable(t, st, clk, Config{})
	payload := []byte(strings.Repeat("\xfeübung ", 512)) // 4 KiB, invalid UTF-8 included
	for range 3 {
		if _, err := b.Publish(&Message{Queue: "q", JobType: "報告", Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}

	st.failWait.Store(true)
	_, err := b.Publish(&Message{Queue: "q", Payload: payload})
	if !errors.Is(err, ErrNotDurable) || !strings.Contains(err.Error(), "no space left") || !strings.Contains(err.Error(), "publish it again") {
		t.Fatalf("a publish the disk did not take: %v", err)
	}
	st.failWait.Store(false)
	st.failAppend.Store(true)
	if _, err := b.Publish(&Message{Queue: "q", Payload: payload}); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("a publish the log refused: %v", err)
	}
	in, err := b.Queue("q")
	if err != nil {
		t.Fatal(err)
	}
	// The first failed publish was logged, only not synced: it may run
	// (its error says so). The second never reached the queue.
	if in.Ready != 4 {
		t.Fatalf("after two failed publishes the queue holds %d jobs, want the 3 stored and the 1 logged but not synced", in.Ready)
	}

	if _, err := b.DeleteQueue("q", true); !errors.Is(err, ErrNotDurable) || !strings.Contains(err.Error(), "not deleted") {
		t.Fatalf("a delete the log refused: %v", err)
	}
	if in, err := b.Queue("q"); err != nil || in.Ready != 4 {
		t.Fatalf("a delete the log refused changed the queue: %+v, %v", in, err)
	}

	st.failAppend.Store(false)
	st.failWait.Store(true)
	d, err := b.DeleteQueue("q", true)
	if !errors.Is(err, ErrNotDurable) || d.Waiting != 4 {
		t.Fatalf("a delete logged but not synced: %+v, %v", d, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "dropped 4 waiting, 0 delayed, 0 running and 0 dead-lettered jobs") || !strings.Contains(msg, "may come back") {
		t.Errorf("the error of a delete that was not made durable does not say what it dropped: %v", err)
	}
	if _, err := b.Queue("q"); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("the queue is still there after its delete was logged: %v", err)
	}
}
