// Package predictsvc owns the Predictor gRPC service (Predict, Observe,
// Attach and Report in api/harbinger/v1) over a rabbitmq.Local: the one implementation
// that both `harbinger serve` and `harbinger sidecar` serve. It decodes and
// validates a request, calls Local, and encodes the answer; the sidecar
// also shares each observation through a Sharer.
//
// The service predicts for jobs published to RabbitMQ, so it never touches
// a Harbinger broker's queues. It lives apart from internal/sidecar so that
// `harbinger serve` can serve it without the sidecar's RabbitMQ sharing,
// and apart from internal/server, which takes it as a plain
// PredictorServer, so that the broker's transport does not depend on the
// rabbitmq package (which imports the AMQP client).
package predictsvc

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	harbingerv1 "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/predict"
	"github.com/harbinger-mq/harbinger/rabbitmq"
)

// Limits on a request's key. Every key the service accepts may be kept by
// the predictor (up to rabbitmq.LocalConfig.MaxKeys of them), so its
// strings are bounded as well as its count.
const (
	// MaxQueueName is the longest queue name in bytes: AMQP's own limit.
	MaxQueueName = 255
	// MaxKeyLen is the longest producer or job type in bytes, as the
	// broker's default (broker.DefaultMaxKeyLen).
	MaxKeyLen = 256
	// MaxAttach bounds one Attach call's change of a queue's handler count.
	MaxAttach = 1 << 20
	// MaxPredicted is the longest predicted duration a stamp or
	// rabbitmq.CountedMetadata may carry: a prediction is learned from
	// observations, which are at most predict.DefaultMaxDuration. A longer
	// one (a header any publisher can set) would put its queue's backlog
	// out by up to centuries, for good: the backlog is a running sum.
	MaxPredicted = predict.DefaultMaxDuration
)

// Config configures a Service.
type Config struct {
	// Hold makes Attach count the handlers of each queue, so that Local
	// tracks the queue's backlog and holds long messages. It is right only
	// when every publisher and consumer of a queue uses this one service;
	// without it Attach is accepted and ignored.
	Hold bool
}

// Sharer passes an observation on to other predictors; the sidecar's Share
// does, through RabbitMQ. Observe waits for Publish and ignores its error,
// so Publish should be quick and count its own failures.
type Sharer interface {
	Publish(ctx context.Context, k rabbitmq.Key, d time.Duration) error
}

// PredictionSharer is a Sharer that also passes on the predictions the
// service makes, so that every predictor of a fleet draws its tier
// boundaries from the same window of predicted costs (see
// rabbitmq.Local.RecordPeer). The sidecar's Share is one. Predict calls
// SharePrediction on the publish path, so it must not block.
type PredictionSharer interface {
	Sharer
	SharePrediction(k rabbitmq.Key, cost time.Duration)
}

// Service implements harbingerv1.PredictorServer over a rabbitmq.Local. It
// is safe for concurrent use.
type Service struct {
	harbingerv1.UnimplementedPredictorServer
	local *rabbitmq.Local
	cfg   Config
	share atomic.Pointer[sharer] // nil while there is nowhere to share

	reportCalls, reportItems atomic.Uint64
}

// Stats counts the service's Report calls and the items they carried:
// how far its clients batch.
type Stats struct {
	ReportCalls, ReportItems uint64
}

// Stats returns the counts so far.
func (s *Service) Stats() Stats {
	return Stats{ReportCalls: s.reportCalls.Load(), ReportItems: s.reportItems.Load()}
}

// sharer boxes a Sharer for atomic.Pointer.
type sharer struct{ Sharer }

// New returns a Service over local.
func New(local *rabbitmq.Local, cfg Config) *Service {
	return &Service{local: local, cfg: cfg}
}

// SetSharer sets (or, with nil, clears) where observations are shared.
func (s *Service) SetSharer(sh Sharer) {
	if sh == nil {
		s.share.Store(nil)
		return
	}
	s.share.Store(&sharer{sh})
}

// sharer returns where to share, nil if nowhere.
func (s *Service) sharer() Sharer {
	if sh := s.share.Load(); sh != nil {
		return sh.Sharer
	}
	return nil
}

// Predict implements harbingerv1.PredictorServer. A key never observed
// gets the cold default and is not remembered.
func (s *Service) Predict(ctx context.Context, req *harbingerv1.PredictRequest) (*harbingerv1.PredictResponse, error) {
	counted, isCounted, err := countedOf(ctx)
	if err != nil {
		return nil, err
	}
	return s.predict(ctx, req, counted, isCounted)
}

// predict answers req; with isCounted the message is already published
// with counted stamped on it, which its queue's backlog counts instead of
// the fresh prediction.
func (s *Service) predict(ctx context.Context, req *harbingerv1.PredictRequest, counted time.Duration, isCounted bool) (*harbingerv1.PredictResponse, error) {
	k, err := keyOf(req.GetQueue(), req.GetProducer(), req.GetJobType(), req.GetSizeHint(), "the queue the job is published to")
	if err != nil {
		return nil, err
	}
	var pr rabbitmq.Priority
	if isCounted {
		pr, err = s.local.PredictCounted(ctx, k, counted)
	} else {
		pr, err = s.local.Predict(ctx, k)
	}
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	// Only a warm prediction enters a predictor's window; a cold one is
	// the default, not the key's cost.
	if !pr.Cold {
		if sh, ok := s.sharer().(PredictionSharer); ok {
			sh.SharePrediction(k, pr.Predicted)
		}
	}
	resp := &harbingerv1.PredictResponse{
		Tier:         uint32(pr.Tier),
		AmqpPriority: uint32(pr.AMQP),
		PredictedMs:  float64(pr.Predicted) / float64(time.Millisecond), // exact to the nanosecond once rounded back
		// Local's Cold covers every fallback; the proto tells the two apart.
		Cold:        pr.Cold && !pr.SpreadGated,
		SpreadGated: pr.SpreadGated,
		Long:        pr.Long,
	}
	if pr.Hold > 0 {
		resp.Hold = durationpb.New(pr.Hold)
	}
	return resp, nil
}

// Observe implements harbingerv1.PredictorServer. The observation is
// learned locally and then shared; a failure to share is the Sharer's to
// count, not the caller's, who can do nothing about it.
func (s *Service) Observe(ctx context.Context, req *harbingerv1.ObserveRequest) (*harbingerv1.ObserveResponse, error) {
	if err := s.observe(ctx, req); err != nil {
		return nil, err
	}
	return &harbingerv1.ObserveResponse{}, nil
}

// observe handles one observation, or with Dropped one job that left its
// queue without completing.
func (s *Service) observe(ctx context.Context, req *harbingerv1.ObserveRequest) error {
	if req.GetDropped() {
		return s.dropped(ctx, req)
	}
	k, err := keyOf(req.GetQueue(), req.GetProducer(), req.GetJobType(), req.GetSizeHint(), "the queue the job was consumed from")
	if err != nil {
		return err
	}
	if req.GetDuration() == nil || req.GetDuration().CheckValid() != nil {
		return status.Error(codes.InvalidArgument, "predictsvc: duration is required and must be a valid duration")
	}
	d := req.GetDuration().AsDuration()
	if st := req.GetStamp(); st != nil {
		stamp, serr := stampOf(st)
		if serr != nil {
			return serr
		}
		// Without Config.Hold no queue has handlers, so no backlog is
		// kept; the stamp still scores the prediction.
		err = s.local.ObserveStamped(ctx, k, stamp, d)
	} else {
		err = s.local.Observe(ctx, k, d)
	}
	if err != nil {
		if errors.Is(err, predict.ErrBadDuration) {
			return status.Error(codes.InvalidArgument, err.Error()+": report the handler's wall time")
		}
		return status.Error(codes.Internal, err.Error())
	}
	if sh := s.sharer(); sh != nil {
		_ = sh.Publish(ctx, k, d)
	}
	return nil
}

// MaxReportItems bounds a Report call's observations and publishes
// together: the request's size is bounded by gRPC's message limit, the
// work one call holds the service for by this.
const MaxReportItems = 4096

// Report implements harbingerv1.PredictorServer: each observation as
// Observe, each publish as Predict with its counted duration. An item's
// failure is listed with its index and does not stop the others.
func (s *Service) Report(ctx context.Context, req *harbingerv1.ReportRequest) (*harbingerv1.ReportResponse, error) {
	obs, pubs := req.GetObservations(), req.GetPublishes()
	if n := len(obs) + len(pubs); n > MaxReportItems {
		return nil, status.Errorf(codes.InvalidArgument, "predictsvc: a report carries at most %d items, got %d: send it in parts", MaxReportItems, n)
	}
	s.reportCalls.Add(1)
	s.reportItems.Add(uint64(len(obs) + len(pubs)))
	resp := &harbingerv1.ReportResponse{Answers: make([]*harbingerv1.PredictResponse, len(pubs))}
	for i, o := range obs {
		if err := s.observe(ctx, o); err != nil {
			resp.ObservationErrors = append(resp.ObservationErrors, reportError(i, err))
		}
	}
	for i, p := range pubs {
		counted, err := countedDuration(p.GetCounted())
		if err == nil {
			resp.Answers[i], err = s.predict(ctx, p.GetJob(), counted, true)
		}
		if err != nil {
			resp.Answers[i] = &harbingerv1.PredictResponse{}
			resp.PublishErrors = append(resp.PublishErrors, reportError(i, err))
		}
	}
	return resp, nil
}

// reportError is err as the i-th item's entry in a ReportResponse.
func reportError(i int, err error) *harbingerv1.ReportError {
	st := status.Convert(err)
	return &harbingerv1.ReportError{Index: uint32(i), Code: uint32(st.Code()), Message: st.Message()}
}

// countedDuration decodes a CountedPublish's duration, which must be one
// a prediction could have been.
func countedDuration(d *durationpb.Duration) (time.Duration, error) {
	if d == nil || d.CheckValid() != nil || d.AsDuration() < 0 || d.AsDuration() > MaxPredicted {
		return 0, status.Errorf(codes.InvalidArgument, "predictsvc: a counted publish needs a valid duration from 0 to %v", MaxPredicted)
	}
	return d.AsDuration(), nil
}

// dropped takes a job that left its queue without completing out of the
// queue's backlog (rabbitmq.Local.Forget); nothing is learned or shared.
func (s *Service) dropped(ctx context.Context, req *harbingerv1.ObserveRequest) error {
	if err := checkQueue(req.GetQueue(), "the queue the job left"); err != nil {
		return err
	}
	if req.GetStamp() == nil {
		return status.Error(codes.InvalidArgument, "predictsvc: a dropped job needs its stamp: the backlog counted its prediction")
	}
	stamp, err := stampOf(req.GetStamp())
	if err != nil {
		return err
	}
	s.local.Forget(ctx, req.GetQueue(), stamp.Predicted)
	return nil
}

// Attach implements harbingerv1.PredictorServer: with Config.Hold it counts
// the handlers that drain a queue, which holds need; without, it validates
// the request and changes nothing.
func (s *Service) Attach(ctx context.Context, req *harbingerv1.AttachRequest) (*harbingerv1.AttachResponse, error) {
	if err := checkQueue(req.GetQueue(), "the queue the handlers consume"); err != nil {
		return nil, err
	}
	if n := req.GetHandlers(); n < -MaxAttach || n > MaxAttach {
		return nil, status.Errorf(codes.InvalidArgument, "predictsvc: handlers must be within ±%d, got %d", MaxAttach, n)
	}
	if s.cfg.Hold {
		if err := s.local.TryAttach(ctx, req.GetQueue(), int(req.GetHandlers())); err != nil {
			if errors.Is(err, rabbitmq.ErrTooManyQueues) {
				return nil, status.Error(codes.ResourceExhausted, err.Error())
			}
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return &harbingerv1.AttachResponse{}, nil
}

// countedOf reads rabbitmq.CountedMetadata: the predicted duration a
// caching client already stamped on the message it asks about.
func countedOf(ctx context.Context) (time.Duration, bool, error) {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return 0, false, nil
	}
	vs := md.Get(rabbitmq.CountedMetadata)
	if len(vs) == 0 {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(vs[0], 10, 64)
	if err != nil || n < 0 || n > int64(MaxPredicted) {
		return 0, false, status.Errorf(codes.InvalidArgument, "predictsvc: %s must be a number of nanoseconds from 0 to %d, got %q", rabbitmq.CountedMetadata, int64(MaxPredicted), vs[0])
	}
	return time.Duration(n), true, nil
}

// stampOf decodes a stamp, refusing one no publisher could have made.
func stampOf(st *harbingerv1.Stamp) (rabbitmq.Stamp, error) {
	p := st.GetPredicted()
	if p == nil || p.CheckValid() != nil || p.AsDuration() < 0 || p.AsDuration() > MaxPredicted {
		return rabbitmq.Stamp{}, status.Errorf(codes.InvalidArgument, "predictsvc: a stamp needs a valid predicted duration from 0 to %v", MaxPredicted)
	}
	if st.GetTier() > predict.MaxTiers {
		return rabbitmq.Stamp{}, status.Errorf(codes.InvalidArgument, "predictsvc: stamp tier must be 0 to %d, got %d", predict.MaxTiers, st.GetTier())
	}
	return rabbitmq.Stamp{Predicted: p.AsDuration(), Tier: int(st.GetTier()), Cold: st.GetCold()}, nil
}

// keyOf checks and builds a request's key; which says what the queue is,
// for the error.
func keyOf(queue, producer, jobType string, size uint64, which string) (rabbitmq.Key, error) {
	if err := checkQueue(queue, which); err != nil {
		return rabbitmq.Key{}, err
	}
	if err := checkName("producer", producer, MaxKeyLen); err != nil {
		return rabbitmq.Key{}, err
	}
	if err := checkName("job type", jobType, MaxKeyLen); err != nil {
		return rabbitmq.Key{}, err
	}
	return rabbitmq.Key{Queue: queue, Producer: producer, JobType: jobType, Size: size}, nil
}

func checkQueue(queue, which string) error {
	if queue == "" {
		return status.Errorf(codes.InvalidArgument, "predictsvc: queue is required: name %s", which)
	}
	return checkName("queue name", queue, MaxQueueName)
}

// checkName refuses a name that is not UTF-8 (AMQP names and headers are,
// and so are proto strings) or longer than limit bytes.
func checkName(what, name string, limit int) error {
	if len(name) > limit {
		return status.Errorf(codes.InvalidArgument, "predictsvc: %s is %d bytes, the most is %d", what, len(name), limit)
	}
	if !utf8.ValidString(name) {
		return status.Errorf(codes.InvalidArgument, "predictsvc: %s %q is not valid UTF-8", what, name)
	}
	return nil
}
