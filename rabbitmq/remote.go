package rabbitmq

import (
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	harbingerv1 "github.com/harbinger-mq/harbinger/api/harbinger/v1"
)

// DefaultRemoteTimeout bounds every call to the sidecar: a publisher waits
// no longer than this for a priority before taking the default one.
const DefaultRemoteTimeout = 50 * time.Millisecond

// CountedMetadata is the gRPC metadata key with which a caching Remote
// (RemoteOptions.CacheFor) tells the sidecar about a message it already
// published with an earlier answer: the value is the predicted duration
// stamped on it, in nanoseconds, which the sidecar counts in the queue's
// backlog instead of its own fresh prediction (Local.PredictCounted). A
// sidecar that does not know the key counts its fresh prediction, and the
// backlog is off by the difference until the consumer's stamp takes it out.
const CountedMetadata = "x-harbinger-counted-ns"

// maxCached bounds the keys a Remote caches; past it the cache starts
// again empty.
const maxCached = 10_000

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
	// CacheFor, when positive, lets Predict answer from the sidecar's
	// latest answer for the same key if that answer's request went out
	// less than CacheFor ago, instead of waiting for a round trip. The
	// sidecar still hears of every message: a cached answer is followed
	// by a report, off the publisher's path, that carries the predicted
	// duration stamped on the message (see ReportEvery), and whose answer
	// replaces the cached one. So under steady traffic a
	// message gets the answer the key's previous message got, and never
	// one older than CacheFor; its tier, long mark and hold are that much
	// staler (see docs/sidecar.md). 0, the default, asks for every message.
	CacheFor time.Duration
	// ReportEvery is how long a report may wait to share a call with
	// others: consumers' completions, and the publishes answered from the
	// cache, go to the sidecar in batches (its Report call), a batch when
	// it holds 256 reports or this long after its first, so that a busy
	// client makes a call per batch rather than per message. Nobody waits
	// for a report; each delays what the sidecar knows (its backlog, hence
	// its holds, and its learning) by up to this much. Default
	// DefaultReportEvery; negative sends each report in a call of its own.
	ReportEvery time.Duration
	// Now is the clock the cache ages by, default time.Now.
	Now func() time.Time
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
	if o.ReportEvery == 0 {
		o.ReportEvery = DefaultReportEvery
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

func (o RemoteOptions) validate() error {
	switch {
	case o.Timeout < 0:
		return fmt.Errorf("rabbitmq: remote timeout must be positive, got %v", o.Timeout)
	case o.Tiers < 1:
		return fmt.Errorf("rabbitmq: tiers must be at least 1, got %d", o.Tiers)
	case o.CacheFor < 0:
		return fmt.Errorf("rabbitmq: cache time must not be negative, got %v", o.CacheFor)
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

	// The cache (RemoteOptions.CacheFor).
	cacheMu     sync.Mutex
	cache       map[Key]cachedAnswer
	hits        atomic.Uint64
	countErrors atomic.Uint64
	asked       atomic.Uint64 // requests sent, numbering them for the cache

	reports  *reports
	noReport atomic.Bool // the sidecar predates Report: one call per report
}

// cachedAnswer is the sidecar's latest answer for a key, and when the
// request it answered went out.
type cachedAnswer struct {
	pr  Priority
	at  time.Time
	seq uint64 // of the request: a later request's answer replaces an earlier's
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
	r := &Remote{opts: opts, conn: conn, client: harbingerv1.NewPredictorClient(conn)}
	if opts.CacheFor > 0 {
		r.cache = make(map[Key]cachedAnswer)
	}
	r.reports = newReports(r, opts.ReportEvery)
	return r, nil
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

// Close sends the reports that wait and waits for their answers (each
// batch bounded by the timeout), then closes the connection. Call it after
// the last Predict and once every Consume that uses r has returned.
func (r *Remote) Close() error {
	r.reports.close()
	return r.conn.Close()
}

// Predict implements Predictor; see Remote for the fallback and
// RemoteOptions.CacheFor for the cache.
func (r *Remote) Predict(ctx context.Context, k Key) (Priority, error) {
	now := r.opts.Now()
	if r.cache != nil {
		r.cacheMu.Lock()
		c, ok := r.cache[k]
		r.cacheMu.Unlock()
		if ok && now.Sub(c.at) < r.opts.CacheFor {
			r.hits.Add(1)
			// A publish the sidecar never hears of would leave its
			// completion subtracting from the backlog what was never added.
			r.reports.count(countedPublish{key: k, seq: r.asked.Add(1), sent: now, req: &harbingerv1.CountedPublish{
				Job:     &harbingerv1.PredictRequest{Queue: k.Queue, Producer: k.Producer, JobType: k.JobType, SizeHint: k.Size},
				Counted: durationpb.New(c.pr.Predicted),
			}})
			return c.pr, nil
		}
	}
	pr, err := r.ask(ctx, k, now, -1)
	if err != nil {
		r.fallbacks.Add(1)
		r.lastErr.Store(&err)
		return middle(r.opts.Tiers, r.opts.MaxPriority), nil
	}
	return pr, nil
}

// ask asks the sidecar for k's priority and caches the answer as of sent,
// when the request went out.
func (r *Remote) ask(ctx context.Context, k Key, sent time.Time, counted time.Duration) (Priority, error) {
	return r.askAt(ctx, k, sent, r.asked.Add(1), counted)
}

// askAt is ask for the request numbered seq, telling the sidecar the
// duration already stamped on the message when counted is not negative.
func (r *Remote) askAt(ctx context.Context, k Key, sent time.Time, seq uint64, counted time.Duration) (Priority, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	if counted >= 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, CountedMetadata, strconv.FormatInt(int64(counted), 10))
	}
	resp, err := r.client.Predict(ctx, &harbingerv1.PredictRequest{
		Queue: k.Queue, Producer: k.Producer, JobType: k.JobType, SizeHint: k.Size,
	})
	if err != nil {
		return Priority{}, err
	}
	pr := priorityOf(resp)
	r.remember(k, pr, sent, seq)
	return pr, nil
}

// priorityOf decodes the sidecar's answer.
func priorityOf(resp *harbingerv1.PredictResponse) Priority {
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
	return pr
}

// remember caches the answer to request seq, sent at sent, unless a later
// request's answer is cached already.
func (r *Remote) remember(k Key, pr Priority, sent time.Time, seq uint64) {
	if r.cache == nil {
		return
	}
	r.cacheMu.Lock()
	defer r.cacheMu.Unlock()
	if c, ok := r.cache[k]; !ok || seq > c.seq {
		if !ok && len(r.cache) >= maxCached {
			clear(r.cache)
		}
		r.cache[k] = cachedAnswer{pr: pr, at: sent, seq: seq}
	}
}

// Observe implements Predictor. It waits at most the timeout.
func (r *Remote) Observe(ctx context.Context, k Key, d time.Duration) error {
	return r.observeOne(ctx, observeRequest(k, nil, d))
}

// ObserveStamped is Observe with the prediction the publisher stamped on
// the message: a sidecar run with --hold takes the message out of its
// queue's backlog, and any sidecar scores the prediction.
func (r *Remote) ObserveStamped(ctx context.Context, k Key, s Stamp, took time.Duration) error {
	return r.observeOne(ctx, observeRequest(k, &s, took))
}

// observeOne sends one observation in a call of its own.
func (r *Remote) observeOne(ctx context.Context, req *harbingerv1.ObserveRequest) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	if _, err := r.client.Observe(ctx, req); err != nil {
		r.observeErrors.Add(1)
		r.lastErr.Store(&err)
		return fmt.Errorf("rabbitmq: sidecar observe: %w", err)
	}
	return nil
}

// report queues a consumer's completion for the next batch (ReportEvery):
// the consumer does not wait for the sidecar. A nil stamp sends none; a
// failure is counted and passed to onErr, which may be nil.
func (r *Remote) report(k Key, s *Stamp, took time.Duration, onErr func(error)) {
	r.reports.observe(observeRequest(k, s, took), onErr)
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

// Forget tells the sidecar that a message left queue without completing
// (its publish failed, or its consumer rejected it), so that its
// prediction leaves the queue's backlog. A failure is counted in
// ObserveErrors; the sidecar then keeps counting the message.
func (r *Remote) Forget(ctx context.Context, queue string, predicted time.Duration) {
	// Cleanup after a failure, often of ctx itself: it runs regardless.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.Timeout)
	defer cancel()
	_, err := r.client.Observe(ctx, &harbingerv1.ObserveRequest{
		Queue: queue, Dropped: true, Stamp: &harbingerv1.Stamp{Predicted: durationpb.New(max(predicted, 0))},
	})
	if err != nil {
		r.observeErrors.Add(1)
		r.lastErr.Store(&err)
	}
}

// RemoteStats counts what went wrong talking to the sidecar.
type RemoteStats struct {
	Fallbacks     uint64 // predictions answered with the default priority
	CacheHits     uint64 // predictions answered from the cache (RemoteOptions.CacheFor)
	CountErrors   uint64 // cached answers' messages the sidecar was not told of
	ObserveErrors uint64 // observations the sidecar did not take
	AttachErrors  uint64 // handler counts the sidecar did not take
	LastError     error  // the most recent error, nil if none
}

// Stats returns the counts so far.
func (r *Remote) Stats() RemoteStats {
	s := RemoteStats{
		Fallbacks: r.fallbacks.Load(), CacheHits: r.hits.Load(), CountErrors: r.countErrors.Load(),
		ObserveErrors: r.observeErrors.Load(), AttachErrors: r.attachErrors.Load(),
	}
	if e := r.lastErr.Load(); e != nil {
		s.LastError = *e
	}
	return s
}

// Fallbacks returns how many predictions fell back to the default priority.
func (r *Remote) Fallbacks() uint64 { return r.fallbacks.Load() }
