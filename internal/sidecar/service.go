package sidecar

import (
	"context"
	"errors"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
	return &harbingerv1.PredictResponse{
		Tier:         uint32(pr.Tier),
		AmqpPriority: uint32(pr.AMQP),
		Long:         pr.Long,
		PredictedMs:  float64(pr.Predicted.Microseconds()) / 1000,
		Cold:         pr.Cold,
	}, nil
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
	if err := s.local.Observe(ctx, k, d); err != nil {
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

func keyOf(queue, producer, jobType string, size uint64) rabbitmq.Key {
	return rabbitmq.Key{Queue: queue, Producer: producer, JobType: jobType, Size: size}
}
