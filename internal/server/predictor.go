package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
)

// SetPredictor sets the Predictor service that Register serves, before
// Register is called. The Predictor service predicts for jobs published to
// RabbitMQ, not to the broker, so it is not the broker's: `harbinger serve`
// passes the shared one (internal/predictsvc), which keeps this package
// free of the rabbitmq package and its AMQP client. Without one, the
// Predictor methods answer Unimplemented.
func (s *Server) SetPredictor(p pb.PredictorServer) { s.pred.svc = p }

// predictorServer hands every Predictor call to the service SetPredictor
// set. It only bridges Server's pred field until that field holds the
// service itself.
type predictorServer struct {
	pb.UnimplementedPredictorServer
	s   *Server
	svc pb.PredictorServer
}

func (p *predictorServer) Predict(ctx context.Context, req *pb.PredictRequest) (*pb.PredictResponse, error) {
	if p.svc == nil {
		return nil, errNoPredictor
	}
	return p.svc.Predict(ctx, req)
}

func (p *predictorServer) Observe(ctx context.Context, req *pb.ObserveRequest) (*pb.ObserveResponse, error) {
	if p.svc == nil {
		return nil, errNoPredictor
	}
	return p.svc.Observe(ctx, req)
}

func (p *predictorServer) Attach(ctx context.Context, req *pb.AttachRequest) (*pb.AttachResponse, error) {
	if p.svc == nil {
		return nil, errNoPredictor
	}
	return p.svc.Attach(ctx, req)
}

var errNoPredictor = status.Error(codes.Unimplemented, "server: this server has no Predictor service")
