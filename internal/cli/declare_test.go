package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/client"
)

// lockedBuffer is a log a serve writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

const declaredConfig = `
queues:
  emails:
    policy: weighted
    tiers: 3
    weights: [5, 3, 1]
    max_in_flight: 4
    keep_done: 100
  reports:
    policy: fifo
    max_attempts: 2
    lease: 2m
schedules:
  - name: nightly-report
    queue: reports
    cron: "0 3 * * *"
    time_zone: Europe/Paris
    job_type: build-report
    payload: '{"scope": "all"}'
`

// A deployment declared in a config file comes up as declared from an
// empty data directory, and a restart with the same file changes nothing
// (and logs that it found each as declared).
func TestConfigFileDeclaresQueuesAndSchedules(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "harbinger.yaml")
	if err := os.WriteFile(path, []byte(declaredConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func() (string, *lockedBuffer, func()) {
		cfg, err := loadServeConfig([]string{"-config", path, "-data-dir", filepath.Join(dir, "data"), "-grpc-addr", "127.0.0.1:0", "-http-addr", "off"}, func(string) string { return "" }, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		logs := &lockedBuffer{}
		ctx, cancel := context.WithCancel(context.Background())
		addrs, done := make(chan string, 1), make(chan error, 1)
		go func() { done <- serve(ctx, cfg, logs, func(g, _ string) { addrs <- g }) }()
		select {
		case a := <-addrs:
			return a, logs, func() {
				cancel()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}
		case err := <-done:
			cancel()
			t.Fatalf("serve: %v\n%s", err, logs)
		}
		return "", nil, nil
	}

	addr, logs, stop := start()
	check := func(addr string) {
		t.Helper()
		cl, err := client.Dial(t.Context(), addr)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		e, err := cl.Queue(t.Context(), "emails")
		if err != nil {
			t.Fatal(err)
		}
		if c := e.GetConfig(); c.GetPolicy() != "weighted" || c.GetTiers() != 3 || len(c.GetWeights()) != 3 || c.GetWeights()[0] != 5 || c.GetMaxInFlight() != 4 || c.GetKeepDone() != 100 {
			t.Errorf("emails: %v", c)
		}
		r, err := cl.Queue(t.Context(), "reports")
		if err != nil {
			t.Fatal(err)
		}
		if c := r.GetConfig(); c.GetPolicy() != "fifo" || c.GetMaxAttempts() != 2 || c.GetLease().AsDuration() != 2*time.Minute {
			t.Errorf("reports: %v", c)
		}
		ss, err := cl.ListSchedules(t.Context())
		if err != nil || len(ss) != 1 {
			t.Fatalf("schedules %v, %v", ss, err)
		}
		if s := ss[0]; s.GetName() != "nightly-report" || s.GetCron() != "0 3 * * *" || s.GetTimeZone() != "Europe/Paris" || string(s.GetPayload()) != `{"scope": "all"}` {
			t.Errorf("schedule %v", s)
		}
	}
	check(addr)
	stop()
	first := logs.String()
	for _, want := range []string{`queue declared" queue=emails`, `queue declared" queue=reports`, `schedule declared" schedule=nightly-report`} {
		if !strings.Contains(first, want) {
			t.Errorf("the first start's log lacks %q:\n%s", want, first)
		}
	}

	addr, logs, stop = start()
	check(addr)
	stop()
	second := logs.String()
	for _, want := range []string{`queue as declared" queue=emails`, `queue as declared" queue=reports`, `schedule as declared" schedule=nightly-report`} {
		if !strings.Contains(second, want) {
			t.Errorf("the restart's log lacks %q:\n%s", want, second)
		}
	}
	if strings.Contains(second, "changed") || strings.Contains(second, "config: queue declared") {
		t.Errorf("a restart with the same file changed something:\n%s", second)
	}

	// A changed setting is applied and its difference logged.
	changed := strings.Replace(declaredConfig, "max_in_flight: 4", "max_in_flight: 8", 1)
	if err := os.WriteFile(path, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	_, logs, stop = start()
	stop()
	if !strings.Contains(logs.String(), `queue changed" queue=emails changes="max_in_flight: 4 -> 8"`) {
		t.Errorf("the change was not logged:\n%s", logs)
	}
}

// A config file's type mistakes are said in words, not Go type names.
func TestConfigErrorsSayWhatIsWanted(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ yaml, want string }{
		{"just text", "where a mapping of settings (key: value) is wanted"},
		{"shutdown_timeout: soon", "where a duration such as 30s is wanted"},
		{"queues:\n  q:\n    tiers: many", "where a whole number is wanted"},
		{"queues:\n  q:\n    colour: red", "field colour not found here"},
	} {
		_, err := decodeServeConfig([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "cli.") || strings.Contains(err.Error(), "broker.") {
			t.Errorf("%q: %v, want %q and no Go type name", c.yaml, err, c.want)
		}
	}
}

// The admin command line declares queues and schedules, publishes test
// jobs (delayed too), lists them in every state, runs a delayed one now
// and finds a job by id alone, its JSON payload indented.
func TestAdminDeclaresPublishesAndRunsNow(t *testing.T) {
	t.Parallel()
	addr, cl := adminBroker(t)
	out := mustAdmin(t, addr, "declare-queue", "emails", "policy=weighted", "tiers=3", "weights=5,3,1", "max_in_flight=4", "lease=1m", "keep_done=10")
	if !strings.Contains(out, "declared emails: policy weighted, 3 tiers, max in flight 4") {
		t.Errorf("declare-queue said %q", out)
	}
	if _, err := admin(t, addr, "declare-queue", "emails", "colour=red"); err == nil || !strings.Contains(err.Error(), "colour") {
		t.Errorf("an unknown setting: %v", err)
	}
	out = mustAdmin(t, addr, "publish", "emails", "job_type=welcome", `payload={"to": "ann"}`, "delay=10m", "count=2")
	ids := strings.Fields(out[strings.Index(out, ": ")+2:])
	if !strings.HasPrefix(out, "published 2 to emails, due in 10m0s") || len(ids) != 2 {
		t.Fatalf("publish said %q", out)
	}
	jobs := mustAdmin(t, addr, "jobs", "emails")
	if !strings.Contains(jobs, "delayed and retry-pending (2 of 2 shown") || row(t, jobs, ids[0])[1] != "scheduled" {
		t.Errorf("jobs:\n%s", jobs)
	}
	if out := mustAdmin(t, addr, "run-now", "emails", ids[0]); out != "1 delayed jobs of emails run now\n" {
		t.Errorf("run-now said %q", out)
	}
	job := mustAdmin(t, addr, "job", ids[0])
	if r := row(t, job, "state"); r[1] != "waiting" || !strings.Contains(job, "13 bytes, JSON") || !strings.Contains(job, "{\n  \"to\": \"ann\"\n}") {
		t.Errorf("job by id alone:\n%s", job)
	}
	out = mustAdmin(t, addr, "declare-schedule", "hourly", "queue=emails", "every=1h", "job_type=digest", "headers.team=ops")
	if !strings.HasPrefix(out, "declared schedule hourly on emails: next tick ") {
		t.Errorf("declare-schedule said %q", out)
	}
	ss, err := cl.ListSchedules(t.Context())
	if err != nil || len(ss) != 1 || ss[0].GetEvery().AsDuration() != time.Hour || ss[0].GetHeaders()["team"] != "ops" {
		t.Errorf("schedules %v, %v", ss, err)
	}
	// -json: snake_case, and 64-bit counts are numbers.
	var q struct {
		Queues []struct {
			Name    string `json:"name"`
			Delayed int    `json:"delayed"`
			Ready   int    `json:"ready"`
		} `json:"queues"`
	}
	if err := json.Unmarshal([]byte(mustAdmin(t, addr, "queues", "-json")), &q); err != nil || len(q.Queues) != 1 || q.Queues[0].Delayed != 1 || q.Queues[0].Ready != 1 {
		t.Errorf("queues -json: %+v, %v", q, err)
	}
}

// serve -h names each flag's type, as admin's and sidecar's do; sidecar
// -h lists its old flag names in one line, not as flags of their own.
func TestHelpShowsTypesAndHidesOldNames(t *testing.T) {
	t.Parallel()
	var serveHelp bytes.Buffer
	if _, err := loadServeConfig([]string{"-h"}, func(string) string { return "" }, &serveHelp); err == nil {
		t.Fatal("serve -h: no error")
	}
	for _, want := range []string{"-lease duration", "-max-attempts int", "-grpc-addr string", "-memory\n"} {
		if !strings.Contains(serveHelp.String(), want) {
			t.Errorf("serve -h lacks %q", want)
		}
	}
	if strings.Contains(serveHelp.String(), " value\n") {
		t.Errorf("serve -h still shows a flag's type as value:\n%s", serveHelp.String())
	}
	var sidecarHelp bytes.Buffer
	_ = runSidecar(t.Context(), []string{"-h"}, &bytes.Buffer{}, &sidecarHelp)
	h := sidecarHelp.String()
	if strings.Contains(h, "  -listen") || strings.Contains(h, "  -http string") || !strings.Contains(h, "Old flag names, still accepted: -http (-http-addr), -listen (-grpc-addr)") {
		t.Errorf("sidecar -h:\n%s", h)
	}
}
