package client

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
)

// recordingStream is a Consume stream that keeps what is sent on it.
type recordingStream struct {
	grpc.BidiStreamingClient[pb.ConsumeRequest, pb.ConsumeResponse]
	mu   sync.Mutex
	sent []*pb.ConsumeRequest
}

func (s *recordingStream) Send(r *pb.ConsumeRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, r)
	return nil
}

// settledThenExtended reports the first job whose lease was extended
// after it was acked, if any.
func (s *recordingStream) settledThenExtended() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	settled := map[string]bool{}
	for _, r := range s.sent {
		switch r := r.Request.(type) {
		case *pb.ConsumeRequest_Ack:
			settled[r.Ack.Id] = true
		case *pb.ConsumeRequest_Extend:
			if settled[r.Extend.Id] {
				return r.Extend.Id
			}
		}
	}
	return ""
}

// However close to a job's ack its lease renewal fires, no extend of
// the job follows the ack: the broker would refuse it, and the worker
// report that as an error (by default, a warning in the log). Both
// renewals are raced: the one of a delivery waiting for a handler and the
// one of a running job. Before, a renewal that had read the job just
// before it was settled still sent its extend, after the ack.
func TestNoExtendAfterAck(t *testing.T) {
	t.Parallel()
	rs := &recordingStream{}
	// Renewals fire as soon as they can, again and again.
	s := &session{stream: rs, cfg: WorkerConfig{LeaseExtend: time.Nanosecond}}
	r := &renewer{s: s}
	defer r.stop()
	handler := func(context.Context, *Delivery) error {
		runtime.Gosched()
		return nil
	}
	for i := range 1500 {
		d := &Delivery{ID: fmt.Sprintf("auftrag-%d-ü", i), Lease: 30 * time.Second, Payload: make([]byte, 1<<10)}
		s.hold(d)
		s.wait(d)
		for range i % 4 {
			runtime.Gosched()
		}
		s.handle(t.Context(), d, handler, r)
	}
	s.forget()
	if id := rs.settledThenExtended(); id != "" {
		t.Fatalf("job %s was extended after its ack", id)
	}
}

// A job past its timeout: its handler's context ends with ErrTimeout, its
// lease is renewed no more, and it is nacked for a retry saying so; one
// whose handler still returns nil is acked.
func TestTimeout(t *testing.T) {
	t.Parallel()
	rs := &recordingStream{}
	s := &session{stream: rs, cfg: WorkerConfig{Timeout: time.Millisecond}}
	r := &renewer{s: s}
	defer r.stop()

	// The renewal: one extend before the timeout, none after.
	d := &Delivery{ID: "bericht-ü", Lease: 30 * time.Second}
	r.start(d, time.Hour, time.Now().Add(time.Hour)) // fired by hand below
	r.fire()
	r.start(d, time.Hour, time.Now().Add(-time.Nanosecond))
	r.fire()
	r.stop()

	causes := make(chan error, 2)
	for i, h := range []Handler{
		func(ctx context.Context, _ *Delivery) error {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		},
		func(ctx context.Context, _ *Delivery) error { <-ctx.Done(); causes <- context.Cause(ctx); return nil },
	} {
		d := &Delivery{ID: fmt.Sprint("job-", i), Lease: 30 * time.Second, Payload: make([]byte, 2<<10)}
		s.hold(d)
		s.handle(t.Context(), d, h, r)
		if err := <-causes; err != ErrTimeout {
			t.Errorf("handler %d: its context ended with %v, want ErrTimeout", i, err)
		}
	}

	rs.mu.Lock()
	defer rs.mu.Unlock()
	var extends int
	var nack *pb.Nack
	var ack *pb.Ack
	for _, req := range rs.sent {
		switch req := req.Request.(type) {
		case *pb.ConsumeRequest_Extend:
			extends++
		case *pb.ConsumeRequest_Nack:
			nack = req.Nack
		case *pb.ConsumeRequest_Ack:
			ack = req.Ack
		}
	}
	if extends != 1 {
		t.Errorf("%d extends, want 1: none once the job is past its timeout", extends)
	}
	if nack == nil || nack.Id != "job-0" || nack.Action != pb.NackAction_NACK_ACTION_RETRY || !strings.HasPrefix(nack.Reason, "timed out after 1ms: ") {
		t.Errorf("the job whose handler gave up: %v, want a retry saying it timed out", nack)
	}
	if ack == nil || ack.Id != "job-1" {
		t.Errorf("the job whose handler returned nil after its timeout: %v, want an ack", ack)
	}
}

// A handler's panic retries its job with the value as the reason and logs
// the stack; a panic with an error wrapping ErrDeadLetter dead-letters it,
// as returning that error does.
func TestHandlerPanic(t *testing.T) {
	t.Parallel()
	rs := &recordingStream{}
	var logged bytes.Buffer
	s := &session{stream: rs, log: slog.New(slog.NewTextHandler(&logged, nil))}
	r := &renewer{s: s}
	defer r.stop()
	for i, h := range []Handler{
		func(context.Context, *Delivery) error { panic("boom ✗") },
		func(context.Context, *Delivery) error { panic(fmt.Errorf("%w: unreadable", ErrDeadLetter)) },
	} {
		d := &Delivery{ID: fmt.Sprint("job-", i), JobType: "résumé", Lease: 30 * time.Second}
		s.hold(d)
		s.handle(t.Context(), d, h, r)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if len(rs.sent) != 2 {
		t.Fatalf("sent %d requests, want two nacks", len(rs.sent))
	}
	for i, want := range []struct {
		action pb.NackAction
		reason string
	}{
		{pb.NackAction_NACK_ACTION_RETRY, "handler panicked: boom ✗"},
		{pb.NackAction_NACK_ACTION_DEAD_LETTER, "handler panicked: harbinger: dead-letter this job: unreadable"},
	} {
		n := rs.sent[i].GetNack()
		if n == nil || n.Action != want.action || n.Reason != want.reason {
			t.Errorf("panic %d settled with %v, want %v %q", i, rs.sent[i], want.action, want.reason)
		}
	}
	if out := logged.String(); strings.Count(out, "handler panicked") != 2 || !strings.Contains(out, "TestHandlerPanic") {
		t.Errorf("the log does not carry both panics with their stacks:\n%s", out)
	}
}
