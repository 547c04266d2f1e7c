package sdk_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// serve runs a broker with cfg (serveAt) and returns a client dialled to
// it; both stop when the test ends.
func serve(t *testing.T, cfg broker.Config) (*client.Client, *broker.Broker) {
	t.Helper()
	addr, b := serveAt(t, cfg)
	c, err := client.Dial(t.Context(), addr, client.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, b
}

// pattern is n bytes that are not all alike, so that a payload cut or
// shifted anywhere compares unequal.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// A job the broker accepted can be read back whatever its size: with an
// 8 MiB max payload, GetJob of a 5 MB job answers it whole. Before, the
// client kept gRPC's default receive limit of 4 MiB for every call but
// Consume, and refused the broker's answer with ResourceExhausted
// ("received message larger than max").
func TestGetJobLargerThanGRPCDefault(t *testing.T) {
	t.Parallel()
	c, _ := serve(t, broker.Config{MaxPayload: 8 << 20})
	ctx := t.Context()
	payload := pattern(5_000_000, 3)
	ids, err := c.Publish(ctx, &client.Message{Queue: "exports", JobType: "csv", Payload: payload, Headers: map[string]string{"kunde": "Müller"}})
	if err != nil {
		t.Fatal(err)
	}
	j, err := c.GetJob(ctx, "exports", ids[0])
	if err != nil {
		t.Fatalf("GetJob of a %d-byte job: %v", len(payload), err)
	}
	if !bytes.Equal(j.Payload, payload) || j.Headers["kunde"] != "Müller" {
		t.Fatalf("GetJob answered %d bytes of payload and headers %v", len(j.Payload), j.Headers)
	}
}

// A Publish whose messages each fit the broker's limits is stored however
// large the messages are together: six messages of 1,000,000 bytes (within
// the default 1 MiB max payload, 6 MB together against a 4 MiB request
// limit) are all stored, in order. A message too large for any request
// fails alone with InvalidArgument, and the rest are stored. Before, the
// whole call failed with ResourceExhausted ("received message larger than
// max"), the code a full queue answers, naming no message.
func TestPublishLargerThanOneRequest(t *testing.T) {
	t.Parallel()
	c, b := serve(t, broker.Config{})
	ctx := t.Context()

	var msgs []*client.Message
	for i := range 6 {
		msgs = append(msgs, &client.Message{Queue: "scans", JobType: "ocr", Payload: pattern(1_000_000, byte(i)), Headers: map[string]string{"seite": "ü"}})
	}
	ids, err := c.Publish(ctx, msgs...)
	if err != nil {
		t.Fatalf("Publish of 6 messages of 1 MB: %v", err)
	}
	if len(ids) != len(msgs) {
		t.Fatalf("%d ids for %d messages", len(ids), len(msgs))
	}
	for i, id := range ids {
		j, err := c.GetJob(ctx, "scans", id)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(j.Payload, msgs[i].Payload) {
			t.Fatalf("id %d holds another message's payload", i)
		}
	}

	huge := &client.Message{Queue: "scans", JobType: "ocr", Payload: pattern(5<<20, 9)}
	small := &client.Message{Queue: "scans", JobType: "ocr", Payload: []byte("klein")}
	ids, err = c.Publish(ctx, small, huge, small)
	var pe *client.PublishError
	if !errors.As(err, &pe) || pe.Total != 3 || len(pe.Failed) != 1 || pe.Failed[0].Index != 1 || status.Code(pe.Failed[0].Err) != codes.InvalidArgument {
		t.Fatalf("Publish(small, 5 MiB, small) = %v, want a PublishError with message 1 InvalidArgument", err)
	}
	if len(ids) != 2 {
		t.Fatalf("%d ids, want the two small messages'", len(ids))
	}
	if in, err := b.Queue("scans"); err != nil || in.Ready != 8 {
		t.Fatalf("queue holds %d ready jobs (%v), want 8", in.Ready, err)
	}
}

// Schedules carry payloads: 80 of 60 KiB make more than one answer may
// hold, and ListSchedules failed with "trying to send message larger than
// max". The broker answers them a page at a time and the client reads
// every page.
func TestListSchedulesOfLargePayloads(t *testing.T) {
	t.Parallel()
	c, _ := serve(t, broker.Config{})
	ctx := t.Context()
	const n = 80
	for i := range n {
		s := &pb.Schedule{Name: fmt.Sprintf("rapport-%02d-ü", i), Queue: "reports", Every: durationpb.New(time.Hour), Payload: pattern(60<<10, byte(i))}
		if _, err := c.DeclareSchedule(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.ListSchedules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("listed %d schedules, want %d", len(got), n)
	}
	for i, s := range got {
		if want := fmt.Sprintf("rapport-%02d-ü", i); s.Name != want || !bytes.Equal(s.Payload, pattern(60<<10, byte(i))) {
			t.Fatalf("schedule %d is %q with %d bytes, want %q whole", i, s.Name, len(s.Payload), want)
		}
	}
}
