package rabbitmq

import (
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	harbingerv1 "github.com/harbinger-mq/harbinger/api/harbinger/v1"
)

// DefaultRemoteTimeout bounds every call to the sidecar: a publisher waits
// no longer than this for a priority before taking the default one.
const DefaultRemoteTimeout = 50 * time.Millisecond

// RemoteOptions configures a sidecar client. The zero value of a field
// means its default.
type RemoteOptions struct {
	Timeout     time.Duration // per call, default 50 ms
	Tiers       int           // the sidecar's tier count, for the fallback priority; default 5
	MaxPriority uint8         // for the fallback priority; default 5
	// TLS, when set, connects over TLS with it (for a sidecar started
	// with -tls-cert; its Certificates for one that asks for client
	// certificates).
	TLS *tls.Config
	// Token is sent with every call, for a sidecar started with -tokens.
	// Without TLS it is sent only to a sidecar on this machine's loopback.
	Token string
}

// WithDefaults returns o with every zero field set to its default.
func (o RemoteOptions) WithDefaults() RemoteOptions {
	if o.Timeout == 0 {
		o.Timeout = DefaultRemoteTimeout
	}
	if o.Tiers == 0 {
		o.Tiers = DefaultTiers
	}
	if o.MaxPriority == 0 {
		o.MaxPriority = DefaultMaxPriority
	}
	return o
}

func (o RemoteOptions) validate() error {
	switch {
	case o.Timeout < 0:
		return fmt.Errorf("rabbitmq: remote timeout must be positive, got %v", o.Timeout)
	case o.Tiers < 1:
		return fmt.Errorf("rabbitmq: tiers must be at least 1, got %d", o.Tiers)
	}
	return nil
}

// Remote is a client of `harbinger sidecar`. It never makes a publisher
// wait: when the sidecar is down, slow or answers with an error, Predict
// returns the default (middle) priority with a nil error and counts a
// fallback. Observe errors are returned (and counted) so that a consumer can
// log them; they never affect the message. With a sidecar run with --hold,
// Consume also reports its handlers and each completion's stamp, and
// Predict returns holds (see HoldQueueArgs).
type Remote struct {
	opts   RemoteOptions
	conn   *grpc.ClientConn
	client harbingerv1.PredictorClient

	fallbacks     atomic.Uint64
	observeErrors atomic.Uint64
	attachErrors  atomic.Uint64
	lastErr       atomic.Pointer[error]
}

// DialSidecar returns a client of the sidecar at addr (host:port) with the
// default options. It does not wait for the sidecar: one that is down now
// is used once it is up, and meanwhile predictions fall back.
func DialSidecar(ctx context.Context, addr string) (*Remote, error) {
	return DialSidecarOptions(ctx, addr, RemoteOptions{})
}

// DialSidecarOptions is DialSidecar with options.
func DialSidecarOptions(_ context.Context, addr string, opts RemoteOptions) (*Remote, error) {
	opts = opts.WithDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if opts.TLS != nil {
		creds = credentials.NewTLS(opts.TLS)
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if opts.Token != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer{token: opts.Token, plain: opts.TLS == nil && loopback(addr)}))
	}
	conn, err := grpc.NewClient(addr, dial...)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: sidecar address %q: %w", addr, err)
	}
	conn.Connect()
	return &Remote{opts: opts, conn: conn, client: harbingerv1.NewPredictorClient(conn)}, nil
}

// bearer sends a token with every call.
type bearer struct {
	token string
	plain bool // no TLS: allowed only because the sidecar is on loopback
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return !b.plain }

func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// remote marks Remote as a predictor in another process, whose reports
// Consume sends from a goroutine of its own.
func (r *Remote) remote() {}

// Close closes the connection to the sidecar.
func (r *Remote) Close() error { return r.conn.Close() }

// Predict implements Predictor; see Remote for the fallback.
func (r *Remote) Predict(ctx context.Context, k Key) (Priority, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	resp, err := r.client.Predict(ctx, &harbingerv1.PredictRequest{
		Queue: k.Queue, Producer: k.Producer, JobType: k.JobType, SizeHint: k.Size,
	})
	if err != nil {
		r.fallbacks.Add(1)
		r.lastErr.Store(&err)
		return middle(r.opts.Tiers, r.opts.MaxPriority), nil
	}
	pr := Priority{
		Tier: int(resp.GetTier()),
		AMQP: uint8(min(resp.GetAmqpPriority(), 255)),
		// Rounded, so that the nanoseconds the sidecar sent come back exactly:
		// the stamp must take out of its backlog what the prediction put in.
		Predicted:   time.Duration(math.Round(resp.GetPredictedMs() * float64(time.Millisecond))),
		Cold:        resp.GetCold() || resp.GetSpreadGated(),
		SpreadGated: resp.GetSpreadGated(),
		Long:        resp.GetLong(),
	}
	if h := resp.GetHold(); h != nil && h.CheckValid() == nil && h.AsDuration() > 0 {
		pr.Hold = h.AsDuration()
	}
	return pr, nil
}

// Observe implements Predictor. It waits at most the timeout.
func (r *Remote) Observe(ctx context.Context, k Key, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	_, err := r.client.Observe(ctx, &harbingerv1.ObserveRequest{
		Queue: k.Queue, Producer: k.Producer, JobType: k.JobType, SizeHint: k.Size,
		Duration: durationpb.New(d),
	})
	if err != nil {
		r.observeErrors.Add(1)
		r.lastErr.Store(&err)
		return fmt.Errorf("rabbitmq: sidecar observe: %w", err)
	}
	return nil
}

// ObserveStamped is Observe with the prediction the publisher stamped on
// the message: a sidecar run with --hold takes the message out of its
// queue's backlog, and any sidecar scores the prediction.
func (r *Remote) ObserveStamped(ctx context.Context, k Key, s Stamp, took time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	_, err := r.client.Observe(ctx, &harbingerv1.ObserveRequest{
		Queue: k.Queue, Producer: k.Producer, JobType: k.JobType, SizeHint: k.Size,
		Duration: durationpb.New(took),
		Stamp:    &harbingerv1.Stamp{Predicted: durationpb.New(s.Predicted), Tier: uint32(max(s.Tier, 0)), Cold: s.Cold},
	})
	if err != nil {
		r.observeErrors.Add(1)
		r.lastErr.Store(&err)
		return fmt.Errorf("rabbitmq: sidecar observe: %w", err)
	}
	return nil
}

// Attach tells the sidecar that handlers started (or, negative, stopped)
// consuming queue; Consume calls it. A sidecar run with --hold needs the
// count to hold long messages; others ignore it. It waits at most the
// timeout, and a failure is counted (Stats), never returned: without the
// count the sidecar only holds less.
func (r *Remote) Attach(ctx context.Context, queue string, handlers int) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	n := int32(max(min(handlers, math.MaxInt32), math.MinInt32))
	if _, err := r.client.Attach(ctx, &harbingerv1.AttachRequest{Queue: queue, Handlers: n}); err != nil {
		r.attachErrors.Add(1)
		r.lastErr.Store(&err)
	}
}

// Forget is a no-op: the sidecar has no call to take back a message whose
// publish failed, so its prediction stays in the sidecar's backlog
// estimate (a failed publish usually means a closed channel, which is rare).
func (r *Remote) Forget(context.Context, string, time.Duration) {}

// RemoteStats counts what went wrong talking to the sidecar.
type RemoteStats struct {
	Fallbacks     uint64 // predictions answered with the default priority
	ObserveErrors uint64 // observations the sidecar did not take
	AttachErrors  uint64 // handler counts the sidecar did not take
	LastError     error  // the most recent error, nil if none
}

// Stats returns the counts so far.
func (r *Remote) Stats() RemoteStats {
	s := RemoteStats{Fallbacks: r.fallbacks.Load(), ObserveErrors: r.observeErrors.Load(), AttachErrors: r.attachErrors.Load()}
	if e := r.lastErr.Load(); e != nil {
		s.LastError = *e
	}
	return s
}

// Fallbacks returns how many predictions fell back to the default priority.
func (r *Remote) Fallbacks() uint64 { return r.fallbacks.Load() }
