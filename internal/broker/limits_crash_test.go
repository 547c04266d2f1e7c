package broker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/fair"
	"github.com/harbinger-mq/harbinger/internal/store"
)

var limitsJobs = flag.Int("limits.jobs", 20000, "jobs TestLimitsHoldThroughCrashes runs (the goal's full size is 100000)")

// TestLimitsHoldThroughCrashes runs jobs of a queue with a limit per
// tenant and one on exports through workers that are killed and a broker
// that crashes and restarts from its log, all on a fake clock, and counts
// the running jobs the way the workers see them: a job runs from its
// delivery until its worker finishes it or is killed, whatever became of
// the broker meanwhile. No tenant ever runs more than its limit, no job is
// lost, and every job is done in the end.
func TestLimitsHoldThroughCrashes(t *testing.T) {
	t.Parallel()
	const (
		tenantLimit, exportLimit = 3, 2
		workers                  = 24
		lease                    = 5 * time.Second
	)
	jobs := *limitsJobs
	if testing.Short() {
		jobs = 2000
	}
	r := rand.New(rand.NewPCG(45, 100))
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st := store.NewMemory()
	cfg := QueueConfig{GroupBy: "tenant", Limits: Rules{fmt.Sprintf("tenant=%d", tenantLimit), fmt.Sprintf("job_type:export=%d", exportLimit)},
		Lease: lease, MaxAttempts: 1000, MaxDepth: jobs + 1}
	tenants := []string{"acme", "globex", "ünïcode", "initech", "umbrella", "hooli", "\U0001F600", "wayne"}

	var b *Broker
	start := func() {
		b = durable(t, st, clk, Config{})
		if _, err := b.Declare("q", cfg); err != nil {
			t.Fatal(err)
		}
	}
	start()
	published := 0
	publish := func(n int) {
		for range n {
			if published == jobs {
				return
			}
			jt := "report"
			if r.IntN(8) == 0 {
				jt = "export"
			}
			m := &Message{Queue: "q", Producer: "p", JobType: jt, Payload: make([]byte, 1024),
				Headers: map[string]string{fair.TenantHeader: tenants[r.IntN(len(tenants))]}}
			if _, err := b.Publish(m); err != nil {
				t.Fatal(err)
			}
			published++
		}
	}

	// What the workers see.
	type job struct {
		id, tenant string
		export     bool
		done       time.Time
	}
	type worker struct {
		c   *Consumer
		b   *Broker // the broker it took its job from
		job *job
	}
	running := map[string]int{}
	exports := 0
	finished := map[string]bool{}
	ws := make([]*worker, workers)
	subscribe := func(w *worker) {
		c, err := b.Subscribe("q", "w", 1)
		if err != nil {
			t.Fatal(err)
		}
		w.c, w.b = c, b
	}
	for i := range ws {
		ws[i] = &worker{}
		subscribe(ws[i])
	}
	stop := func(w *worker) {
		j := w.job
		running[j.tenant]--
		if j.export {
			exports--
		}
		w.job = nil
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	take := func() {
		for _, w := range ws {
			if w.job != nil || w.b != b {
				continue
			}
			d, err := w.c.Next(cancelled)
			if err != nil {
				continue
			}
			j := &job{id: d.ID, tenant: d.Headers[fair.TenantHeader], export: d.JobType == "export",
				done: clk.Now().Add(time.Duration(1+r.IntN(int(lease/time.Millisecond)-1)) * time.Millisecond)}
			w.job = j
			running[j.tenant]++
			if j.export {
				exports++
			}
			if running[j.tenant] > tenantLimit {
				t.Fatalf("tenant %q runs %d jobs, counted by the workers; limit %d", j.tenant, running[j.tenant], tenantLimit)
			}
			if exports > exportLimit {
				t.Fatalf("%d exports running, counted by the workers; limit %d", exports, exportLimit)
			}
		}
	}
	crashes, kills := 0, 0
	for step := 0; len(finished) < jobs; step++ {
		if step > 50*jobs {
			q, _ := b.lookup("q", false)
			q.mu.Lock()
			l := q.line
			t.Logf("ready %d in flight %d delayed %d lost %d; fair running %d blocked %v; check %v", l.Len(), l.InFlight(), l.DelayedLen(), l.Lost(), l.Fair().Running(), fmt.Sprint(l.Fair().Blocked()), l.Fair().Check())
			for _, c := range q.cons {
				t.Logf("consumer credit %d", c.credit)
			}
			for _, g := range l.Fair().Groups(clk.Now(), 0) {
				t.Logf("  %+v", g)
			}
			q.mu.Unlock()
			for i, w := range ws {
				t.Logf("worker %d: current broker %v, job %+v", i, w.b == b, w.job)
			}
			t.Fatalf("stuck: %d of %d jobs done after %d steps", len(finished), jobs, step)
		}
		publish(1 + r.IntN(8))
		take()
		// The next worker to finish.
		var next *worker
		for _, w := range ws {
			if w.job != nil && (next == nil || w.job.done.Before(next.job.done)) {
				next = w
			}
		}
		switch k := r.IntN(2000); {
		case step%max(jobs/25, 50) == 49:
			// About 30 crashes whatever the size: each restart replays the
			// log, which grows with the jobs.
			// The broker is killed and restarts from its log. Workers keep
			// running what they hold; their acks are lost with the old
			// broker, and their jobs come back from the log.
			crash(b)
			crashes++
			start()
			for _, w := range ws {
				if w.job == nil {
					subscribe(w)
				}
			}
		case k < 40:
			// A worker is killed: its job stops with it, and the broker
			// hears its connection go.
			w := ws[r.IntN(len(ws))]
			if w.job != nil {
				stop(w)
			}
			if w.b == b {
				w.c.Close()
			}
			subscribe(w)
			kills++
		case next != nil:
			clk.Advance(max(0, next.job.done.Sub(clk.Now())))
			j := next.job
			if next.b == b {
				switch err := next.c.Ack(j.id, time.Millisecond); {
				case err == nil:
					if finished[j.id] {
						t.Fatalf("job %s done twice", j.id)
					}
					finished[j.id] = true
				case !errors.Is(err, ErrUnknownMessage) && !errors.Is(err, ErrConsumerClosed) && !errors.Is(err, ErrShuttingDown):
					t.Fatal(err)
				}
			}
			stop(next)
			if next.b != b {
				subscribe(next) // its broker is gone: connect to the new one
			} else {
				next.c.AddCredit(1) // ready for the next job, as a worker at prefetch 1 says
			}
		default:
			clk.Advance(lease / 10) // nobody runs anything: holds lapse, buckets refill
		}
	}
	t.Logf("%d jobs, %d broker crashes, %d worker kills, %d tenants", jobs, crashes, kills, len(running))
	for _, w := range ws {
		if w.b == b {
			w.c.Close()
		}
	}
}
