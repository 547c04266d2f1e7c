package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/fair"
	"github.com/harbinger-mq/harbinger/internal/server"
)

// TestKill9Limits: a queue with a limit per tenant and one on exports,
// and a queue with a rate limit alone, served by a real broker process
// that is SIGKILLed and restarted on the same data directory again and
// again, while workers (each on a connection of its own) run every job
// for a short random time and are killed at random, their connection
// dropped mid-job. The running jobs are counted by the workers: a job
// runs from the moment its worker receives it until that worker finishes
// it (and acks) or is killed, whatever became of the broker meanwhile.
// No tenant ever runs more than its limit, nor exports theirs; the rate
// queue's starts, as its workers see them, never exceed its token bucket
// (burst plus rate times the window, plus a little for the time a
// delivery takes to arrive) over any window, crashes included; and every
// job published is acked in the end, none lost and none stuck.
func TestKill9Limits(t *testing.T) {
	if testing.Short() {
		t.Skip("kill test skipped in -short mode")
	}
	t.Parallel()
	// crawlJobs keep the rate queue busy, at its rate, about as long as
	// the limited queue's jobs take.
	kills, jobs, crawlJobs := 10, 10_000, 750
	if *killFull {
		kills, jobs, crawlJobs = 40, 100_000, 5_000
	}
	if raceEnabled {
		kills, jobs, crawlJobs = 5, 2_000, 300
	}
	const (
		producers, workers       = 4, 24
		tenantLimit, exportLimit = 3, 2
		// The rate queue: a burst of three seconds' worth (5% of a
		// minute's starts), more than the tokens a restart's downtime
		// (about a second) refills, so a restart that started the bucket
		// full would show.
		crawlRate, crawlBurst, crawlWorkers = 50.0, 150, 4
		// How late a worker may see a start the broker made: the bucket
		// bound over a window allows this much more.
		latency = 200 * time.Millisecond
	)
	tenants := []string{"acme", "globex", "ünïcode", "テナント", "\U0001F600", "initech"}

	dir := t.TempDir()
	addr := freePort(t)
	args := []string{"serve", "-grpc-addr", addr, "-http-addr", "off", "-data-dir", dir, "-log-level", "warn", "-shutdown-timeout", "2s"}
	proc := startChild(t, args...)
	defer func() {
		if proc != nil {
			proc.kill()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Reconnect at once after a restart, not after gRPC's growing backoff.
	fast := client.WithDialOptions(grpc.WithConnectParams(grpc.ConnectParams{
		Backoff: backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.5, MaxDelay: 200 * time.Millisecond}, MinConnectTimeout: time.Second}))
	dial := func() *client.Client {
		cl, err := client.Dial(ctx, addr, client.WithLogger(quietLog), fast)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	cl := dial()
	defer cl.Close()
	waitServing(ctx, t, addr)
	declare := map[string]broker.QueueConfig{
		"reports": {GroupBy: fair.Tenant, Limits: broker.Rules{fmt.Sprintf("tenant=%d", tenantLimit), fmt.Sprintf("job_type:export=%d", exportLimit)},
			Lease: time.Second, MaxAttempts: 1000, MaxDepth: jobs + 1000},
		"crawl": {RateLimits: broker.Rules{fmt.Sprintf("producer=%v/s:%d", crawlRate, crawlBurst)},
			Lease: time.Second, MaxAttempts: 1000, MaxDepth: jobs + 1000},
	}
	for name, cfg := range declare {
		if _, err := cl.DeclareQueue(ctx, name, server.QueueConfigProto(cfg)); err != nil {
			t.Fatal(err)
		}
	}

	var (
		mu        sync.Mutex
		confirmed = map[string]bool{}
		handled   = map[string]int{} // finished by a worker that was not killed
		running   = map[string]int{} // by tenant, as the workers count
		exports   int
		most      = map[string]int{} // the most running at once, by tenant
		mostExp   int
		crawls    []time.Time // the rate queue's starts, as its workers see them
		killedN   int
		handledN  atomic.Int64
		// progress is closed (and replaced) at every job finished.
		progress = make(chan struct{})
	)
	signal := func() { // with mu held
		close(progress)
		progress = make(chan struct{})
	}
	// waitFor waits until ok holds (checked under mu) or ctx ends.
	waitFor := func(ok func() bool) error {
		for {
			mu.Lock()
			if ok() {
				mu.Unlock()
				return nil
			}
			ch := progress
			mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	// A worker: one connection, one job at a time. Killing it counts its
	// job as stopped and the worker as dead, then drops its connection, so
	// the broker hears of it only after the count; a job the dead worker's
	// connection brings meanwhile never starts, as in a dead process.
	type run struct {
		id, tenant string
		attempt    int
		at         time.Time
		export     bool
		killed     chan struct{}
		dead       bool
	}
	live := map[*run]bool{}
	var downs [][2]time.Time // from a kill until the broker serves again
	type worker struct {
		cl  *client.Client // its connection; nil once killed, until it connects again
		cur *run
	}
	var ws []*worker
	stopRun := func(r *run) { // with mu held
		delete(live, r)
		running[r.tenant]--
		if r.export {
			exports--
		}
	}
	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	startWorker := func(queue string, i int, rng *rand.Rand) {
		w := &worker{}
		mu.Lock()
		ws = append(ws, w)
		mu.Unlock()
		var rmu sync.Mutex // the worker's random numbers: its handlers may overlap across a reconnect
		handler := func(wcl *client.Client) client.Handler {
			return func(_ context.Context, d *client.Delivery) error {
				rmu.Lock()
				took := time.Duration(1+rng.IntN(10)) * time.Millisecond
				rmu.Unlock()
				r := &run{id: d.ID, tenant: d.Headers[fair.TenantHeader], attempt: d.Attempt, at: time.Now(), export: d.JobType == "export", killed: make(chan struct{})}
				mu.Lock()
				if w.cl != wcl { // killed
					mu.Unlock()
					return fmt.Errorf("killed")
				}
				if queue == "crawl" {
					crawls = append(crawls, time.Now())
					r = nil
				} else {
					running[r.tenant]++
					live[r] = true
					most[r.tenant] = max(most[r.tenant], running[r.tenant])
					if r.export {
						exports++
						mostExp = max(mostExp, exports)
					}
					if running[r.tenant] > tenantLimit {
						var what []string
						for o := range live {
							if o.tenant == r.tenant {
								what = append(what, fmt.Sprintf("%s attempt %d for %v", o.id, o.attempt, time.Since(o.at).Round(time.Microsecond)))
							}
						}
						last := "no kill yet"
						if n := len(downs); n > 0 {
							last = fmt.Sprintf("the last kill %v ago, serving again %v ago", time.Since(downs[n-1][0]).Round(time.Microsecond), time.Since(downs[n-1][1]).Round(time.Microsecond))
						}
						t.Errorf("tenant %q runs %d jobs, counted by the workers; limit %d (%s; %s)", r.tenant, running[r.tenant], tenantLimit, strings.Join(what, ", "), last)
					}
					if exports > exportLimit {
						t.Errorf("%d exports run, counted by the workers; limit %d", exports, exportLimit)
					}
					w.cur = r
				}
				mu.Unlock()
				timer := time.NewTimer(took)
				defer timer.Stop()
				var killed <-chan struct{}
				if r != nil {
					killed = r.killed
				}
				select {
				case <-timer.C:
				case <-killed:
					return fmt.Errorf("killed") // its connection is gone: this goes nowhere
				}
				mu.Lock()
				if r != nil {
					if r.dead { // killed just as it finished
						mu.Unlock()
						return fmt.Errorf("killed")
					}
					stopRun(r)
					if w.cur == r {
						w.cur = nil
					}
				}
				handled[d.ID]++
				handledN.Add(1)
				signal()
				mu.Unlock()
				return nil // acked
			}
		}
		wg.Go(func() {
			for wctx.Err() == nil {
				wcl := dial()
				mu.Lock()
				w.cl = wcl
				mu.Unlock()
				err := wcl.RunWorker(wctx, client.WorkerConfig{Queue: queue, Name: fmt.Sprint(queue, i), MaxReconnectDelay: 100 * time.Millisecond}, handler(wcl))
				wcl.Close()
				if err != nil && !strings.Contains(err.Error(), "closed") {
					t.Errorf("worker: %v", err)
				}
			}
		})
	}
	for i := range workers {
		startWorker("reports", i, rand.New(rand.NewPCG(uint64(i), 7)))
	}
	for i := range crawlWorkers {
		startWorker("crawl", i, rand.New(rand.NewPCG(uint64(i), 8)))
	}
	// Kill a worker mid-job now and then.
	killCtx, stopKilling := context.WithCancel(ctx)
	killDone := make(chan struct{})
	go func() {
		defer close(killDone)
		rng := rand.New(rand.NewPCG(3, 4))
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
			case <-killCtx.Done():
				return
			}
			mu.Lock()
			w := ws[rng.IntN(workers)]
			r := w.cur
			if r == nil || w.cl == nil {
				mu.Unlock()
				continue
			}
			r.dead = true
			stopRun(r)
			w.cur = nil
			close(r.killed)
			killedN++
			wcl := w.cl
			w.cl = nil
			mu.Unlock()
			wcl.Close() // the connection drops: the broker takes the job back
		}
	}()

	// Producers: kilobyte payloads in batches, re-sent when a kill cuts a
	// publish short; at most a few thousand jobs ahead of the workers.
	payload := strings.Repeat("ж", 1024) // 2 KB
	var pwg sync.WaitGroup
	publish := func(p int, queue string, n int) {
		rng := rand.New(rand.NewPCG(uint64(p), 9))
		for i := 0; i < n; {
			if waitFor(func() bool { return len(confirmed)-len(handled) < 4000 }) != nil {
				t.Errorf("publish: %v", ctx.Err())
				return
			}
			var batch []*client.Message
			for ; i < n && len(batch) < 50; i++ {
				jt := "report"
				if rng.IntN(10) == 0 {
					jt = "export"
				}
				batch = append(batch, &client.Message{Queue: queue, Producer: fmt.Sprint("p", p), JobType: jt,
					Payload: []byte(payload[:2*(256+rng.IntN(768))]), Headers: map[string]string{fair.TenantHeader: tenants[rng.IntN(len(tenants))]}})
			}
			for {
				ids, err := cl.Publish(ctx, batch...)
				if err == nil {
					mu.Lock()
					for _, id := range ids {
						confirmed[id] = true
					}
					mu.Unlock()
					break
				}
				if ctx.Err() != nil {
					t.Errorf("publish: %v", err)
					return
				}
			}
		}
	}
	for p := range producers {
		pwg.Go(func() { publish(p, "reports", jobs/producers) })
	}
	pwg.Go(func() { publish(producers, "crawl", crawlJobs) })

	// Kill the broker at random moments spread over the run: kill k (from
	// 0) once a random share between (k+0.5)/(kills+2) and
	// (k+1.5)/(kills+2) of the jobs is done.
	began := time.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	total := jobs + crawlJobs
	for k := range kills {
		target := int64((float64(k) + 0.5 + rng.Float64()) * float64(total) / float64(kills+2))
		if waitFor(func() bool { return handledN.Load() >= target }) != nil {
			t.Fatalf("no progress before kill %d", k+1)
		}
		mu.Lock()
		downs = append(downs, [2]time.Time{time.Now(), {}})
		mu.Unlock()
		proc.kill()
		proc = startChild(t, args...)
		waitServing(ctx, t, addr)
		mu.Lock()
		downs[len(downs)-1][1] = time.Now()
		mu.Unlock()
	}
	pwg.Wait()
	stopKilling()
	<-killDone

	// Let the workers finish everything, then check the broker holds
	// nothing more.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		mu.Lock()
		missing := 0
		for id := range confirmed {
			if handled[id] == 0 {
				missing++
			}
		}
		mu.Unlock()
		done := missing == 0
		for name := range declare {
			q, err := cl.Queue(ctx, name)
			done = done && err == nil && q.Ready == 0 && q.InFlight == 0 && q.Delayed == 0
		}
		if done {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("timed out: %d confirmed jobs never finished", missing)
		}
	}
	took := time.Since(began)
	stopWorkers()
	wg.Wait()
	if err := proc.stop(); err != nil {
		t.Errorf("final shutdown: %v", err)
	}
	proc = nil

	mu.Lock()
	defer mu.Unlock()
	if len(confirmed) != jobs+crawlJobs {
		t.Fatalf("%d jobs confirmed, want %d", len(confirmed), jobs+crawlJobs)
	}
	worst, down := 0, time.Duration(0)
	for _, d := range downs {
		down += d[1].Sub(d[0])
	}
	for _, n := range most {
		worst = max(worst, n)
	}
	t.Logf("%d broker kills (down %v in all), %d workers killed mid-job; %d jobs of %d tenants and %d rate-limited jobs confirmed and finished in %v; most running at once, counted by the workers: %d of a tenant (limit %d), %d exports (limit %d); by tenant %v",
		kills, down.Round(time.Millisecond), killedN, jobs, len(tenants), crawlJobs, took.Round(time.Millisecond), worst, tenantLimit, mostExp, exportLimit, most)

	// The rate queue's starts over every window that starts at one of them.
	slices.SortFunc(crawls, func(a, b time.Time) int { return a.Compare(b) })
	for _, w := range []time.Duration{time.Second, 10 * time.Second, time.Minute} {
		if crawls[len(crawls)-1].Sub(crawls[0]) < w {
			continue
		}
		hi, lo := 0, len(crawls)
		for i, s := range crawls {
			n, _ := slices.BinarySearchFunc(crawls, s.Add(w), func(a, b time.Time) int { return a.Compare(b) })
			n -= i
			hi = max(hi, n)
			if s.Add(w).Before(crawls[len(crawls)-1]) {
				lo = min(lo, n)
			}
		}
		bound := float64(crawlBurst) + crawlRate*(w+latency).Seconds()
		t.Logf("rate queue: %d starts; per %v window at most %d (bucket bound %.0f, declared rate x window %.0f), at least %d", len(crawls), w, hi, bound, crawlRate*w.Seconds(), lo)
		if float64(hi) > bound {
			t.Errorf("the rate queue started %d jobs in %v, more than its bucket allows (%.0f)", hi, w, bound)
		}
	}
}
