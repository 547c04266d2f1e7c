package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// TestLargePayloadStress moves large payloads from several Producers to
// several workers: 32 KiB payloads, which a Producer cutting batches by
// count alone packed into requests over the broker's receive limit, and
// payloads of exactly the broker's max payload. Every published job is
// acked exactly once, with its bytes and its non-ASCII headers intact, and
// nothing is left in the queue.
func TestLargePayloadStress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		jobs int
		size int
	}{
		{"32KiB", 2000, 32 << 10},
		{"max payload", 64, broker.DefaultMaxPayload},
	} {
		// One after the other: each holds a few hundred MB at its peak.
		t.Run(tc.name, func(t *testing.T) { largePayloadStress(t, tc.jobs, tc.size) })
	}
}

func largePayloadStress(t *testing.T, jobs, size int) {
	const (
		producers = 4
		workers   = 4
		queue     = "large"
	)
	tb := setup(t, broker.Config{})
	if _, err := tb.cl.DeclareQueue(tb.ctx, queue, &pb.QueueConfig{MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	headers := func(i int, sum string) map[string]string {
		return map[string]string{
			"sha256":  sum,
			"índice":  strconv.Itoa(i),
			"заметка": "グッドジョブ 🚀 " + strconv.Itoa(i),
		}
	}

	var mu sync.Mutex
	handled := map[string]int{} // delivery id: times handled
	var bad []string            // what a handler found wrong
	handler := func(_ context.Context, d *client.Delivery) error {
		sum := sha256.Sum256(d.Payload)
		want := headers(0, hex.EncodeToString(sum[:]))
		i, err := strconv.Atoi(d.Headers["índice"])
		mu.Lock()
		defer mu.Unlock()
		handled[d.ID]++
		switch {
		case err != nil:
			bad = append(bad, d.ID+": no index header")
		case len(d.Payload) != size || d.Headers["sha256"] != want["sha256"]:
			bad = append(bad, d.ID+": payload does not match its checksum")
		case d.Headers["заметка"] != headers(i, "")["заметка"] || len(d.Headers) != len(want):
			bad = append(bad, d.ID+": headers changed")
		}
		return nil
	}
	stops := make([]func() error, workers)
	for w := range stops {
		cl, rec := dialRecorded(t, tb.addr)
		t.Cleanup(func() { rec.noReconnects(t) })
		stops[w] = runWorker(t, cl, client.WorkerConfig{Queue: queue, Concurrency: 2, Prefetch: 4}, handler)
	}

	var published sync.Map // id: job index
	var pubWG sync.WaitGroup
	pubErrs := make(chan error, jobs)
	for p := range producers {
		pubWG.Go(func() {
			cl, err := client.Dial(context.Background(), tb.addr, client.WithLogger(quiet))
			if err != nil {
				pubErrs <- err
				return
			}
			defer cl.Close()
			pr := cl.NewProducer(client.ProducerConfig{})
			defer pr.Close()
			var seed [32]byte
			seed[0], seed[1] = byte(p), byte(size>>10)
			rng := rand.NewChaCha8(seed)
			for i := p; i < jobs; i += producers {
				payload := make([]byte, size)
				_, _ = rng.Read(payload)
				sum := sha256.Sum256(payload)
				m := &client.Message{Queue: queue, Producer: "pröducer", JobType: "größe", Payload: payload, Headers: headers(i, hex.EncodeToString(sum[:]))}
				err := pr.PublishAsync(m, func(id string, err error) {
					if err != nil {
						pubErrs <- err
						return
					}
					if _, dup := published.LoadOrStore(id, i); dup {
						pubErrs <- errDuplicateID(id)
					}
				})
				if err != nil {
					pubErrs <- err
					return
				}
			}
		})
	}
	pubWG.Wait() // each producer's Close has answered all its messages
	close(pubErrs)
	for err := range pubErrs {
		t.Fatalf("publish failed: %v", err)
	}
	tb.waitFor(t, "every job acked", func() bool {
		in := tb.info(t, queue)
		return in.Acked == uint64(jobs) || in.DeadLetters > 0
	})
	for _, stop := range stops {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}

	in := tb.info(t, queue)
	if in.Published != uint64(jobs) || in.Acked != uint64(jobs) || in.Redelivered != 0 || in.DeadLetters != 0 ||
		in.Ready != 0 || in.InFlight != 0 || in.Delayed != 0 {
		t.Fatalf("queue: %s", counts(in))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, b := range bad {
		t.Error(b)
	}
	n, dups := 0, 0
	published.Range(func(id, _ any) bool {
		n++
		switch c := handled[id.(string)]; {
		case c == 0:
			t.Errorf("job %s was never handled", id)
		case c > 1:
			dups++
		}
		return true
	})
	if n != jobs || len(handled) != jobs || dups != 0 {
		t.Fatalf("%d ids published, %d handled, %d handled more than once; want %d, %d, 0", n, len(handled), dups, jobs, jobs)
	}
}

type errDuplicateID string

func (e errDuplicateID) Error() string { return "id " + string(e) + " answered twice" }
