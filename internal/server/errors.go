package server

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/harbinger-mq/harbinger/internal/broker"
)

// errorTable maps broker errors to gRPC codes and a hint that tells the
// caller what to do about them. The first match wins.
var errorTable = []struct {
	err  error
	code codes.Code
	hint string
}{
	{broker.ErrQueueNotFound, codes.NotFound, "declare it with DeclareQueue or publish to it first"},
	{broker.ErrScheduleNotFound, codes.NotFound, "list them with ListSchedules"},
	{broker.ErrQueueDeleted, codes.NotFound, "an operator deleted the queue; subscribing again creates a new one"},
	{broker.ErrQueueInUse, codes.FailedPrecondition, ""},
	{broker.ErrNoGroups, codes.FailedPrecondition, "declare group_by, limits or rate_limits with DeclareQueue (docs/limits.md)"},
	{broker.ErrPayloadTooLarge, codes.InvalidArgument, "store the body elsewhere and publish a reference, or raise the broker's max payload"},
	{broker.ErrInvalid, codes.InvalidArgument, ""},
	{broker.ErrBadDuration, codes.InvalidArgument, ""},
	{broker.ErrAdjusted, codes.InvalidArgument, ""},
	{broker.ErrQueueFull, codes.ResourceExhausted, "retry with backoff once consumers catch up, or raise max_depth with DeclareQueue"},
	{broker.ErrTooManyQueues, codes.ResourceExhausted, ""},
	{broker.ErrTooManyUniqueKeys, codes.ResourceExhausted, ""},
	{broker.ErrTooManyConsumers, codes.ResourceExhausted, "close idle consumers or raise the broker's max consumers"},
	{broker.ErrShuttingDown, codes.Unavailable, "the broker is shutting down; retry after it restarts"},
	{broker.ErrNotDurable, codes.Unavailable, "the broker's disk failed; it takes publishes again once an operator has fixed the disk and restarted it"},
	{broker.ErrOverBudget, codes.ResourceExhausted, "retry with backoff once consumers catch up, or raise the broker's max bytes"},
	{broker.ErrConsumerClosed, codes.Unavailable, "open a new Consume stream"},
	{broker.ErrUnknownMessage, codes.FailedPrecondition, ""},
	{broker.ErrHistoryOff, codes.FailedPrecondition, "start serve without -history-off (or history: off: true in its config file) to record it"},
	{context.Canceled, codes.Canceled, ""},
	{context.DeadlineExceeded, codes.DeadlineExceeded, ""},
}

// toStatus converts a broker error to a gRPC status error.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	msg := strings.TrimPrefix(err.Error(), "broker: ")
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			if e.hint != "" {
				msg += "; " + e.hint
			}
			return status.Error(e.code, msg)
		}
	}
	return status.Error(codes.Internal, msg)
}

func invalidArg(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}
