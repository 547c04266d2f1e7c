// Package client is the Go SDK for Harbinger: publish jobs, run workers
// that learn the broker how long jobs take, and manage queues. It talks to
// the broker over gRPC and depends only on the public API package.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
)

// Client is a connection to a Harbinger broker. It is safe for concurrent
// use; one Client per process is usually enough.
type Client struct {
	conn   *grpc.ClientConn
	broker pb.BrokerClient
	admin  pb.AdminClient
	log    *slog.Logger
}

// Flow-control windows of a connection to the broker (see Dial).
const (
	streamWindow = 4 << 20
	connWindow   = 16 << 20
)

// Option configures Dial.
type Option func(*options)

type options struct {
	dial      []grpc.DialOption
	log       *slog.Logger
	token     string
	tls       *tls.Config
	keepalive keepalive.ClientParameters
}

// bearer is a token as per-call credentials.
type bearer struct {
	token    string
	loopback bool // no TLS: sent only because the broker is on loopback
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return !b.loopback }

// isLoopback reports whether addr names this machine's loopback.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// WithDialOptions adds gRPC dial options, e.g. transport credentials (the
// default is an insecure connection, fit for loopback and private networks).
func WithDialOptions(o ...grpc.DialOption) Option {
	return func(opts *options) { opts.dial = append(opts.dial, o...) }
}

// WithToken sends token with every call ("authorization: Bearer TOKEN"),
// for a broker started with -tokens. gRPC refuses to send it over a
// connection without TLS unless the broker is on this machine's loopback;
// use WithTLS for any other.
func WithToken(token string) Option {
	return func(o *options) { o.token = token }
}

// WithTLS connects over TLS with cfg (its RootCAs for a private CA, its
// Certificates for a broker that asks for client certificates).
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) { o.tls = cfg }
}

// WithKeepalive sets how long a connection with an open call may stay
// quiet before the client pings the broker (at least 10s, gRPC's floor;
// the broker allows pings twice as often, so a client at the floor is
// never cut off for pinging too often), and how long
// it waits for the answer before it takes the connection for dead and
// reconnects. The defaults are KeepaliveTime and KeepaliveTimeout; a
// network that drops idle connections sooner needs a shorter time.
func WithKeepalive(time, timeout time.Duration) Option {
	return func(o *options) { o.keepalive = keepalive.ClientParameters{Time: time, Timeout: timeout} }
}

// WithLogger sets the logger workers report reconnects and errors to, and
// the client says when it cannot reach the broker (and why) and when it
// reaches it again. The default is slog.Default.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// KeepaliveTime and KeepaliveTimeout are how long a connection with an
// open call may stay quiet before the client pings the broker, and how
// long it then waits for the answer before it takes the connection for
// dead (see WithKeepalive).
const (
	KeepaliveTime    = 30 * time.Second
	KeepaliveTimeout = 20 * time.Second
)

// Dial connects to the broker at addr (host:port). The connection is made
// lazily and re-made after failures, so Dial succeeds even while the broker
// is down; ctx bounds only the setup. Calls wait for the broker to answer
// until their context ends; while the connection fails, the client logs
// why once (WithLogger), so that a broker it can never reach, or one that
// disagrees with it on TLS, does not leave it waiting in silence.
func Dial(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o := options{log: slog.Default(), keepalive: keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout}}
	for _, f := range opts {
		f(&o)
	}
	creds := insecure.NewCredentials()
	if o.tls != nil {
		creds = credentials.NewTLS(o.tls)
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if o.token != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer{token: o.token, loopback: o.tls == nil && isLoopback(addr)}))
	}
	// Static windows, as the broker's: gRPC's bandwidth estimator would
	// otherwise ping the broker for nearly every small message. The
	// stream window holds a full-size delivery of the default limits.
	// The broker bounds every answer by its own send limit, sized for the
	// largest job it accepts; gRPC's default receive limit of 4 MiB would
	// refuse GetJob or ListDeadLetters of a job a broker with a larger max
	// payload took.
	// While a call is open (a worker's Consume, a Producer's stream) the
	// connection is pinged when it has been quiet for a while: a worker
	// waiting for jobs sends nothing, so a connection that died without
	// a word (a NAT or firewall dropping it, a host gone) would otherwise
	// leave it waiting for ever instead of reconnecting.
	dial = append(dial, grpc.WithStaticStreamWindowSize(streamWindow), grpc.WithStaticConnWindowSize(connWindow),
		grpc.WithChainUnaryInterceptor(encodeErrors), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)),
		grpc.WithKeepaliveParams(o.keepalive))
	dial = append(dial, o.dial...)
	conn, err := grpc.NewClient(addr, dial...)
	if err != nil {
		return nil, err
	}
	c := &Client{conn: conn, broker: pb.NewBrokerClient(conn), admin: pb.NewAdminClient(conn), log: o.log}
	go watchConn(conn, c.broker, addr, o.tls != nil, o.log)
	return c, nil
}

// encodeErrors gives a call whose request protobuf cannot encode (a
// string that is not valid UTF-8: a queue name, a job id) the status it
// deserves, InvalidArgument with protobuf's reason, instead of the
// Internal that gRPC reports for it. It encodes the request again only
// when a call failed with Internal.
func encodeErrors(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoke(ctx, method, req, reply, cc, opts...)
	if status.Code(err) != codes.Internal {
		return err
	}
	if m, ok := req.(proto.Message); ok {
		if _, merr := proto.Marshal(m); merr != nil {
			return status.Errorf(codes.InvalidArgument, "harbinger: %s: the request cannot be encoded: %v", method[strings.LastIndexByte(method, '/')+1:], merr)
		}
	}
	return err
}

// Close closes the connection. Workers and producers using it stop.
func (c *Client) Close() error { return c.conn.Close() }

// Message is a job to publish.
type Message struct {
	Queue    string
	Producer string // part of the predictor's key: who sends the job
	JobType  string // part of the predictor's key: what kind of job it is
	// SizeHint feeds the predictor's size bucket; 0 uses the payload size.
	SizeHint    uint64
	Payload     []byte
	TTL         time.Duration // 0 uses the queue's default; counted from when the job is due
	MaxAttempts int           // 0 uses the queue's default
	Headers     map[string]string
	// RunAt, when in the future, keeps the job invisible until then: it
	// runs no earlier, and takes its place in line as if published then.
	RunAt time.Time
	// Delay is RunAt relative to the publish, measured on the broker's
	// clock (immune to skew between the machines); set one or the other.
	Delay time.Duration
	// RetryBase and RetryMax replace the queue's retry backoff for this
	// job: the first retry waits about RetryBase, doubling per attempt up
	// to RetryMax (with the queue's jitter). 0 uses the queue's.
	RetryBase, RetryMax time.Duration
	// UniqueKey makes the publish idempotent for UniqueFor: a second
	// publish to the queue with the same key inside the window stores
	// nothing and is answered with the first job's id (PublishEach reports
	// it as a duplicate), whether that job is waiting, running or finished.
	UniqueKey string
	UniqueFor time.Duration
}

func (m *Message) proto() *pb.Message {
	p := &pb.Message{
		Queue: m.Queue, Producer: m.Producer, JobType: m.JobType, SizeHint: m.SizeHint,
		Payload: m.Payload, MaxAttempts: uint32(max(m.MaxAttempts, 0)), Headers: m.Headers,
	}
	if m.TTL != 0 {
		p.Ttl = durationpb.New(m.TTL)
	}
	if !m.RunAt.IsZero() {
		p.RunAt = timestamppb.New(m.RunAt)
	}
	if m.Delay != 0 {
		p.Delay = durationpb.New(m.Delay)
	}
	if m.RetryBase != 0 {
		p.RetryBase = durationpb.New(m.RetryBase)
	}
	if m.RetryMax != 0 {
		p.RetryMax = durationpb.New(m.RetryMax)
	}
	if m.UniqueKey != "" {
		p.UniqueKey = m.UniqueKey
		p.UniqueFor = durationpb.New(m.UniqueFor)
	}
	return p
}

// Publish sends messages in one request, or, when they are together
// larger than the broker reads in one, in as few as fit. It returns the
// ids of the messages the broker stored, in order, and, when any was not
// stored, a *PublishError that says which and why (the others are stored:
// publish only the failed ones again, or they are duplicated). A message
// whose strings (queue, producer, job type, headers, unique key) are not
// valid UTF-8 cannot be encoded, and one larger than any request may carry
// cannot be sent: either is refused here with InvalidArgument, alone, and
// the rest are sent. If a request fails as a whole after an earlier one of
// the call was answered, its messages and the later ones are reported in
// the *PublishError with its error. While the broker is
// unreachable (e.g. restarting) it waits and retries as long as ctx allows;
// a retry after a connection broke mid-call may publish a batch twice,
// which at-least-once delivery allows. For many small publishes from a hot
// loop, use a Producer.
func (c *Client) Publish(ctx context.Context, msgs ...*Message) ([]string, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	resp, err := c.publishRaw(ctx, msgs)
	if err != nil {
		return nil, err
	}
	return results(resp, len(msgs))
}

// publishRaw sends msgs, retrying while the broker is unavailable and ctx
// allows, and answers one result per message of msgs. A message that
// cannot be encoded (a string that is not valid UTF-8) is answered here
// with InvalidArgument and not sent: protobuf would refuse the whole
// request for it. Messages larger together than every broker reads in one
// request (gRPC's default limit) are cut to the broker's own limit, and
// one no request can carry is answered here with InvalidArgument: the
// broker would refuse the whole request for it, with the code of a full
// queue.
func (c *Client) publishRaw(ctx context.Context, msgs []*Message) (*pb.PublishResponse, error) {
	out := make([]*pb.PublishResult, len(msgs)) // by index in msgs
	pms := make([]*pb.Message, len(msgs))
	sendable := make([]int, 0, len(msgs))
	size := 0
	for i, m := range msgs {
		pm := m.proto()
		if err := checkUTF8(pm); err != nil {
			out[i] = refused(err)
			continue
		}
		pms[i] = pm
		sendable = append(sendable, i)
		size += messageSize(pm)
	}
	parts := [][]int{sendable}
	if size > fallbackRequestBytes-requestSlack {
		lim, err := c.fetchLimits(ctx, math.MaxInt, math.MaxInt)
		if err != nil {
			return nil, err
		}
		parts = lim.cut(pms, sendable, out)
	}
	answered := false // some request of the call was answered: its messages may be stored
	for k, part := range parts {
		if len(part) == 0 {
			continue
		}
		req := &pb.PublishRequest{Messages: make([]*pb.Message, len(part))}
		for j, i := range part {
			req.Messages[j] = pms[i]
		}
		resp, err := c.sendPublish(ctx, req)
		if err == nil && len(resp.Results) != len(part) {
			err = errMismatch
		}
		if err != nil {
			if !answered {
				return nil, err
			}
			// What the earlier requests stored stays stored: only the
			// messages of this request and later ones are to publish again.
			for _, rest := range parts[k:] {
				for _, i := range rest {
					out[i] = refused(err)
				}
			}
			break
		}
		answered = true
		for j, i := range part {
			out[i] = resp.Results[j]
		}
	}
	return &pb.PublishResponse{Results: out}, nil
}

// refused is the result of a message that was not stored because of err.
func refused(err error) *pb.PublishResult {
	st := status.Convert(err)
	return &pb.PublishResult{Code: uint32(st.Code()), Error: st.Message()}
}

// sendPublish sends req, retrying while the broker is unavailable and ctx
// allows.
func (c *Client) sendPublish(ctx context.Context, req *pb.PublishRequest) (*pb.PublishResponse, error) {
	bo := newBackoff(time.Second)
	for {
		resp, err := c.broker.Publish(ctx, req, grpc.WaitForReady(true))
		if err == nil {
			return resp, nil
		}
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return nil, err
		}
		if !pause(ctx.Done(), bo.next()) {
			return nil, err
		}
	}
}

// DeclareQueue creates a queue with cfg, or updates its config. A nil cfg
// takes the broker's defaults.
func (c *Client) DeclareQueue(ctx context.Context, name string, cfg *pb.QueueConfig) (*pb.QueueInfo, error) {
	return c.admin.DeclareQueue(ctx, &pb.DeclareQueueRequest{Name: name, Config: cfg})
}

// ListQueues reports every queue, sorted by name.
func (c *Client) ListQueues(ctx context.Context) ([]*pb.QueueInfo, error) {
	resp, err := c.admin.ListQueues(ctx, &pb.ListQueuesRequest{})
	if err != nil {
		return nil, err
	}
	return resp.Queues, nil
}

// Queue reports one queue, or a NotFound error.
func (c *Client) Queue(ctx context.Context, name string) (*pb.QueueInfo, error) {
	qs, err := c.ListQueues(ctx)
	if err != nil {
		return nil, err
	}
	for _, q := range qs {
		if q.Name == name {
			return q, nil
		}
	}
	return nil, errNotFound(name)
}

// CancelJob ends a job by id and says where it stood: "waiting" or
// "delayed" (removed), or "running", that is delivered to a worker (its
// handler's context is cancelled with cause ErrCancelled, or, for a
// delivery still waiting for a free handler, the handler never runs; the
// job is not retried). A job the queue no longer holds gives NotFound.
func (c *Client) CancelJob(ctx context.Context, queue, id string) (string, error) {
	resp, err := c.admin.CancelJob(ctx, &pb.CancelJobRequest{Queue: queue, Id: id})
	if err != nil {
		return "", err
	}
	return resp.State, nil
}

// DeclareSchedule creates or replaces a periodic job: each tick of
// s.Cron (in s.TimeZone) or of s.Every publishes one job to s.Queue.
func (c *Client) DeclareSchedule(ctx context.Context, s *pb.Schedule) (*pb.Schedule, error) {
	return c.admin.DeclareSchedule(ctx, s)
}

// ListSchedules reports every schedule, by name, in as many calls as
// their payloads take.
func (c *Client) ListSchedules(ctx context.Context) ([]*pb.Schedule, error) {
	var all []*pb.Schedule
	req := &pb.ListSchedulesRequest{}
	for {
		resp, err := c.admin.ListSchedules(ctx, req)
		if err != nil {
			return nil, err
		}
		all = append(all, resp.Schedules...)
		if resp.Next == "" || resp.Next == req.After {
			return all, nil
		}
		req.After = resp.Next
	}
}

// PauseSchedule stops (paused true) or restarts a schedule's ticks.
func (c *Client) PauseSchedule(ctx context.Context, name string, paused bool) (*pb.Schedule, error) {
	return c.admin.PauseSchedule(ctx, &pb.PauseScheduleRequest{Name: name, Paused: paused})
}

// DeleteSchedule removes a schedule.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	_, err := c.admin.DeleteSchedule(ctx, &pb.DeleteScheduleRequest{Name: name})
	return err
}

// PauseQueue stops deliveries from a queue until ResumeQueue; publishes
// are still taken and jobs in flight finish.
func (c *Client) PauseQueue(ctx context.Context, name string) (*pb.QueueInfo, error) {
	return c.admin.PauseQueue(ctx, &pb.PauseQueueRequest{Name: name, Paused: true})
}

// ResumeQueue starts deliveries from a paused queue again.
func (c *Client) ResumeQueue(ctx context.Context, name string) (*pb.QueueInfo, error) {
	return c.admin.PauseQueue(ctx, &pb.PauseQueueRequest{Name: name, Paused: false})
}

// PurgeQueue drops a queue's ready jobs and reports how many.
func (c *Client) PurgeQueue(ctx context.Context, name string) (int, error) {
	resp, err := c.admin.PurgeQueue(ctx, &pb.PurgeQueueRequest{Name: name})
	if err != nil {
		return 0, err
	}
	return int(resp.Purged), nil
}

// DeleteQueue removes a queue with its config, predictor and unique keys.
// The broker refuses (FailedPrecondition) while the queue holds any job,
// unless force is set, which drops them for good, and while a schedule
// publishes to it. Workers of the queue stop: RunWorker returns NotFound.
func (c *Client) DeleteQueue(ctx context.Context, name string, force bool) (*pb.DeleteQueueResponse, error) {
	return c.admin.DeleteQueue(ctx, &pb.DeleteQueueRequest{Name: name, Force: force})
}

// GetJob reports a job of queue by the id its publish answered: whether it
// waits, is delayed, runs or is dead-lettered, and what the broker knows of
// it. NotFound when the queue holds no such job (acked, cancelled, purged,
// dropped or never published to it).
func (c *Client) GetJob(ctx context.Context, queue, id string) (*pb.JobInfo, error) {
	return c.admin.GetJob(ctx, &pb.GetJobRequest{Queue: queue, Id: id})
}

// ListDeadLetters reports up to limit dead letters (0: the server's
// default), oldest first.
func (c *Client) ListDeadLetters(ctx context.Context, queue string, limit int) ([]*pb.DeadLetter, error) {
	resp, err := c.admin.ListDeadLetters(ctx, &pb.ListDeadLettersRequest{Queue: queue, Limit: uint32(max(limit, 0))})
	if err != nil {
		return nil, err
	}
	return resp.DeadLetters, nil
}

// ListJobs reports up to limit (at most 1000; 0 for that many) of a
// queue's waiting jobs, in the order they would run if workers asked now,
// and of its running jobs, the longest running first.
func (c *Client) ListJobs(ctx context.Context, queue string, limit int) (*pb.ListJobsResponse, error) {
	return c.admin.ListJobs(ctx, &pb.ListJobsRequest{Queue: queue, Limit: uint32(max(limit, 0))})
}

// ListJobsFrom is ListJobs after skipping offset jobs of each list: the
// next page.
func (c *Client) ListJobsFrom(ctx context.Context, queue string, offset, limit int) (*pb.ListJobsResponse, error) {
	return c.admin.ListJobs(ctx, &pb.ListJobsRequest{Queue: queue, Limit: uint32(max(limit, 0)), Offset: uint32(max(offset, 0))})
}

// RunJobsNow makes delayed jobs due at once and reports how many it moved;
// ids of jobs that are not delayed are skipped.
func (c *Client) RunJobsNow(ctx context.Context, queue string, ids ...string) (int, error) {
	resp, err := c.admin.RunJobsNow(ctx, &pb.RunJobsNowRequest{Queue: queue, Ids: ids})
	if err != nil {
		return 0, err
	}
	return int(resp.Moved), nil
}

// RequeueDeadLetters moves dead letters back to their queue (all when ids
// is empty) and reports how many moved.
func (c *Client) RequeueDeadLetters(ctx context.Context, queue string, ids ...string) (int, error) {
	resp, err := c.admin.RequeueDeadLetters(ctx, &pb.RequeueDeadLettersRequest{Queue: queue, Ids: ids})
	if err != nil {
		return 0, err
	}
	return int(resp.Requeued), nil
}

// DeleteDeadLetters drops dead letters for good (all of the queue's when
// ids is empty) and reports how many.
func (c *Client) DeleteDeadLetters(ctx context.Context, queue string, ids ...string) (int, error) {
	resp, err := c.admin.DeleteDeadLetters(ctx, &pb.DeleteDeadLettersRequest{Queue: queue, Ids: ids})
	if err != nil {
		return 0, err
	}
	return int(resp.Deleted), nil
}

// ListKeys reports up to limit of a queue's predictor keys, busiest first.
func (c *Client) ListKeys(ctx context.Context, queue string, limit int) ([]*pb.KeyStats, error) {
	resp, err := c.admin.ListKeys(ctx, &pb.ListKeysRequest{Queue: queue, Limit: uint32(max(limit, 0))})
	if err != nil {
		return nil, err
	}
	return resp.Keys, nil
}

// ListGroups reports up to limit of a queue's groups under its limits
// and fair shares (the busiest when there are more, sorted by name), with
// the queue's totals. A queue that declares none fails with
// FailedPrecondition.
func (c *Client) ListGroups(ctx context.Context, queue string, limit int) (*pb.ListGroupsResponse, error) {
	return c.admin.ListGroups(ctx, &pb.ListGroupsRequest{Queue: queue, Limit: uint32(max(limit, 0))})
}

// ExportHistory writes a queue's recorded history (its settled
// deliveries, never payloads or headers) to w as a history file, the
// versioned JSON Lines format the simulator replays (harbinger sim
// --history FILE). window > 0 takes the deliveries settled in the last
// window; 0 takes all the broker keeps. It returns the bytes written.
func (c *Client) ExportHistory(ctx context.Context, queue string, window time.Duration, w io.Writer) (int64, error) {
	req := &pb.ExportHistoryRequest{Queue: queue}
	if window > 0 {
		req.Window = durationpb.New(window)
	}
	st, err := c.admin.ExportHistory(ctx, req)
	if err != nil {
		return 0, err
	}
	var n int64
	for {
		chunk, err := st.Recv()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		k, err := w.Write(chunk.Data)
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
}

func errNotFound(name string) error {
	return status.Errorf(codes.NotFound, "queue %q not found", name)
}

// Result is one message's answer from PublishEach.
type Result struct {
	// ID of the stored job; for a duplicate, of the job that took the
	// unique key; empty when the message was not stored.
	ID string
	// Duplicate: the message's unique key was taken; nothing was stored.
	Duplicate bool
	// Err is why the message was not stored (a gRPC status error).
	Err error
}

// PublishEach is Publish with one Result per message, in order, so a
// caller can tell duplicates of unique jobs from new ones. Its error is
// for the call as a whole (e.g. ctx ended); refused messages are reported
// in their Result, as are, when a publish cut into several requests
// fails after the first was answered, the messages not sent.
func (c *Client) PublishEach(ctx context.Context, msgs ...*Message) ([]Result, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	resp, err := c.publishRaw(ctx, msgs)
	if err != nil {
		return nil, err
	}
	if len(resp.Results) != len(msgs) {
		return nil, errMismatch
	}
	out := make([]Result, len(msgs))
	for i, r := range resp.Results {
		out[i] = resultOf(r)
	}
	return out, nil
}

// results turns a PublishResponse into the stored ids and a *PublishError
// for the messages that were not stored.
func results(resp *pb.PublishResponse, n int) ([]string, error) {
	if len(resp.Results) != n {
		return nil, errMismatch
	}
	ids := make([]string, 0, n)
	var pe *PublishError
	for i, r := range resp.Results {
		if err := resultError(r); err != nil {
			if pe == nil {
				pe = &PublishError{Total: n}
			}
			pe.Failed = append(pe.Failed, FailedMessage{Index: i, Err: err})
			continue
		}
		ids = append(ids, r.Id)
	}
	if pe != nil {
		return ids, pe
	}
	return ids, nil
}

// resultError is a refused message's error as a gRPC status, so that
// status.Code reads it; nil for a stored message.
// resultOf is one message's Result from the broker's answer.
func resultOf(r *pb.PublishResult) Result {
	return Result{ID: r.Id, Duplicate: r.Duplicate, Err: resultError(r)}
}

func resultError(r *pb.PublishResult) error {
	if r.Id != "" && r.Code == 0 {
		return nil
	}
	code := codes.Code(r.Code)
	if code == codes.OK {
		code = codes.Internal // no id and no reason: the broker broke the contract
	}
	return status.Error(code, r.Error)
}

// PublishError reports the messages of a Publish that the broker did not
// store; every other message of the call was stored.
type PublishError struct {
	Total  int             // messages in the call
	Failed []FailedMessage // in call order
}

// FailedMessage is one message the broker did not store, by its index in
// the call, with the broker's reason as a gRPC status error.
type FailedMessage struct {
	Index int
	Err   error
}

func (e *PublishError) Error() string {
	const show = 3
	var b strings.Builder
	fmt.Fprintf(&b, "harbinger: %d of %d messages not stored", len(e.Failed), e.Total)
	for i, f := range e.Failed {
		if i == show {
			fmt.Fprintf(&b, "; and %d more", len(e.Failed)-show)
			break
		}
		fmt.Fprintf(&b, "; message %d: %v", f.Index, status.Convert(f.Err).Message())
	}
	return b.String()
}

// Unwrap returns every failed message's error.
func (e *PublishError) Unwrap() []error {
	out := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		out[i] = f.Err
	}
	return out
}

// ErrCancelled is the cause (context.Cause) of a handler's context when
// its job was cancelled (Client.CancelJob).
var ErrCancelled = errors.New("harbinger: job cancelled")

// ErrClosed is returned by a Producer after Close.
var ErrClosed = errors.New("harbinger: producer closed")
