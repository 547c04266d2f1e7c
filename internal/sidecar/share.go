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
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/predictsvc"
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
	// DefaultBatchEvery and DefaultBatchMax bound how long an observation
	// or a prediction waits to be shared: a sidecar sends what its clients
	// told it in one message per DefaultBatchMax of them, or
	// DefaultBatchEvery after the first one waiting, whichever comes first.
	// One message per observation cost RabbitMQ a publish and a delivery
	// to every sidecar per job, about as much again as the job itself.
	DefaultBatchEvery = 50 * time.Millisecond
	DefaultBatchMax   = 256
	snapshotSuffix    = ".snapshots"
	backlogSuffix     = ".backlog"
	// caughtUpKeys is the size of each generation of keys a sidecar
	// remembers having replayed from snapshots: four snapshots' worth.
	caughtUpKeys = 4 * DefaultSnapshotKeys
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
	// BatchEvery and BatchMax: observations and predictions are shared in
	// batches of at most BatchMax (default 256), each sent at most
	// BatchEvery (default 50 ms) after its first entry was made.
	BatchEvery time.Duration
	BatchMax   int
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
	if c.BatchEvery == 0 {
		c.BatchEvery = DefaultBatchEvery
	}
	if c.BatchMax == 0 {
		c.BatchMax = DefaultBatchMax
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
	case c.BatchEvery < 0 || c.BatchMax < 1:
		return fmt.Errorf("sidecar: the batch interval must be positive and the batch size at least 1, got %v and %d", c.BatchEvery, c.BatchMax)
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

// batch is what a sidecar shares in one message on the observation
// exchange: its clients' observations and its warm predictions since the
// previous batch. A sidecar that sends batches shares its predictions, so
// a receiver records those in its tier window (rabbitmq.Local.RecordPeer)
// and learns from the observations without counting them in the window
// again. Its field names differ from an observation's, so that a batch
// never reads as one of the single observations that sidecars without
// batches send (one per message, their completions counted in the window
// instead: rabbitmq.Local.ObservePeer); those sidecars ignore a batch.
type batch struct {
	Observations []observation `json:"obs,omitempty"`
	Predictions  []observation `json:"pred,omitempty"` // NS is the predicted cost
}

func (b *batch) len() int { return len(b.Observations) + len(b.Predictions) }

// key is o's key, false when its queue could not be one a sidecar's
// clients name (predictsvc refuses those): a peer's message is anything
// publishing to the exchange can send, and the predictor keeps the queue
// name of every key whole, while it cuts producers and job types itself.
func (o observation) key() (rabbitmq.Key, bool) {
	if !queueName(o.Queue) {
		return rabbitmq.Key{}, false
	}
	return rabbitmq.Key{Queue: o.Queue, Producer: o.Producer, JobType: o.JobType, Size: o.Size}, true
}

// queueName reports whether q could be a queue's name: AMQP's limit.
func queueName(q string) bool {
	return q != "" && len(q) <= predictsvc.MaxQueueName && utf8.ValidString(q)
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
	PredictionsSent              uint64 // warm predictions shared
	PredictionsRead              uint64 // peers' predictions recorded
	Batches                      uint64 // batch messages sent
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
	send  func(ctx context.Context, exchange string, body []byte) error // publish; tests replace it

	batchMu    sync.Mutex
	pending    batch
	batchTimer clock.Timer    // nil while no batch timer is armed
	sending    sync.WaitGroup // full batches on their way (enqueue)

	mu sync.Mutex
	// Keys already replayed from a snapshot, in two generations: when the
	// newer holds caughtUpKeys, it becomes the older and the older is
	// dropped, so a key is replayed once until twice that many others
	// have been since, and the sets stay bounded.
	caughtUp, caughtUpOld map[rabbitmq.Key]bool
	peers                 map[string]bool // sidecar ids seen
	timer                 clock.Timer
	reportTimer           clock.Timer
	stopped               bool

	done  chan struct{}
	stats struct {
		sent, received, sendErrors, snapsSent, snapsRead, caughtUp atomic.Uint64
		reportsSent, reportsRead                                   atomic.Uint64
		predsSent, predsRead, batches                              atomic.Uint64
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
	s := newShare(cfg, local)
	s.pub = pub
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

// newShare returns a Share that is not connected yet; cfg has its defaults.
func newShare(cfg ShareConfig, local *rabbitmq.Local) *Share {
	s := &Share{
		cfg: cfg, local: local,
		caughtUp: make(map[rabbitmq.Key]bool), peers: make(map[string]bool),
		done: make(chan struct{}),
	}
	s.send = s.publish
	return s
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
		PredictionsSent: s.stats.predsSent.Load(), PredictionsRead: s.stats.predsRead.Load(),
		Batches: s.stats.batches.Load(),
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
	if s.send(context.Background(), s.cfg.BacklogExchange, body) == nil {
		s.stats.reportsSent.Add(1)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopped {
		s.reportTimer = s.cfg.Clock.AfterFunc(s.cfg.ReportEvery, s.report)
	}
}

// Publish queues one local observation for the other sidecars; it goes
// out with the next batch (ShareConfig.BatchEvery, BatchMax). It never
// waits for RabbitMQ, and a batch RabbitMQ refuses is counted
// (ShareStats.SendErrors), not returned: shared learning is best effort.
func (s *Share) Publish(_ context.Context, k rabbitmq.Key, d time.Duration) error {
	s.enqueue(func(b *batch) {
		b.Observations = append(b.Observations, observation{Queue: k.Queue, Producer: k.Producer, JobType: k.JobType, Size: k.Size, NS: int64(d)})
	})
	return nil
}

// SharePrediction queues the cost of a warm prediction this sidecar made
// for one of its clients, for the other sidecars' tier windows; it goes out
// with the next batch. It implements predictsvc.PredictionSharer.
func (s *Share) SharePrediction(k rabbitmq.Key, cost time.Duration) {
	if cost <= 0 {
		return
	}
	s.enqueue(func(b *batch) {
		b.Predictions = append(b.Predictions, observation{Queue: k.Queue, Producer: k.Producer, JobType: k.JobType, Size: k.Size, NS: int64(cost)})
	})
}

// enqueue adds to the waiting batch. The first entry arms the batch timer;
// the entry that fills the batch sends it from a goroutine of its own, so
// that a client's call never waits for RabbitMQ.
func (s *Share) enqueue(add func(*batch)) {
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	add(&s.pending)
	switch {
	case s.pending.len() >= s.cfg.BatchMax:
		b := s.take()
		s.mu.Lock()
		stopped := s.stopped
		s.mu.Unlock()
		// Once stopped, the share has waited for its sends (the stop takes
		// the batch under batchMu after setting stopped): a send started
		// now would race that wait and the channel's close. RabbitMQ is
		// gone, so the batch is lost, as the waiting one is.
		if !stopped {
			s.sending.Go(func() { s.sendBatch(b) })
		}
	case s.batchTimer == nil:
		s.mu.Lock()
		stopped := s.stopped
		s.mu.Unlock()
		if !stopped {
			s.batchTimer = s.cfg.Clock.AfterFunc(s.cfg.BatchEvery, s.flush)
		}
	}
}

// take empties the waiting batch and disarms its timer. s.batchMu is held.
func (s *Share) take() batch {
	b := s.pending
	s.pending = batch{}
	if s.batchTimer != nil {
		s.batchTimer.Stop()
		s.batchTimer = nil
	}
	return b
}

// flush sends the waiting batch, if any.
func (s *Share) flush() {
	s.batchMu.Lock()
	b := s.take()
	s.batchMu.Unlock()
	s.sendBatch(b)
}

func (s *Share) sendBatch(b batch) {
	if b.len() == 0 {
		return
	}
	body, _ := json.Marshal(b)
	if err := s.send(context.Background(), s.cfg.Exchange, body); err != nil {
		s.stats.sendErrors.Add(uint64(len(b.Observations)))
		return
	}
	s.stats.batches.Add(1)
	s.stats.sent.Add(uint64(len(b.Observations)))
	s.stats.predsSent.Add(uint64(len(b.Predictions)))
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
	if err := s.send(ctx, s.cfg.SnapshotExchange, body); err != nil {
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
		s.batchMu.Lock()
		s.take() // RabbitMQ is gone: what waits is lost, as best effort allows
		s.batchMu.Unlock()
		s.sending.Wait() // no send outlives the publishing channel
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
				s.foldShared(ctx, d.Body)
			case s.cfg.SnapshotExchange:
				s.foldSnapshot(ctx, from, d.Body)
			case s.cfg.BacklogExchange:
				s.foldReport(from, d.Body)
			}
		}
	}
}

// foldShared folds in what a peer shared on the observation exchange: a
// batch (its predictions into the tier window, its observations learned),
// or a single observation from a sidecar that does not batch, whose
// completions stand in for its predictions in the window.
func (s *Share) foldShared(ctx context.Context, body []byte) {
	var m struct {
		observation
		batch
	}
	if json.Unmarshal(body, &m) != nil {
		return
	}
	if m.Queue != "" {
		k, ok := m.observation.key()
		if m.NS <= 0 || !ok {
			return
		}
		if s.local.ObservePeer(ctx, k, time.Duration(m.NS)) == nil {
			s.stats.received.Add(1)
		}
		return
	}
	for _, p := range m.Predictions {
		if k, ok := p.key(); ok && p.NS > 0 {
			s.local.RecordPeer(k, time.Duration(p.NS))
			s.stats.predsRead.Add(1)
		}
	}
	for _, o := range m.Observations {
		k, ok := o.key()
		if o.NS <= 0 || !ok {
			continue
		}
		if s.local.Observe(ctx, k, time.Duration(o.NS)) == nil {
			s.stats.received.Add(1)
		}
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
	// Answered once per peer, and only for as many peers as a fleet keeps.
	newPeer := !s.peers[from] && len(s.peers) < MaxFleetPeers
	if newPeer {
		s.peers[from] = true
	}
	s.mu.Unlock()
	for _, sk := range snap.Keys {
		k, ok := sk.key()
		if sk.NS <= 0 || !ok {
			continue
		}
		// A key is caught up once, from the first snapshot that knows it
		// better than this sidecar does; one that knows it less well
		// leaves it for a better-informed peer's.
		have, _ := s.local.Lookup(k)
		if have.Count >= sk.Count {
			continue
		}
		s.mu.Lock()
		done := s.caughtUp[k] || s.caughtUpOld[k]
		if !done {
			if len(s.caughtUp) >= caughtUpKeys {
				s.caughtUpOld, s.caughtUp = s.caughtUp, make(map[rabbitmq.Key]bool)
			}
			s.caughtUp[k] = true
		}
		s.mu.Unlock()
		if done {
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
