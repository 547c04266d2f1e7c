package sidecar

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/harbinger-mq/harbinger/rabbitmq"
)

// TestRemoteHoldsThroughSidecar drives a sidecar started with Hold through
// the Remote client, as Publisher and Consume do: once handlers are
// attached and work is queued, a long message gets a hold; a stamped
// completion shrinks it; without Hold the sidecar gives none.
func TestRemoteHoldsThroughSidecar(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, hold := range []bool{true, false} {
		s := startWith(t, Config{Hold: hold})
		r := dialRemote(t, s)
		// One observation sets the typical duration that cold keys are
		// predicted at: 100 ms.
		if err := r.Observe(ctx, rabbitmq.Key{Queue: "other"}, 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		cold := rabbitmq.Key{Queue: "jobs", JobType: "new"}
		r.Attach(ctx, "jobs", 2)
		var holds []time.Duration
		var last rabbitmq.Priority
		for range 3 {
			pr, err := r.Predict(ctx, cold)
			if err != nil || !pr.Long {
				t.Fatalf("Predict = %+v, %v; want a long (cold) prediction", pr, err)
			}
			holds = append(holds, pr.Hold)
			last = pr
		}
		if !hold {
			for _, h := range holds {
				if h != 0 {
					t.Fatalf("sidecar without Hold gave a hold of %v", h)
				}
			}
			continue
		}
		// 0, then 100 ms and 200 ms of work ahead over 2 handlers, held
		// DefaultHold of that wait.
		held := func(wait time.Duration) time.Duration { return time.Duration(rabbitmq.DefaultHold * float64(wait)) }
		want := []time.Duration{0, held(50 * time.Millisecond), held(100 * time.Millisecond)}
		for i := range want {
			if holds[i] != want[i] {
				t.Errorf("holds %v, want %v", holds, want)
				break
			}
		}
		metrics := scrape(t, s)
		for _, want := range []string{"harbinger_sidecar_held_total 2", `harbinger_sidecar_backlog_seconds{queue="jobs"} 0.3`} {
			if !strings.Contains(metrics, want) {
				t.Errorf("metrics lack %q", want)
			}
		}
		// Completing two of the three leaves 100 ms.
		for range 2 {
			if err := r.ObserveStamped(ctx, cold, rabbitmq.Stamp{Predicted: last.Predicted, Tier: last.Tier, Cold: true}, 90*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		if pr, _ := r.Predict(ctx, cold); pr.Hold != held(50*time.Millisecond) {
			t.Errorf("hold after two completions = %v, want %v", pr.Hold, held(50*time.Millisecond))
		}
		r.Attach(ctx, "jobs", -2)
		if pr, _ := r.Predict(ctx, cold); pr.Hold != 0 {
			t.Errorf("hold with no handlers left = %v, want 0", pr.Hold)
		}
		if st := r.Stats(); st.AttachErrors != 0 || st.ObserveErrors != 0 {
			t.Errorf("remote errors: %+v", st)
		}
	}
}

// scrape returns the sidecar's /metrics page.
func scrape(t *testing.T, s *Sidecar) string {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// TestHoldEndToEnd runs the whole holding path against the real RabbitMQ:
// a worker consuming through Remote attaches to a sidecar started with
// Hold, a Publisher with a hold queue publishes unpredictable (so long)
// messages behind a backlog, some go through the hold queue, and every
// message is handled exactly once, after which the sidecar's backlog for
// the queue is empty again.
func TestHoldEndToEnd(t *testing.T) {
	t.Parallel()
	requireRabbit(t)
	s := startWith(t, Config{Hold: true})
	r := dialRemote(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Cold keys are predicted at the typical duration, 20 ms from here on.
	if err := r.Observe(ctx, rabbitmq.Key{Queue: "warm-up"}, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.Dial(amqpURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	q := "harbinger-test.hold." + hex.EncodeToString(b[:])
	hq := q + ".hold"
	defer func() {
		_, _ = ch.QueueDelete(q, false, false, false)
		_, _ = ch.QueueDelete(hq, false, false, false)
	}()
	if err := rabbitmq.DeclarePriorityQueue(ch, q, rabbitmq.DefaultMaxPriority); err != nil {
		t.Fatal(err)
	}
	if err := rabbitmq.DeclareHoldQueue(ch, hq, q); err != nil {
		t.Fatal(err)
	}

	const n = 20
	handled := make(chan string, 2*n)
	wch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- rabbitmq.Consume(cctx, wch, q, r, rabbitmq.ConsumerOptions{}, func(_ context.Context, d amqp.Delivery) error {
			time.Sleep(2 * time.Millisecond) // the work
			handled <- string(d.Body)
			if string(d.Body) == "unreadable" {
				return rabbitmq.ErrReject
			}
			return nil
		})
	}()
	pub := rabbitmq.NewPublisher(ch, r, rabbitmq.PublisherOptions{HoldQueue: hq})
	publish := func(body string) {
		t.Helper()
		k := rabbitmq.Key{Queue: q, Producer: "test", JobType: "unpredictable"}
		if err := pub.Publish(ctx, "", q, k, amqp.Publishing{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	// Once the first message is handled, Consume has attached its handler.
	publish("first")
	if got := <-handled; got != "first" {
		t.Fatalf("handled %q first", got)
	}
	for i := range n {
		publish(strconv.Itoa(i))
	}
	seen := map[string]int{}
	for range n {
		select {
		case body := <-handled:
			seen[body]++
		case <-ctx.Done():
			t.Fatalf("handled %d of %d messages", len(seen), n)
		}
	}
	// The last completions reach the sidecar after their handlers return.
	eventually(t, 5*time.Second, "the backlog to drain", func() bool { return s.Local().Stats().Backlog[q] == 0 })
	// A rejected message never completes: the consumer tells the sidecar
	// it is gone, or the backlog would count it for ever.
	publish("unreadable")
	if got := <-handled; got != "unreadable" {
		t.Fatalf("handled %q, want the unreadable message", got)
	}
	eventually(t, 5*time.Second, "the rejected message to leave the backlog", func() bool { return s.Local().Stats().Backlog[q] == 0 })
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if seen[strconv.Itoa(i)] != 1 {
			t.Errorf("message %d handled %d times", i, seen[strconv.Itoa(i)])
		}
	}
	if pub.Held() == 0 {
		t.Error("no message went through the hold queue")
	}
	// Close sends the reports that still wait: the backlog, floored at
	// zero, can drain before the last one is in.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if st := r.Stats(); st.ObserveErrors != 0 || st.AttachErrors != 0 {
		t.Errorf("remote errors: %+v", st)
	}
	// Every completion came in a Report (the rejected message's drop in a
	// call of its own); how many shared a call depends on the machine.
	if rs := s.Stats().Reports; rs.ReportItems != n+1 || rs.ReportCalls < 1 || rs.ReportCalls > rs.ReportItems {
		t.Errorf("reports %+v, want the %d completions in 1 to %d calls", rs, n+1, n+1)
	}
	metrics := scrape(t, s)
	for _, want := range []string{fmt.Sprintf("harbinger_sidecar_report_items_total %d", n+1), "harbinger_sidecar_report_calls_total "} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	t.Logf("%d of %d messages held; remote stats %+v; %d reports in %d calls", pub.Held(), n+1, r.Stats(), s.Stats().Reports.ReportItems, s.Stats().Reports.ReportCalls)
}
