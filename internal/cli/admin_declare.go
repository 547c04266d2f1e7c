package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"unicode/utf8"

	"fmt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/server"
)

// adminDeclareQueue creates or reconfigures a queue from KEY=VALUE
// settings, the keys of a config file's queues: (policy=weighted tiers=3
// weights=5,3,1 max_in_flight=4 lease=1m keep_done=1000 ...).
func adminDeclareQueue(ctx context.Context, c *client.Client, a adminArgs) error {
	if len(a.pos) == 0 {
		return fmt.Errorf("want QUEUE [KEY=VALUE ...]")
	}
	data, err := assignments(a.pos[1:])
	if err != nil {
		return err
	}
	var cfg broker.QueueConfig
	if err := decodeStrict(data, &cfg); err != nil {
		return fmt.Errorf("queue settings: %v", err)
	}
	q, err := c.DeclareQueue(ctx, a.pos[0], server.QueueConfigProto(cfg))
	if err != nil {
		return err
	}
	qc := q.GetConfig()
	limit := "no limit"
	if qc.GetMaxInFlight() > 0 {
		limit = strconv.Itoa(int(qc.GetMaxInFlight()))
	}
	return a.said(q, "declared %s: policy %s, %d tiers, max in flight %s, max attempts %d, lease %s, %d ready",
		q.GetName(), qc.GetPolicy(), qc.GetTiers(), limit, qc.GetMaxAttempts(), qc.GetLease().AsDuration(), q.GetReady())
}

// adminDeclareSchedule creates or replaces a schedule from KEY=VALUE
// settings, the keys of a config file's schedules: queue=Q and cron=...
// (time_zone=...) or every=D, with job_type, producer, payload,
// headers.K=V, catch_up, paused.
func adminDeclareSchedule(ctx context.Context, c *client.Client, a adminArgs) error {
	if len(a.pos) == 0 {
		return fmt.Errorf("want NAME queue=QUEUE (cron=EXPR | every=DURATION) [KEY=VALUE ...]")
	}
	data, err := assignments(a.pos[1:])
	if err != nil {
		return err
	}
	var sc ScheduleConfig
	if err := decodeStrict(data, &sc); err != nil {
		return fmt.Errorf("schedule settings: %v", err)
	}
	if sc.Name != "" && sc.Name != a.pos[0] {
		return fmt.Errorf("the schedule is named %q: drop name=%s", a.pos[0], sc.Name)
	}
	p := &pb.Schedule{Name: a.pos[0], Queue: sc.Queue, Cron: sc.Cron, TimeZone: sc.TimeZone, Paused: sc.Paused,
		Producer: sc.Producer, JobType: sc.JobType, Payload: []byte(sc.Payload), Headers: sc.Headers}
	if sc.Every > 0 {
		p.Every = durationpb.New(sc.Every)
	}
	if sc.CatchUp > 0 {
		p.CatchUp = durationpb.New(sc.CatchUp)
	}
	s, err := c.DeclareSchedule(ctx, p)
	if err != nil {
		return err
	}
	return a.said(s, "declared schedule %s on %s: next tick %s", s.GetName(), s.GetQueue(), stamp(s.GetNextTick()))
}

// publishArgs are what `admin publish` reads: a test job, or several.
type publishArgs struct {
	Producer    string            `yaml:"producer"`
	JobType     string            `yaml:"job_type"`
	Payload     string            `yaml:"payload"`
	Headers     map[string]string `yaml:"headers"`
	Delay       time.Duration     `yaml:"delay"`
	TTL         time.Duration     `yaml:"ttl"`
	MaxAttempts int               `yaml:"max_attempts"`
	Count       int               `yaml:"count"`
}

// adminPublish publishes test jobs: count of them (default 1), each with
// the same settings, and prints their ids.
func adminPublish(ctx context.Context, c *client.Client, a adminArgs) error {
	if len(a.pos) == 0 {
		return fmt.Errorf("want QUEUE [job_type=T] [producer=P] [payload=TEXT] [headers.K=V] [delay=D] [ttl=D] [max_attempts=N] [count=N]")
	}
	data, err := assignments(a.pos[1:])
	if err != nil {
		return err
	}
	var pa publishArgs
	if err := decodeStrict(data, &pa); err != nil {
		return fmt.Errorf("publish settings: %v", err)
	}
	switch {
	case pa.Count == 0:
		pa.Count = 1
	case pa.Count < 0 || pa.Count > 10_000:
		return fmt.Errorf("count must be 1 to 10000, got %d", pa.Count)
	}
	if pa.Producer == "" {
		pa.Producer = "harbinger-admin"
	}
	msgs := make([]*client.Message, pa.Count)
	for i := range msgs {
		msgs[i] = &client.Message{Queue: a.pos[0], Producer: pa.Producer, JobType: pa.JobType, Payload: []byte(pa.Payload),
			Headers: pa.Headers, Delay: pa.Delay, TTL: pa.TTL, MaxAttempts: pa.MaxAttempts}
	}
	ids, err := c.Publish(ctx, msgs...)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(&pb.PublishResponse{Results: results(ids)})
	}
	when := ""
	if pa.Delay > 0 {
		when = ", due in " + pa.Delay.String()
	}
	_, err = fmt.Fprintf(a.out, "published %d to %s%s: %s\n", len(ids), a.pos[0], when, strings.Join(ids, " "))
	return err
}

func results(ids []string) []*pb.PublishResult {
	out := make([]*pb.PublishResult, len(ids))
	for i, id := range ids {
		out[i] = &pb.PublishResult{Id: id}
	}
	return out
}

// adminRunNow makes delayed jobs due at once.
func adminRunNow(ctx context.Context, c *client.Client, a adminArgs) error {
	if len(a.pos) < 2 {
		return fmt.Errorf("want QUEUE and the ids of delayed jobs to run now")
	}
	n, err := c.RunJobsNow(ctx, a.pos[0], a.pos[1:]...)
	if err != nil {
		return err
	}
	skipped := ""
	if k := len(a.pos) - 1 - n; k > 0 {
		skipped = fmt.Sprintf("; %d of the ids named were not delayed (admin jobs %s lists them)", k, a.pos[0])
	}
	return a.said(&pb.RunJobsNowResponse{Moved: uint64(n)}, "%d delayed jobs of %s run now%s", n, a.pos[0], skipped)
}

// findJob looks a job up by id in every queue the token may list, in
// name order.
func findJob(ctx context.Context, c *client.Client, id string) (*pb.JobInfo, error) {
	qs, err := c.ListQueues(ctx)
	if err != nil {
		return nil, err
	}
	for _, q := range qs {
		j, err := c.GetJob(ctx, q.GetName(), id)
		if err == nil {
			return j, nil
		}
		if status.Code(err) != codes.NotFound && status.Code(err) != codes.PermissionDenied {
			return nil, err
		}
	}
	return nil, fmt.Errorf("no queue holds a job %q (ended and not kept, purged, dropped or never published)", id)
}

// payloadText is how `admin job` shows a payload after its table: JSON
// indented, UTF-8 text as it is (each unprintable character escaped, as
// the table's cells are), anything else not at all; at most limit bytes
// of it, saying when the rest was cut. kind is what the "payload" row
// adds: ", JSON", ", text", or nothing.
func payloadText(p []byte, limit int) (kind, body string) {
	if len(p) == 0 {
		return "", ""
	}
	var buf bytes.Buffer
	text := ""
	switch {
	case len(p) <= 1<<20 && json.Valid(p) && json.Indent(&buf, p, "", "  ") == nil:
		kind, text = ", JSON", buf.String()
	case utf8.Valid(p):
		kind, text = ", text", string(p)
	default:
		return ", binary (admin job -json shows it in base64)", ""
	}
	cut := ""
	if len(text) > limit {
		n := limit
		for n > 0 && !utf8.RuneStart(text[n]) {
			n--
		}
		text, cut = text[:n], fmt.Sprintf("\n… (%d more bytes; -json has it whole)", len(text)-n)
	}
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = cell(strings.ReplaceAll(l, "\t", "    "))
	}
	return kind, strings.Join(lines, "\n") + cut
}
