package server

import (
	"context"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
)

// predictorServer implements pb.PredictorServer over the broker's queues.
type predictorServer struct {
	pb.UnimplementedPredictorServer
	s *Server
}

func (p *predictorServer) Predict(_ context.Context, req *pb.PredictRequest) (*pb.PredictResponse, error) {
	pr, err := p.s.b.Predict(req.Queue, req.Producer, req.JobType, req.SizeHint)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.PredictResponse{
		Tier: uint32(pr.Tier), AmqpPriority: uint32(max(pr.Tiers-1-pr.Tier, 0)),
		PredictedMs: ms(pr.Cost), Cold: pr.Cold, SpreadGated: pr.SpreadGated,
	}, nil
}

func (p *predictorServer) Observe(_ context.Context, req *pb.ObserveRequest) (*pb.ObserveResponse, error) {
	d, err := duration("duration", req.Duration)
	if err != nil {
		return nil, err
	}
	if err := p.s.b.Observe(req.Queue, req.Producer, req.JobType, req.SizeHint, d); err != nil {
		return nil, toStatus(err)
	}
	return &pb.ObserveResponse{}, nil
}
