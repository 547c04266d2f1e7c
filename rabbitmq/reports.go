package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	harbingerv1 "github.com/harbinger-mq/harbinger/api/harbinger/v1"
)

// DefaultReportEvery is RemoteOptions.ReportEvery's default: long enough
// that a busy client's reports share calls, short next to the sidecars'
// exchange of backlogs (every 200 ms by default), which already makes
// every hold that much staler.
const DefaultReportEvery = 10 * time.Millisecond

// Bounds on a Remote's reports.
const (
	// reportBatch is the most items one Report call carries; a batch that
	// fills goes out at once.
	reportBatch = 256
	// reportCalls is how many Report calls a Remote has in flight at once.
	reportCalls = 4
	// maxUnsent bounds the reports a Remote holds that the sidecar has not
	// answered; past it a report fails at once (a sidecar that is down or
	// far behind), counted as any failed report is.
	maxUnsent = 16 * reportBatch
)

// errReportsBacklogged fails a report made while maxUnsent reports wait.
var errReportsBacklogged = errors.New("rabbitmq: sidecar reports backed up: the sidecar is down or slow; report dropped")

// observation is a completion waiting to go out, with who to tell if it
// fails.
type observation struct {
	req   *harbingerv1.ObserveRequest
	onErr func(error) // may be nil
}

// countedPublish is a publish answered from the cache, waiting to go out:
// seq and sent are the request's, for the answer to refresh the cache.
type countedPublish struct {
	key  Key
	req  *harbingerv1.CountedPublish
	seq  uint64
	sent time.Time
}

// reports collects a Remote's reports (completions, and publishes answered
// from its cache) and sends them to the sidecar in batches: one Report
// call per batch, sent when the batch fills or `every` after its
// first report, at most reportCalls at once. Nobody waits for a batch:
// a failed item is counted, and a completion's failure is passed to its
// onErr. Against a sidecar that predates Report, the batch's items go out
// one call each.
type reports struct {
	r     *Remote
	every time.Duration // negative: every report at once, alone
	after func(time.Duration, func()) func() bool

	mu      sync.Mutex
	obs     []observation
	pubs    []countedPublish
	unsent  int         // reports taken and not yet answered, these included
	stop    func() bool // the armed timer's, nil when none
	calls   chan struct{}
	sending sync.WaitGroup
}

func newReports(r *Remote, every time.Duration) *reports {
	return &reports{r: r, every: every, calls: make(chan struct{}, reportCalls),
		after: func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }}
}

// observe queues a completion.
func (q *reports) observe(req *harbingerv1.ObserveRequest, onErr func(error)) {
	err := checkUTF8(req.GetQueue(), req.GetProducer(), req.GetJobType())
	if err == nil && !q.take() {
		err = errReportsBacklogged
	}
	if err != nil {
		q.r.observeErrors.Add(1)
		q.r.lastErr.Store(&err)
		if onErr != nil {
			onErr(err)
		}
		return
	}
	q.mu.Lock()
	q.obs = append(q.obs, observation{req: req, onErr: onErr})
	q.queued()
}

// count queues a publish answered from the cache.
func (q *reports) count(p countedPublish) {
	err := checkUTF8(p.key.Queue, p.key.Producer, p.key.JobType)
	if err == nil && !q.take() {
		err = errReportsBacklogged
	}
	if err != nil {
		q.r.countErrors.Add(1)
		q.r.lastErr.Store(&err)
		return
	}
	q.mu.Lock()
	q.pubs = append(q.pubs, p)
	q.queued()
}

// checkUTF8 refuses a key that is not UTF-8 (a header set by a publisher
// other than ours): gRPC cannot send it, and in a batch it would fail the
// whole call.
func checkUTF8(parts ...string) error {
	for _, s := range parts {
		if !utf8.ValidString(s) {
			return fmt.Errorf("rabbitmq: key part %.64q is not valid UTF-8: the sidecar takes UTF-8 keys only", s)
		}
	}
	return nil
}

// take reserves room for one more report; false when maxUnsent wait.
func (q *reports) take() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.unsent >= maxUnsent {
		return false
	}
	q.unsent++
	return true
}

// queued sends the batch if it is full (or batching is off), else arms the
// timer for it. q.mu is held, and released.
func (q *reports) queued() {
	if q.every < 0 || len(q.obs)+len(q.pubs) >= reportBatch {
		q.sendLocked()
		return
	}
	if q.stop == nil {
		q.stop = q.after(q.every, q.flush)
	}
	q.mu.Unlock()
}

// flush sends whatever waits.
func (q *reports) flush() {
	q.mu.Lock()
	q.sendLocked()
}

// sendLocked takes the waiting batch and sends it from a goroutine of its
// own. q.mu is held, and released.
func (q *reports) sendLocked() {
	if q.stop != nil {
		q.stop()
		q.stop = nil
	}
	obs, pubs := q.obs, q.pubs
	q.obs, q.pubs = nil, nil
	if len(obs)+len(pubs) == 0 {
		q.mu.Unlock()
		return
	}
	q.sending.Add(1)
	q.mu.Unlock()
	go func() {
		defer q.sending.Done()
		q.calls <- struct{}{}
		defer func() { <-q.calls }()
		q.send(obs, pubs)
		q.mu.Lock()
		q.unsent -= len(obs) + len(pubs)
		q.mu.Unlock()
	}()
}

// close sends what waits and waits for every batch's answer.
func (q *reports) close() {
	q.flush()
	q.sending.Wait()
}

// send makes one Report call and settles its items.
func (q *reports) send(obs []observation, pubs []countedPublish) {
	req := &harbingerv1.ReportRequest{Observations: make([]*harbingerv1.ObserveRequest, len(obs)), Publishes: make([]*harbingerv1.CountedPublish, len(pubs))}
	for i, o := range obs {
		req.Observations[i] = o.req
	}
	for i, p := range pubs {
		req.Publishes[i] = p.req
	}
	ctx, cancel := context.WithTimeout(context.Background(), q.r.opts.Timeout)
	defer cancel()
	var resp *harbingerv1.ReportResponse
	var err error
	if !q.r.noReport.Load() {
		resp, err = q.r.client.Report(ctx, req)
		if status.Code(err) == codes.Unimplemented {
			q.r.noReport.Store(true)
		}
	}
	if q.r.noReport.Load() {
		q.sendEach(obs, pubs)
		return
	}
	if err == nil && len(resp.GetAnswers()) != len(pubs) {
		err = fmt.Errorf("rabbitmq: sidecar answered %d of %d publishes", len(resp.GetAnswers()), len(pubs))
	}
	if err != nil {
		err = fmt.Errorf("rabbitmq: sidecar report: %w", err)
		q.r.lastErr.Store(&err)
		q.r.observeErrors.Add(uint64(len(obs)))
		q.r.countErrors.Add(uint64(len(pubs)))
		for _, o := range obs {
			if o.onErr != nil {
				o.onErr(err)
			}
		}
		return
	}
	for _, e := range resp.GetObservationErrors() {
		if i := int(e.GetIndex()); i < len(obs) {
			err := itemError(e)
			q.r.observeErrors.Add(1)
			q.r.lastErr.Store(&err)
			if obs[i].onErr != nil {
				obs[i].onErr(err)
			}
		}
	}
	failed := make(map[int]bool, len(resp.GetPublishErrors()))
	for _, e := range resp.GetPublishErrors() {
		if i := int(e.GetIndex()); i < len(pubs) {
			err := itemError(e)
			failed[i] = true
			q.r.countErrors.Add(1)
			q.r.lastErr.Store(&err)
		}
	}
	for i, p := range pubs {
		if !failed[i] {
			q.r.remember(p.key, priorityOf(resp.GetAnswers()[i]), p.sent, p.seq)
		}
	}
}

// sendEach sends a batch's items one call each, for a sidecar without
// Report.
func (q *reports) sendEach(obs []observation, pubs []countedPublish) {
	for _, o := range obs {
		if err := q.r.observeOne(context.Background(), o.req); err != nil && o.onErr != nil {
			o.onErr(err)
		}
	}
	for _, p := range pubs {
		if _, err := q.r.askAt(context.Background(), p.key, p.sent, p.seq, p.req.GetCounted().AsDuration()); err != nil {
			q.r.countErrors.Add(1)
			q.r.lastErr.Store(&err)
		}
	}
}

// itemError is one item's failure as the sidecar reported it.
func itemError(e *harbingerv1.ReportError) error {
	return fmt.Errorf("rabbitmq: sidecar report: %w", status.Error(codes.Code(min(e.GetCode(), math.MaxInt32)), e.GetMessage()))
}

// observeRequest builds a completion's report; a nil stamp sends none.
func observeRequest(k Key, s *Stamp, took time.Duration) *harbingerv1.ObserveRequest {
	req := &harbingerv1.ObserveRequest{
		Queue: k.Queue, Producer: k.Producer, JobType: k.JobType, SizeHint: k.Size,
		Duration: durationpb.New(took),
	}
	if s != nil {
		req.Stamp = &harbingerv1.Stamp{Predicted: durationpb.New(s.Predicted), Tier: uint32(max(s.Tier, 0)), Cold: s.Cold}
	}
	return req
}
