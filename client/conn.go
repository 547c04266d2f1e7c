package client

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
)

// watchConn reports the connection's failures and recoveries to log until
// the connection shuts down. Producers and workers wait for the broker
// through restarts rather than fail, so without this a client that can
// never connect (a wrong address, a client and a broker that disagree on
// TLS) would wait in silence. It says why once per failure episode, and
// again only if the reason changes; an episode ends when the connection
// is ready.
func watchConn(conn *grpc.ClientConn, broker pb.BrokerClient, addr string, tlsOn bool, log *slog.Logger) {
	failing := ""
	for {
		state := conn.GetState()
		switch state {
		case connectivity.Shutdown:
			return
		case connectivity.TransientFailure:
			if why := lastConnError(broker); why != "" && why != failing {
				args := []any{"addr", addr, "err", why}
				if hint := connHint(why, tlsOn); hint != "" {
					args = append(args, "hint", hint)
				}
				log.Warn("harbinger: cannot reach the broker (producers, workers and calls wait for it)", args...)
				failing = why
			}
		case connectivity.Ready:
			if failing != "" {
				log.Info("harbinger: connected to the broker", "addr", addr)
				failing = ""
			}
		}
		if !conn.WaitForStateChange(context.Background(), state) {
			return
		}
	}
}

// lastConnError is why the connection failed last, as gRPC tells a call
// that does not wait for the connection to be ready: such a call fails at
// once, without reaching the network, while the connection is failing. ""
// if the call reached the broker (the connection recovered in the
// meantime), whatever the broker answered.
func lastConnError(broker pb.BrokerClient) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := broker.GetLimits(ctx, &pb.GetLimitsRequest{})
	if status.Code(err) != codes.Unavailable {
		return ""
	}
	return status.Convert(err).Message()
}

// connHint names what most often causes a connection error: a client and
// a broker that disagree on TLS. A TLS broker closes a plaintext
// connection before its HTTP/2 preface; a plaintext broker answers a TLS
// handshake with something that is not one. The admin CLI tells the same
// from internal/tlscheck, which the SDK may not import;
// TestConnHintAgreesWithTLSCheck keeps the two in step.
func connHint(why string, tlsOn bool) string {
	switch {
	case !tlsOn && strings.Contains(why, "server preface"):
		return "the broker closed the connection at once: if it serves TLS, dial it WithTLS"
	case tlsOn && strings.Contains(why, "first record does not look like a TLS handshake"):
		return "the broker does not serve TLS: dial it without WithTLS"
	}
	return ""
}
