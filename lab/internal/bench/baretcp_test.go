package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/harness"
)

// serveBareTCP runs a BareTCPServer in the test's process and returns a
// queue on it (a process of its own in bench cost; the protocol is the
// same).
func serveBareTCP(t *testing.T) *BareTCPQueue {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- ServeBareTCP(ctx, "127.0.0.1:0", func(a string) { addrs <- a }) }()
	addr := <-addrs
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return &BareTCPQueue{p: harness.ListeningAt(addr), name: "jobs-ü"}
}

// Every message published is delivered and acked exactly once across
// several workers, bodies of 16 bytes to 64 KB intact; a worker whose
// handler fails (its connection ends) has its delivery go to another.
func TestBareTCPDeliversEachOnce(t *testing.T) {
	t.Parallel()
	q := serveBareTCP(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	const producers, each = 3, 300
	var mu sync.Mutex
	got := map[uint64]int{}
	done := make(chan struct{})
	var failed atomic.Bool
	var workers sync.WaitGroup
	for w := range 3 {
		workers.Go(func() {
			err := q.Work(ctx, w, nil, func(_ context.Context, body []byte) error {
				seq, _, err := DecodeBody(body)
				if err != nil {
					t.Error(err)
					return err
				}
				if want := 16 + int(seq%5)*(16<<10); len(body) != want {
					t.Errorf("message %d: %d bytes, want %d", seq, len(body), want)
				}
				if seq == 7 && failed.CompareAndSwap(false, true) {
					return errors.New("the first worker to get message 7 fails it")
				}
				mu.Lock()
				defer mu.Unlock()
				if len(got) == producers*each {
					// Every message is in: the test is stopping, and a
					// delivery whose ack the stop cut off (the last one,
					// handled as the workers' context ended) may come
					// again. Refuse it rather than count it.
					return errors.New("the test is stopping")
				}
				got[seq]++
				if len(got) == producers*each {
					close(done)
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	var producing sync.WaitGroup
	for p := range producers {
		producing.Go(func() {
			pub, err := q.NewPublisher(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			defer pub.Close()
			for i := range each {
				seq := uint64(p*each + i)
				if err := pub.Publish(ctx, Message{Body: EncodeBody(seq, time.Now(), 16+int(seq%5)*(16<<10))}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	producing.Wait()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("not every message was delivered within a minute")
	}
	cancel()
	workers.Wait()
	mu.Lock()
	defer mu.Unlock()
	for seq := range uint64(producers * each) {
		if got[seq] != 1 {
			t.Errorf("message %d acked %d times", seq, got[seq])
		}
	}
}

// A frame over the limit ends the connection instead of allocating it.
func TestBareTCPRefusesHugeFrames(t *testing.T) {
	t.Parallel()
	q := serveBareTCP(t)
	c, err := q.dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer c.c.Close()
	if err := c.send(tcpUse, []byte(q.name)); err != nil {
		t.Fatal(err)
	}
	hdr := []byte{tcpPublish, 0xff, 0xff, 0xff, 0xff} // 4 GiB announced
	if _, err := c.c.Write(hdr); err != nil {
		t.Fatal(err)
	}
	c.c.SetReadDeadline(time.Now().Add(time.Minute))
	if kind, _, err := readFrame(c.r, nil); err == nil {
		t.Fatalf("the server answered a 4 GiB frame with %q", fmt.Sprint(kind))
	}
}
