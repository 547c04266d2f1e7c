package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/auth"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/server"
	"github.com/harbinger-mq/harbinger/internal/tlscheck"
)

func init() {
	register("admin", "operate a running broker: list queues, pause, resume, purge, delete, dead letters, cancel, keys", runAdmin)
}

// adminCommands are admin's subcommands, in the order --help lists them.
var adminCommands = []struct {
	name, args, summary string
	run                 func(ctx context.Context, c *client.Client, a adminArgs) error
}{
	{"declare-queue", "QUEUE [KEY=VALUE...]", "create or reconfigure a queue: policy=, tiers=, weights=5,3,1, max_in_flight=, max_depth=, max_attempts=, lease=, default_ttl=, keep_done=, aging=, retry_base=, retry_max=, shadow=, group_by=, group_weights.NAME=, limits=tenant=5,job_type:export=2, rate_limits=producer:crawler=10/s:20, reserve=, no_reserve=, reserve_above=, reserve_window=, credit=, no_credit= (a config file's queue keys)", adminDeclareQueue},
	{"publish", "QUEUE [KEY=VALUE...]", "publish test jobs: job_type=, producer=, payload=, headers.K=V, delay=, ttl=, max_attempts=, count=", adminPublish},
	{"queues", "", "every queue: policy, ready, in flight (/ its max_in_flight), delayed, dead, consumers, the oldest waiting job's wait, run-time p50/p99 (measured within 1%), paused", adminQueues},
	{"pause", "QUEUE", "stop delivering a queue's jobs (publishes are still taken)", adminPause},
	{"resume", "QUEUE", "deliver a paused queue's jobs again", adminResume},
	{"purge", "QUEUE --confirm QUEUE", "drop every waiting job of a queue (not those in flight or delayed)", adminPurge},
	{"delete-queue", "QUEUE --confirm QUEUE", "delete a queue; refused while it holds jobs, unless --force drops them all", adminDeleteQueue},
	{"dead", "QUEUE [--limit N]", "a queue's dead letters, oldest first: id, producer, job type, attempts, when and why", adminDead},
	{"requeue", "QUEUE (ID... | --all)", "put dead letters back in line as new jobs", adminRequeue},
	{"drop", "QUEUE (ID... | --all)", "delete dead letters for good", adminDrop},
	{"jobs", "QUEUE [--limit N] [--offset N]", "a queue's jobs in every state: waiting in the order they would run now, running (longest first), delayed and retry-pending (soonest due first), dead, and the ended ones a queue with keep_done keeps", adminJobs},
	{"run-now", "QUEUE ID...", "make delayed or retry-pending jobs due now", adminRunNow},
	{"job", "[QUEUE] ID", "one job, in QUEUE or, without it, in whichever queue holds it: waiting, delayed, running or dead (or done or cancelled, on a queue with keep_done), and what the broker knows of it (-json adds its payload)", adminJob},
	{"cancel", "QUEUE ID", "cancel a job: a waiting or delayed one is removed, a running one's worker is told", adminCancel},
	{"keys", "QUEUE [--limit N]", "what the queue's predictor learned per key, busiest first", adminKeys},
	{"groups", "QUEUE [--limit N]", "the queue's groups under its limits and fair shares: weight, running (/ limit), waiting, share of the worker time in the last minute, throttled jobs", adminGroups},
	{"history", "QUEUE [--since 24h] > FILE", "the queue's recorded history (settled deliveries: arrival, key, size hint, attempt, start, duration, outcome; never payloads) as a history file for harbinger sim --history (docs/history.md)", adminHistory},
	{"declare-schedule", "NAME queue=Q (cron=EXPR | every=D) [KEY=VALUE...]", "create or replace a schedule: time_zone=, job_type=, producer=, payload=, headers.K=V, catch_up=, paused=", adminDeclareSchedule},
	{"schedules", "", "periodic schedules: queue, when, job type, last and next tick (UTC), jobs fired, paused", adminSchedules},
	{"pause-schedule", "NAME", "stop a schedule's ticks", adminPauseSchedule(true)},
	{"resume-schedule", "NAME", "start a paused schedule's ticks again", adminPauseSchedule(false)},
	{"delete-schedule", "NAME --confirm NAME", "delete a schedule (the jobs it published stay)", adminDeleteSchedule},
}

// adminArgs are what a subcommand gets after the flags.
type adminArgs struct {
	pos     []string
	all     bool
	limit   int
	offset  int
	confirm string
	force   bool
	json    bool
	since   time.Duration
	out     io.Writer
}

func adminUsage(w io.Writer) {
	fmt.Fprintln(w, "Usage: harbinger admin [-addr HOST:PORT] [-token T] [-tls] [-tls-ca FILE] [-tls-cert FILE -tls-key FILE] [-timeout D] [-json] <command> [args]")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range adminCommands {
		fmt.Fprintf(w, "  %-16s %s\n  %-16s   %s\n", c.name, c.args, "", c.summary)
	}
	fmt.Fprintln(w, "\nFlags (before or after the command):")
}

func runAdmin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("admin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { adminUsage(stderr); fs.PrintDefaults() }
	addr := fs.String("addr", envOr("HARBINGER_ADDR", "127.0.0.1:7070"), "broker gRPC address (env HARBINGER_ADDR)")
	token := fs.String("token", "", "token, when the broker asks for one (env HARBINGER_TOKEN; a flag shows in ps, the variable does not)")
	tlsOn := fs.Bool("tls", false, "dial with TLS, verifying the broker against the system's roots (or -tls-ca)")
	tlsCA := fs.String("tls-ca", "", "PEM CA to verify the broker's TLS certificate with (implies -tls)")
	tlsCert := fs.String("tls-cert", "", "PEM client certificate, for a broker that asks for one (with -tls-key; implies -tls)")
	tlsKey := fs.String("tls-key", "", "PEM private key of -tls-cert")
	timeout := fs.Duration("timeout", 10*time.Second, "how long the command may take")
	asJSON := fs.Bool("json", false, "print the broker's answer as JSON instead of a table")
	limit := fs.Int("limit", server.DefaultListLimit, fmt.Sprintf("dead and keys: most rows shown, up to %d; jobs: of each list, up to %d", server.MaxListLimit, broker.MaxJobsListed))
	offset := fs.Int("offset", 0, "jobs: skip this many of each list, for the next page")
	all := fs.Bool("all", false, "requeue and drop: every dead letter of the queue")
	confirm := fs.String("confirm", "", "purge, delete-queue and delete-schedule: the name again")
	since := fs.Duration("since", 0, "history: the deliveries settled in this last window, e.g. 24h (default: all the broker keeps)")
	force := fs.Bool("force", false, "delete-queue: delete it even if it holds jobs, dropping every waiting, delayed, running and dead-lettered one")
	// Flags may come before and after the command and its arguments; "--"
	// ends them, so a name or id that starts with "-" can be given.
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return errUsage
		}
		if n := len(rest) - fs.NArg(); n > 0 && rest[n-1] == "--" {
			pos = append(pos, fs.Args()...)
			break
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(pos) == 0 {
		fs.Usage()
		return errUsage
	}
	i := -1
	for j, c := range adminCommands {
		if c.name == pos[0] {
			i = j
		}
	}
	if i < 0 {
		return fmt.Errorf("unknown command %q (harbinger admin -h lists them)", pos[0])
	}
	if *timeout <= 0 {
		return fmt.Errorf("-timeout must be positive, got %s", *timeout)
	}
	if *since < 0 {
		return fmt.Errorf("-since must be a positive duration, got %s", *since)
	}
	// The API's limit is a uint32 the broker caps: a larger number would
	// wrap (2^32 asks for the default, 2^32+1 for one row) or be cut
	// without a word.
	maxLimit := server.MaxListLimit
	if pos[0] == "jobs" {
		maxLimit = broker.MaxJobsListed
	}
	if *limit <= 0 || *limit > maxLimit {
		return fmt.Errorf("-limit must be positive and at most %d for %s, got %d", maxLimit, pos[0], *limit)
	}
	if *token == "" {
		*token = os.Getenv("HARBINGER_TOKEN")
	}
	// Admin calls fail at once, with a hint of their own (tlsHint), so the
	// client need not log that it cannot reach the broker.
	opts := []client.Option{client.WithLogger(slog.New(slog.DiscardHandler))}
	if *token != "" {
		opts = append(opts, client.WithToken(*token))
	}
	if (*tlsCert == "") != (*tlsKey == "") {
		return errors.New("-tls-cert and -tls-key go together")
	}
	if *tlsOn || *tlsCA != "" || *tlsCert != "" {
		tc, err := auth.ClientTLS{CAFile: *tlsCA, CertFile: *tlsCert, KeyFile: *tlsKey}.Config()
		if err != nil {
			return err
		}
		opts = append(opts, client.WithTLS(tc))
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c, err := client.Dial(ctx, *addr, opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	tlsOnOurs := *tlsOn || *tlsCA != "" || *tlsCert != ""
	return tlsHint(adminCommands[i].run(ctx, c, adminArgs{pos: pos[1:], all: *all, limit: *limit, offset: max(*offset, 0), confirm: *confirm, force: *force, json: *asJSON, since: *since, out: stdout}), tlsOnOurs)
}

// tlsHint adds to a connection error what most often causes it: a client
// and a broker that disagree on TLS. A TLS broker closes a plaintext
// connection before its HTTP/2 preface; a plaintext broker answers a TLS
// handshake with something that is not one.
func tlsHint(err error, tlsOn bool) error {
	if err == nil || status.Code(err) != codes.Unavailable {
		return err
	}
	switch {
	case !tlscheck.Mismatch(status.Convert(err).Message(), tlsOn):
		return err
	case tlsOn:
		return fmt.Errorf("%w (the broker does not serve TLS: drop -tls and the -tls-* flags)", err)
	default:
		return fmt.Errorf("%w (the broker closed the connection at once: if it serves TLS, add -tls, with -tls-ca for a private CA)", err)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// want checks the number of positional arguments.
func (a adminArgs) want(n int, usage string) error {
	if len(a.pos) != n {
		return fmt.Errorf("want %s, got %d argument(s): %q", usage, len(a.pos), a.pos)
	}
	return nil
}

// printJSON prints m as indented JSON, every field shown, in the shape of
// the dashboard's JSON API: snake_case names (the proto's own), and 64-bit
// counts as numbers, not the strings protojson makes of them. Timestamps
// are RFC 3339 text, durations text such as "1.5s", bytes base64.
func (a adminArgs) printJSON(m proto.Message) error {
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return err
	}
	numbers(v, m.ProtoReflect().Descriptor())
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(a.out, string(out))
	return err
}

// numbers turns the 64-bit integers protojson wrote as strings in v, a
// decoded message of md, back into numbers.
func numbers(v any, md protoreflect.MessageDescriptor) {
	obj, ok := v.(map[string]any)
	if !ok || strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		return
	}
	fields := md.Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		val, ok := obj[string(f.Name())]
		if !ok {
			continue
		}
		fix := func(x any) any {
			switch f.Kind() {
			case protoreflect.Int64Kind, protoreflect.Uint64Kind, protoreflect.Sint64Kind,
				protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
				if s, ok := x.(string); ok {
					return json.Number(s)
				}
			case protoreflect.MessageKind:
				numbers(x, f.Message())
			}
			return x
		}
		switch {
		case f.IsList():
			if l, ok := val.([]any); ok {
				for j := range l {
					l[j] = fix(l[j])
				}
			}
		case f.IsMap():
			if mm, ok := val.(map[string]any); ok {
				vf := f.MapValue()
				for k, x := range mm {
					if vf.Kind() == protoreflect.MessageKind {
						numbers(x, vf.Message())
					} else if s, ok := x.(string); ok && (vf.Kind() == protoreflect.Int64Kind || vf.Kind() == protoreflect.Uint64Kind) {
						mm[k] = json.Number(s)
					}
				}
			}
		default:
			obj[string(f.Name())] = fix(val)
		}
	}
}

// table prints rows under header, aligned, every cell through cell.
func (a adminArgs) table(header string, rows [][]string) error {
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		for i, c := range r {
			fmt.Fprint(tw, cell(c))
			if i < len(r)-1 {
				fmt.Fprint(tw, "\t")
			}
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// cell shows text a broker kept (a producer, job type, consumer or
// schedule name may be any valid UTF-8) as it is, but for the characters a
// terminal acts on instead of showing: a newline or tab would break the
// table's rows and columns, an escape sequence could recolour or retitle
// the operator's terminal, and a bidirectional override reorders what
// follows. Those are written as Go escapes (\n, \x1b, \u202e).
func cell(s string) string {
	if !strings.ContainsFunc(s, unprintable) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unprintable(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func unprintable(r rune) bool { return r != ' ' && !unicode.IsPrint(r) }

// wait formats a wait as the dashboard does: milliseconds under a second,
// then seconds, minutes, hours.
func wait(d time.Duration) string {
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		return strconv.FormatFloat(d.Minutes(), 'f', 1, 64) + "m"
	}
	return strconv.FormatFloat(d.Hours(), 'f', 1, 64) + "h"
}

func adminQueues(ctx context.Context, c *client.Client, a adminArgs) error {
	if err := a.want(0, "no arguments"); err != nil {
		return err
	}
	qs, err := c.ListQueues(ctx)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(&pb.ListQueuesResponse{Queues: qs})
	}
	rows := make([][]string, 0, len(qs))
	for _, q := range qs {
		oldest := "-"
		if w := q.GetOldestWait(); w != nil {
			oldest = wait(w.AsDuration())
		}
		paused := ""
		if q.GetPaused() {
			paused = "paused"
		}
		inFlight := u(q.GetInFlight())
		if lim := q.GetConfig().GetMaxInFlight(); lim > 0 {
			inFlight += "/" + u(uint64(lim)) // of the queue's limit
		}
		run := "-"
		if q.GetRunP50() != nil {
			run = wait(q.GetRunP50().AsDuration()) + "/" + wait(q.GetRunP99().AsDuration())
		}
		rows = append(rows, []string{q.GetName(), q.GetConfig().GetPolicy(), u(q.GetReady()), inFlight, u(q.GetDelayed()),
			u(q.GetDeadLetters()), u(uint64(q.GetConsumers())), oldest, run, paused})
	}
	return a.table("QUEUE\tPOLICY\tREADY\tIN FLIGHT\tDELAYED\tDEAD\tCONSUMERS\tOLDEST WAIT\tRUN P50/P99\t", rows)
}

func u(n uint64) string { return strconv.FormatUint(n, 10) }

func adminPause(ctx context.Context, c *client.Client, a adminArgs) error {
	if err := a.want(1, "QUEUE"); err != nil {
		return err
	}
	q, err := c.PauseQueue(ctx, a.pos[0])
	if err != nil {
		return err
	}
	return a.said(q, "paused %s: %d ready, %d in flight finish", q.GetName(), q.GetReady(), q.GetInFlight())
}

func adminResume(ctx context.Context, c *client.Client, a adminArgs) error {
	if err := a.want(1, "QUEUE"); err != nil {
		return err
	}
	q, err := c.ResumeQueue(ctx, a.pos[0])
	if err != nil {
		return err
	}
	return a.said(q, "resumed %s: %d ready", q.GetName(), q.GetReady())
}

// said prints m as JSON, or the sentence.
func (a adminArgs) said(m proto.Message, format string, args ...any) error {
	if a.json {
		return a.printJSON(m)
	}
	_, err := fmt.Fprintf(a.out, format+"\n", args...)
	return err
}

func adminPurge(ctx context.Context, c *client.Client, a adminArgs) error {
	if err := a.want(1, "QUEUE --confirm QUEUE"); err != nil {
		return err
	}
	if a.confirm != a.pos[0] {
		return fmt.Errorf("purge drops every waiting job of %q: give its name again with --confirm %s", a.pos[0], a.pos[0])
	}
	n, err := c.PurgeQueue(ctx, a.pos[0])
	if err != nil {
		return err
	}
	return a.said(&pb.PurgeQueueResponse{Purged: uint64(n)}, "purged %s: %d waiting jobs dropped", a.pos[0], n)
}

func adminDeleteQueue(ctx context.Context, c *client.Client, a adminArgs) error {
	if err := a.want(1, "QUEUE --confirm QUEUE"); err != nil {
		return err
	}
	if a.confirm != a.pos[0] {
		return fmt.Errorf("delete-queue removes %q with its settings and what its predictor learned: give its name again with --confirm %s", a.pos[0], a.pos[0])
	}
	r, err := c.DeleteQueue(ctx, a.pos[0], a.force)
	if err != nil {
		return err
	}
	return a.said(r, "deleted %s: dropped %d waiting, %d delayed, %d running and %d dead-lettered jobs; %d consumers stopped",
		a.pos[0], r.GetWaiting(), r.GetDelayed(), r.GetRunning(), r.GetDead(), r.GetConsumers())
}

func adminDead(ctx context.Context, c *client.Client, a adminArgs) error {
	if err := a.want(1, "QUEUE"); err != nil {
		return err
	}
	ds, err := c.ListDeadLetters(ctx, a.pos[0], a.limit)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(&pb.ListDeadLettersResponse{DeadLetters: ds})
	}
	rows := make([][]string, 0, len(ds))
	for _, d := range ds {
		rows = append(rows, []string{d.GetId(), d.GetProducer(), d.GetJobType(), u(uint64(d.GetAttempts())),
			stamp(d.GetDeadAt()), oneLine(d.GetReason())})
	}
	return a.table("ID\tPRODUCER\tJOB TYPE\tATTEMPTS\tDIED (UTC)\tREASON", rows)
}

// oneLine keeps a table row on one line: a reason may hold newlines or
// tabs (a handler's error text).
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\t' {
			return ' '
		}
		return r
	}, s)
}

// deadIDs are the ids a requeue or drop names: some, or --all (the API's
// empty list).
func (a adminArgs) deadIDs(verb string) ([]string, error) {
	if len(a.pos) == 0 {
		return nil, fmt.Errorf("want QUEUE and the ids to %s, or --all", verb)
	}
	ids := a.pos[1:]
	switch {
	case a.all && len(ids) > 0:
		return nil, fmt.Errorf("give ids or --all, not both")
	case !a.all && len(ids) == 0:
		return nil, fmt.Errorf("name the dead letters to %s, or give --all for every one of %s", verb, a.pos[0])
	}
	return ids, nil
}

func adminRequeue(ctx context.Context, c *client.Client, a adminArgs) error {
	ids, err := a.deadIDs("requeue")
	if err != nil {
		return err
	}
	n, err := c.RequeueDeadLetters(ctx, a.pos[0], ids...)
	if err != nil {
		return err
	}
	return a.said(&pb.RequeueDeadLettersResponse{Requeued: uint64(n)}, "requeued %d dead letters of %s%s", n, a.pos[0], notFound(a.pos[0], ids, n))
}

func adminDrop(ctx context.Context, c *client.Client, a adminArgs) error {
	ids, err := a.deadIDs("drop")
	if err != nil {
		return err
	}
	n, err := c.DeleteDeadLetters(ctx, a.pos[0], ids...)
	if err != nil {
		return err
	}
	return a.said(&pb.DeleteDeadLettersResponse{Deleted: uint64(n)}, "dropped %d dead letters of %s%s", n, a.pos[0], notFound(a.pos[0], ids, n))
}

// notFound says how many of the ids a requeue or drop named were not
// among the queue's dead letters (a mistyped id, or one already
// requeued), as the broker only counts those it found; "" when none.
func notFound(queue string, ids []string, n int) string {
	named := len(slices.Compact(slices.Sorted(slices.Values(ids))))
	if n >= named {
		return ""
	}
	return fmt.Sprintf("; %d of the %d ids named are not among its dead letters (admin dead %s lists them)", named-n, named, queue)
}

func adminJob(ctx context.Context, c *client.Client, a adminArgs) error {
	var j *pb.JobInfo
	var err error
	switch len(a.pos) {
	case 1:
		j, err = findJob(ctx, c, a.pos[0])
	case 2:
		j, err = c.GetJob(ctx, a.pos[0], a.pos[1])
	default:
		return a.want(2, "[QUEUE] ID")
	}
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(j)
	}
	if j.GetEndedAt().IsValid() {
		// Ended and kept (keep_done): only what the queue keeps of it.
		rows := [][]string{
			{"id", j.GetId()}, {"queue", j.GetQueue()}, {"state", j.GetState()},
			{"producer", j.GetProducer()}, {"job type", j.GetJobType()},
			{"attempts", u(uint64(j.GetAttempts()))}, {"ended", stamp(j.GetEndedAt())},
		}
		if j.GetTook() != nil {
			rows = append(rows, []string{"took", j.GetTook().AsDuration().String()})
		}
		return a.table("FIELD\tVALUE\t", rows)
	}
	rows := [][]string{
		{"id", j.GetId()}, {"queue", j.GetQueue()}, {"state", j.GetState()},
		{"producer", j.GetProducer()}, {"job type", j.GetJobType()},
		{"attempts", fmt.Sprintf("%d of %d", j.GetAttempts(), j.GetMaxAttempts())},
		{"published", stamp(j.GetPublishedAt())},
		{"tier", u(uint64(j.GetTier()))}, {"predicted ms", ms(j.GetPredictedMs())},
	}
	add := func(field, v string) {
		if v != "" && v != "-" {
			rows = append(rows, []string{field, v})
		}
	}
	if j.GetLong() {
		add("long", "yes: the long-job bound applies")
	}
	if j.GetCold() {
		add("cold", "yes: too few observations of its key to trust")
	}
	add("enqueued", stamp(j.GetEnqueued()))
	add("expires", stamp(j.GetExpires()))
	add("due", stamp(j.GetDue()))
	add("consumer", j.GetConsumer())
	if j.GetCancelled() {
		add("cancelled", "yes: its worker was told to stop; it ends, not retried, when the worker lets it go")
	}
	add("leased", stamp(j.GetLeased()))
	add("lease ends", stamp(j.GetLeaseDeadline()))
	add("dead at", stamp(j.GetDeadAt()))
	add("reason", j.GetReason())
	for _, k := range slices.Sorted(maps.Keys(j.GetHeaders())) {
		rows = append(rows, []string{"header " + k, j.GetHeaders()[k]})
	}
	kind, body := payloadText(j.GetPayload(), 4<<10)
	rows = append(rows, []string{"payload", fmt.Sprintf("%d bytes%s", len(j.GetPayload()), kind)})
	if err := a.table("FIELD\tVALUE\t", rows); err != nil {
		return err
	}
	if body != "" {
		_, err = fmt.Fprintln(a.out, body)
	}
	return err
}

func adminCancel(ctx context.Context, c *client.Client, a adminArgs) error {
	if err := a.want(2, "QUEUE ID"); err != nil {
		return err
	}
	state, err := c.CancelJob(ctx, a.pos[0], a.pos[1])
	if err != nil {
		return err
	}
	return a.said(&pb.CancelJobResponse{State: state}, "cancelled %s of %s (it was %s)", a.pos[1], a.pos[0], state)
}

// adminHistory writes the queue's history file to standard output.
func adminHistory(ctx context.Context, c *client.Client, a adminArgs) error {
	if err := a.want(1, "QUEUE"); err != nil {
		return err
	}
	_, err := c.ExportHistory(ctx, a.pos[0], a.since, a.out)
	return err
}

func adminKeys(ctx context.Context, c *client.Client, a adminArgs) error {
	if err := a.want(1, "QUEUE"); err != nil {
		return err
	}
	ks, err := c.ListKeys(ctx, a.pos[0], a.limit)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(&pb.ListKeysResponse{Keys: ks})
	}
	rows := make([][]string, 0, len(ks))
	for _, k := range ks {
		size := "-"
		if k.GetSizeBucket() >= 0 {
			size = strconv.Itoa(int(k.GetSizeBucket()))
		}
		var state []string
		switch {
		case k.GetCold():
			state = append(state, "cold")
		case k.GetSpreadGated():
			state = append(state, "spread")
		}
		if k.GetLong() {
			state = append(state, "long")
		}
		rows = append(rows, []string{k.GetProducer(), k.GetJobType(), size, u(k.GetCount()),
			ms(k.GetEwmaMs()), ms(k.GetP50Ms()), ms(k.GetP99Ms()), u(uint64(k.GetTier())), strings.Join(state, ",")})
	}
	return a.table("PRODUCER\tJOB TYPE\tSIZE BUCKET\tCOUNT\tEWMA ms\tP50 ms\tP99 ms\tTIER\t", rows)
}

func adminGroups(ctx context.Context, c *client.Client, a adminArgs) error {
	if err := a.want(1, "QUEUE"); err != nil {
		return err
	}
	resp, err := c.ListGroups(ctx, a.pos[0], a.limit)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(resp)
	}
	rows := make([][]string, 0, len(resp.GetGroups()))
	for _, g := range resp.GetGroups() {
		name, running := g.GetName(), u(g.GetRunning())
		if name == "" {
			name = "(all)"
		}
		if g.GetLimit() > 0 {
			running += "/" + u(uint64(g.GetLimit()))
		}
		rows = append(rows, []string{name, u(uint64(g.GetWeight())), running, u(g.GetWaiting()),
			strconv.FormatFloat(100*g.GetWorkShare(), 'f', 1, 64) + "%", u(g.GetThrottled())})
	}
	if err := a.table("GROUP\tWEIGHT\tRUNNING\tWAITING\tWORK (1 min)\tTHROTTLED\t", rows); err != nil {
		return err
	}
	if n := resp.GetGroupCount(); n > uint64(len(rows)) {
		_, err = fmt.Fprintf(a.out, "(%d of %d groups, the busiest; --limit shows more)\n", len(rows), n)
	}
	return err
}

func ms(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func adminSchedules(ctx context.Context, c *client.Client, a adminArgs) error {
	if err := a.want(0, "no arguments"); err != nil {
		return err
	}
	ss, err := c.ListSchedules(ctx)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(&pb.ListSchedulesResponse{Schedules: ss})
	}
	rows := make([][]string, 0, len(ss))
	for _, sc := range ss {
		when := "every " + sc.GetEvery().AsDuration().String()
		if sc.GetCron() != "" {
			when = "cron " + sc.GetCron()
			if tz := sc.GetTimeZone(); tz != "" {
				when += " " + tz
			}
		}
		paused := ""
		if sc.GetPaused() {
			paused = "paused"
		}
		rows = append(rows, []string{sc.GetName(), sc.GetQueue(), when, sc.GetJobType(),
			stamp(sc.GetLastTick()), stamp(sc.GetNextTick()),
			u(sc.GetFired()), paused})
	}
	return a.table("SCHEDULE\tQUEUE\tWHEN\tJOB TYPE\tLAST TICK\tNEXT TICK\tFIRED\t", rows)
}

func adminPauseSchedule(pause bool) func(ctx context.Context, c *client.Client, a adminArgs) error {
	return func(ctx context.Context, c *client.Client, a adminArgs) error {
		if err := a.want(1, "NAME"); err != nil {
			return err
		}
		sc, err := c.PauseSchedule(ctx, a.pos[0], pause)
		if err != nil {
			return err
		}
		verb := "resumed"
		if pause {
			verb = "paused"
		}
		return a.said(sc, "%s schedule %s", verb, sc.GetName())
	}
}

func adminDeleteSchedule(ctx context.Context, c *client.Client, a adminArgs) error {
	if err := a.want(1, "NAME --confirm NAME"); err != nil {
		return err
	}
	if a.confirm != a.pos[0] {
		return fmt.Errorf("delete-schedule removes %q for good: give its name again with --confirm %s", a.pos[0], a.pos[0])
	}
	if err := c.DeleteSchedule(ctx, a.pos[0]); err != nil {
		return err
	}
	return a.said(&pb.DeleteScheduleResponse{}, "deleted schedule %s", a.pos[0])
}

// stamp formats a broker's timestamp in UTC, "-" when unset.
func stamp(ts *timestamppb.Timestamp) string {
	if !ts.IsValid() {
		return "-"
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

func adminJobs(ctx context.Context, c *client.Client, a adminArgs) error {
	if err := a.want(1, "QUEUE"); err != nil {
		return err
	}
	js, err := c.ListJobsFrom(ctx, a.pos[0], a.offset, a.limit)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(js)
	}
	shown := func(n int, total uint64, order string) string {
		if a.offset > 0 {
			return fmt.Sprintf("%d of %d shown from #%d, %s", n, total, a.offset+1, order)
		}
		return fmt.Sprintf("%d of %d shown, %s", n, total, order)
	}
	fmt.Fprintf(a.out, "waiting (%s)\n", shown(len(js.GetWaiting()), js.GetWaitingTotal(), "next to run first"))
	rows := make([][]string, 0, len(js.GetWaiting()))
	for i, j := range js.GetWaiting() {
		flags := ""
		switch {
		case j.GetLong():
			flags = "long"
		case j.GetCold():
			flags = "cold"
		}
		rows = append(rows, []string{strconv.Itoa(a.offset + i + 1), j.GetId(), j.GetProducer(), j.GetJobType(), u(uint64(j.GetTier())),
			ms(j.GetPredictedMs()), wait(j.GetWaited().AsDuration()), u(uint64(j.GetAttempts())), flags})
	}
	if err := a.table("#\tID\tPRODUCER\tJOB TYPE\tTIER\tPREDICTED ms\tWAITED\tATTEMPTS\t", rows); err != nil {
		return err
	}
	fmt.Fprintf(a.out, "\nrunning (%s)\n", shown(len(js.GetRunning()), js.GetRunningTotal(), "longest running first"))
	rows = rows[:0]
	for _, j := range js.GetRunning() {
		rows = append(rows, []string{j.GetId(), j.GetProducer(), j.GetJobType(), j.GetConsumer(), u(uint64(j.GetAttempt())),
			ms(j.GetPredictedMs()), wait(j.GetRunning().AsDuration()), stamp(j.GetLeaseDeadline())})
	}
	if err := a.table("ID\tPRODUCER\tJOB TYPE\tCONSUMER\tATTEMPT\tPREDICTED ms\tRUNNING FOR\tLEASE ENDS (UTC)", rows); err != nil {
		return err
	}
	fmt.Fprintf(a.out, "\ndelayed and retry-pending (%s)\n", shown(len(js.GetDelayed()), js.GetDelayedTotal(), "soonest due first"))
	rows = rows[:0]
	for _, j := range js.GetDelayed() {
		why := "scheduled"
		if j.GetRetry() {
			why = "retry"
		}
		rows = append(rows, []string{j.GetId(), why, j.GetProducer(), j.GetJobType(),
			fmt.Sprintf("%d of %d", j.GetAttempts(), j.GetMaxAttempts()), stamp(j.GetDue())})
	}
	if err := a.table("ID\tWHY\tPRODUCER\tJOB TYPE\tATTEMPTS\tDUE (UTC)", rows); err != nil {
		return err
	}
	fmt.Fprintf(a.out, "\ndead (%s)\n", shown(len(js.GetDead()), js.GetDeadTotal(), "oldest first"))
	rows = rows[:0]
	for _, d := range js.GetDead() {
		rows = append(rows, []string{d.GetId(), d.GetProducer(), d.GetJobType(), u(uint64(d.GetAttempts())),
			stamp(d.GetDeadAt()), oneLine(d.GetReason())})
	}
	if err := a.table("ID\tPRODUCER\tJOB TYPE\tATTEMPTS\tDIED (UTC)\tREASON", rows); err != nil {
		return err
	}
	fmt.Fprintf(a.out, "\nended (%s; kept by a queue with keep_done)\n", shown(len(js.GetDone()), js.GetDoneTotal(), "most recent first"))
	rows = rows[:0]
	for _, d := range js.GetDone() {
		took := "-"
		if d.GetTook() != nil {
			took = d.GetTook().AsDuration().String()
		}
		rows = append(rows, []string{d.GetId(), d.GetState(), d.GetProducer(), d.GetJobType(), u(uint64(d.GetAttempts())), took, stamp(d.GetEndedAt())})
	}
	return a.table("ID\tSTATE\tPRODUCER\tJOB TYPE\tATTEMPTS\tTOOK\tENDED (UTC)", rows)
}
