package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/auth/authtest"
)

// admin runs `harbinger admin` against addr and returns what it printed
// and its error.
func admin(t *testing.T, addr string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := runAdmin(t.Context(), append([]string{"-addr", addr}, args...), &out, io.Discard)
	return out.String(), err
}

func mustAdmin(t *testing.T, addr string, args ...string) string {
	t.Helper()
	out, err := admin(t, addr, args...)
	if err != nil {
		t.Fatalf("admin %v: %v", args, err)
	}
	return out
}

// adminBroker starts a memory-mode serve for the test and returns its
// address and a client of it; both stop when the test ends.
func adminBroker(t *testing.T) (string, *client.Client) {
	t.Helper()
	addr, stop := runServeFor(t, ServeConfig{Memory: true})
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	cl, err := client.Dial(t.Context(), addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return addr, cl
}

// firstDead is the id of the first dead letter in admin dead's table.
func firstDead(t *testing.T, table string) string {
	t.Helper()
	lines := strings.Split(table, "\n")
	if len(lines) < 2 || len(strings.Fields(lines[1])) == 0 {
		t.Fatalf("no dead letter in:\n%s", table)
	}
	return strings.Fields(lines[1])[0]
}

// row returns the table row whose first column is first.
func row(t *testing.T, table, first string) []string {
	t.Helper()
	for line := range strings.Lines(table) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == first {
			return f
		}
	}
	t.Fatalf("no row %q in:\n%s", first, table)
	return nil
}

// An operator's session against a real broker: list queues, pause and
// resume, look at dead letters and requeue them, cancel a job, purge
// (only with the name typed again), see what the predictor learned; and
// mistakes refused with a message that says what to do.
func TestAdminCommands(t *testing.T) {
	t.Parallel()
	addr, cl := adminBroker(t)
	ctx := t.Context()
	payload := bytes.Repeat([]byte("ü\xff"), 2048) // 6 KiB, invalid UTF-8 inside
	var msgs []*client.Message
	for i := range 6 {
		msgs = append(msgs, &client.Message{Queue: "mail", Producer: "web", JobType: []string{"émail ✓", "digest"}[i%2], Payload: payload})
	}
	if _, err := cl.Publish(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.DeclareQueue(ctx, "reports", &pb.QueueConfig{MaxInFlight: 3}); err != nil {
		t.Fatal(err)
	}
	reportIDs, err := cl.Publish(ctx, &client.Message{Queue: "reports", Producer: "cron", JobType: "monthly"})
	if err != nil {
		t.Fatal(err)
	}

	out := mustAdmin(t, addr, "queues")
	if !strings.HasPrefix(out, "QUEUE") || !strings.Contains(out, "OLDEST WAIT") {
		t.Fatalf("queues printed no header:\n%s", out)
	}
	if r := row(t, out, "mail"); r[2] != "6" || r[7] == "-" {
		t.Errorf("mail row %q: want 6 ready and an oldest wait", r)
	}
	if r := row(t, out, "reports"); r[3] != "0/3" {
		t.Errorf("reports row %q: want 0/3 in flight (its limit is 3)", r)
	}
	var listed struct {
		Queues []struct {
			Name       string `json:"name"`
			Ready      int    `json:"ready"` // a number, as the dashboard's API has it
			OldestWait string `json:"oldest_wait"`
		} `json:"queues"`
	}
	if err := json.Unmarshal([]byte(mustAdmin(t, addr, "queues", "-json")), &listed); err != nil || len(listed.Queues) != 2 {
		t.Fatalf("queues -json: %+v, %v", listed, err)
	}
	for _, q := range listed.Queues {
		if d, err := time.ParseDuration(q.OldestWait); err != nil || d < 0 || d > time.Minute {
			t.Errorf("%s's oldest wait %q: %v", q.Name, q.OldestWait, err)
		}
	}

	// Flags after the command work as before it.
	if out := mustAdmin(t, addr, "pause", "mail"); !strings.Contains(out, "paused mail: 6 ready") {
		t.Errorf("pause said %q", out)
	}
	if r := row(t, mustAdmin(t, addr, "queues"), "mail"); r[len(r)-1] != "paused" {
		t.Errorf("mail row after pause: %q", r)
	}
	mustAdmin(t, addr, "resume", "mail")

	// Two jobs dead-lettered by a handler whose error spans lines, the
	// other four acked.
	wctx, cancel := context.WithCancel(ctx)
	var handled atomic.Int32
	worker := make(chan error, 1)
	go func() {
		worker <- cl.RunWorker(wctx, client.WorkerConfig{Queue: "mail"}, func(_ context.Context, d *client.Delivery) error {
			if handled.Add(1) <= 2 {
				return fmt.Errorf("%w: bad address\n\tat line 2", client.ErrDeadLetter)
			}
			return nil
		})
	}()
	var table, keys string
	for {
		// The worker's acks and nacks land after its handlers return: ask
		// until all six have.
		table, keys = mustAdmin(t, addr, "dead", "mail"), mustAdmin(t, addr, "keys", "mail")
		if strings.Count(table, "bad address") == 2 && strings.Count(keys, "web") == 2 && row(t, mustAdmin(t, addr, "queues"), "mail")[3] == "0" {
			break
		}
	}
	cancel()
	<-worker
	for line := range strings.Lines(table) {
		if strings.Contains(line, "bad address") && !strings.HasSuffix(line, "bad address  at line 2\n") {
			t.Errorf("a dead letter's reason is not on its own line: %q", line)
		}
	}
	if r := row(t, keys, "web"); len(r) < 8 {
		t.Errorf("keys row %q", r)
	}
	// Both keys have fewer than three observations: cold, and so long
	// under the default policy.
	if n := strings.Count(keys, "cold,long"); n != 2 {
		t.Errorf("keys marked cold,long: %d, want 2:\n%s", n, keys)
	}
	if !strings.Contains(keys, "émail ✓") {
		t.Errorf("keys lost the non-ASCII job type:\n%s", keys)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"requeue", "mail"}, "--all"},
		{[]string{"requeue", "mail", "x", "--all"}, "not both"},
		{[]string{"purge", "mail"}, "--confirm mail"},
		{[]string{"purge", "mail", "--confirm", "reports"}, "--confirm mail"},
		{[]string{"cancel", "mail"}, "want QUEUE ID"},
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"queues", "-limit", "0"}, "-limit must be positive"},
		{[]string{"resume", "no-such-queue"}, "NotFound"},
	} {
		if _, err := admin(t, addr, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("admin %v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
	if out := mustAdmin(t, addr, "requeue", "mail", "--all"); out != "requeued 2 dead letters of mail\n" {
		t.Errorf("requeue said %q", out)
	}
	// One job by id: a waiting one, then (below) gone once cancelled.
	job := mustAdmin(t, addr, "job", "reports", reportIDs[0])
	for _, want := range [][]string{{"state", "waiting"}, {"producer", "cron"}, {"job", "type", "monthly"}, {"attempts", "0", "of", "5"}, {"cold", "yes:"}} {
		if r := row(t, job, want[0]); !slices.Equal(r[:len(want)], want) {
			t.Errorf("job row %q, want %q", r, want)
		}
	}
	var info struct {
		State   string `json:"state"`
		Payload []byte `json:"payload"`
	}
	// The dead letter requeued above: in line again, its payload whole.
	if err := json.Unmarshal([]byte(mustAdmin(t, addr, "job", "mail", "-json", firstDead(t, table))), &info); err != nil || info.State != "waiting" || !bytes.Equal(info.Payload, payload) {
		t.Errorf("job -json of a requeued dead letter: state %q, %d bytes of payload (want %d), %v", info.State, len(info.Payload), len(payload), err)
	}
	if out := mustAdmin(t, addr, "cancel", "reports", reportIDs[0]); !strings.Contains(out, "(it was waiting)") {
		t.Errorf("cancel said %q", out)
	}
	if _, err := admin(t, addr, "job", "reports", reportIDs[0]); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("job of a cancelled job: %v", err)
	}
	out = mustAdmin(t, addr, "purge", "mail", "--confirm", "mail")
	if !strings.HasPrefix(out, "purged mail: ") {
		t.Errorf("purge said %q", out)
	}
	if r := row(t, mustAdmin(t, addr, "queues"), "mail"); r[2] != "0" || r[7] != "-" {
		t.Errorf("mail row after purge: %q: want 0 ready and no oldest wait", r)
	}

	// delete-queue: the name typed again, refused while the queue holds a
	// job (saying how many and how to delete anyway), then forced.
	if _, err := cl.Publish(ctx, &client.Message{Queue: "reports", JobType: "yearly", Payload: payload}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin(t, addr, "delete-queue", "reports"); err == nil || !strings.Contains(err.Error(), "--confirm reports") {
		t.Errorf("delete-queue without --confirm: %v", err)
	}
	if _, err := admin(t, addr, "delete-queue", "reports", "--confirm", "reports"); err == nil ||
		!strings.Contains(err.Error(), "1 waiting") || !strings.Contains(err.Error(), "force") {
		t.Errorf("delete-queue of a queue with a waiting job: %v", err)
	}
	if out := mustAdmin(t, addr, "delete-queue", "reports", "--confirm", "reports", "--force"); out != "deleted reports: dropped 1 waiting, 0 delayed, 0 running and 0 dead-lettered jobs; 0 consumers stopped\n" {
		t.Errorf("delete-queue --force said %q", out)
	}
	if out := mustAdmin(t, addr, "delete-queue", "mail", "--confirm", "mail", "-json"); !strings.Contains(out, "{") {
		t.Errorf("delete-queue -json said %q", out)
	}
	if out := mustAdmin(t, addr, "queues"); strings.Contains(out, "reports") || strings.Contains(out, "mail") {
		t.Errorf("queues after deleting both:\n%s", out)
	}
	if _, err := admin(t, addr, "delete-queue", "reports", "--confirm", "reports"); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("deleting a deleted queue: %v", err)
	}
}

// admin over TLS with mutual TLS and tokens: the right CA, certificate and
// token get in; a wrong token gets the broker's Unauthenticated, and no
// TLS gets nothing.
func TestAdminTLSAndToken(t *testing.T) {
	t.Parallel()
	certs := authtest.NewCerts(t)
	path, toks := authtest.TokenFile(t, map[string][]string{"ops": {"admin"}, "reader": {"read"}})
	l := startLive(t, ServeConfig{TLSCert: certs.ServerCert, TLSKey: certs.ServerKey, TLSClientCA: certs.CA, Tokens: path})
	tlsArgs := []string{"-tls-ca", certs.CA, "-tls-cert", certs.ClientCert, "-tls-key", certs.ClientKey}
	if out, err := admin(t, l.grpc, append(tlsArgs, "-token", toks["reader"], "queues")...); err != nil || !strings.HasPrefix(out, "QUEUE") {
		t.Fatalf("queues with a read token: %q, %v", out, err)
	}
	if _, err := admin(t, l.grpc, append(tlsArgs, "-token", toks["reader"], "pause", "q")...); err == nil || !strings.Contains(err.Error(), "PermissionDenied") {
		t.Errorf("pause with a read token: %v, want PermissionDenied", err)
	}
	if _, err := admin(t, l.grpc, append(tlsArgs, "-token", "not-a-token", "queues")...); err == nil || !strings.Contains(err.Error(), "Unauthenticated") {
		t.Errorf("a wrong token: %v, want Unauthenticated", err)
	}
	if _, err := admin(t, l.grpc, "-timeout", "2s", "-token", toks["ops"], "queues"); err == nil || !strings.Contains(err.Error(), "add -tls") {
		t.Errorf("admin without TLS against a TLS broker: %v, want a hint to add -tls", err)
	}
	plain := startLive(t, ServeConfig{})
	if _, err := admin(t, plain.grpc, "-timeout", "2s", "-tls", "queues"); err == nil || !strings.Contains(err.Error(), "does not serve TLS") {
		t.Errorf("admin with TLS against a plaintext broker: %v, want a hint to drop -tls", err)
	}
	if _, err := admin(t, l.grpc, "-tls-cert", certs.ClientCert, "queues"); err == nil || !strings.Contains(err.Error(), "go together") {
		t.Errorf("-tls-cert without -tls-key: %v", err)
	}
}

// HARBINGER_ADDR and HARBINGER_TOKEN stand in for -addr and -token, so a
// token need not show in ps.
func TestAdminFromEnvironment(t *testing.T) {
	path, toks := authtest.TokenFile(t, map[string][]string{"ops": {"admin"}})
	l := startLive(t, ServeConfig{Tokens: path})
	t.Setenv("HARBINGER_ADDR", l.grpc)
	t.Setenv("HARBINGER_TOKEN", toks["ops"])
	var out bytes.Buffer
	if err := runAdmin(t.Context(), []string{"queues"}, &out, io.Discard); err != nil || !strings.HasPrefix(out.String(), "QUEUE") {
		t.Fatalf("queues from the environment: %q, %v", out.String(), err)
	}
	t.Setenv("HARBINGER_TOKEN", "wrong")
	if err := runAdmin(t.Context(), []string{"queues"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "Unauthenticated") {
		t.Errorf("a wrong token from the environment: %v", err)
	}
}

// Schedules from the command line: listed with when they fire, paused,
// resumed, and deleted only with the name typed again.
func TestAdminSchedules(t *testing.T) {
	t.Parallel()
	addr, cl := adminBroker(t)
	for _, sc := range []*pb.Schedule{
		{Name: "nightly-report", Queue: "reports", Cron: "30 2 * * *", TimeZone: "Europe/Zurich", JobType: "rapport ✓"},
		{Name: "sweep", Queue: "maintenance", Every: durationpb.New(time.Hour), JobType: "sweep"},
	} {
		if _, err := cl.DeclareSchedule(t.Context(), sc); err != nil {
			t.Fatalf("declare %s: %v", sc.Name, err)
		}
	}
	out := mustAdmin(t, addr, "schedules")
	if !strings.Contains(out, "cron 30 2 * * * Europe/Zurich") || !strings.Contains(out, "rapport ✓") || !strings.Contains(out, "every 1h0m0s") {
		t.Errorf("schedules:\n%s", out)
	}
	if r := row(t, out, "sweep"); r[len(r)-1] == "paused" {
		t.Errorf("sweep listed paused before it was: %q", r)
	}
	if out := mustAdmin(t, addr, "pause-schedule", "sweep"); out != "paused schedule sweep\n" {
		t.Errorf("pause-schedule said %q", out)
	}
	if r := row(t, mustAdmin(t, addr, "schedules"), "sweep"); r[len(r)-1] != "paused" {
		t.Errorf("sweep row after pause: %q", r)
	}
	mustAdmin(t, addr, "resume-schedule", "sweep")
	if _, err := admin(t, addr, "delete-schedule", "sweep"); err == nil || !strings.Contains(err.Error(), "--confirm sweep") {
		t.Errorf("delete-schedule without --confirm: %v", err)
	}
	mustAdmin(t, addr, "delete-schedule", "sweep", "--confirm", "sweep")
	if out := mustAdmin(t, addr, "schedules"); strings.Contains(out, "sweep") || !strings.Contains(out, "nightly-report") {
		t.Errorf("after deleting sweep:\n%s", out)
	}
	if _, err := admin(t, addr, "pause-schedule", "sweep"); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("pausing a deleted schedule: %v", err)
	}
}

// jobs shows what waits, in the order it would run, and what runs, with
// the worker that holds it.
func TestAdminJobs(t *testing.T) {
	t.Parallel()
	addr, cl := adminBroker(t)
	ctx := t.Context()
	ids, err := cl.Publish(ctx,
		&client.Message{Queue: "work", Producer: "web", JobType: "résumé", Payload: bytes.Repeat([]byte{0xff}, 4096)},
		&client.Message{Queue: "work", Producer: "web", JobType: "thumb"},
		&client.Message{Queue: "work", Producer: "web", JobType: "thumb"})
	if err != nil {
		t.Fatal(err)
	}
	out := mustAdmin(t, addr, "jobs", "work")
	if !strings.HasPrefix(out, "waiting (3 of 3 shown") || !strings.Contains(out, "running (0 of 0 shown") {
		t.Fatalf("jobs before any worker:\n%s", out)
	}
	for i := range 3 {
		if r := row(t, out, strconv.Itoa(i+1)); !slices.Contains(ids, r[1]) {
			t.Errorf("waiting row %d %q names no published job", i+1, r)
		}
	}

	release := make(chan struct{})
	wctx, cancel := context.WithCancel(ctx)
	worker := make(chan error, 1)
	go func() {
		worker <- cl.RunWorker(wctx, client.WorkerConfig{Queue: "work", Name: "worker-ü"}, func(context.Context, *client.Delivery) error {
			<-release
			return nil
		})
	}()
	var js struct {
		Waiting []struct{ ID string } `json:"waiting"`
		Running []struct {
			ID, Consumer string
		} `json:"running"`
	}
	for len(js.Running) == 0 {
		// Asked until the worker holds its first job (each answer is a signal).
		if err := json.Unmarshal([]byte(mustAdmin(t, addr, "jobs", "work", "-json")), &js); err != nil {
			t.Fatal(err)
		}
	}
	if len(js.Waiting) != 2 || js.Running[0].Consumer != "worker-ü" || !slices.Contains(ids, js.Running[0].ID) {
		t.Errorf("jobs -json with one running: %+v", js)
	}
	if out := mustAdmin(t, addr, "jobs", "work", "--limit", "1"); !strings.HasPrefix(out, "waiting (1 of 2 shown") {
		t.Errorf("jobs --limit 1:\n%s", out)
	}
	close(release)
	cancel()
	<-worker
	if _, err := admin(t, addr, "jobs", "nowhere"); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("jobs of a queue that does not exist: %v", err)
	}
}

// -limit goes to the broker as a uint32 it caps: 2^32+1 was one row, 2^32
// the default, 5000 jobs a thousand, all without a word. Now a number the
// command cannot show is refused.
func TestAdminLimitInRange(t *testing.T) {
	t.Parallel()
	addr, cl := adminBroker(t)
	if _, err := cl.Publish(t.Context(), &client.Message{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"dead", "q", "-limit", "4294967297"},
		{"keys", "q", "-limit", "4294967296"},
		{"keys", "q", "-limit", "10001"},
		{"jobs", "q", "-limit", "1001"},
		{"jobs", "q", "-limit", "-1"},
	} {
		if _, err := admin(t, addr, args...); err == nil || !strings.Contains(err.Error(), "-limit must be positive and at most") {
			t.Errorf("admin %q: %v, want -limit refused", args, err)
		}
	}
	mustAdmin(t, addr, "keys", "q", "-limit", "10000")
	mustAdmin(t, addr, "jobs", "q", "-limit", "1000")
}

// "--" ends the flags for every argument after it, so a queue, schedule
// or id that starts with "-" can be named.
func TestAdminArgsAfterDoubleDash(t *testing.T) {
	t.Parallel()
	addr, cl := adminBroker(t)
	ids, err := cl.Publish(t.Context(), &client.Message{Queue: "-dash"}, &client.Message{Queue: "-dash"})
	if err != nil {
		t.Fatal(err)
	}
	if out := mustAdmin(t, addr, "cancel", "--", "-dash", ids[0]); !strings.Contains(out, "(it was waiting)") {
		t.Errorf("cancel -- -dash ID: %q", out)
	}
	if out, err := admin(t, addr, "drop", "--", "-dash", "-not-an-id"); err != nil || !strings.HasPrefix(out, "dropped 0 dead letters of -dash") {
		t.Errorf("drop -- -dash -not-an-id: %q, %v", out, err)
	}
}

// requeue and drop say when ids they were given are not dead letters of
// the queue: the broker only counts what it found, and "requeued 4" of
// five named reads like success.
func TestAdminDeadIDsNotFound(t *testing.T) {
	t.Parallel()
	addr, cl := adminBroker(t)
	if _, err := cl.Publish(t.Context(), &client.Message{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"requeue", "q", "nope", "nope"}, "requeued 0 dead letters of q; 1 of the 1 ids named are not among its dead letters (admin dead q lists them)\n"},
		{[]string{"drop", "q", "a", "b"}, "dropped 0 dead letters of q; 2 of the 2 ids named are not among its dead letters (admin dead q lists them)\n"},
		{[]string{"drop", "q", "--all"}, "dropped 0 dead letters of q\n"},
	} {
		if out := mustAdmin(t, addr, tc.args...); out != tc.want {
			t.Errorf("admin %q said %q, want %q", tc.args, out, tc.want)
		}
	}
}

// A job type with a newline, a tab and an escape stays in its row and
// column, its characters shown, not acted on by the terminal.
func TestAdminTablesEscapeControlCharacters(t *testing.T) {
	t.Parallel()
	addr, cl := adminBroker(t)
	ids, err := cl.Publish(t.Context(), &client.Message{Queue: "q", Producer: "web\tapp", JobType: "a\nb\tc\x1b[31m\u202e ✓"})
	if err != nil {
		t.Fatal(err)
	}
	out := mustAdmin(t, addr, "jobs", "q")
	if strings.ContainsAny(out, "\t\x1b\u202e") {
		t.Errorf("jobs printed a tab, an escape or an override:\n%q", out)
	}
	var line string
	for l := range strings.Lines(out) {
		if strings.Contains(l, ids[0]) {
			line = l
		}
	}
	if want := `web\tapp  a\nb\tc\x1b[31m\u202e ✓`; !strings.Contains(line, want) {
		t.Errorf("the job's row %q lacks %q", line, want)
	}
}

func TestCell(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"émail ✓ 日本":        "émail ✓ 日本",
		"a\nb\r\tc":         `a\nb\r\tc`,
		"\x1b]0;owned\x07":  `\x1b]0;owned\a`,
		"abc\u202edef":      `abc\u202edef`,
		"zero\u200bwidth":   `zero\u200bwidth`,
		"\u0085next\x7fdel": `\u0085next\x7fdel`,
	} {
		if got := cell(in); got != want {
			t.Errorf("cell(%q) = %s, want %s", in, got, want)
		}
	}
}

// admin job on a job that ended, on a queue that keeps its ended jobs:
// done, when and how long it took, and nothing it no longer has.
func TestAdminJobEnded(t *testing.T) {
	t.Parallel()
	addr, cl := adminBroker(t)
	ctx := t.Context()
	if _, err := cl.DeclareQueue(ctx, "kept", &pb.QueueConfig{KeepDone: 100}); err != nil {
		t.Fatal(err)
	}
	ids, err := cl.Publish(ctx, &client.Message{Queue: "kept", Producer: "wéb", JobType: "rapport", Payload: bytes.Repeat([]byte("x"), 4<<10)})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	ran := make(chan struct{})
	worker := make(chan error, 1)
	go func() {
		worker <- cl.RunWorker(wctx, client.WorkerConfig{Queue: "kept"}, func(context.Context, *client.Delivery) error {
			close(ran)
			return nil
		})
	}()
	<-ran
	cancel() // a stopping worker sends its last ack and waits for the broker to read it
	if err := <-worker; err != nil {
		t.Fatal(err)
	}
	out := mustAdmin(t, addr, "job", "kept", ids[0])
	for _, want := range [][]string{{"state", "done"}, {"producer", "wéb"}, {"attempts", "1"}} {
		if r := row(t, out, want[0]); !slices.Equal(r, want) {
			t.Errorf("row %q, want %q", r, want)
		}
	}
	if r := row(t, out, "took"); len(r) != 2 {
		t.Errorf("took row %q", r)
	}
	if strings.Contains(out, "payload") || strings.Contains(out, "predicted") {
		t.Errorf("admin job shows what an ended job no longer has:\n%s", out)
	}
}

// admin groups shows a queue's groups under its limits as the broker
// counts them: running against the limit, waiting, throttled; and says
// plainly when a queue declares no limits.
func TestAdminGroups(t *testing.T) {
	t.Parallel()
	addr, cl := adminBroker(t)
	ctx := t.Context()
	mustAdmin(t, addr, "declare-queue", "work", "group_by=tenant", "limits=tenant=2")
	tenants := map[string]int{"zürich": 5, "東京": 3}
	var msgs []*client.Message
	for tenant, n := range tenants {
		for range n {
			msgs = append(msgs, &client.Message{Queue: "work", Producer: "web", JobType: "report",
				Payload: bytes.Repeat([]byte{0xfe}, 4096), Headers: map[string]string{"tenant": tenant}})
		}
	}
	if _, err := cl.Publish(ctx, msgs...); err != nil {
		t.Fatal(err)
	}

	// Four workers that hold their jobs: at most two of each tenant run.
	release := make(chan struct{})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	worker := make(chan error, 4)
	for i := range 4 {
		go func() {
			worker <- cl.RunWorker(wctx, client.WorkerConfig{Queue: "work", Name: fmt.Sprint("w", i)}, func(context.Context, *client.Delivery) error {
				<-release
				return nil
			})
		}()
	}
	var resp pb.ListGroupsResponse
	for {
		// Asked until the workers hold four jobs (each answer is a signal).
		if err := protojson.Unmarshal([]byte(mustAdmin(t, addr, "groups", "work", "-json")), &resp); err != nil {
			t.Fatal(err)
		}
		running := uint64(0)
		for _, g := range resp.Groups {
			running += g.Running
		}
		if running == 4 {
			break
		}
	}
	if len(resp.Groups) != 2 || resp.GroupCount != 2 {
		t.Fatalf("groups -json: %v", &resp)
	}
	for _, g := range resp.Groups {
		if g.Running != 2 || g.Limit != 2 || g.Weight != 1 || g.Waiting != uint64(tenants[g.Name]-2) || g.Throttled == 0 {
			t.Errorf("group %q: %v, want 2 running of limit 2 and %d waiting", g.Name, g, tenants[g.Name]-2)
		}
	}
	table := mustAdmin(t, addr, "groups", "work")
	t.Logf("admin groups work:\n%s", table)
	if r := row(t, table, "zürich"); r[2] != "2/2" || r[3] != "3" {
		t.Errorf("zürich's row %q, want 2/2 running and 3 waiting", r)
	}
	if r := row(t, table, "東京"); r[2] != "2/2" || r[3] != "1" {
		t.Errorf("東京's row %q, want 2/2 running and 1 waiting", r)
	}
	if out := mustAdmin(t, addr, "groups", "work", "--limit", "1"); !strings.Contains(out, "(1 of 2 groups, the busiest") {
		t.Errorf("groups --limit 1:\n%s", out)
	}
	close(release)
	cancel()
	for range 4 {
		<-worker
	}

	if _, err := cl.Publish(ctx, &client.Message{Queue: "plain"}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin(t, addr, "groups", "plain"); err == nil || !strings.Contains(err.Error(), "FailedPrecondition") || !strings.Contains(err.Error(), "declares no limits") {
		t.Errorf("groups of a queue without limits: %v", err)
	}
	if _, err := admin(t, addr, "groups", "nowhere"); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("groups of a queue that does not exist: %v", err)
	}
}
