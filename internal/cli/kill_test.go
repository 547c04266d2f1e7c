package cli

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/client"
)

var killFull = flag.Bool("kill-full", false, "run TestKill9 at full size (100 kills, 40,000 jobs), and TestKill9Limits (40 kills, 100,000 jobs)")

// childEnv makes the test binary run `harbinger` with the arguments it
// holds (separated by \x1f) instead of the tests: a real broker process
// that the kill test can SIGKILL.
const childEnv = "HARBINGER_TEST_CHILD"

func TestMain(m *testing.M) {
	if args := os.Getenv(childEnv); args != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := Main(ctx, strings.Split(args, "\x1f"), os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// child is one run of `harbinger serve` in its own process.
type child struct{ cmd *exec.Cmd }

func startChild(t *testing.T, args ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join(args, "\x1f"))
	cmd.Stderr = &prefixWriter{t: t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return &child{cmd: cmd}
}

func (c *child) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	_ = c.cmd.Wait()
}

func (c *child) stop() error {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	return c.cmd.Wait()
}

// prefixWriter passes a child's warnings and errors to the test log.
type prefixWriter struct{ t *testing.T }

func (w *prefixWriter) Write(p []byte) (int, error) {
	for line := range strings.SplitSeq(strings.TrimRight(string(p), "\n"), "\n") {
		if strings.Contains(line, "level=ERROR") || strings.Contains(line, "panic") {
			w.t.Logf("broker: %s", line)
		}
	}
	return len(p), nil
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestKill9: producers publish with confirmation and workers ack while
// the broker process is SIGKILLed at random moments and restarted on the
// same data directory. At the end every confirmed job was handled, none is
// left, and only jobs in flight at a kill ran twice.
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("kill test skipped in -short mode")
	}
	t.Parallel()
	kills, jobs := 20, 4000
	if *killFull {
		kills, jobs = 100, 40_000
	}
	const producers, workers = 4, 4
	dir := t.TempDir()
	addr := freePort(t)
	args := []string{"serve", "-grpc-addr", addr, "-http-addr", "off", "-data-dir", dir, "-log-level", "warn", "-shutdown-timeout", "2s"}
	proc := startChild(t, args...)
	defer func() {
		if proc != nil {
			proc.kill()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, err := client.Dial(ctx, addr, client.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	var (
		mu        sync.Mutex
		confirmed = map[string]bool{}
		handled   = map[string]int{}
		progress  = make(chan struct{}, 1<<16)
		handledN  atomic.Int64
	)
	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			err := cl.RunWorker(wctx, client.WorkerConfig{Queue: "jobs", Name: fmt.Sprint("w", w)}, func(_ context.Context, d *client.Delivery) error {
				if due, ok := d.Headers["due"]; ok {
					var ns int64
					fmt.Sscan(due, &ns)
					if early := time.Unix(0, ns).Sub(time.Now()); early > 0 {
						t.Errorf("job %s delivered %v before it was due", d.ID, early)
					}
				}
				mu.Lock()
				handled[d.ID]++
				mu.Unlock()
				handledN.Add(1)
				select {
				case progress <- struct{}{}:
				default:
				}
				return nil
			})
			if err != nil {
				t.Errorf("worker: %v", err)
			}
		})
	}
	var pwg sync.WaitGroup
	for p := range producers {
		pwg.Go(func() {
			for i := range jobs / producers {
				m := &client.Message{Queue: "jobs", Producer: fmt.Sprint("p", p), JobType: []string{"thumbnail", "report"}[i%2],
					Payload: []byte(fmt.Sprintf("producer %d job %d: ünïcode ✓", p, i))}
				if i%4 == 3 { // a quarter are delayed, and must not run early
					m.Delay = time.Duration(1+i%3) * 200 * time.Millisecond
					m.Headers = map[string]string{"due": fmt.Sprint(time.Now().Add(m.Delay).UnixNano())}
				}
				for {
					ids, err := cl.Publish(ctx, m)
					if err == nil {
						mu.Lock()
						confirmed[ids[0]] = true
						mu.Unlock()
						break
					}
					if ctx.Err() != nil {
						t.Errorf("publish: %v", err)
						return
					}
					// Not confirmed (the broker died mid-call): publish again,
					// as a producer that wants the job must.
				}
			}
		})
	}

	// Kill at random moments: after a random amount of progress each time.
	rng := rand.New(rand.NewPCG(1, 2))
	for k := range kills {
		for range 5 + rng.IntN(jobs/kills/2+1) {
			select {
			case <-progress:
			case <-ctx.Done():
				t.Fatalf("no progress before kill %d", k+1)
			}
		}
		proc.kill()
		proc = startChild(t, args...)
	}
	pwg.Wait()

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
		q, err := cl.Queue(ctx, "jobs")
		if missing == 0 && err == nil && q.Ready == 0 && q.InFlight == 0 && q.Delayed == 0 {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("timed out: %d confirmed jobs never handled, queue %v (%v)", missing, q, err)
		}
	}
	stopWorkers()
	wg.Wait()
	if err := proc.stop(); err != nil {
		t.Errorf("final shutdown: %v", err)
	}
	proc = nil

	mu.Lock()
	defer mu.Unlock()
	dups, extra := 0, 0
	for id, n := range handled {
		if !confirmed[id] {
			extra++ // stored, but its confirmation was cut by a kill: republished
		}
		dups += n - 1
	}
	t.Logf("%d kills: %d jobs confirmed, %d handled, %d handled twice or more, %d stored without confirmation", kills, len(confirmed), len(handled), dups, extra)
	if len(confirmed) != jobs {
		t.Fatalf("%d jobs confirmed, want %d", len(confirmed), jobs)
	}
	// Each kill can repeat the jobs in flight and those acked in the last
	// moments before it (an ack is not waited for: losing one costs a
	// repeat, never a job).
	if limit := kills * 64; dups > limit {
		t.Fatalf("%d repeats for %d kills: more than the jobs in flight at a kill", dups, kills)
	}
}

var quietLog = slog.New(slog.DiscardHandler)

// TestKill9KeepsJobFeatures: what the job features promise survives a
// SIGKILL of a real broker process: a paused queue stays paused, a
// cancelled job stays gone, a unique key stays taken, a scheduled job
// stays invisible until due, and a periodic schedule keeps firing.
func TestKill9KeepsJobFeatures(t *testing.T) {
	if testing.Short() {
		t.Skip("kill test skipped in -short mode")
	}
	t.Parallel()
	dir := t.TempDir()
	addr := freePort(t)
	args := []string{"serve", "-grpc-addr", addr, "-http-addr", "off", "-data-dir", dir, "-log-level", "warn"}
	proc := startChild(t, args...)
	defer func() { proc.kill() }() // after a clean stop, a no-op
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := client.Dial(ctx, addr, client.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	unique := &client.Message{Queue: "billing", UniqueKey: "order-9", UniqueFor: time.Hour}
	first, err := cl.PublishEach(ctx, unique)
	if err != nil || first[0].Err != nil {
		t.Fatalf("unique publish: %v %v", first, err)
	}
	due := time.Now().Add(3 * time.Second) // the broker's due time is no earlier than this
	ids, err := cl.Publish(ctx, &client.Message{Queue: "billing", JobType: "doomed"}, &client.Message{Queue: "later", Delay: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CancelJob(ctx, "billing", ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.PauseQueue(ctx, "billing"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.DeclareSchedule(ctx, &pb.Schedule{Name: "tick", Queue: "ticks", Every: durationpb.New(time.Second)}); err != nil {
		t.Fatal(err)
	}

	proc.kill()
	proc = startChild(t, args...)
	waitServing(ctx, t, addr)

	q, err := cl.Queue(ctx, "billing")
	if err != nil || !q.Paused || q.Ready != 1 {
		t.Fatalf("billing after the kill: %v, %v (want paused, only the unique job)", q, err)
	}
	again, err := cl.PublishEach(ctx, unique)
	if err != nil || !again[0].Duplicate || again[0].ID != first[0].ID {
		t.Fatalf("unique key after the kill: %+v, %v", again, err)
	}
	seen := make(chan time.Time, 1)
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	go cl.RunWorker(wctx, client.WorkerConfig{Queue: "later"}, func(context.Context, *client.Delivery) error {
		seen <- time.Now()
		return nil
	})
	select {
	case at := <-seen:
		if at.Before(due) {
			t.Fatalf("the scheduled job ran %v early", due.Sub(at))
		}
	case <-ctx.Done():
		t.Fatal("the scheduled job never ran after the kill")
	}
	// The schedule kept its place and goes on firing.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		list, err := cl.ListSchedules(ctx)
		if err == nil && len(list) == 1 && list[0].Fired >= 2 {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("the schedule stopped firing after the kill: %v, %v", list, err)
		}
	}
	stopWorker()
	if err := proc.stop(); err != nil {
		t.Errorf("final shutdown: %v", err)
	}
}

// waitServing waits until the broker at addr answers its health check.
func waitServing(ctx context.Context, t *testing.T, addr string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("broker at %s never came up: %v", addr, err)
	}
}
