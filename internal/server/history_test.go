package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/history"
)

// export reads an ExportHistory stream to its end: the file and the
// number of chunks it came in.
func export(t *testing.T, ac pb.AdminClient, req *pb.ExportHistoryRequest) ([]byte, int, error) {
	t.Helper()
	st, err := ac.ExportHistory(context.Background(), req)
	if err != nil {
		return nil, 0, err
	}
	var buf bytes.Buffer
	n := 0
	for {
		c, err := st.Recv()
		if err == io.EOF {
			return buf.Bytes(), n, nil
		}
		if err != nil {
			return nil, n, err
		}
		buf.Write(c.Data)
		n++
	}
}

// TestExportHistory settles 12,000 jobs of 3,000 keys, a minute apart
// in two halves, and exports the whole record and the last minute.
func TestExportHistory(t *testing.T) {
	t.Parallel()
	clk := fakeClock()
	tb := setup(t, broker.Config{Clock: clk})
	c, err := tb.b.Subscribe("q", "w", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 12_000 {
		if i == 6000 {
			clk.Advance(2 * time.Minute)
		}
		key := fmt.Sprintf("job-%04d", i%3000)
		if i%7 == 0 {
			key = fmt.Sprintf("ジョブ-%04d", i%3000)
		}
		if _, err := tb.b.Publish(&broker.Message{Queue: "q", Producer: "api", JobType: key, Payload: []byte("never exported")}); err != nil {
			t.Fatal(err)
		}
		d, err := c.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Millisecond)
		if err := c.Ack(d.ID, time.Millisecond); err != nil {
			t.Fatal(err)
		}
		c.AddCredit(1)
	}
	data, chunks, err := export(t, tb.ac, &pb.ExportHistoryRequest{Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	if chunks < 2 || bytes.Contains(data, []byte("never exported")) {
		t.Fatalf("%d chunks of %d bytes; payload in it: %v", chunks, len(data), bytes.Contains(data, []byte("never exported")))
	}
	h, es, err := history.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if h.Queue != "q" || len(es) != 12_000 || h.WorkersSeen != 1 {
		t.Fatalf("header %+v, %d entries", h, len(es))
	}
	data, _, err = export(t, tb.ac, &pb.ExportHistoryRequest{Queue: "q", Window: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if _, es, err = history.Decode(bytes.NewReader(data)); err != nil || len(es) != 6000 {
		t.Fatalf("last minute: %d entries, %v; want 6000", len(es), err)
	}
	_, _, err = export(t, tb.ac, &pb.ExportHistoryRequest{Queue: "nope"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("unknown queue: %v", err)
	}
	_, _, err = export(t, tb.ac, &pb.ExportHistoryRequest{Queue: "q", Window: durationpb.New(-time.Second)})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("negative window: %v", err)
	}
}

func TestExportHistoryOff(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.Config{History: history.Config{Off: true}})
	tb.publish(t, &pb.Message{Queue: "q"})
	_, _, err := export(t, tb.ac, &pb.ExportHistoryRequest{Queue: "q"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("history off: %v", err)
	}
}
