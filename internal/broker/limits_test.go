package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
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
		{QueueConfig{GroupBy: "tenant", ReserveAbove: -1}, "reserve_above"},
		{QueueConfig{GroupBy: "tenant", ReserveAbove: math.NaN()}, "reserve_above"},
		{QueueConfig{GroupBy: "tenant", ReserveAbove: math.Inf(1)}, "reserve_above"},
		{QueueConfig{GroupBy: "tenant", ReserveAbove: 2e6}, "reserve_above"},
		{QueueConfig{ReserveAbove: 2}, "reserve_above"},
		{QueueConfig{GroupBy: "tenant", ReserveWindow: -time.Second}, "reserve_window"},
		{QueueConfig{GroupBy: "tenant", ReserveWindow: 2 * time.Hour}, "reserve_window"},
		{QueueConfig{ReserveWindow: time.Second}, "reserve_window"},
		{QueueConfig{GroupBy: "tenant", Credit: -time.Millisecond}, "credit"},
		{QueueConfig{GroupBy: "tenant", Credit: 2 * time.Hour}, "credit"},
		{QueueConfig{GroupBy: "tenant", Credit: time.Second, NoCredit: true}, "credit"},
		{QueueConfig{Credit: time.Second}, "credit"},
		{QueueConfig{NoCredit: true}, "no_credit"},
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
	cfg := QueueConfig{GroupBy: "tenant", Limits: []string{"tenant=2", "job_type:export=1"}, RateLimits: []string{"producer:crawler=50/s:5"},
		Reserve: 3, ReserveAbove: 1.5, ReserveWindow: 2500 * time.Millisecond, Credit: 40 * time.Millisecond}
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
		fmt.Sprint(info.Config.Limits) != "[tenant=2 job_type:export=1]" || fmt.Sprint(info.Config.RateLimits) != "[producer:crawler=50/s:5]" ||
		info.Config.Reserve != 3 || info.Config.ReserveAbove != 1.5 || info.Config.ReserveWindow != 2500*time.Millisecond || info.Config.Credit != 40*time.Millisecond {
		t.Fatalf("recovered config %+v", info.Config)
	}
	if got := fairIn(t, b2, "q"); got.Reserve != 3 || got.ReserveAbove != 1.5 || got.ReserveWindow != 2500*time.Millisecond || got.Credit != 40*time.Millisecond {
		t.Fatalf("the recovered scheduler runs with %+v", got)
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

// fairIn is the fair shares' config queue's scheduler runs with.
func fairIn(t *testing.T, b *Broker, queue string) fair.Config {
	t.Helper()
	q, err := b.lookup(queue, false)
	if err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.line.Fair() == nil {
		t.Fatalf("queue %s has no fair shares", queue)
	}
	return q.line.Fair().Config()
}

// The fair shares' settings a queue declares are what QueueInfo reports,
// the ones left out at fair's defaults, and what its scheduler runs with;
// a redeclare changes them, and turning one off shows it off.
func TestDeclareFairSettings(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	info, err := tb.b.Declare("q", QueueConfig{GroupBy: "tenant"})
	if err != nil {
		t.Fatal(err)
	}
	c := info.Config
	if c.Reserve != fair.DefaultReserve || c.ReserveAbove != fair.DefaultReserveAbove || c.ReserveWindow != fair.DefaultReserveWindow ||
		c.Credit != fair.DefaultCredit || c.NoReserve || c.NoCredit {
		t.Fatalf("defaults shown as %+v", c)
	}
	for _, want := range []QueueConfig{
		{GroupBy: "tenant", Reserve: 1, ReserveAbove: 1, ReserveWindow: 5 * time.Second, Credit: time.Second},
		{GroupBy: "tenant", Reserve: 4, ReserveAbove: 0.25, ReserveWindow: 10 * time.Millisecond, Credit: time.Millisecond},
		{GroupBy: "producer", NoReserve: true, ReserveAbove: fair.MaxReserveAbove, ReserveWindow: fair.MaxReserveWindow, NoCredit: true},
	} {
		if _, err := tb.b.Declare("q", want); err != nil {
			t.Fatalf("%+v: %v", want, err)
		}
		info, err := tb.b.Queue("q")
		if err != nil {
			t.Fatal(err)
		}
		c := info.Config
		if c.Reserve != want.Reserve || c.NoReserve != want.NoReserve || c.ReserveAbove != want.ReserveAbove ||
			c.ReserveWindow != want.ReserveWindow || c.Credit != want.Credit || c.NoCredit != want.NoCredit {
			t.Fatalf("declared %+v, QueueInfo has %+v", want, c)
		}
		f := fairIn(t, tb.b, "q")
		if (!want.NoReserve && f.Reserve != want.Reserve) || f.NoReserve != want.NoReserve || f.ReserveAbove != want.ReserveAbove ||
			f.ReserveWindow != want.ReserveWindow || f.Credit != want.Credit || f.NoCredit != want.NoCredit {
			t.Fatalf("declared %+v, the scheduler runs with %+v", want, f)
		}
	}
}

// The reservation's reserve_above a queue declares reaches its
// scheduler: a group past its share whose next job is predicted to cost
// what the other group's do does not take the last free worker while
// the other group had work a moment ago with reserve_above 1, and does
// with the default (4), which holds back only jobs four times as long.
func TestDeclaredReserveAboveHolds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		above float64
		held  bool
	}{{0, false}, {1, true}} {
		t.Run(fmt.Sprint("reserve_above=", tc.above), func(t *testing.T) {
			t.Parallel()
			tb := setup(t, Config{})
			if _, err := tb.b.Declare("q", QueueConfig{Policy: "fifo", GroupBy: "producer", ReserveAbove: tc.above}); err != nil {
				t.Fatal(err)
			}
			c := tb.sub(t, "q", 4) // four workers: the reservation holds the last two
			next := func() (Delivery, bool) {
				t.Helper()
				ctx, cancel := context.WithCancel(tb.ctx)
				cancel() // take what is ready, do not wait
				d, err := c.Next(ctx)
				return d, err == nil
			}
			// One job teaches the predictor the typical cost it gives every
			// key it has not seen: flood's and steady's jobs are predicted
			// alike, at 100ms.
			tb.publish(t, &Message{Queue: "q", Producer: "warmup", JobType: "j"})
			d, ok := next()
			if !ok {
				t.Fatal("the warm-up job was not delivered")
			}
			if err := c.Ack(d.ID, 100*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			c.AddCredit(1)              // as a worker does for the job it finished
			tb.clk.Advance(time.Minute) // the warm-up group leaves the window
			for range 10 {
				tb.publish(t, &Message{Queue: "q", Producer: "flood", JobType: "j"})
			}
			for range 3 {
				if d, ok := next(); !ok || d.Producer != "flood" {
					t.Fatalf("Next = %+v, %v; want a flood job: no other group has work", d, ok)
				}
			}
			// 1.5s on, flood has used about 2.3 workers over the last
			// second, past its share of 2 once steady has work.
			tb.clk.Advance(1500 * time.Millisecond)
			tb.publish(t, &Message{Queue: "q", Producer: "steady", JobType: "j"})
			d, ok = next()
			if !ok || d.Producer != "steady" || d.Predicted != 100*time.Millisecond {
				t.Fatalf("Next = %+v, %v; want the steady job, predicted at 100ms", d, ok)
			}
			if err := c.Ack(d.ID, 100*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			c.AddCredit(1) // as a worker does for the job it finished
			d, ok = next()
			if ok == tc.held {
				t.Fatalf("the last free worker: got a job %v (%+v); want it held back %v", ok, d, tc.held)
			}
			if ok && (d.Producer != "flood" || d.Predicted != 100*time.Millisecond) {
				t.Fatalf("Next = %+v; want a flood job predicted at 100ms", d)
			}
			if info, err := tb.b.Queue("q"); err != nil || (info.Reserved > 0) != tc.held {
				t.Fatalf("Reserved = %d, %v; want it counted only when held", info.Reserved, err)
			}
		})
	}
}
