package conformance

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/client"
)

// The pairs of producer and worker SDKs the scenario runs with.
var pairs = []struct{ producer, worker string }{
	{"go", "go"},
	{"python", "python"},
	{"typescript", "typescript"},
	{"python", "typescript"},
	{"typescript", "python"},
	{"go", "typescript"},
	{"python", "go"},
}

type step struct {
	Kind  string `json:"kind"`
	Count int    `json:"count"`
}

type scenario struct {
	Queue struct {
		MaxAttempts int `json:"max_attempts"`
		RetryBaseMs int `json:"retry_base_ms"`
		RetryMaxMs  int `json:"retry_max_ms"`
		LeaseMs     int `json:"lease_ms"`
	} `json:"queue"`
	Phase1  []step `json:"phase1"`
	Phase2  []step `json:"phase2"`
	SleepMs int    `json:"sleep_ms"`
	SlowMs  int    `json:"slow_ms"`
}

// kinds lists each job's kind by n, in publish order.
func (sc scenario) kinds() (kinds []string, phase1 int) {
	for _, s := range sc.Phase1 {
		for range s.Count {
			kinds = append(kinds, s.Kind)
		}
	}
	phase1 = len(kinds)
	for _, s := range sc.Phase2 {
		for range s.Count {
			kinds = append(kinds, s.Kind)
		}
	}
	return kinds, phase1
}

// event is one JSON line of an agent.
type event struct {
	Event   string `json:"event"`
	N       int    `json:"n"`
	Kind    string `json:"kind"`
	Attempt int    `json:"attempt"`
	Outcome string `json:"outcome"`
	ID      string `json:"id"`
	Code    int    `json:"code"`
	Error   string `json:"error"`
	Phase   int    `json:"phase"`
}

// agent is an SDK's producer or worker process and what it reported.
type agent struct {
	t     *testing.T
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	evs   []event
	more  chan struct{} // closed and replaced at each event
	done  chan struct{} // closed when stdout ends
}

func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func command(t *testing.T, lang, goAgent string, args ...string) *exec.Cmd {
	t.Helper()
	r := root(t)
	switch lang {
	case "go":
		return exec.Command(goAgent, args...)
	case "python":
		py := os.Getenv("HARBINGER_PYTHON")
		if py == "" {
			py = "/usr/bin/python3"
		}
		return exec.Command(py, append([]string{filepath.Join(r, "sdk/python/conformance/agent.py")}, args...)...)
	case "typescript":
		js := filepath.Join(r, "sdk/typescript/dist/conformance/agent.js")
		if _, err := os.Stat(js); err != nil {
			t.Fatalf("%s is missing: run npm ci && npm run build in sdk/typescript first", js)
		}
		return exec.Command("node", append([]string{js}, args...)...)
	}
	t.Fatalf("no agent for %q", lang)
	return nil
}

func startAgent(t *testing.T, name string, cmd *exec.Cmd) *agent {
	t.Helper()
	a := &agent{t: t, name: name, cmd: cmd, more: make(chan struct{}), done: make(chan struct{})}
	var err error
	if a.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &lockedWriter{w: &stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(a.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var e event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				continue
			}
			a.mu.Lock()
			a.evs = append(a.evs, e)
			close(a.more)
			a.more = make(chan struct{})
			a.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, stderr.String())
		}
	})
	return a
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// waitFor waits until pred holds of the agent's events, or fails the test.
func (a *agent) waitFor(what string, timeout time.Duration, pred func([]event) bool) {
	a.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		a.mu.Lock()
		ok := pred(a.evs)
		more := a.more
		a.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-more:
		case <-a.done:
			a.mu.Lock()
			ok := pred(a.evs)
			a.mu.Unlock()
			if !ok {
				a.t.Fatalf("%s ended before %s", a.name, what)
			}
			return
		case <-deadline.C:
			a.t.Fatalf("%s: timed out after %v waiting for %s", a.name, timeout, what)
		}
	}
}

func (a *agent) events() []event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]event(nil), a.evs...)
}

// broker is a `harbinger serve` on a data directory, restartable on the same port.
type broker struct {
	t    *testing.T
	bin  string
	dir  string
	addr string
	cmd  *exec.Cmd
}

var serving = regexp.MustCompile(`msg="harbinger: serving" grpc=(\S+)`)

func (b *broker) start() {
	b.t.Helper()
	cmd := exec.Command(b.bin, "serve", "-grpc-addr", b.addr, "-http-addr", "off", "-data-dir", b.dir)
	errs, err := cmd.StderrPipe()
	if err != nil {
		b.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	b.cmd = cmd
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(errs)
		for sc.Scan() {
			if m := serving.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case ready <- m[1]:
				default:
				}
			}
		}
		close(ready)
	}()
	select {
	case addr, ok := <-ready:
		if !ok {
			b.t.Fatal("harbinger serve exited before serving")
		}
		b.addr = addr
	case <-time.After(30 * time.Second):
		b.t.Fatal("harbinger serve did not start in 30s")
	}
}

func (b *broker) kill() {
	_ = b.cmd.Process.Signal(syscall.SIGKILL)
	_ = b.cmd.Wait()
}

func brokerBinary(t *testing.T) string {
	if bin := os.Getenv("HARBINGER_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "harbinger")
	build(t, bin, "github.com/harbinger-mq/harbinger/cmd/harbinger")
	return bin
}

func build(t *testing.T, out, pkg string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
}

// TestConformance runs the scenario of testdata/scenario.json with every
// pair of SDKs: the same queue settings, jobs, broker restart and
// cancellation, and the same expected outcomes. It needs Python with the
// SDK's packages and a built TypeScript SDK, so it runs only when
// HARBINGER_CONFORMANCE is set (as .ci/run sets it).
func TestConformance(t *testing.T) {
	if os.Getenv("HARBINGER_CONFORMANCE") == "" {
		t.Skip("set HARBINGER_CONFORMANCE=1 to run the SDK conformance scenario (it needs python3 with grpcio and a built sdk/typescript)")
	}
	bin := brokerBinary(t)
	goAgent := filepath.Join(t.TempDir(), "agent")
	build(t, goAgent, "github.com/harbinger-mq/harbinger/internal/conformance/agent")
	b, err := os.ReadFile("testdata/scenario.json")
	if err != nil {
		t.Fatal(err)
	}
	var sc scenario
	if err := json.Unmarshal(b, &sc); err != nil {
		t.Fatal(err)
	}
	scenarioPath, _ := filepath.Abs("testdata/scenario.json")
	for _, p := range pairs {
		t.Run(p.producer+"-to-"+p.worker, func(t *testing.T) {
			run(t, bin, goAgent, scenarioPath, sc, p.producer, p.worker)
		})
	}
}

func run(t *testing.T, bin, goAgent, scenarioPath string, sc scenario, producerLang, workerLang string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	br := &broker{t: t, bin: bin, dir: filepath.Join(t.TempDir(), "data"), addr: "127.0.0.1:0"}
	br.start()
	t.Cleanup(br.kill)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := client.Dial(ctx, br.addr, client.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	queue := "conformance." + producerLang + "." + workerLang
	ms := func(n int) *durationpb.Duration { return durationpb.New(time.Duration(n) * time.Millisecond) }
	if _, err := c.DeclareQueue(ctx, queue, &pb.QueueConfig{
		MaxAttempts: uint32(sc.Queue.MaxAttempts), RetryBase: ms(sc.Queue.RetryBaseMs),
		RetryMax: ms(sc.Queue.RetryMaxMs), Lease: ms(sc.Queue.LeaseMs),
	}); err != nil {
		t.Fatal(err)
	}
	args := []string{"--addr", br.addr, "--queue", queue, "--scenario", scenarioPath}
	w := startAgent(t, workerLang+" worker", command(t, workerLang, goAgent, append(args, "worker")...))
	p := startAgent(t, producerLang+" producer", command(t, producerLang, goAgent, append(args, "producer")...))
	kinds, phase1 := sc.kinds()
	const long = time.Minute

	// Phase 1: each message has its own answer; the two the broker would
	// refuse are refused as INVALID_ARGUMENT, the rest stored.
	p.waitFor("phase 1", long, func(evs []event) bool { return hasPhase(evs, 1) })
	checkResults(t, p.events(), kinds[:phase1], 0)

	// Cancel the running "block" job: its handler stops, and it is not retried.
	blockN := indexOf(kinds, "block")
	w.waitFor("the block job to start", long, func(evs []event) bool { return count(evs, "start", blockN, "") > 0 })
	blockID := resultID(p.events(), blockN)
	if state, err := c.CancelJob(ctx, queue, blockID); err != nil || state != "running" {
		t.Fatalf("CancelJob(block) = %q, %v; want running", state, err)
	}
	w.waitFor("the block job's handler to be cancelled", long, func(evs []event) bool {
		return count(evs, "end", blockN, "cancelled") == 1
	})

	// The retried and dead-lettered jobs settle before the restart, so
	// their attempts are the scenario's, not the restart's.
	w.waitFor("phase 1's failing, flaky and slow jobs to settle", long, func(evs []event) bool {
		for n, k := range kinds[:phase1] {
			switch k {
			case "fail":
				if count(evs, "end", n, "error") < sc.Queue.MaxAttempts {
					return false
				}
			case "dead":
				if count(evs, "end", n, "dead") < 1 {
					return false
				}
			case "flaky", "slow":
				if count(evs, "end", n, "ok") < 1 {
					return false
				}
			}
		}
		return true
	})
	poll(t, ctx, "four dead letters", func() bool {
		dls, err := c.ListDeadLetters(ctx, queue, 0)
		return err == nil && len(dls) == 4
	})
	// The worker reported them done; wait for the broker to have their
	// acks, and for a publish (answered once on disk, after every record
	// before it) to put the acks on disk, or the kill could lose them and
	// the jobs would run again, as at-least-once delivery allows.
	for n, k := range kinds[:phase1] {
		if k == "flaky" || k == "slow" {
			id := resultID(p.events(), n)
			poll(t, ctx, "the broker to take job "+id+"'s ack", func() bool {
				_, err := c.GetJob(ctx, queue, id)
				return status.Code(err) == codes.NotFound
			})
		}
	}
	if _, err := c.Publish(ctx, &client.Message{Queue: queue + ".sync"}); err != nil {
		t.Fatal(err)
	}

	// Kill the broker mid-run (the sleep jobs are running) and start it
	// again on the same port and data directory; then phase 2.
	br.kill()
	br.start()
	if _, err := io.WriteString(p.stdin, "continue\n"); err != nil {
		t.Fatal(err)
	}
	p.waitFor("phase 2", long, func(evs []event) bool { return hasPhase(evs, 2) })
	checkResults(t, p.events(), kinds[phase1:], phase1)

	// Every job that should succeed has, at least once (delivery is at
	// least once: a job running at the kill runs again), and nothing is
	// left waiting or running.
	w.waitFor("every ok and sleep job to succeed", long, func(evs []event) bool {
		for n, k := range kinds {
			if (k == "ok" || k == "sleep") && count(evs, "end", n, "ok") == 0 {
				return false
			}
		}
		return true
	})
	poll(t, ctx, "an empty queue", func() bool {
		q, err := c.Queue(ctx, queue)
		return err == nil && q.Ready == 0 && q.InFlight == 0 && q.Delayed == 0
	})

	// Stop the worker as an orchestrator would: SIGTERM; it exits cleanly.
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	if err := wait(w.cmd, 30*time.Second); err != nil {
		t.Errorf("worker after SIGTERM: %v", err)
	}
	if err := wait(p.cmd, 30*time.Second); err != nil {
		t.Errorf("producer: %v", err)
	}

	evs := w.events()
	for n, k := range kinds {
		switch k {
		case "block":
			if s := count(evs, "start", n, ""); s != 1 {
				t.Errorf("the cancelled job started %d times, want 1", s)
			}
		case "slow":
			// Its lease (1s) is renewed while it runs (1.5s): it runs once.
			if s := count(evs, "start", n, ""); s != 1 {
				t.Errorf("the slow job started %d times, want 1: its lease was not renewed: %v", s, of(evs, n))
			}
		case "flaky":
			if count(evs, "end", n, "error") != 1 || !ended(evs, n, 2, "ok") {
				t.Errorf("flaky job %d: want an error at attempt 1 and success at attempt 2; got %v", n, of(evs, n))
			}
		case "dead":
			if count(evs, "start", n, "") != 1 {
				t.Errorf("dead job %d ran %d times, want 1", n, count(evs, "start", n, ""))
			}
		}
	}
	if _, err := c.GetJob(ctx, queue, resultID(p.events(), blockN)); status.Code(err) != codes.NotFound {
		t.Errorf("GetJob(cancelled job) = %v, want NotFound", err)
	}
	dls, err := c.ListDeadLetters(ctx, queue, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dls {
		var pl struct{ N int }
		_ = json.Unmarshal(d.Payload, &pl)
		want := fmt.Sprintf("%s %d", d.JobType, pl.N)
		switch d.JobType {
		case "fail":
			// The handler's error text, and the broker's retries ran out.
			if !strings.Contains(d.Reason, want) || !strings.Contains(d.Reason, fmt.Sprintf("(attempt %d of %d)", sc.Queue.MaxAttempts, sc.Queue.MaxAttempts)) {
				t.Errorf("dead letter of %s: reason %q", want, d.Reason)
			}
		case "dead":
			if !strings.Contains(d.Reason, want) || d.Attempts != 1 {
				t.Errorf("dead letter of %s: reason %q after %d attempts, want it at once", want, d.Reason, d.Attempts)
			}
		default:
			t.Errorf("unexpected dead letter %s: %q", d.JobType, d.Reason)
		}
	}
	// The durations the worker reported are the handlers' own.
	keys, err := c.ListKeys(ctx, queue, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, k := range keys {
		seen[k.JobType] = true
		switch k.JobType {
		case "sleep":
			if k.P50Ms < float64(sc.SleepMs)*0.9 || k.P50Ms > float64(sc.SleepMs)*5 {
				t.Errorf("sleep jobs (%d ms) learned as p50 %.1f ms", sc.SleepMs, k.P50Ms)
			}
		case "slow":
			if k.EwmaMs < float64(sc.SlowMs)*0.9 || k.EwmaMs > float64(sc.SlowMs)*3 {
				t.Errorf("the slow job (%d ms) learned as %.1f ms", sc.SlowMs, k.EwmaMs)
			}
		case "ok":
			if k.P50Ms > float64(sc.SleepMs)/2 {
				t.Errorf("empty jobs learned as p50 %.1f ms", k.P50Ms)
			}
		}
	}
	for _, k := range []string{"sleep", "slow", "ok"} {
		if !seen[k] {
			t.Errorf("the broker learned nothing of %q jobs", k)
		}
	}
}

func wait(cmd *exec.Cmd, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		_ = cmd.Process.Kill()
		return fmt.Errorf("did not exit within %v", d)
	}
}

// poll asks the broker until ok holds, with a deadline: the broker's
// state is only seen by asking.
func poll(t *testing.T, ctx context.Context, what string, ok func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !ok() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

func checkResults(t *testing.T, evs []event, kinds []string, first int) {
	t.Helper()
	got := map[int]event{}
	for _, e := range evs {
		if e.Event == "result" {
			got[e.N] = e
		}
	}
	for i, k := range kinds {
		n := first + i
		e, ok := got[n]
		switch {
		case !ok:
			t.Errorf("message %d (%s): no result", n, k)
		case k == "bad-utf8" || k == "too-large":
			if e.Code != int(codes.InvalidArgument) || e.ID != "" {
				t.Errorf("message %d (%s): code %d id %q, want refused with INVALID_ARGUMENT", n, k, e.Code, e.ID)
			}
		case e.Code != 0 || e.ID == "":
			t.Errorf("message %d (%s): not stored: code %d %s", n, k, e.Code, e.Error)
		}
	}
}

func hasPhase(evs []event, phase int) bool {
	for _, e := range evs {
		if e.Event == "phase" && e.Phase == phase {
			return true
		}
	}
	return false
}

func indexOf(kinds []string, k string) int {
	for i, x := range kinds {
		if x == k {
			return i
		}
	}
	return -1
}

func resultID(evs []event, n int) string {
	for _, e := range evs {
		if e.Event == "result" && e.N == n {
			return e.ID
		}
	}
	return ""
}

// count is the events of kind ev for job n with outcome (any when "").
func count(evs []event, ev string, n int, outcome string) int {
	c := 0
	for _, e := range evs {
		if e.Event == ev && e.N == n && (outcome == "" || e.Outcome == outcome) {
			c++
		}
	}
	return c
}

func ended(evs []event, n, attempt int, outcome string) bool {
	for _, e := range evs {
		if e.Event == "end" && e.N == n && e.Attempt == attempt && e.Outcome == outcome {
			return true
		}
	}
	return false
}

func of(evs []event, n int) []event {
	var out []event
	for _, e := range evs {
		if e.N == n && e.Event != "result" {
			out = append(out, e)
		}
	}
	return out
}
