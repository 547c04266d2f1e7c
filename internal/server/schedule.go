package server

import (
	"context"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

func (a *adminServer) DeclareSchedule(_ context.Context, req *pb.Schedule) (*pb.Schedule, error) {
	s := broker.Schedule{
		Name: req.Name, Queue: req.Queue, Cron: req.Cron, TimeZone: req.TimeZone, Paused: req.Paused,
		Producer: req.Producer, JobType: req.JobType, Payload: req.Payload, Headers: req.Headers,
	}
	var err error
	if s.Every, err = duration("every", req.Every); err != nil {
		return nil, err
	}
	if s.CatchUp, err = duration("catch_up", req.CatchUp); err != nil {
		return nil, err
	}
	if req.Start != nil {
		if err := req.Start.CheckValid(); err != nil {
			return nil, invalidArg("start: %v", err)
		}
		s.Start = req.Start.AsTime()
	}
	out, err := a.s.b.DeclareSchedule(s)
	if err != nil {
		return nil, toStatus(err)
	}
	return toSchedule(out), nil
}

func (a *adminServer) ListSchedules(context.Context, *pb.ListSchedulesRequest) (*pb.ListSchedulesResponse, error) {
	all := a.s.b.Schedules()
	out := &pb.ListSchedulesResponse{Schedules: make([]*pb.Schedule, len(all))}
	for i, s := range all {
		out.Schedules[i] = toSchedule(s)
	}
	return out, nil
}

func (a *adminServer) PauseSchedule(_ context.Context, req *pb.PauseScheduleRequest) (*pb.Schedule, error) {
	s, err := a.s.b.PauseSchedule(req.Name, req.Paused)
	if err != nil {
		return nil, toStatus(err)
	}
	return toSchedule(s), nil
}

func (a *adminServer) DeleteSchedule(_ context.Context, req *pb.DeleteScheduleRequest) (*pb.DeleteScheduleResponse, error) {
	if err := a.s.b.DeleteSchedule(req.Name); err != nil {
		return nil, toStatus(err)
	}
	return &pb.DeleteScheduleResponse{}, nil
}

func toSchedule(s broker.Schedule) *pb.Schedule {
	out := &pb.Schedule{
		Name: s.Name, Queue: s.Queue, Cron: s.Cron, TimeZone: s.TimeZone, Paused: s.Paused,
		Producer: s.Producer, JobType: s.JobType, Payload: s.Payload, Headers: s.Headers,
		CatchUp: durationpb.New(s.CatchUp), Start: timestamppb.New(s.Start), Fired: s.Fired,
	}
	if s.Every > 0 {
		out.Every = durationpb.New(s.Every)
	}
	if !s.LastTick.IsZero() {
		out.LastTick = timestamppb.New(s.LastTick)
	}
	if !s.NextTick.IsZero() && !s.Paused {
		out.NextTick = timestamppb.New(s.NextTick)
	}
	return out
}
