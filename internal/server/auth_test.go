package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/auth"
	"github.com/harbinger-mq/harbinger/internal/auth/authtest"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// Every RPC of every Harbinger service has an access rule: one added
// without a rule would be refused to every token.
func TestAuthCoversEveryRPC(t *testing.T) {
	t.Parallel()
	for _, sd := range []grpc.ServiceDesc{pb.Broker_ServiceDesc, pb.Admin_ServiceDesc, pb.Predictor_ServiceDesc} {
		var names []string
		for _, m := range sd.Methods {
			names = append(names, m.MethodName)
		}
		for _, s := range sd.Streams {
			names = append(names, s.StreamName)
		}
		for _, n := range names {
			if _, ok := rules["/"+sd.ServiceName+"/"+n]; !ok {
				t.Errorf("%s/%s has no access rule in auth.go", sd.ServiceName, n)
			}
		}
	}
}

type authBundle struct {
	addr   string
	tokens map[string]string
	b      *broker.Broker
	set    *auth.Tokens // the server's, for tests that reload it
	path   string       // its file
}

// authSetup serves a broker with tokens: "admin" may do everything;
// "orders" may do everything on queues named orders.*; "others" holds every
// permission, but on queues named other.*; "reader" may read every queue;
// "publisher" may publish to orders.*.
func authSetup(t *testing.T) *authBundle {
	t.Helper()
	path, toks := authtest.TokenFile(t, map[string][]string{
		"admin":     {"admin"},
		"orders":    {"admin:orders."},
		"others":    {"admin:other."},
		"reader":    {"read"},
		"publisher": {"publish:orders."},
	})
	tokens, err := auth.LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(broker.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(append(ServerOptions(broker.Config{}), AuthOptions(tokens)...)...)
	New(b, quiet).Register(gs)
	done := make(chan struct{})
	go func() { _ = gs.Serve(lis); close(done) }()
	t.Cleanup(func() {
		_ = b.Shutdown(context.Background())
		gs.Stop()
		<-done
	})
	return &authBundle{addr: lis.Addr().String(), tokens: toks, b: b, set: tokens, path: path}
}

func (ab *authBundle) dial(t *testing.T, token string) *grpc.ClientConn {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(auth.Bearer{Token: token, Insecure: true}))
	}
	conn, err := grpc.NewClient(ab.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// rpcCalls makes every RPC once on queue q and returns its error (the
// first answer of a stream).
var rpcCalls = map[string]func(ctx context.Context, c *grpc.ClientConn, q string) error{
	"Publish": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		_, err := pb.NewBrokerClient(c).Publish(ctx, &pb.PublishRequest{Messages: []*pb.Message{{Queue: q}}})
		return err
	},
	"PublishStream": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		st, err := pb.NewBrokerClient(c).PublishStream(ctx)
		if err != nil {
			return err
		}
		// A stream the broker has already ended makes Send return io.EOF;
		// its status comes from Recv.
		if err := st.Send(&pb.PublishRequest{Messages: []*pb.Message{{Queue: q}}}); err != nil && err != io.EOF {
			return err
		}
		_, err = st.Recv()
		return err
	},
	"Consume": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		// A job waits in q (see TestEveryRPCAsksForAToken), so a consumer
		// that is let in gets a delivery at once.
		st, err := pb.NewBrokerClient(c).Consume(ctx)
		if err != nil {
			return err
		}
		if err := st.Send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Subscribe{Subscribe: &pb.Subscribe{Queue: q, Prefetch: 1}}}); err != nil && err != io.EOF {
			return err
		}
		_, err = st.Recv()
		return err
	},
	"GetLimits": func(ctx context.Context, c *grpc.ClientConn, _ string) error {
		_, err := pb.NewBrokerClient(c).GetLimits(ctx, &pb.GetLimitsRequest{})
		return err
	},
	"DeclareQueue": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		_, err := pb.NewAdminClient(c).DeclareQueue(ctx, &pb.DeclareQueueRequest{Name: q})
		return err
	},
	"ListQueues": func(ctx context.Context, c *grpc.ClientConn, _ string) error {
		_, err := pb.NewAdminClient(c).ListQueues(ctx, &pb.ListQueuesRequest{})
		return err
	},
	"PurgeQueue": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		_, err := pb.NewAdminClient(c).PurgeQueue(ctx, &pb.PurgeQueueRequest{Name: q + ".purge"})
		return err
	},
	"GetJob": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		// NotFound (no such id) once let in: the check is on the queue.
		_, err := pb.NewAdminClient(c).GetJob(ctx, &pb.GetJobRequest{Queue: q, Id: "none"})
		if status.Code(err) == codes.NotFound {
			return nil
		}
		return err
	},
	"DeleteQueue": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		_, err := pb.NewAdminClient(c).DeleteQueue(ctx, &pb.DeleteQueueRequest{Name: q + ".delete", Force: true})
		return err
	},
	"ListDeadLetters": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		_, err := pb.NewAdminClient(c).ListDeadLetters(ctx, &pb.ListDeadLettersRequest{Queue: q})
		return err
	},
	"DeleteDeadLetters": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		_, err := pb.NewAdminClient(c).DeleteDeadLetters(ctx, &pb.DeleteDeadLettersRequest{Queue: q})
		return err
	},
	"RequeueDeadLetters": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		_, err := pb.NewAdminClient(c).RequeueDeadLetters(ctx, &pb.RequeueDeadLettersRequest{Queue: q})
		return err
	},
	"ListJobs": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		_, err := pb.NewAdminClient(c).ListJobs(ctx, &pb.ListJobsRequest{Queue: q})
		return err
	},
	"ListGroups": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		_, err := pb.NewAdminClient(c).ListGroups(ctx, &pb.ListGroupsRequest{Queue: q})
		return err
	},
	"ListKeys": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		_, err := pb.NewAdminClient(c).ListKeys(ctx, &pb.ListKeysRequest{Queue: q})
		return err
	},
	"CancelJob": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		_, err := pb.NewAdminClient(c).CancelJob(ctx, &pb.CancelJobRequest{Queue: q, Id: "no-such-job"})
		return err
	},
	"ExportHistory": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		st, err := pb.NewAdminClient(c).ExportHistory(ctx, &pb.ExportHistoryRequest{Queue: q})
		if err != nil {
			return err
		}
		_, err = st.Recv()
		return err
	},
	"RunJobsNow": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		_, err := pb.NewAdminClient(c).RunJobsNow(ctx, &pb.RunJobsNowRequest{Queue: q, Ids: []string{"no-such-job"}})
		return err
	},
	"PauseQueue": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		_, err := pb.NewAdminClient(c).PauseQueue(ctx, &pb.PauseQueueRequest{Name: q + ".pause", Paused: true})
		return err
	},
	"DeclareSchedule": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		_, err := pb.NewAdminClient(c).DeclareSchedule(ctx, &pb.Schedule{Name: "nightly", Queue: q, Every: durationpb.New(time.Hour)})
		return err
	},
	"ListSchedules": func(ctx context.Context, c *grpc.ClientConn, _ string) error {
		_, err := pb.NewAdminClient(c).ListSchedules(ctx, &pb.ListSchedulesRequest{})
		return err
	},
	"PauseSchedule": func(ctx context.Context, c *grpc.ClientConn, _ string) error {
		_, err := pb.NewAdminClient(c).PauseSchedule(ctx, &pb.PauseScheduleRequest{Name: "nightly", Paused: true})
		return err
	},
	"DeleteSchedule": func(ctx context.Context, c *grpc.ClientConn, _ string) error {
		_, err := pb.NewAdminClient(c).DeleteSchedule(ctx, &pb.DeleteScheduleRequest{Name: "no-such-schedule"})
		return err
	},
	"Predict": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		_, err := pb.NewPredictorClient(c).Predict(ctx, &pb.PredictRequest{Queue: q})
		return err
	},
	"Observe": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		_, err := pb.NewPredictorClient(c).Observe(ctx, &pb.ObserveRequest{Queue: q})
		return err
	},
	"Attach": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		_, err := pb.NewPredictorClient(c).Attach(ctx, &pb.AttachRequest{Queue: q})
		return err
	},
	"Report": func(ctx context.Context, c *grpc.ClientConn, q string) error {
		_, err := pb.NewPredictorClient(c).Report(ctx, &pb.ReportRequest{
			Observations: []*pb.ObserveRequest{{Queue: q}},
			Publishes:    []*pb.CountedPublish{{Job: &pb.PredictRequest{Queue: q}}},
		})
		return err
	},
}

// A Report needs what its parts would need as calls of their own: consume
// on every queue its observations name, publish on every queue its
// publishes name.
func TestReportNeedsBothPermissions(t *testing.T) {
	t.Parallel()
	ab := authSetup(t)
	ctx := t.Context()
	pub := pb.NewPredictorClient(ab.dial(t, ab.tokens["publisher"]))
	const q = "orders.eu"
	publishes := []*pb.CountedPublish{{Job: &pb.PredictRequest{Queue: q}, Counted: durationpb.New(time.Millisecond)}}
	// The broker in this test serves no predictor: past the check, the
	// call is Unimplemented.
	if _, err := pub.Report(ctx, &pb.ReportRequest{Publishes: publishes}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("publishes with publish on %s: %v, want to pass the check", q, err)
	}
	for name, req := range map[string]*pb.ReportRequest{
		"an observation":             {Observations: []*pb.ObserveRequest{{Queue: q}}, Publishes: publishes},
		"a publish to another queue": {Publishes: append(publishes, &pb.CountedPublish{Job: &pb.PredictRequest{Queue: "billing"}})},
	} {
		if _, err := pub.Report(ctx, req); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s with publish on orders.* only: %v, want PermissionDenied", name, err)
		}
	}
}

// Every RPC without a token, with a token the broker does not know, with a
// known token scoped to other queues, and with a correctly scoped one.
func TestEveryRPCAsksForAToken(t *testing.T) {
	t.Parallel()
	ab := authSetup(t)
	ctx := t.Context()
	const q = "orders.eu"
	admin := ab.dial(t, ab.tokens["admin"])
	for _, name := range []string{q, q + ".purge", q + ".pause", q + ".delete"} {
		if _, err := pb.NewBrokerClient(admin).Publish(ctx, &pb.PublishRequest{Messages: []*pb.Message{{Queue: name}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Every RPC of the services is exercised here.
	for _, sd := range []grpc.ServiceDesc{pb.Broker_ServiceDesc, pb.Admin_ServiceDesc, pb.Predictor_ServiceDesc} {
		for _, m := range sd.Methods {
			if rpcCalls[m.MethodName] == nil {
				t.Errorf("no call for %s/%s in rpcCalls", sd.ServiceName, m.MethodName)
			}
		}
		for _, s := range sd.Streams {
			if rpcCalls[s.StreamName] == nil {
				t.Errorf("no call for %s/%s in rpcCalls", sd.ServiceName, s.StreamName)
			}
		}
	}
	none := ab.dial(t, "")
	wrong := ab.dial(t, "hbr_"+ab.tokens["admin"][4:]+"x")
	scoped := ab.dial(t, ab.tokens["others"])
	right := ab.dial(t, ab.tokens["orders"])
	for name, call := range rpcCalls {
		t.Run(name, func(t *testing.T) {
			if code := status.Code(call(ctx, none, q)); code != codes.Unauthenticated {
				t.Errorf("without a token: %v, want Unauthenticated", code)
			}
			if code := status.Code(call(ctx, wrong, q)); code != codes.Unauthenticated {
				t.Errorf("with a wrong token: %v, want Unauthenticated", code)
			}
			scopedCode := status.Code(call(ctx, scoped, q))
			if name == "GetLimits" || name == "ListQueues" || name == "ListSchedules" {
				// Any known token may ask the limits; a list shows what
				// the token may read (below).
				if scopedCode != codes.OK {
					t.Errorf("with a token for other queues: %v, want OK", scopedCode)
				}
			} else if scopedCode != codes.PermissionDenied {
				t.Errorf("with a token for other queues: %v, want PermissionDenied", scopedCode)
			}
			ok := right
			if name == "PauseSchedule" || name == "DeleteSchedule" {
				// These name only a schedule: admin on every queue.
				if code := status.Code(call(ctx, right, q)); code != codes.PermissionDenied {
					t.Errorf("with admin on orders.* only: %v, want PermissionDenied", code)
				}
				ok = admin
			}
			err := call(ctx, ok, q)
			if c := status.Code(err); c == codes.Unauthenticated || c == codes.PermissionDenied {
				t.Errorf("with a correctly scoped token: %v", err)
			}
		})
	}
}

// A list of queues shows a token only the queues it may read; reading is
// not acting, and a publish is checked message by message.
func TestScopesNarrowWhatATokenSeesAndDoes(t *testing.T) {
	t.Parallel()
	ab := authSetup(t)
	ctx := t.Context()
	admin := pb.NewBrokerClient(ab.dial(t, ab.tokens["admin"]))
	for _, q := range []string{"orders.eu", "other.x", "billing"} {
		if _, err := admin.Publish(ctx, &pb.PublishRequest{Messages: []*pb.Message{{Queue: q}}}); err != nil {
			t.Fatal(err)
		}
	}
	list := func(token string) []string {
		resp, err := pb.NewAdminClient(ab.dial(t, token)).ListQueues(ctx, &pb.ListQueuesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, q := range resp.Queues {
			names = append(names, q.Name)
		}
		return names
	}
	if got := list(ab.tokens["orders"]); len(got) != 1 || got[0] != "orders.eu" {
		t.Errorf("orders sees %v, want [orders.eu]", got)
	}
	if got := list(ab.tokens["reader"]); len(got) != 3 {
		t.Errorf("reader sees %v, want all three", got)
	}
	reader := ab.dial(t, ab.tokens["reader"])
	if _, err := pb.NewAdminClient(reader).ListKeys(ctx, &pb.ListKeysRequest{Queue: "billing"}); err != nil {
		t.Errorf("reader ListKeys: %v", err)
	}
	if _, err := pb.NewAdminClient(reader).PurgeQueue(ctx, &pb.PurgeQueueRequest{Name: "billing"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("reader PurgeQueue: %v, want PermissionDenied", err)
	}
	orders := pb.NewBrokerClient(ab.dial(t, ab.tokens["orders"]))
	_, err := orders.Publish(ctx, &pb.PublishRequest{Messages: []*pb.Message{{Queue: "orders.eu"}, {Queue: "billing"}}})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("a batch with one queue out of scope: %v, want PermissionDenied", err)
	}
	// A stream that starts in scope and strays is cut off.
	st, err := orders.PublishStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.PublishRequest{Messages: []*pb.Message{{Queue: "orders.eu"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("in scope: %v", err)
	}
	if err := st.Send(&pb.PublishRequest{Messages: []*pb.Message{{Queue: "billing"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Errorf("out of scope on the same stream: %v, want PermissionDenied", err)
	}
	// Health checks need no token.
	if _, err := healthpb.NewHealthClient(ab.dial(t, "")).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health check without a token: %v", err)
	}
}

// /metrics asks for a token that reads every queue; /healthz asks for none.
func TestMetricsAskForAToken(t *testing.T) {
	t.Parallel()
	path, toks := authtest.TokenFile(t, map[string][]string{"reader": {"read"}, "orders": {"read:orders."}})
	tokens, err := auth.LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(broker.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Shutdown(context.Background()) }()
	hs := httptest.NewServer(NewHTTPHandler(b, HTTPOptions{Tokens: tokens}))
	defer hs.Close()
	get := func(path, token string) int {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", hs.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hs.Client().Do(req) // not DefaultClient: another test's hs.Close closes its idle connections
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		path, token string
		want        int
	}{
		{"/metrics", "", 401}, {"/metrics", "hbr_wrong", 401}, {"/metrics", toks["orders"], 403}, {"/metrics", toks["reader"], 200},
		{"/healthz", "", 200},
	} {
		if got := get(c.path, c.token); got != c.want {
			t.Errorf("GET %s with %q: %d, want %d", c.path, c.token, got, c.want)
		}
	}
}
