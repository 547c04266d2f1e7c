package server

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/auth"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// rewrite replaces the token file with these grants of the tokens
// authSetup made (name -> scopes) and reloads it, as SIGHUP does.
func (ab *authBundle) rewrite(t *testing.T, grants map[string][]string) {
	t.Helper()
	var f strings.Builder
	f.WriteString("tokens:\n")
	for name, scopes := range grants {
		var ss []auth.Scope
		for _, s := range scopes {
			sc, err := auth.ParseScope(s)
			if err != nil {
				t.Fatal(err)
			}
			ss = append(ss, sc)
		}
		f.WriteString(auth.FileEntry(name, ab.tokens[name], ss))
	}
	if err := os.WriteFile(ab.path, []byte(f.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ab.set.Reload(); err != nil {
		t.Fatal(err)
	}
}

// A token revoked or narrowed by a reload ends the streams it opened, at
// once: a Consume stream ends with Unauthenticated (revoked) or
// PermissionDenied (no longer allowed to consume its queue) and is sent no
// job after the reload, whether one was ready or it was idle; a
// PublishStream's next request is refused and nothing of it stored.
// Before, a stream checked its token only when it was opened (and each
// request's queues against the grant of that moment): removing a token
// and sending SIGHUP stopped new calls while an open worker went on
// receiving jobs and an open publisher went on storing them.
func TestReloadEndsStreamsOfARevokedToken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		grants map[string][]string // the file after the reload
		want   codes.Code          // OK: the streams go on
		// ready: a job is published after the reload, before the stream
		// is read; else the consumer is idle and must be woken.
		ready bool
	}{
		{"revoked, idle", map[string][]string{"admin": {"admin"}}, codes.Unauthenticated, false},
		{"revoked, job ready", map[string][]string{"admin": {"admin"}}, codes.Unauthenticated, true},
		{"narrowed, idle", map[string][]string{"admin": {"admin"}, "orders": {"read:orders.", "admin:other."}}, codes.PermissionDenied, false},
		{"narrowed, job ready", map[string][]string{"admin": {"admin"}, "orders": {"read:orders.", "admin:other."}}, codes.PermissionDenied, true},
		// The same scopes, the file rewritten: nothing changes for it.
		{"kept", map[string][]string{"admin": {"admin"}, "orders": {"admin:orders."}}, codes.OK, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ab := authSetup(t)
			conn := ab.dial(t, ab.tokens["orders"])
			bc := pb.NewBrokerClient(conn)
			// A bound on each wait, so that a stream the reload fails to
			// end fails the test instead of hanging it.
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()

			cons, err := bc.Consume(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := cons.Send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Subscribe{Subscribe: &pb.Subscribe{Queue: "orders.work", Prefetch: 4}}}); err != nil {
				t.Fatal(err)
			}
			publish := func(queue string) {
				t.Helper()
				if _, err := ab.b.Publish(&broker.Message{Queue: queue, Payload: []byte("job")}); err != nil {
					t.Fatal(err)
				}
			}
			// The stream is subscribed and delivering before the reload.
			publish("orders.work")
			r, err := cons.Recv()
			if err != nil || r.GetDelivery() == nil {
				t.Fatalf("before the reload: %v, %v", r, err)
			}
			first := r.GetDelivery().GetId()
			if err := cons.Send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Ack{Ack: &pb.Ack{Id: first, Duration: durationpb.New(time.Millisecond)}}}); err != nil {
				t.Fatal(err)
			}
			waitInfo(t, ab.b, "orders.work", "the first job acked", func(in broker.QueueInfo) bool { return in.Acked == 1 })

			pubs, err := bc.PublishStream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			req := &pb.PublishRequest{Messages: []*pb.Message{{Queue: "orders.out", Payload: []byte("x")}}}
			if err := pubs.Send(req); err != nil {
				t.Fatal(err)
			}
			if resp, err := pubs.Recv(); err != nil || resp.Results[0].GetId() == "" {
				t.Fatalf("publish before the reload: %v, %v", resp, err)
			}

			ab.rewrite(t, tc.grants)
			if tc.ready {
				publish("orders.work")
			}

			// The consumer.
			r, err = cons.Recv()
			ended := false
			switch {
			case tc.want == codes.OK:
				if err != nil || r.GetDelivery() == nil {
					t.Errorf("a token whose scopes were kept: %v, %v", r, err)
				}
			case err == nil:
				t.Errorf("after the reload the stream was sent %v, want it ended with %v", r, tc.want)
			case status.Code(err) != tc.want:
				t.Errorf("the consumer's stream ended with %v, want %v", err, tc.want)
			default:
				ended = true
			}
			if ended {
				if tc.ready {
					// The job published after the reload stays in line.
					waitInfo(t, ab.b, "orders.work", "the job ready, the consumer gone", func(in broker.QueueInfo) bool {
						return in.Ready == 1 && in.InFlight == 0 && in.Consumers == 0 && in.Delivered == 1
					})
				} else {
					waitInfo(t, ab.b, "orders.work", "the consumer gone", func(in broker.QueueInfo) bool { return in.Consumers == 0 })
				}
			}

			// The publisher.
			if err := pubs.Send(req); err != nil && err != io.EOF {
				t.Fatal(err)
			}
			resp, err := pubs.Recv()
			if tc.want == codes.OK {
				if err != nil || resp.Results[0].GetId() == "" {
					t.Fatalf("publish after a reload that kept the scopes: %v, %v", resp, err)
				}
				return
			}
			if status.Code(err) != tc.want {
				t.Fatalf("publish after the reload: %v, %v; want %v", resp, err, tc.want)
			}
			if in, err := ab.b.Queue("orders.out"); err != nil || in.Published != 1 {
				t.Fatalf("orders.out after the reload: %+v, %v; want only the first publish stored", in, err)
			}
		})
	}
}

// waitInfo waits until cond holds of queue's info; the broker's Changed
// channel wakes it at each change.
func waitInfo(t *testing.T, b *broker.Broker, queue, what string, cond func(broker.QueueInfo) bool) {
	t.Helper()
	timeout := time.NewTimer(20 * time.Second)
	defer timeout.Stop()
	for {
		changed := b.Changed()
		if in, err := b.Queue(queue); err == nil && cond(in) {
			return
		}
		select {
		case <-changed:
		case <-timeout.C:
			in, _ := b.Queue(queue)
			t.Fatalf("timed out waiting for %s: %+v", what, in)
		}
	}
}
