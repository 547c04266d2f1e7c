package broker

import (
	"errors"
	"fmt"
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

// BadDurationError reports an ack duration the predictor refused. The job was
// acked all the same.
type BadDurationError struct {
	ID       string
	Duration time.Duration
}

func (e *BadDurationError) Error() string {
	return fmt.Sprintf("broker: message %s acked, but its duration %v was not learned: durations must be positive and below the configured maximum", e.ID, e.Duration)
}

// Is makes errors.Is(err, ErrBadDuration) true.
func (e *BadDurationError) Is(target error) bool { return target == ErrBadDuration }
