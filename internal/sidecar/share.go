package sidecar

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/rabbitmq"
)

// Defaults for ShareConfig.
const (
	DefaultExchange            = "harbinger.observations"
	DefaultSnapshotEvery       = 10 * time.Second
	DefaultSnapshotKeys        = 10_000
	DefaultCatchUpObservations = 32
	// DefaultReportEvery is how often a holding sidecar reports its
	// per-queue totals to the fleet: often enough that a peer's share of a
	// backlog is at most a fifth of a second old, for one small message
	// per sidecar.
	DefaultReportEvery = 200 * time.Millisecond
	// DefaultBacklogExpiry is how long a peer's totals count after its
	// latest report: ten missed reports, so that a slow broker does not
	// make a live peer look dead.
	DefaultBacklogExpiry = 2 * time.Second
	snapshotSuffix       = ".snapshots"
	backlogSuffix        = ".backlog"
)

// HeaderSidecarID marks what a sidecar published, so that it skips its own
// observations and snapshots when they come back through the fanout.
const HeaderSidecarID = "x-harbinger-sidecar-id"

// ShareConfig configures shared learning through RabbitMQ. The zero value of
// a field means its default.
type ShareConfig struct {
	Exchange         string        // fanout exchange of observations, default harbinger.observations
	SnapshotExchange string        // fanout exchange of snapshots, default Exchange + ".snapshots"
	SnapshotEvery    time.Duration // default 10 s
	SnapshotKeys     int           // busiest keys per snapshot, default 10000
	// CatchUpObservations is how many times a key's EWMA from another
	// sidecar's snapshot is replayed into a key this sidecar knows less
	// about, default 32 (enough for the default alpha to converge).
	CatchUpObservations int
	ID                  string      // this sidecar's id, default random
	Clock               clock.Clock // default the wall clock
	// Fleet, when set, makes the share exchange per-queue backlog totals
	// on BacklogExchange (default Exchange + ".backlog"): it reports the
	// predictor's totals every ReportEvery (default 200 ms) and folds the
	// peers' into Fleet, where a peer counts until BacklogExpiry (default
	// 2 s) after its latest report. The sidecar sets it with Config.Hold.
	Fleet           *Fleet
	BacklogExchange string
	ReportEvery     time.Duration
	BacklogExpiry   time.Duration
}

// WithDefaults returns c with every zero field set to its default.
func (c ShareConfig) WithDefaults() ShareConfig {
	if c.Exchange == "" {
		c.Exchange = DefaultExchange
	}
	if c.SnapshotExchange == "" {
		c.SnapshotExchange = c.Exchange + snapshotSuffix
	}
	if c.BacklogExchange == "" {
		c.BacklogExchange = c.Exchange + backlogSuffix
	}
	if c.ReportEvery == 0 {
		c.ReportEvery = DefaultReportEvery
	}
	if c.BacklogExpiry == 0 {
		c.BacklogExpiry = DefaultBacklogExpiry
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = DefaultSnapshotEvery
	}
	if c.SnapshotKeys == 0 {
		c.SnapshotKeys = DefaultSnapshotKeys
	}
	if c.CatchUpObservations == 0 {
		c.CatchUpObservations = DefaultCatchUpObservations
	}
	if c.ID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		c.ID = hex.EncodeToString(b[:])
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	return c
}

func (c ShareConfig) validate() error {
	switch {
	case c.Exchange == c.SnapshotExchange:
		return fmt.Errorf("sidecar: the observation and snapshot exchanges must differ, both are %q", c.Exchange)
	case c.BacklogExchange == c.Exchange || c.BacklogExchange == c.SnapshotExchange:
		return fmt.Errorf("sidecar: the backlog exchange must differ from the observation and snapshot exchanges, got %q", c.BacklogExchange)
	case c.ReportEvery < 0 || c.BacklogExpiry < 0:
		return fmt.Errorf("sidecar: the backlog report interval and expiry must be positive, got %v and %v", c.ReportEvery, c.BacklogExpiry)
	case c.BacklogExpiry > 0 && c.BacklogExpiry < 2*c.ReportEvery:
		return fmt.Errorf("sidecar: the backlog expiry (%v) must be at least two report intervals (%v), or every late report would expire a live peer", c.BacklogExpiry, c.ReportEvery)
	case c.SnapshotEvery < 0:
		return fmt.Errorf("sidecar: snapshot interval must be positive, got %v", c.SnapshotEvery)
	case c.SnapshotKeys < 1 || c.CatchUpObservations < 1:
		return errors.New("sidecar: snapshot keys and catch-up observations must be at least 1")
	}
	return nil
}

// observation is one measured duration on the wire.
type observation struct {
	Queue    string `json:"q"`
	Producer string `json:"p,omitempty"`
	JobType  string `json:"t,omitempty"`
	Size     uint64 `json:"s,omitempty"`
	NS       int64  `json:"d"`
}

// snapshot is a sidecar's per-key state on the wire.
type snapshot struct {
	Keys []snapshotKey `json:"keys"`
}

type snapshotKey struct {
	observation        // NS is the EWMA
	Count       uint64 `json:"n"`
}

// ShareStats counts shared-learning traffic.
type ShareStats struct {
	Sent, Received, SendErrors   uint64 // observations
	SnapshotsSent, SnapshotsRead uint64
	CaughtUp                     uint64 // keys replayed from snapshots
	ReportsSent, ReportsRead     uint64 // backlog totals (with Fleet)
}

// Share shares one Local predictor's learning with every other sidecar on
// the same exchanges: it publishes local observations, folds in everyone
// else's, and publishes and reads periodic snapshots so that a sidecar that
// starts late catches up. It lives as long as one AMQP connection.
type Share struct {
	cfg   ShareConfig
	local *rabbitmq.Local

	pubMu sync.Mutex
	pub   *amqp.Channel

	mu          sync.Mutex
	caughtUp    map[rabbitmq.Key]bool // keys already replayed from a snapshot
	peers       map[string]bool       // sidecar ids seen
	timer       clock.Timer
	reportTimer clock.Timer
	stopped     bool

	done  chan struct{}
	stats struct {
		sent, received, sendErrors, snapsSent, snapsRead, caughtUp atomic.Uint64
		reportsSent, reportsRead                                   atomic.Uint64
	}
}

// StartShare declares the two fanout exchanges and this sidecar's exclusive
// queue bound to both, starts consuming, and publishes a first snapshot
// (which makes the other sidecars answer with theirs). It stops when ctx is
// done or the connection closes; Done tells when.
func StartShare(ctx context.Context, conn *amqp.Connection, local *rabbitmq.Local, cfg ShareConfig) (*Share, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pub, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("sidecar: open channel: %w", err)
	}
	sub, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("sidecar: open channel: %w", err)
	}
	exchanges := []string{cfg.Exchange, cfg.SnapshotExchange}
	if cfg.Fleet != nil {
		exchanges = append(exchanges, cfg.BacklogExchange)
	}
	for _, ex := range exchanges {
		if err := pub.ExchangeDeclare(ex, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
			return nil, fmt.Errorf("sidecar: declare exchange %q: %w", ex, err)
		}
	}
	q, err := sub.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		return nil, fmt.Errorf("sidecar: declare queue: %w", err)
	}
	for _, ex := range exchanges {
		if err := sub.QueueBind(q.Name, "", ex, false, nil); err != nil {
			return nil, fmt.Errorf("sidecar: bind to %q: %w", ex, err)
		}
	}
	ds, err := sub.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("sidecar: consume: %w", err)
	}
	s := &Share{
		cfg: cfg, local: local, pub: pub,
		caughtUp: make(map[rabbitmq.Key]bool), peers: make(map[string]bool),
		done: make(chan struct{}),
	}
	go s.consume(ctx, sub, ds)
	if err := s.PublishSnapshot(ctx); err != nil {
		return nil, err
	}
	s.arm()
	if cfg.Fleet != nil {
		s.report()
	}
	return s, nil
}

// ID returns this sidecar's id.
func (s *Share) ID() string { return s.cfg.ID }

// Done is closed when the share has stopped.
func (s *Share) Done() <-chan struct{} { return s.done }

// Stats returns the counts so far.
func (s *Share) Stats() ShareStats {
	return ShareStats{
		Sent: s.stats.sent.Load(), Received: s.stats.received.Load(), SendErrors: s.stats.sendErrors.Load(),
		SnapshotsSent: s.stats.snapsSent.Load(), SnapshotsRead: s.stats.snapsRead.Load(),
		CaughtUp:    s.stats.caughtUp.Load(),
		ReportsSent: s.stats.reportsSent.Load(), ReportsRead: s.stats.reportsRead.Load(),
	}
}

// reportSeq numbers a process's backlog reports across its shares (one per
// connection), so that a peer never takes a report sent before a
// reconnection for a newer one.
var reportSeq atomic.Uint64

// report expires dead peers, publishes this sidecar's totals and arms the
// next report.
func (s *Share) report() {
	f := s.cfg.Fleet
	f.Expire(s.cfg.Clock.Now())
	r := f.Report(reportSeq.Add(1), s.local.Totals())
	body, _ := json.Marshal(r)
	if s.publish(context.Background(), s.cfg.BacklogExchange, body) == nil {
		s.stats.reportsSent.Add(1)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopped {
		s.reportTimer = s.cfg.Clock.AfterFunc(s.cfg.ReportEvery, s.report)
	}
}

// Publish sends one local observation to the other sidecars. It does not
// wait for RabbitMQ to confirm: shared learning is best effort.
func (s *Share) Publish(ctx context.Context, k rabbitmq.Key, d time.Duration) error {
	body, _ := json.Marshal(observation{Queue: k.Queue, Producer: k.Producer, JobType: k.JobType, Size: k.Size, NS: int64(d)})
	if err := s.publish(ctx, s.cfg.Exchange, body); err != nil {
		s.stats.sendErrors.Add(1)
		return err
	}
	s.stats.sent.Add(1)
	return nil
}

// PublishSnapshot sends the busiest keys' counts and EWMAs.
func (s *Share) PublishSnapshot(ctx context.Context) error {
	ks := s.local.Keys(s.cfg.SnapshotKeys)
	snap := snapshot{Keys: make([]snapshotKey, len(ks))}
	for i, k := range ks {
		snap.Keys[i] = snapshotKey{
			observation: observation{Queue: k.Key.Queue, Producer: k.Key.Producer, JobType: k.Key.JobType, Size: k.Key.Size, NS: int64(k.EWMA)},
			Count:       k.Count,
		}
	}
	body, _ := json.Marshal(snap)
	if err := s.publish(ctx, s.cfg.SnapshotExchange, body); err != nil {
		return err
	}
	s.stats.snapsSent.Add(1)
	return nil
}

func (s *Share) publish(ctx context.Context, exchange string, body []byte) error {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	err := s.pub.PublishWithContext(ctx, exchange, "", false, false, amqp.Publishing{
		ContentType: "application/json",
		Headers:     amqp.Table{HeaderSidecarID: s.cfg.ID},
		Body:        body,
	})
	if err != nil {
		return fmt.Errorf("sidecar: publish to %q: %w", exchange, err)
	}
	return nil
}

// arm schedules the next periodic snapshot.
func (s *Share) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.timer = s.cfg.Clock.AfterFunc(s.cfg.SnapshotEvery, func() {
		_ = s.PublishSnapshot(context.Background())
		s.arm()
	})
}

func (s *Share) consume(ctx context.Context, sub *amqp.Channel, ds <-chan amqp.Delivery) {
	defer close(s.done)
	defer func() {
		s.mu.Lock()
		s.stopped = true
		if s.timer != nil {
			s.timer.Stop()
		}
		if s.reportTimer != nil {
			s.reportTimer.Stop()
		}
		s.mu.Unlock()
		_ = sub.Close()
		s.pubMu.Lock()
		_ = s.pub.Close()
		s.pubMu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case d, ok := <-ds:
			if !ok {
				return
			}
			from, _ := d.Headers[HeaderSidecarID].(string)
			if from == s.cfg.ID {
				continue
			}
			switch d.Exchange {
			case s.cfg.Exchange:
				s.foldObservation(ctx, d.Body)
			case s.cfg.SnapshotExchange:
				s.foldSnapshot(ctx, from, d.Body)
			case s.cfg.BacklogExchange:
				s.foldReport(from, d.Body)
			}
		}
	}
}

func (s *Share) foldObservation(ctx context.Context, body []byte) {
	var o observation
	if json.Unmarshal(body, &o) != nil || o.NS <= 0 {
		return
	}
	k := rabbitmq.Key{Queue: o.Queue, Producer: o.Producer, JobType: o.JobType, Size: o.Size}
	// As a peer's: the window the tiers are drawn from then holds the
	// fleet's mix of work, not only this sidecar's clients'.
	if s.local.ObservePeer(ctx, k, time.Duration(o.NS)) == nil {
		s.stats.received.Add(1)
	}
}

// foldSnapshot replays another sidecar's EWMA into every key this sidecar
// has seen fewer observations of and has not yet caught up on. A snapshot
// from a sidecar not seen before is answered with this sidecar's own, so a
// newcomer catches up without waiting for the next period.
func (s *Share) foldSnapshot(ctx context.Context, from string, body []byte) {
	var snap snapshot
	if json.Unmarshal(body, &snap) != nil {
		return
	}
	s.stats.snapsRead.Add(1)
	s.mu.Lock()
	newPeer := !s.peers[from]
	s.peers[from] = true
	s.mu.Unlock()
	for _, sk := range snap.Keys {
		k := rabbitmq.Key{Queue: sk.Queue, Producer: sk.Producer, JobType: sk.JobType, Size: sk.Size}
		if sk.NS <= 0 {
			continue
		}
		s.mu.Lock()
		done := s.caughtUp[k]
		if !done {
			if len(s.caughtUp) >= 4*DefaultSnapshotKeys {
				clear(s.caughtUp)
			}
			s.caughtUp[k] = true
		}
		s.mu.Unlock()
		if done {
			continue
		}
		have, _ := s.local.Lookup(k)
		if have.Count >= sk.Count {
			continue
		}
		n := min(sk.Count-have.Count, uint64(s.cfg.CatchUpObservations))
		for range n {
			_ = s.local.Observe(ctx, k, time.Duration(sk.NS))
		}
		s.stats.caughtUp.Add(1)
	}
	if newPeer {
		_ = s.PublishSnapshot(ctx)
	}
}

// foldReport takes a peer's backlog totals into the fleet.
func (s *Share) foldReport(from string, body []byte) {
	if s.cfg.Fleet == nil {
		return
	}
	var r backlogReport
	if json.Unmarshal(body, &r) != nil {
		return
	}
	s.stats.reportsRead.Add(1)
	s.cfg.Fleet.Update(from, s.cfg.Clock.Now(), r)
}
