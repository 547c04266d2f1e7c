// Package rabbitmq brings Harbinger's shortest-job-first scheduling to
// RabbitMQ users. It owns the client side of the RabbitMQ sidecar: a
// Predictor (in-process, Local, or a gRPC client of `harbinger sidecar`,
// Remote), a Publisher that turns a prediction into an AMQP priority and
// records the message's predictor key in headers, Consume, which times
// handlers and reports successful durations back, and two queue layouts:
// one classic queue with x-max-priority, or TierQueues (one queue per tier,
// for quorum queues) with a weighted consumer that bounds long-job waits.
//
// RabbitMQ does the queueing, persistence and redelivery; Harbinger only
// chooses priorities. See docs/sidecar.md for deployment and trade-offs.
package rabbitmq
