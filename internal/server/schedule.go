package server

import (
	"context"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
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

// ListSchedules answers the schedules after req.After by name, as many as
// fit in one answer: schedules carry payloads, and gRPC refuses to send an
// answer over its limit, failing the call (80 schedules of 60 KiB did).
func (a *adminServer) ListSchedules(_ context.Context, req *pb.ListSchedulesRequest) (*pb.ListSchedulesResponse, error) {
	all := a.s.b.Schedules() // by name
	from, _ := slices.BinarySearchFunc(all, req.After, func(s broker.Schedule, name string) int { return strings.Compare(s.Name, name) })
	if from < len(all) && all[from].Name == req.After {
		from++
	}
	out := &pb.ListSchedulesResponse{}
	budget := a.s.maxSend - nextMargin
	size := 0
	for _, s := range all[from:] {
		ps := toSchedule(s)
		n := proto.Size(ps) + listEntryOverhead
		if size+n > budget && len(out.Schedules) > 0 {
			out.Next = out.Schedules[len(out.Schedules)-1].Name
			break
		}
		size += n
		out.Schedules = append(out.Schedules, ps)
	}
	return out, nil
}

// nextMargin is room kept in a schedules answer for its next field: a
// schedule's name, far shorter.
const nextMargin = 4 << 10

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
