package broker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/fair"
	"github.com/harbinger-mq/harbinger/internal/store"
)

var limitsJobs = flag.Int("limits.jobs", 20000, "jobs TestLimitsHoldThroughCrashes runs (the goal's full size is 100000)")

// TestLimitsHoldThroughCrashes runs jobs of a queue with a limit per
// tenant, one on exports and a rate limit on the crawler's jobs through
// workers that are killed and a broker that crashes and restarts from its
// log (checkpointed now and then), all on a fake clock, and counts the
// running jobs and the starts the way the workers see them: a job runs
// from its delivery until its worker finishes it or is killed, whatever
// became of the broker meanwhile. No tenant ever runs more than its
// limit; the crawler's starts (on a queue of their own with a rate limit
// alone) over every 60 s window are at most 1.05 times its rate (its
// burst is within that), crashes or not, and while it has a backlog at
// least 0.95 times; no job is lost, and every job is done in the end.
func TestLimitsHoldThroughCrashes(t *testing.T) {
	t.Parallel()
	const (
		tenantLimit, exportLimit = 3, 2
		workers                  = 24
		lease                    = 5 * time.Second
		// The crawler's queue: a quarter of the jobs, far more than its
		// rate lets start, so it has a backlog until near the end, and
		// workers enough to run more than its rate.
		crawlRate, crawlBurst = 2.0, 5
		crawlWorkers          = 8
		window                = time.Minute
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
	// No concurrency limit: after a restart the jobs that were in flight
	// hold no other back, so the crawler's bucket is all that stops it
	// from starting at once.
	crawlCfg := QueueConfig{RateLimits: Rules{fmt.Sprintf("producer:crawler=%v/s:%d", crawlRate, crawlBurst)},
		Lease: lease, MaxAttempts: 1000, MaxDepth: jobs + 1}
	tenants := []string{"acme", "globex", "ünïcode", "initech", "umbrella", "hooli", "\U0001F600", "wayne"}

	var b *Broker
	start := func() {
		b = durable(t, st, clk, Config{CheckpointBytes: 4 << 20})
		if _, err := b.Declare("q", cfg); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Declare("crawl", crawlCfg); err != nil {
			t.Fatal(err)
		}
	}
	start()
	published, crawlJobs := 0, 0
	publish := func(n int) {
		for range n {
			if published == jobs {
				return
			}
			jt := "report"
			if r.IntN(8) == 0 {
				jt = "export"
			}
			queue, producer := "q", "p"
			if r.IntN(4) == 0 {
				queue, producer, jt = "crawl", "crawler", "crawl"
				crawlJobs++
			}
			m := &Message{Queue: queue, Producer: producer, JobType: jt, Payload: make([]byte, 1024),
				Headers: map[string]string{fair.TenantHeader: tenants[r.IntN(len(tenants))]}}
			if _, err := b.Publish(m); err != nil {
				t.Fatal(err)
			}
			published++
		}
	}

	// What the workers see.
	type job struct {
		id, tenant    string
		export, crawl bool
		done          time.Time
	}
	type worker struct {
		queue string
		c     *Consumer
		b     *Broker // the broker it took its job from
		job   *job
	}
	running := map[string]int{}
	exports := 0
	var crawls, crashAt []time.Time // the crawler's starts, as the workers see them, and the crashes
	crawled := map[string]bool{}
	var backlogEnd time.Time // when the last crawler job first started
	finished := map[string]bool{}
	ws := make([]*worker, workers+crawlWorkers)
	subscribe := func(w *worker) {
		c, err := b.Subscribe(w.queue, "w", 1)
		if err != nil {
			t.Fatal(err)
		}
		w.c, w.b = c, b
	}
	for i := range ws {
		ws[i] = &worker{queue: "q"}
		if i >= workers {
			ws[i].queue = "crawl"
		}
		subscribe(ws[i])
	}
	stop := func(w *worker) {
		j := w.job
		w.job = nil
		if j.crawl {
			return
		}
		running[j.tenant]--
		if j.export {
			exports--
		}
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
			j := &job{id: d.ID, tenant: d.Headers[fair.TenantHeader], export: d.JobType == "export", crawl: d.Queue == "crawl",
				done: clk.Now().Add(time.Duration(1+r.IntN(int(lease/time.Millisecond)-1)) * time.Millisecond)}
			w.job = j
			if j.crawl {
				crawls = append(crawls, clk.Now())
				crawled[d.ID] = true
				if published == jobs && len(crawled) == crawlJobs && backlogEnd.IsZero() {
					backlogEnd = clk.Now()
				}
				continue
			}
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
			crashAt = append(crashAt, clk.Now())
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
		case next != nil && wakesBefore(clk, next.job.done):
			// The broker's timer (a bucket refilled, a hold lapsed) comes
			// first: a worker takes what it sends when it comes.
			at, _ := clk.Next()
			clk.Advance(max(0, at.Sub(clk.Now())))
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
	t.Logf("%d jobs, %d broker crashes, %d worker kills, %d tenants, %v on the fake clock", jobs, crashes, kills, len(running), clk.Now().Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	// The crawler's starts over every window of a minute that starts at
	// one of them (the most any window holds), and, while it had a
	// backlog (until the last of its jobs first started), the fewest over
	// the windows that start at each one; one with a crash in it may hold
	// fewer, as the workers take a moment to connect to the new broker
	// and the crawler's jobs that were in flight wait a lease to run
	// again.
	most, least, leastClean := 0, len(crawls), len(crawls)
	for i, s := range crawls {
		n := 0
		for _, u := range crawls[i:] {
			if u.Sub(s) < window {
				n++
			}
		}
		most = max(most, n)
		if s.Add(window).After(backlogEnd) {
			continue
		}
		least = min(least, n)
		if !slices.ContainsFunc(crashAt, func(c time.Time) bool { return c.Add(lease).After(s) && c.Before(s.Add(window)) }) {
			leastClean = min(leastClean, n)
		}
	}
	per := crawlRate * window.Seconds()
	clean := fmt.Sprint(leastClean)
	if leastClean == len(crawls) {
		clean = "none: every window has a crash"
	}
	t.Logf("crawler: %d starts; per %v window at most %d, at least %d (without a crash: %s); declared %v (burst %d)", len(crawls), window, most, least, clean, per, crawlBurst)
	if float64(most) > 1.05*per {
		t.Errorf("the crawler started %d jobs in a %v window, more than 1.05 x %v", most, window, per)
	}
	if float64(leastClean) < 0.95*per {
		t.Errorf("the crawler started only %d jobs in a %v window without a crash while it had a backlog, fewer than 0.95 x %v", leastClean, window, per)
	}
	for _, w := range ws {
		if w.b == b {
			w.c.Close()
		}
	}
}

// wakesBefore reports whether clk has a timer due before t.
func wakesBefore(clk *clock.Fake, t time.Time) bool {
	at, ok := clk.Next()
	return ok && at.Before(t)
}
