// Package sidecar owns `harbinger sidecar`: Harbinger's predictor served
// over gRPC (the Predictor service of internal/predictsvc, which `harbinger
// serve` serves too) next to a RabbitMQ cluster, with
// Prometheus metrics, and learning shared between sidecars through RabbitMQ
// fanout exchanges. Publishers reach it with rabbitmq.DialSidecar.
package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	amqp "github.com/rabbitmq/amqp091-go"
	"google.golang.org/grpc"

	harbingerv1 "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/predictsvc"
	"github.com/harbinger-mq/harbinger/rabbitmq"
)

// Defaults for Config.
const (
	DefaultListen     = "127.0.0.1:7072"
	DefaultHTTP       = "127.0.0.1:7073"
	DefaultAMQPURL    = "amqp://guest:guest@127.0.0.1:5672/"
	DefaultRetryFirst = 500 * time.Millisecond
	DefaultRetryMax   = 30 * time.Second
)

// Config configures a sidecar. The zero value of a field means its default.
type Config struct {
	Listen string // gRPC address, default 127.0.0.1:7072; port 0 picks one
	HTTP   string // metrics address (/metrics, /healthz), default 127.0.0.1:7073; "-" disables
	// AMQPURL is RabbitMQ for shared learning, default the local guest
	// account; "-" disables sharing. Several URLs separated by commas
	// name the nodes of a cluster: the sidecar connects to the first it
	// can reach, in order, and when it loses that node it tries the same
	// node first, then the others (a comma inside a URL is written %2C).
	AMQPURL string
	Predict rabbitmq.LocalConfig
	// Hold makes the sidecar track each queue's backlog from its clients'
	// predictions, completions and handlers, and hold long messages (see
	// rabbitmq.HoldQueueArgs). With sharing on (AMQPURL not "-") the
	// sidecars of a fleet exchange their per-queue totals (see Fleet), so
	// each queue's publishers and consumers may use any sidecar of the
	// fleet; without sharing the estimate is right only when every
	// publisher and consumer of a queue uses this one sidecar.
	Hold   bool
	Share  ShareConfig
	Logger *slog.Logger // default discards
	Clock  clock.Clock  // default the wall clock
	// GRPCOptions are added to the gRPC server's: TLS credentials and the
	// token interceptors, as `harbinger sidecar -tls-cert -tokens` sets.
	GRPCOptions []grpc.ServerOption
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.HTTP == "" {
		c.HTTP = DefaultHTTP
	}
	if c.AMQPURL == "" {
		c.AMQPURL = DefaultAMQPURL
	}
	c.Predict = c.Predict.WithDefaults()
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Share.Clock == nil {
		c.Share.Clock = c.Clock
	}
	c.Share = c.Share.WithDefaults()
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	if c.Predict.MaxPriority == 0 {
		return errors.New("sidecar: max priority must be 1 to 255")
	}
	if c.AMQPURL != "-" {
		if _, err := ParseAMQPURLs(c.AMQPURL); err != nil {
			return err
		}
	}
	return c.Share.validate()
}

// ParseAMQPURLs splits a comma-separated list of AMQP URLs (Config.AMQPURL)
// and checks each, so that a mistyped URL fails at start instead of being
// retried forever. Errors name the URL by its place in the list, never
// by its text, which may hold a password.
func ParseAMQPURLs(list string) ([]string, error) {
	parts := strings.Split(list, ",")
	urls := make([]string, 0, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, fmt.Errorf("sidecar: AMQP URL %d of %d is empty (URLs are separated by single commas)", i+1, len(parts))
		}
		if !utf8.ValidString(p) {
			return nil, fmt.Errorf("sidecar: AMQP URL %d of %d is not valid UTF-8", i+1, len(parts))
		}
		u, err := amqp.ParseURI(p)
		if err != nil {
			// url.Parse's errors quote the whole URL, password and all.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return nil, fmt.Errorf("sidecar: AMQP URL %d of %d: %s", i+1, len(parts), strings.ReplaceAll(err.Error(), p, "the URL"))
		}
		if u.Host == "" {
			return nil, fmt.Errorf("sidecar: AMQP URL %d of %d names no host", i+1, len(parts))
		}
		urls = append(urls, p)
	}
	return urls, nil
}

// nodeOf names a URL's node for logs and errors: host and port, without
// credentials.
func nodeOf(url string) string {
	u, err := amqp.ParseURI(url)
	if err != nil {
		return "?"
	}
	return net.JoinHostPort(u.Host, strconv.Itoa(u.Port))
}

// Stats is everything the sidecar reports: the predictor's figures and the
// shared-learning counts since start.
type Stats struct {
	Predictor rabbitmq.LocalStats
	Share     ShareStats
	Connected bool
	// Node is the host:port of the RabbitMQ node it shares through, ""
	// while disconnected; Connects counts the connections it has made.
	Node     string
	Connects uint64
	// Reports counts the Report calls its clients made and the reports
	// (completions and publishes) they carried.
	Reports predictsvc.Stats
}

// Sidecar is a running sidecar.
type Sidecar struct {
	cfg     Config
	local   *rabbitmq.Local
	svc     *predictsvc.Service
	grpc    *grpc.Server
	grpcLis net.Listener
	http    *http.Server
	httpLis net.Listener

	cancel context.CancelFunc
	wg     sync.WaitGroup

	urls []string // Config.AMQPURL's nodes
	node int      // the one to try first: the one last connected to

	mu        sync.Mutex
	share     *Share
	shareNode string // node of share
	connects  uint64
	prevShare ShareStats // counts of shares that have ended
	connected chan struct{}
	expiry    clock.Timer // the fleet's next expiry, nil without a fleet
	closed    bool
}

// Start binds the listeners and starts serving. RabbitMQ being unreachable
// is not an error: the sidecar predicts from what it learns itself and keeps
// retrying the connection.
func Start(cfg Config) (*Sidecar, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	local, err := rabbitmq.NewLocal(cfg.Predict)
	if err != nil {
		return nil, err
	}
	if cfg.Hold && cfg.AMQPURL != "-" {
		cfg.Share.Fleet = NewFleet(cfg.Share.ID, cfg.Share.BacklogExpiry)
		local.SetPeers(cfg.Share.Fleet)
	}
	s := &Sidecar{cfg: cfg, local: local, svc: predictsvc.New(local, predictsvc.Config{Hold: cfg.Hold}), connected: make(chan struct{})}
	if cfg.AMQPURL != "-" {
		s.urls, _ = ParseAMQPURLs(cfg.AMQPURL) // validated above
	}
	if s.grpcLis, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("sidecar: listen %s: %w", cfg.Listen, err)
	}
	if cfg.HTTP != "-" {
		if s.httpLis, err = net.Listen("tcp", cfg.HTTP); err != nil {
			s.grpcLis.Close()
			return nil, fmt.Errorf("sidecar: listen %s: %w", cfg.HTTP, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.grpc = grpc.NewServer(cfg.GRPCOptions...)
	harbingerv1.RegisterPredictorServer(s.grpc, s.svc)
	s.wg.Go(func() { _ = s.grpc.Serve(s.grpcLis) })
	if s.httpLis != nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(newCollector(s.Stats))
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		s.wg.Go(func() { _ = s.http.Serve(s.httpLis) })
	}
	if cfg.AMQPURL != "-" {
		s.wg.Go(func() { s.connectLoop(ctx) })
	}
	if cfg.Share.Fleet != nil {
		s.armExpiry()
	}
	return s, nil
}

// armExpiry expires the fleet's dead peers every report interval, whether
// or not a share is reporting: a sidecar cut off from RabbitMQ hears from
// no peer, and must stop counting their handlers after the expiry as if
// they had died, not hold by their last reports for as long as it is cut
// off.
func (s *Sidecar) armExpiry() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.expiry = s.cfg.Clock.AfterFunc(s.cfg.Share.ReportEvery, func() {
		s.cfg.Share.Fleet.Expire(s.cfg.Clock.Now())
		s.armExpiry()
	})
}

// Addr returns the gRPC address.
func (s *Sidecar) Addr() string { return s.grpcLis.Addr().String() }

// HTTPAddr returns the metrics address, or "" when disabled.
func (s *Sidecar) HTTPAddr() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

// Local returns the sidecar's predictor.
func (s *Sidecar) Local() *rabbitmq.Local { return s.local }

// Fleet returns the sidecar's view of its fleet's backlogs, nil unless it
// holds and shares.
func (s *Sidecar) Fleet() *Fleet { return s.cfg.Share.Fleet }

// ID returns the id the sidecar shares under.
func (s *Sidecar) ID() string { return s.cfg.Share.ID }

// Connected is closed once the sidecar first shares through RabbitMQ.
func (s *Sidecar) Connected() <-chan struct{} { return s.connected }

// Stats returns the sidecar's figures.
func (s *Sidecar) Stats() Stats {
	st := Stats{Predictor: s.local.Stats(), Reports: s.svc.Stats()}
	s.mu.Lock()
	st.Share = s.prevShare
	if s.share != nil {
		st.Connected, st.Node = true, s.shareNode
		st.Share = addShareStats(st.Share, s.share.Stats())
	}
	st.Connects = s.connects
	s.mu.Unlock()
	return st
}

func addShareStats(a, b ShareStats) ShareStats {
	return ShareStats{
		Sent: a.Sent + b.Sent, Received: a.Received + b.Received, SendErrors: a.SendErrors + b.SendErrors,
		SnapshotsSent: a.SnapshotsSent + b.SnapshotsSent, SnapshotsRead: a.SnapshotsRead + b.SnapshotsRead,
		CaughtUp:    a.CaughtUp + b.CaughtUp,
		ReportsSent: a.ReportsSent + b.ReportsSent, ReportsRead: a.ReportsRead + b.ReportsRead,
		PredictionsSent: a.PredictionsSent + b.PredictionsSent, PredictionsRead: a.PredictionsRead + b.PredictionsRead,
		Batches: a.Batches + b.Batches,
	}
}

// Close stops serving and waits for every goroutine the sidecar started.
func (s *Sidecar) Close() error {
	s.mu.Lock()
	s.closed = true
	if s.expiry != nil {
		s.expiry.Stop()
	}
	s.mu.Unlock()
	s.cancel()
	s.grpc.Stop()
	if s.http != nil {
		_ = s.http.Close()
	}
	s.wg.Wait()
	return nil
}

// connectLoop keeps one AMQP connection and one Share on it, reconnecting
// with exponential backoff when RabbitMQ goes away.
func (s *Sidecar) connectLoop(ctx context.Context) {
	log := s.cfg.Logger
	retry := DefaultRetryFirst
	for ctx.Err() == nil {
		conn, sh, node, err := s.connect(ctx)
		if err != nil {
			log.Warn("sidecar: RabbitMQ unreachable; predicting from local learning only", "err", err, "retry_in", retry)
			if !s.wait(ctx, retry) {
				return
			}
			retry = min(2*retry, DefaultRetryMax)
			continue
		}
		retry = DefaultRetryFirst
		log.Info("sidecar: sharing learning through RabbitMQ", "id", sh.ID(), "exchange", s.cfg.Share.Exchange, "node", node)
		s.mu.Lock()
		s.share, s.shareNode = sh, node
		s.connects++
		select {
		case <-s.connected:
		default:
			close(s.connected)
		}
		s.mu.Unlock()
		s.svc.SetSharer(sh)
		<-sh.Done()
		s.svc.SetSharer(nil)
		s.mu.Lock()
		s.prevShare = addShareStats(s.prevShare, sh.Stats())
		s.share = nil
		s.mu.Unlock()
		_ = conn.Close()
		if ctx.Err() == nil {
			log.Warn("sidecar: lost RabbitMQ; reconnecting", "node", node)
		}
	}
}

// connect tries each node once, starting with the one it last connected
// to, and shares through the first that takes it. The error names every
// node's failure.
func (s *Sidecar) connect(ctx context.Context) (*amqp.Connection, *Share, string, error) {
	var errs []error
	for i := range s.urls {
		n := (s.node + i) % len(s.urls)
		node := nodeOf(s.urls[n])
		conn, err := amqp.DialConfig(s.urls[n], amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", node, err))
			continue
		}
		sh, err := StartShare(ctx, conn, s.local, s.cfg.Share)
		if err != nil {
			_ = conn.Close()
			errs = append(errs, fmt.Errorf("%s: %w", node, err))
			continue
		}
		s.node = n
		return conn, sh, node, nil
	}
	return nil, nil, "", errors.Join(errs...)
}

// wait waits d on the injected clock, or until ctx is done (false).
func (s *Sidecar) wait(ctx context.Context, d time.Duration) bool {
	fired := make(chan struct{})
	t := s.cfg.Clock.AfterFunc(d, func() { close(fired) })
	select {
	case <-fired:
		return true
	case <-ctx.Done():
		t.Stop()
		return false
	}
}
