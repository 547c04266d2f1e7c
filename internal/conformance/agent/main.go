// Command agent is the Go SDK's side of the SDK conformance scenario
// (internal/conformance, docs/sdk.md): a producer or a worker that does
// what testdata/scenario.json says and reports each outcome as a JSON
// line on stdout. The Python and TypeScript SDKs have the same agent.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/status"

	"github.com/harbinger-mq/harbinger/client"
)

type step struct {
	Kind  string `json:"kind"`
	Count int    `json:"count"`
}

type scenario struct {
	Producer      string `json:"producer"`
	Phase1        []step `json:"phase1"`
	Phase2        []step `json:"phase2"`
	SleepMs       int    `json:"sleep_ms"`
	SlowMs        int    `json:"slow_ms"`
	TooLargeBytes int    `json:"too_large_bytes"`
}

type payload struct {
	N    int    `json:"n"`
	Kind string `json:"kind"`
}

var outMu sync.Mutex

func emit(v map[string]any) {
	b, _ := json.Marshal(v)
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Println(string(b))
}

func main() {
	addr := flag.String("addr", "127.0.0.1:7070", "broker")
	queue := flag.String("queue", "conformance", "queue")
	path := flag.String("scenario", "", "scenario.json")
	concurrency := flag.Int("concurrency", 4, "worker handlers")
	flag.Parse()
	b, err := os.ReadFile(*path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var sc scenario
	if err := json.Unmarshal(b, &sc); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	c, err := client.Dial(ctx, *addr, client.WithLogger(quiet))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
	switch flag.Arg(0) {
	case "producer":
		err = produce(ctx, c, *queue, sc)
	case "worker":
		err = work(ctx, c, *queue, sc, *concurrency)
	default:
		err = fmt.Errorf("agent producer|worker, not %q", flag.Arg(0))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}

func messages(sc scenario, queue string, steps []step, first int) []*client.Message {
	var out []*client.Message
	n := first
	for _, s := range steps {
		for range s.Count {
			body, _ := json.Marshal(payload{N: n, Kind: s.Kind})
			m := &client.Message{Queue: queue, Producer: sc.Producer, JobType: s.Kind, Payload: body}
			switch s.Kind {
			case "bad-utf8":
				m.JobType = "bad-utf8 \xff"
			case "too-large":
				m.Payload = make([]byte, sc.TooLargeBytes)
			}
			out = append(out, m)
			n++
		}
	}
	return out
}

// produce publishes phase 1 through a Producer, waits for "continue" on
// stdin, then publishes phase 2 through the same Producer. A message
// answered Unavailable (the broker restarting) is published again.
func produce(ctx context.Context, c *client.Client, queue string, sc scenario) error {
	p := c.NewProducer(client.ProducerConfig{Window: 4, MaxBatch: 16})
	defer p.Close()
	phase := func(msgs []*client.Message, first int) {
		var wg sync.WaitGroup
		for i, m := range msgs {
			wg.Go(func() {
				var r client.Result
				for try := 0; ; try++ {
					var err error
					r, err = p.PublishResult(ctx, m)
					if err != nil {
						r.Err = err
					}
					if status.Code(r.Err) != 14 || try == 50 {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				st := status.Convert(r.Err)
				code := 0
				if r.Err != nil {
					code = int(st.Code())
				}
				emit(map[string]any{"event": "result", "n": first + i, "kind": kindOf(m), "id": r.ID, "code": code, "error": errText(r.Err)})
			})
		}
		wg.Wait()
	}
	m1 := messages(sc, queue, sc.Phase1, 0)
	phase(m1, 0)
	emit(map[string]any{"event": "phase", "phase": 1})
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() || in.Text() != "continue" {
		return errors.New("producer: no continue on stdin")
	}
	phase(messages(sc, queue, sc.Phase2, len(m1)), len(m1))
	emit(map[string]any{"event": "phase", "phase": 2})
	return nil
}

func kindOf(m *client.Message) string {
	var p payload
	if json.Unmarshal(m.Payload, &p) == nil && p.Kind != "" {
		return p.Kind
	}
	if m.JobType == "bad-utf8 \xff" {
		return "bad-utf8"
	}
	return "too-large"
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return status.Convert(err).Message()
}

func work(ctx context.Context, c *client.Client, queue string, sc scenario, concurrency int) error {
	h := func(ctx context.Context, d *client.Delivery) error {
		var p payload
		_ = json.Unmarshal(d.Payload, &p)
		ev := map[string]any{"n": p.N, "kind": p.Kind, "attempt": d.Attempt}
		emit(merge(ev, "start"))
		outcome, err := run(ctx, sc, p, d.Attempt)
		e := merge(ev, "end")
		e["outcome"] = outcome
		emit(e)
		return err
	}
	return c.RunWorker(ctx, client.WorkerConfig{Queue: queue, Concurrency: concurrency, Name: "conformance-go"}, h)
}

func merge(ev map[string]any, event string) map[string]any {
	out := map[string]any{"event": event}
	for k, v := range ev {
		out[k] = v
	}
	return out
}

func run(ctx context.Context, sc scenario, p payload, attempt int) (string, error) {
	wait := func(ms int) error {
		t := time.NewTimer(time.Duration(ms) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	switch p.Kind {
	case "sleep":
		if err := wait(sc.SleepMs); err != nil {
			return "error", err
		}
	case "slow":
		if err := wait(sc.SlowMs); err != nil {
			return "error", err
		}
	case "flaky":
		if attempt == 1 {
			return "error", fmt.Errorf("flaky %d", p.N)
		}
	case "fail":
		return "error", fmt.Errorf("fail %d", p.N)
	case "dead":
		return "dead", fmt.Errorf("%w: dead %d", client.ErrDeadLetter, p.N)
	case "block":
		<-ctx.Done()
		if errors.Is(context.Cause(ctx), client.ErrCancelled) {
			return "cancelled", ctx.Err()
		}
		return "error", ctx.Err()
	}
	return "ok", nil
}
