package sidecar

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	harbingerv1 "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/predict"
	"github.com/harbinger-mq/harbinger/rabbitmq"
)

// Service is the Predictor gRPC service: decode, call the Local predictor
// (and share the observation), encode.
type Service struct {
	harbingerv1.UnimplementedPredictorServer
	local *rabbitmq.Local
	share atomic.Pointer[Share] // nil while RabbitMQ is unreachable
	hold  bool                  // track backlogs from Attach and stamps (Config.Hold)
}

// NewService returns a Service over local.
func NewService(local *rabbitmq.Local) *Service { return &Service{local: local} }

// SetShare sets (or, with nil, clears) where observations are shared.
func (s *Service) SetShare(sh *Share) { s.share.Store(sh) }

// Predict implements harbingerv1.PredictorServer.
func (s *Service) Predict(ctx context.Context, req *harbingerv1.PredictRequest) (*harbingerv1.PredictResponse, error) {
	if req.GetQueue() == "" {
		return nil, status.Error(codes.InvalidArgument, "sidecar: queue is required: name the queue the job is published to")
	}
	pr, err := s.local.Predict(ctx, keyOf(req.GetQueue(), req.GetProducer(), req.GetJobType(), req.GetSizeHint()))
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	resp := &harbingerv1.PredictResponse{
		Tier:         uint32(pr.Tier),
		AmqpPriority: uint32(pr.AMQP),
		Long:         pr.Long,
		PredictedMs:  float64(pr.Predicted) / float64(time.Millisecond), // exact to the nanosecond once rounded back
		Cold:         pr.Cold,
	}
	if pr.Hold > 0 {
		resp.Hold = durationpb.New(pr.Hold)
	}
	return resp, nil
}

// Observe implements harbingerv1.PredictorServer. The observation is
// learned locally and then shared; a failure to share is counted, not
// returned, since the caller can do nothing about it.
func (s *Service) Observe(ctx context.Context, req *harbingerv1.ObserveRequest) (*harbingerv1.ObserveResponse, error) {
	if req.GetQueue() == "" {
		return nil, status.Error(codes.InvalidArgument, "sidecar: queue is required: name the queue the job was consumed from")
	}
	if req.GetDuration() == nil || req.GetDuration().CheckValid() != nil {
		return nil, status.Error(codes.InvalidArgument, "sidecar: duration is required and must be a valid duration")
	}
	k := keyOf(req.GetQueue(), req.GetProducer(), req.GetJobType(), req.GetSizeHint())
	d := req.GetDuration().AsDuration()
	var err error
	if st := req.GetStamp(); st != nil {
		stamp, serr := stampOf(st)
		if serr != nil {
			return nil, serr
		}
		// Without Config.Hold no queue has handlers, so no backlog is
		// kept; the stamp still scores the prediction.
		err = s.local.ObserveStamped(ctx, k, stamp, d)
	} else {
		err = s.local.Observe(ctx, k, d)
	}
	if err != nil {
		if errors.Is(err, predict.ErrBadDuration) {
			return nil, status.Error(codes.InvalidArgument, err.Error()+": report the handler's wall time")
		}
		return nil, status.Error(codes.Internal, err.Error())
	}
	if sh := s.share.Load(); sh != nil {
		_ = sh.Publish(ctx, k, d)
	}
	return &harbingerv1.ObserveResponse{}, nil
}

// Attach implements harbingerv1.PredictorServer: with Config.Hold it counts
// the handlers that drain a queue, which holds need; without, it is a
// no-op.
func (s *Service) Attach(ctx context.Context, req *harbingerv1.AttachRequest) (*harbingerv1.AttachResponse, error) {
	if req.GetQueue() == "" {
		return nil, status.Error(codes.InvalidArgument, "sidecar: queue is required: name the queue the handlers consume")
	}
	if n := req.GetHandlers(); n < -maxAttach || n > maxAttach {
		return nil, status.Errorf(codes.InvalidArgument, "sidecar: handlers must be within ±%d, got %d", maxAttach, n)
	}
	if s.hold {
		s.local.Attach(ctx, req.GetQueue(), int(req.GetHandlers()))
	}
	return &harbingerv1.AttachResponse{}, nil
}

// maxAttach bounds one Attach call's change of a queue's handler count.
const maxAttach = 1 << 20

// stampOf decodes a stamp, refusing one no publisher could have made.
func stampOf(st *harbingerv1.Stamp) (rabbitmq.Stamp, error) {
	p := st.GetPredicted()
	if p == nil || p.CheckValid() != nil || p.AsDuration() < 0 {
		return rabbitmq.Stamp{}, status.Error(codes.InvalidArgument, "sidecar: a stamp needs a valid, non-negative predicted duration")
	}
	if st.GetTier() > predict.MaxTiers {
		return rabbitmq.Stamp{}, status.Errorf(codes.InvalidArgument, "sidecar: stamp tier must be 0 to %d, got %d", predict.MaxTiers, st.GetTier())
	}
	return rabbitmq.Stamp{Predicted: p.AsDuration(), Tier: int(st.GetTier()), Cold: st.GetCold()}, nil
}

func keyOf(queue, producer, jobType string, size uint64) rabbitmq.Key {
	return rabbitmq.Key{Queue: queue, Producer: producer, JobType: jobType, Size: size}
}
