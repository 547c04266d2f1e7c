package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/predictsvc"
	"github.com/harbinger-mq/harbinger/internal/sidecar"
	"github.com/harbinger-mq/harbinger/rabbitmq"
)

// predictorEndpoint is one server of the Predictor service under test.
type predictorEndpoint struct {
	name string
	conn *grpc.ClientConn
	pred pb.PredictorClient
}

// startServe runs `harbinger serve` (its serve function, gRPC on port 0, no
// HTTP) until the test ends and returns its gRPC address.
func startServe(t *testing.T, cfg ServeConfig) string {
	t.Helper()
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "off"
	cfg.DataDir = t.TempDir()
	cfg.ShutdownTimeout = 5 * time.Second
	cfg = cfg.WithDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, io.Discard, func(g, _ string) { addrs <- g }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	select {
	case addr := <-addrs:
		return addr
	case err := <-done:
		t.Fatalf("serve ended before it was ready: %v", err)
		return ""
	}
}

// startSidecar runs `harbinger sidecar` without RabbitMQ until the test ends.
func startSidecar(t *testing.T, cfg sidecar.Config) *sidecar.Sidecar {
	t.Helper()
	cfg.Listen, cfg.HTTP, cfg.AMQPURL = "127.0.0.1:0", "-", "-"
	s, err := sidecar.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func dialEndpoint(t *testing.T, name, addr string) predictorEndpoint {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return predictorEndpoint{name: name, conn: conn, pred: pb.NewPredictorClient(conn)}
}

// endpoints returns the Predictor service as `harbinger serve` and as
// `harbinger sidecar` serve it, each with a fresh predictor.
func endpoints(t *testing.T) []predictorEndpoint {
	t.Helper()
	return []predictorEndpoint{
		dialEndpoint(t, "serve", startServe(t, ServeConfig{})),
		dialEndpoint(t, "sidecar", startSidecar(t, sidecar.Config{}).Addr()),
	}
}

// A predictor step: one call and what its answer must say.
type predictorStep struct {
	name  string
	call  func(ctx context.Context, c pb.PredictorClient) (proto.Message, error)
	check func(resp proto.Message) string // "" when the answer is right
}

func predictStep(name, jobType string, check func(*pb.PredictResponse) string) predictorStep {
	return predictorStep{
		name: name,
		call: func(ctx context.Context, c pb.PredictorClient) (proto.Message, error) {
			return c.Predict(ctx, &pb.PredictRequest{Queue: "jobs", Producer: "web", JobType: jobType})
		},
		check: func(m proto.Message) string {
			if check == nil {
				return ""
			}
			return check(m.(*pb.PredictResponse))
		},
	}
}

func observeStep(jobType string, d time.Duration, n int) predictorStep {
	return predictorStep{
		name: fmt.Sprintf("observe %s %v ×%d", jobType, d, n),
		call: func(ctx context.Context, c pb.PredictorClient) (proto.Message, error) {
			for range n {
				if _, err := c.Observe(ctx, &pb.ObserveRequest{Queue: "jobs", Producer: "web", JobType: jobType, Duration: durationpb.New(d)}); err != nil {
					return nil, err
				}
			}
			return &pb.ObserveResponse{}, nil
		},
	}
}

// The proto's contract for PredictResponse, at the default 5 tiers under
// x-max-priority 5: a long message takes the top priority, the tiers share
// those below it, shortest highest.
var (
	topPriority   = uint32(rabbitmq.DefaultMaxPriority)
	shortPriority = uint32(rabbitmq.PriorityFor(0, rabbitmq.DefaultTiers, false, rabbitmq.DefaultMaxPriority))
)

var predictorScenario = []predictorStep{
	predictStep("cold key", "thumbnail", func(r *pb.PredictResponse) string {
		if !r.Cold || !r.Long || r.Tier != rabbitmq.DefaultTiers/2 || r.AmqpPriority != topPriority {
			return fmt.Sprintf("want cold, long, middle tier, priority %d", topPriority)
		}
		return ""
	}),
	observeStep("thumbnail", 5*time.Millisecond, 10),
	observeStep("report", 2*time.Second, 10),
	{
		name: "warm-up predictions, four short to one long",
		call: func(ctx context.Context, c pb.PredictorClient) (proto.Message, error) {
			for i := range 50 {
				jt := "thumbnail"
				if i%5 == 4 {
					jt = "report"
				}
				if _, err := c.Predict(ctx, &pb.PredictRequest{Queue: "jobs", Producer: "web", JobType: jt}); err != nil {
					return nil, err
				}
			}
			return &pb.PredictResponse{}, nil
		},
	},
	predictStep("short warm key", "thumbnail", func(r *pb.PredictResponse) string {
		if r.Cold || r.Long || r.Tier != 0 || r.AmqpPriority != shortPriority || r.PredictedMs != 5 || r.Hold != nil {
			return fmt.Sprintf("want warm, not long, tier 0 at priority %d, 5 ms, no hold", shortPriority)
		}
		return ""
	}),
	predictStep("key far longer than typical", "report", func(r *pb.PredictResponse) string {
		if r.Cold || !r.Long || r.Tier == 0 || r.AmqpPriority != topPriority || r.PredictedMs != 2000 {
			return fmt.Sprintf("want warm, long, not tier 0, top priority %d, 2000 ms", topPriority)
		}
		return ""
	}),
	{
		name: "attach and detach handlers",
		call: func(ctx context.Context, c pb.PredictorClient) (proto.Message, error) {
			if _, err := c.Attach(ctx, &pb.AttachRequest{Queue: "jobs", Handlers: 2}); err != nil {
				return nil, err
			}
			return c.Attach(ctx, &pb.AttachRequest{Queue: "jobs", Handlers: -2})
		},
	},
	{
		name: "stamped observation",
		call: func(ctx context.Context, c pb.PredictorClient) (proto.Message, error) {
			return c.Observe(ctx, &pb.ObserveRequest{Queue: "jobs", Producer: "web", JobType: "thumbnail", Duration: durationpb.New(5 * time.Millisecond),
				Stamp: &pb.Stamp{Predicted: durationpb.New(5 * time.Millisecond)}})
		},
	},
	predictStep("short key after the stamp", "thumbnail", nil),
}

// The Predictor service answers the same way whether `harbinger serve` or
// `harbinger sidecar` serves it: the same calls give the same long, hold,
// tier and AMQP priority, per the proto's contract, and Attach works on
// both.
func TestPredictorServeAndSidecarAgree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	eps := endpoints(t)
	answers := make([][]proto.Message, len(eps))
	for i, ep := range eps {
		for _, st := range predictorScenario {
			resp, err := st.call(ctx, ep.pred)
			if err != nil {
				t.Fatalf("%s, %s: %v", ep.name, st.name, err)
			}
			if st.check != nil {
				if msg := st.check(resp); msg != "" {
					t.Errorf("%s, %s: got %v; %s", ep.name, st.name, resp, msg)
				}
			}
			answers[i] = append(answers[i], resp)
		}
	}
	for j, st := range predictorScenario {
		if a, b := answers[0][j], answers[1][j]; !proto.Equal(a, b) {
			t.Errorf("%s: %s answered %v, %s answered %v", st.name, eps[0].name, a, eps[1].name, b)
		}
	}
}

// Both servers refuse malformed keys with InvalidArgument. Over the wire,
// a string that is not UTF-8 is refused by gRPC's codec before the service
// sees it; the service's own check (predictsvc's tests) covers in-process
// callers. Either way the server keeps serving.
func TestPredictorRejectsBadKeysOnServeAndSidecar(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	long := func(n int) string { return strings.Repeat("x", n) }
	ms := durationpb.New(time.Millisecond)
	tests := []struct {
		name string
		call func(c pb.PredictorClient) error
	}{
		{"predict without queue", func(c pb.PredictorClient) error {
			_, err := c.Predict(ctx, &pb.PredictRequest{Producer: "p"})
			return err
		}},
		{"predict with over-long queue", func(c pb.PredictorClient) error {
			_, err := c.Predict(ctx, &pb.PredictRequest{Queue: long(predictsvc.MaxQueueName + 1)})
			return err
		}},
		{"predict with over-long producer", func(c pb.PredictorClient) error {
			_, err := c.Predict(ctx, &pb.PredictRequest{Queue: "q", Producer: long(predictsvc.MaxKeyLen + 1)})
			return err
		}},
		{"predict with over-long job type", func(c pb.PredictorClient) error {
			_, err := c.Predict(ctx, &pb.PredictRequest{Queue: "q", JobType: long(64 << 10)})
			return err
		}},
		{"observe with over-long producer", func(c pb.PredictorClient) error {
			_, err := c.Observe(ctx, &pb.ObserveRequest{Queue: "q", Producer: long(predictsvc.MaxKeyLen + 1), Duration: ms})
			return err
		}},
		{"observe without duration", func(c pb.PredictorClient) error {
			_, err := c.Observe(ctx, &pb.ObserveRequest{Queue: "q"})
			return err
		}},
		{"observe zero duration", func(c pb.PredictorClient) error {
			_, err := c.Observe(ctx, &pb.ObserveRequest{Queue: "q", Duration: durationpb.New(0)})
			return err
		}},
		{"attach without queue", func(c pb.PredictorClient) error {
			_, err := c.Attach(ctx, &pb.AttachRequest{Handlers: 1})
			return err
		}},
		{"attach too many", func(c pb.PredictorClient) error {
			_, err := c.Attach(ctx, &pb.AttachRequest{Queue: "q", Handlers: 1 << 30})
			return err
		}},
	}
	for _, ep := range endpoints(t) {
		for _, tt := range tests {
			if code := status.Code(tt.call(ep.pred)); code != codes.InvalidArgument {
				t.Errorf("%s, %s: code %v, want InvalidArgument", ep.name, tt.name, code)
			}
		}
		// A PredictRequest whose producer (field 2) is not UTF-8, encoded
		// by hand since the generated code will not marshal it.
		raw := protowire.AppendString(nil, "q")
		raw = append(protowire.AppendTag(nil, 1, protowire.BytesType), raw...)
		raw = protowire.AppendTag(raw, 2, protowire.BytesType)
		raw = protowire.AppendBytes(raw, []byte("\xff\xfe"))
		err := ep.conn.Invoke(ctx, pb.Predictor_Predict_FullMethodName, rawMessage(raw), new(pb.PredictResponse), grpc.ForceCodecV2(rawCodec{}))
		if code := status.Code(err); code == codes.OK || code == codes.Unknown {
			t.Errorf("%s: producer not UTF-8 answered %v", ep.name, err)
		}
		if _, err := ep.pred.Predict(ctx, &pb.PredictRequest{Queue: "q"}); err != nil {
			t.Errorf("%s: a good request after the bad ones: %v", ep.name, err)
		}
	}
}

// Predictions and observations for ever new queue names create no broker
// queue, so they cannot use up max-queues, and stay within the sidecar's
// caps: keys within MaxKeys, attached queues within MaxQueues (past it
// Attach is ResourceExhausted).
func TestPredictorRandomQueuesCreateNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const maxQueues, maxKeys, sidecarQueues = 4, 32, 3
	serveAddr := startServe(t, ServeConfig{Broker: broker.Config{MaxQueues: maxQueues}})
	sc := startSidecar(t, sidecar.Config{Hold: true, Predict: rabbitmq.LocalConfig{MaxKeys: maxKeys, MaxQueues: sidecarQueues}})
	eps := []predictorEndpoint{dialEndpoint(t, "serve", serveAddr), dialEndpoint(t, "sidecar", sc.Addr())}
	for _, ep := range eps {
		for i := range 200 {
			q := fmt.Sprintf("random-%s-%d", ep.name, i)
			if _, err := ep.pred.Predict(ctx, &pb.PredictRequest{Queue: q, Producer: "p"}); err != nil {
				t.Fatalf("%s: predict %s: %v", ep.name, q, err)
			}
			if _, err := ep.pred.Observe(ctx, &pb.ObserveRequest{Queue: q, Producer: "p", Duration: durationpb.New(time.Millisecond)}); err != nil {
				t.Fatalf("%s: observe %s: %v", ep.name, q, err)
			}
			_, err := ep.pred.Attach(ctx, &pb.AttachRequest{Queue: q, Handlers: 1})
			want := codes.OK
			if ep.name == "sidecar" && i >= sidecarQueues {
				want = codes.ResourceExhausted
			}
			if code := status.Code(err); code != want {
				t.Fatalf("%s: attach %d: %v, want %v", ep.name, i, err, want)
			}
		}
	}
	if st := sc.Local().Stats(); st.Keys > maxKeys || st.Queues > sidecarQueues {
		t.Errorf("sidecar tracks %d keys and %d queues, past its caps of %d and %d", st.Keys, st.Queues, maxKeys, sidecarQueues)
	}
	qs, err := pb.NewAdminClient(eps[0].conn).ListQueues(ctx, &pb.ListQueuesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(qs.Queues) != 0 {
		t.Errorf("the Predictor service created %d broker queues", len(qs.Queues))
	}
	// max-queues is still all there for real queues.
	for i := range maxQueues {
		q := fmt.Sprintf("real-%d", i)
		if _, err := pb.NewAdminClient(eps[0].conn).DeclareQueue(ctx, &pb.DeclareQueueRequest{Name: q}); err != nil {
			t.Errorf("declare %s after the random predictions: %v", q, err)
		}
	}
}

// rawMessage and rawCodec send bytes as they are, to reach a server with
// what a generated client would refuse to encode.
type rawMessage []byte

type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(rawMessage))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

func (rawCodec) Name() string { return "proto" }
