package sdk_test

import (
	"context"
	"io"
	"log/slog"
	"net"

	"google.golang.org/grpc"

	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/server"
)

// startBroker runs an in-process broker on a loopback port for the
// examples, standing in for "harbinger serve". It returns the address and
// a stop function.
func startBroker() (string, func()) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := broker.New(broker.Config{Logger: quiet})
	if err != nil {
		panic(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	gs := grpc.NewServer()
	server.New(b, quiet).Register(gs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	return lis.Addr().String(), func() {
		_ = b.Shutdown(context.Background())
		gs.Stop()
		<-done
	}
}
