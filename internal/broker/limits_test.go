package broker

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/fair"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// Bad limits are refused with an error that names the setting.
func TestDeclareLimitsRefused(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	for _, tc := range []struct {
		cfg   QueueConfig
		field string
	}{
		{QueueConfig{Limits: []string{"tenant=0"}}, "limits[0].max"},
		{QueueConfig{Limits: []string{"tenant=-4"}}, "limits[0].max"},
		{QueueConfig{Limits: []string{"tenant=99999999999"}}, "limits[0].max"},
		{QueueConfig{Limits: []string{"tenant"}}, "limits[0]"},
		{QueueConfig{Limits: []string{"colour=3"}}, "limits[0].field"},
		{QueueConfig{Limits: []string{"job_type:export=2", "job_type:export=3"}}, "limits[1]"},
		{QueueConfig{RateLimits: []string{"producer=0"}}, "rate_limits[0].per_second"},
		{QueueConfig{RateLimits: []string{"producer=10/s:0"}}, "rate_limits[0].burst"},
		{QueueConfig{RateLimits: []string{"producer=fast"}}, "rate_limits[0].per_second"},
		{QueueConfig{GroupBy: "colour"}, "group_by"},
		{QueueConfig{GroupWeights: map[string]int{"a": 2}}, "group_weights"},
		{QueueConfig{GroupBy: "tenant", GroupWeights: map[string]int{"a": 0}}, `group_weights["a"]`},
		{QueueConfig{GroupBy: "tenant", Reserve: -1}, "reserve"},
		{QueueConfig{Reserve: 1}, "reserve"},
	} {
		_, err := tb.b.Declare("q", tc.cfg)
		var ie *InvalidError
		if !errors.As(err, &ie) || !errors.Is(err, ErrInvalid) || ie.Field != tc.field {
			t.Errorf("%+v: Declare = %v, want an invalid %s", tc.cfg, err, tc.field)
		}
	}
}

// A queue declared with a limit per tenant keeps it through deliveries,
// acks and a restart: the declaration is in the log, and the limit holds
// for the recovered jobs.
func TestLimitsThroughRestart(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st := store.NewMemory()
	b := durable(t, st, clk, Config{})
	cfg := QueueConfig{GroupBy: "tenant", Limits: []string{"tenant=2", "job_type:export=1"}, RateLimits: []string{"producer:crawler=50/s:5"}}
	if _, err := b.Declare("q", cfg); err != nil {
		t.Fatal(err)
	}
	payload := []byte(strings.Repeat("k", 2048))
	tenants := []string{"acme", "ünïcode", "\xfe\xffbad"}
	for i := range 60 {
		jt := "report"
		if i%10 == 0 {
			jt = "export"
		}
		m := &Message{Queue: "q", Producer: "p", JobType: jt, Payload: payload, Headers: map[string]string{fair.TenantHeader: tenants[i%3]}}
		if _, err := b.Publish(m); err != nil {
			t.Fatal(err)
		}
	}
	check := func(b *Broker, want int) {
		t.Helper()
		c, err := b.Subscribe("q", "w", 100)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		running := map[string]int{}
		exports := 0
		for {
			d, err := c.Next(ctx)
			if err != nil {
				break
			}
			running[d.Headers[fair.TenantHeader]]++
			if d.JobType == "export" {
				exports++
			}
		}
		for tn, n := range running {
			if n > 2 {
				t.Fatalf("tenant %q runs %d, limit 2", tn, n)
			}
		}
		if len(running) != want || exports > 1 {
			t.Fatalf("running %v, %d exports; want %d tenants running", running, exports, want)
		}
	}
	check(b, 3)
	crash(b)
	b2 := durable(t, st, clk, Config{})
	info, err := b2.Queue("q")
	if err != nil {
		t.Fatal(err)
	}
	if !equalConfig(info.Config, info.Config.WithDefaults(QueueConfig{})) || info.Config.GroupBy != "tenant" ||
		fmt.Sprint(info.Config.Limits) != "[tenant=2 job_type:export=1]" || fmt.Sprint(info.Config.RateLimits) != "[producer:crawler=50/s:5]" {
		t.Fatalf("recovered config %+v", info.Config)
	}
	// The jobs in flight at the crash may still run on their workers:
	// they hold their tenants' places until a lease has passed.
	check(b2, 0)
	q, _ := b2.lookup("q", false)
	q.mu.Lock()
	lost := q.line.Lost()
	q.mu.Unlock()
	if lost != 6 {
		t.Fatalf("%d jobs held after the restart, want the 6 in flight", lost)
	}
	clk.Advance(info.Config.Lease)
	check(b2, 3)
}

// A consumer waiting while every waiting job's key is at its limit is
// woken when a job of that key ends, and gets the skipped job.
func TestLimitWakesWaitingConsumer(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	if _, err := tb.b.Declare("q", QueueConfig{Limits: []string{"producer=1"}}); err != nil {
		t.Fatal(err)
	}
	ids := tb.publish(t, &Message{Queue: "q", Producer: "crawler", JobType: "fetch"}, &Message{Queue: "q", Producer: "crawler", JobType: "fetch"})
	first := tb.sub(t, "q", 1)
	d, err := first.Next(tb.ctx)
	if err != nil || d.ID != ids[0] {
		t.Fatalf("Next = %v, %v", d, err)
	}
	second := tb.sub(t, "q", 1)
	got := make(chan Delivery, 1)
	go func() {
		d, err := second.Next(tb.ctx)
		if err == nil {
			got <- d
		}
		close(got)
	}()
	// Ack only once the second consumer waits: it has credit and the one
	// job ready is held back by its key's limit.
	q, _ := tb.b.lookup("q", false)
	for {
		q.mu.Lock()
		waiting := second.inWaiters
		q.mu.Unlock()
		if waiting {
			break
		}
		runtime.Gosched()
	}
	if err := first.Ack(d.ID, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d, ok := <-got; !ok || d.ID != ids[1] {
		t.Fatalf("the waiting consumer got %v, %v; want %s", d, ok, ids[1])
	}
	second.Close()
}

// waitLog is a store that notes the last delivery record appended and
// the furthest position waited for.
type waitLog struct {
	store.Store
	mu                sync.Mutex
	deliver, waitedTo store.Pos
}

func (w *waitLog) Append(recs ...*store.Record) (store.Pos, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	pos, err := w.Store.Append(recs...)
	for i, r := range recs {
		if r.Kind == store.KindDeliver {
			w.deliver = pos - store.Pos(len(recs)-1-i)
		}
	}
	return pos, err
}

func (w *waitLog) Wait(pos store.Pos) error {
	w.mu.Lock()
	w.waitedTo = max(w.waitedTo, pos)
	w.mu.Unlock()
	return w.Store.Wait(pos)
}

// A job of a queue with limits or rate limits is handed out only once its
// delivery record is in the log: a broker killed the moment after knows,
// at its restart, that the job may still run (and when it started), and
// holds it against its limits. A queue without them does not wait.
func TestLimitedDeliveryWaitsForItsRecord(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  QueueConfig
		wait bool
	}{
		{"limits", QueueConfig{Limits: Rules{"tenant=2"}}, true},
		{"rate limits", QueueConfig{RateLimits: Rules{"producer=5/s"}}, true},
		{"fair shares alone", QueueConfig{GroupBy: "tenant"}, false},
		{"none", QueueConfig{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			st := &waitLog{Store: store.NewMemory()}
			b := durable(t, st, clk, Config{})
			if _, err := b.Declare("q", tc.cfg); err != nil {
				t.Fatal(err)
			}
			c, err := b.Subscribe("q", "w", 2)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i := range 2 {
				m := &Message{Queue: "q", Producer: "p", Payload: []byte("ж"), Headers: map[string]string{fair.TenantHeader: "ünï"}}
				if _, err := b.Publish(m); err != nil {
					t.Fatal(err)
				}
				d, err := c.Next(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Ack(d.ID, time.Millisecond); err != nil {
					t.Fatal(err)
				}
				st.mu.Lock()
				waited := st.waitedTo >= st.deliver
				st.mu.Unlock()
				if waited != tc.wait {
					t.Fatalf("delivery %d waited for its record: %v, want %v", i, waited, tc.wait)
				}
			}
		})
	}
}
