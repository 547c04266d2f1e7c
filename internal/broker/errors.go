package broker

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors. Errors that carry data are typed structs whose Is matches
// one of these, so callers test with errors.Is and read details with
// errors.As.
var (
	// ErrQueueNotFound: an admin call named a queue that does not exist.
	ErrQueueNotFound = errors.New("broker: queue not found")
	// ErrPayloadTooLarge: a message's payload is over Config.MaxPayload.
	ErrPayloadTooLarge = errors.New("broker: payload too large")
	// ErrQueueFull: the queue holds MaxDepth ready jobs and refuses more.
	ErrQueueFull = errors.New("broker: queue full")
	// ErrInvalid: a request field is out of range or malformed.
	ErrInvalid = errors.New("broker: invalid request")
	// ErrShuttingDown: the broker is draining and takes no new work.
	ErrShuttingDown = errors.New("broker: shutting down")
	// ErrUnknownMessage: an ack, nack or extend named a message the consumer
	// does not hold (never delivered to it, already settled, or its lease
	// expired and it was redelivered).
	ErrUnknownMessage = errors.New("broker: unknown message")
	// ErrTooManyQueues: creating the queue would pass Config.MaxQueues.
	ErrTooManyQueues = errors.New("broker: too many queues")
	// ErrTooManyConsumers: subscribing would pass Config.MaxConsumers.
	ErrTooManyConsumers = errors.New("broker: too many consumers")
	// ErrConsumerClosed: the consumer was closed.
	ErrConsumerClosed = errors.New("broker: consumer closed")
	// ErrBadDuration: an ack's duration was NaN-like, negative, zero or over
	// Config.MaxDuration; the job is acked but the predictor ignores it.
	ErrBadDuration = errors.New("broker: bad ack duration")
	// ErrAdjusted: a consumer's request was out of range and the broker
	// carried it out with the value capped to the limit.
	ErrAdjusted = errors.New("broker: request adjusted")
	// ErrOverBudget: storing the message would take the bytes the broker
	// holds past Config.MaxBytes.
	ErrOverBudget = errors.New("broker: byte budget exhausted")
	// ErrScheduleNotFound: a call named a schedule that does not exist.
	ErrScheduleNotFound = errors.New("broker: schedule not found")
	// ErrTooManyUniqueKeys: the queue's unique-key index is full of open
	// windows.
	ErrTooManyUniqueKeys = errors.New("broker: too many unique keys")
	// ErrNotDurable: the log could not make a publish durable (a full
	// disk, a failed fsync); the publish is not confirmed.
	ErrNotDurable = errors.New("broker: not stored durably")
	// ErrQueueDeleted: the consumer's queue was deleted.
	ErrQueueDeleted = errors.New("broker: queue deleted")
	// ErrQueueInUse: the queue still holds jobs, or a schedule publishes
	// to it, so it was not deleted.
	ErrQueueInUse = errors.New("broker: queue in use")
	// ErrNoGroups: the queue declares no limits, rate limits or fair
	// shares, so it has no groups to report.
	ErrNoGroups = errors.New("broker: the queue declares no limits, rate limits or fair shares")
)

// InvalidError names the field of a request that is wrong and why.
type InvalidError struct {
	Field  string
	Reason string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("broker: invalid %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// PayloadTooLargeError reports a payload over the limit.
type PayloadTooLargeError struct {
	Size, Limit int
}

func (e *PayloadTooLargeError) Error() string {
	return fmt.Sprintf("broker: payload of %d bytes is over the limit of %d bytes", e.Size, e.Limit)
}

// Is makes errors.Is(err, ErrPayloadTooLarge) true.
func (e *PayloadTooLargeError) Is(target error) bool { return target == ErrPayloadTooLarge }

// QueueFullError reports a refused publish.
type QueueFullError struct {
	Queue    string
	MaxDepth int
}

func (e *QueueFullError) Error() string {
	return fmt.Sprintf("broker: queue %q is full (%d ready jobs)", e.Queue, e.MaxDepth)
}

// Is makes errors.Is(err, ErrQueueFull) true.
func (e *QueueFullError) Is(target error) bool { return target == ErrQueueFull }

// QueueNotFoundError names the missing queue.
type QueueNotFoundError struct{ Queue string }

func (e *QueueNotFoundError) Error() string {
	return fmt.Sprintf("broker: queue %q not found", e.Queue)
}

// Is makes errors.Is(err, ErrQueueNotFound) true.
func (e *QueueNotFoundError) Is(target error) bool { return target == ErrQueueNotFound }

// QueueInUseError says why a queue was not deleted: the jobs it holds,
// or the schedules that publish to it.
type QueueInUseError struct {
	Queue     string
	Held      QueueDeleted // the jobs a forced delete would drop
	Schedules []string
}

func (e *QueueInUseError) Error() string {
	if len(e.Schedules) > 0 {
		return fmt.Sprintf("broker: queue %q is not deleted: schedules %q publish to it; delete them first", e.Queue, e.Schedules)
	}
	h := e.Held
	return fmt.Sprintf("broker: queue %q is not deleted: it holds %d waiting, %d delayed, %d running and %d dead-lettered jobs; deleting it with force drops them",
		e.Queue, h.Waiting, h.Delayed, h.Running, h.Dead)
}

// Is makes errors.Is(err, ErrQueueInUse) true.
func (e *QueueInUseError) Is(target error) bool { return target == ErrQueueInUse }

// BadDurationError reports an ack duration the predictor refused. The job was
// acked all the same.
type BadDurationError struct {
	ID       string
	Duration time.Duration
	Max      time.Duration // the longest duration learned
}

func (e *BadDurationError) Error() string {
	return fmt.Sprintf("broker: message %s acked, but its duration %v was not learned: durations must be positive and at most %v", e.ID, e.Duration, e.Max)
}

// Is makes errors.Is(err, ErrBadDuration) true.
func (e *BadDurationError) Is(target error) bool { return target == ErrBadDuration }

// AdjustedError reports a consumer request carried out with a value capped
// to its limit.
type AdjustedError struct {
	ID     string
	Field  string
	Got    time.Duration
	Capped time.Duration
	// Sent, when set, is the value as the client sent it, for a value Got
	// cannot hold (a wire duration past what a time.Duration holds, which
	// the transport saturated): the error then quotes it instead of Got.
	Sent string
}

func (e *AdjustedError) Error() string {
	got := e.Got.String()
	if e.Sent != "" {
		got = e.Sent
	}
	return fmt.Sprintf("broker: message %s: %s %s is out of range; %v was used", e.ID, e.Field, got, e.Capped)
}

// Is makes errors.Is(err, ErrAdjusted) true.
func (e *AdjustedError) Is(target error) bool { return target == ErrAdjusted }

// OverBudgetError reports a publish refused because the broker holds its
// byte budget: ready, delayed, in-flight and dead-lettered jobs together.
type OverBudgetError struct {
	Size  int64 // bytes the message would take
	Held  int64 // bytes held when it was refused
	Limit int64 // Config.MaxBytes
}

func (e *OverBudgetError) Error() string {
	return fmt.Sprintf("broker: byte budget exhausted: the broker holds %d of its %d bytes (max bytes) and the message needs %d", e.Held, e.Limit, e.Size)
}

// Is makes errors.Is(err, ErrOverBudget) true.
func (e *OverBudgetError) Is(target error) bool { return target == ErrOverBudget }

// BatchError reports the messages of a batch that were not stored; the
// others were.
type BatchError struct {
	Total  int            // messages in the batch
	Failed []FailedRecord // in batch order
}

// FailedRecord is one message of a batch that was not stored.
type FailedRecord struct {
	Index int
	Err   error
}

func (e *BatchError) Error() string {
	const show = 3
	var b strings.Builder
	fmt.Fprintf(&b, "broker: %d of %d messages not stored", len(e.Failed), e.Total)
	for i, f := range e.Failed {
		if i == show {
			fmt.Fprintf(&b, "; and %d more", len(e.Failed)-show)
			break
		}
		fmt.Fprintf(&b, "; message %d: %s", f.Index, strings.TrimPrefix(f.Err.Error(), "broker: "))
	}
	return b.String()
}

// Unwrap returns every message's error, so errors.Is matches any of them.
func (e *BatchError) Unwrap() []error {
	out := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		out[i] = f.Err
	}
	return out
}
