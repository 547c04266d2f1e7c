//go:build race

package server

// stressMessages is scaled down under the race detector, which slows the
// broker and the gRPC stack by an order of magnitude.
const stressMessages = 10_000
