// Package layout holds the model of the RabbitMQ layouts the rabbitmq
// package can publish into (one priority queue, with or without holds,
// against FIFO): an event simulation of the production-flow workload that
// drives the real rabbitmq.Local, run as TestLayoutSimulation. Its
// figures are in lab/notes/sidecar.md.
package layout
