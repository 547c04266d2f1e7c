package server

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/auth"
)

// rule is what one RPC asks of a token: a permission on the queues its
// request names (unary) or each message on its stream names.
type rule struct {
	open   bool            // no token needed (health checks)
	any    bool            // any known token, whatever its scopes
	perm   auth.Permission // else this permission on every queue named
	queues func(req any) []string
	// filter, for a list of queues, drops from the answer the queues the
	// token may not read instead of refusing the call.
	filter bool
	and    *rule // a second permission the request needs as well
	// holds, for a stream, lists the queues a message names that the
	// stream goes on using after it (a Consume's Subscribe): a reload
	// that takes the permission on one of them away ends the stream.
	holds func(req any) []string
}

func queueOf[T any](get func(T) string) func(any) []string {
	return func(req any) []string {
		r, ok := req.(T)
		if !ok {
			return nil
		}
		return []string{get(r)}
	}
}

func publishQueues(req any) []string {
	r, ok := req.(*pb.PublishRequest)
	if !ok {
		return nil
	}
	qs := make([]string, 0, 1)
	for _, m := range r.GetMessages() {
		if q := m.GetQueue(); len(qs) == 0 || qs[len(qs)-1] != q {
			qs = append(qs, q)
		}
	}
	return qs
}

// reportQueues lists the queues a Report's observations name (observed
// true) or its publishes name.
func reportQueues(observed bool) func(req any) []string {
	return func(req any) []string {
		r, ok := req.(*pb.ReportRequest)
		if !ok {
			return nil
		}
		var qs []string
		add := func(q string) {
			if len(qs) == 0 || qs[len(qs)-1] != q {
				qs = append(qs, q)
			}
		}
		if observed {
			for _, o := range r.GetObservations() {
				add(o.GetQueue())
			}
		} else {
			for _, p := range r.GetPublishes() {
				add(p.GetJob().GetQueue())
			}
		}
		return qs
	}
}

func consumeQueues(req any) []string {
	if s := req.(*pb.ConsumeRequest).GetSubscribe(); s != nil {
		return []string{s.GetQueue()}
	}
	return nil // acks and credit act on what the Subscribe was allowed
}

// rules covers every Harbinger RPC; TestAuthCoversEveryRPC fails when one
// is added without a rule, and an RPC without one is refused.
var rules = map[string]rule{
	pb.Broker_Publish_FullMethodName:       {perm: auth.Publish, queues: publishQueues},
	pb.Broker_PublishStream_FullMethodName: {perm: auth.Publish, queues: publishQueues},
	pb.Broker_Consume_FullMethodName:       {perm: auth.Consume, queues: consumeQueues, holds: consumeQueues},
	pb.Broker_GetLimits_FullMethodName:     {any: true},

	pb.Admin_DeclareQueue_FullMethodName:       {perm: auth.Admin, queues: queueOf((*pb.DeclareQueueRequest).GetName)},
	pb.Admin_ListQueues_FullMethodName:         {perm: auth.Read, filter: true},
	pb.Admin_PurgeQueue_FullMethodName:         {perm: auth.Admin, queues: queueOf((*pb.PurgeQueueRequest).GetName)},
	pb.Admin_DeleteQueue_FullMethodName:        {perm: auth.Admin, queues: queueOf((*pb.DeleteQueueRequest).GetName)},
	pb.Admin_ListDeadLetters_FullMethodName:    {perm: auth.Read, queues: queueOf((*pb.ListDeadLettersRequest).GetQueue)},
	pb.Admin_RequeueDeadLetters_FullMethodName: {perm: auth.Admin, queues: queueOf((*pb.RequeueDeadLettersRequest).GetQueue)},
	pb.Admin_DeleteDeadLetters_FullMethodName:  {perm: auth.Admin, queues: queueOf((*pb.DeleteDeadLettersRequest).GetQueue)},
	pb.Admin_ListKeys_FullMethodName:           {perm: auth.Read, queues: queueOf((*pb.ListKeysRequest).GetQueue)},
	pb.Admin_ListGroups_FullMethodName:         {perm: auth.Read, queues: queueOf((*pb.ListGroupsRequest).GetQueue)},
	pb.Admin_ListJobs_FullMethodName:           {perm: auth.Read, queues: queueOf((*pb.ListJobsRequest).GetQueue)},
	pb.Admin_GetJob_FullMethodName:             {perm: auth.Read, queues: queueOf((*pb.GetJobRequest).GetQueue)},
	pb.Admin_CancelJob_FullMethodName:          {perm: auth.Admin, queues: queueOf((*pb.CancelJobRequest).GetQueue)},
	pb.Admin_RunJobsNow_FullMethodName:         {perm: auth.Admin, queues: queueOf((*pb.RunJobsNowRequest).GetQueue)},
	pb.Admin_PauseQueue_FullMethodName:         {perm: auth.Admin, queues: queueOf((*pb.PauseQueueRequest).GetName)},
	pb.Admin_ExportHistory_FullMethodName:      {perm: auth.Read, queues: queueOf((*pb.ExportHistoryRequest).GetQueue)},
	// A schedule publishes to its queue. Pausing or deleting one names only
	// the schedule, so it takes admin on every queue.
	pb.Admin_DeclareSchedule_FullMethodName: {perm: auth.Admin, queues: queueOf((*pb.Schedule).GetQueue)},
	pb.Admin_ListSchedules_FullMethodName:   {perm: auth.Read, filter: true},
	pb.Admin_PauseSchedule_FullMethodName:   {perm: auth.Admin},
	pb.Admin_DeleteSchedule_FullMethodName:  {perm: auth.Admin},

	// The Predictor serves RabbitMQ publishers and consumers: predicting is
	// a publisher's part, observing and attaching a consumer's.
	pb.Predictor_Predict_FullMethodName: {perm: auth.Publish, queues: queueOf((*pb.PredictRequest).GetQueue)},
	pb.Predictor_Observe_FullMethodName: {perm: auth.Consume, queues: queueOf((*pb.ObserveRequest).GetQueue)},
	pb.Predictor_Attach_FullMethodName:  {perm: auth.Consume, queues: queueOf((*pb.AttachRequest).GetQueue)},
	// A report carries both: a consumer's observations, a publisher's
	// publishes answered from its cache.
	pb.Predictor_Report_FullMethodName: {perm: auth.Consume, queues: reportQueues(true),
		and: &rule{perm: auth.Publish, queues: reportQueues(false)}},
}

func ruleFor(method string) (rule, bool) {
	if r, ok := rules[method]; ok {
		return r, true
	}
	switch {
	case strings.HasPrefix(method, "/grpc.health.v1.Health/"):
		return rule{open: true}, true
	case strings.HasPrefix(method, "/grpc.reflection."):
		return rule{any: true}, true
	}
	return rule{}, false
}

// AuthOptions are the gRPC server options that check every call's bearer
// token ("authorization: Bearer TOKEN" metadata) against tokens: unknown
// or missing tokens get Unauthenticated, a token without the permission
// PermissionDenied. Health checks need no token.
func AuthOptions(tokens *auth.Tokens) []grpc.ServerOption {
	a := &authorizer{tokens: tokens}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(a.unary), grpc.ChainStreamInterceptor(a.stream)}
}

type authorizer struct{ tokens *auth.Tokens }

// grant looks up the call's token for r; nil with no error for an open
// RPC.
func (a *authorizer) grant(ctx context.Context, method string) (*auth.Grant, rule, error) {
	r, ok := ruleFor(method)
	if !ok {
		return nil, r, status.Errorf(codes.PermissionDenied, "%s has no access rule; no token may call it", method)
	}
	if r.open {
		return nil, r, nil
	}
	g, err := a.tokens.Lookup(bearer(ctx))
	if err != nil {
		return nil, r, authStatus(err)
	}
	return g, r, nil
}

func bearer(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok {
			return strings.TrimSpace(tok)
		}
	}
	return ""
}

// check applies r to one request.
func check(g *auth.Grant, r rule, req any) error {
	if g == nil || r.any || r.filter {
		return nil
	}
	if r.queues == nil {
		return authStatus(g.CheckAll(r.perm))
	}
	for _, q := range r.queues(req) {
		if err := g.Check(r.perm, q); err != nil {
			return authStatus(err)
		}
	}
	if r.and != nil {
		return check(g, *r.and, req)
	}
	return nil
}

func authStatus(err error) error {
	var de *auth.DeniedError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, auth.ErrNoToken):
		return status.Error(codes.Unauthenticated, "this broker asks for a token: send \"authorization: Bearer TOKEN\" metadata (the Go SDK: client.WithToken)")
	case errors.Is(err, auth.ErrBadToken):
		return status.Error(codes.Unauthenticated, "token not recognised; it may have been revoked")
	case errors.As(err, &de):
		return status.Error(codes.PermissionDenied, strings.TrimPrefix(err.Error(), "auth: ")+"; ask for a token with that scope")
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

func (a *authorizer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	g, r, err := a.grant(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	if err := check(g, r, req); err != nil {
		return nil, err
	}
	resp, err := h(ctx, req)
	if g != nil && r.filter {
		switch l := resp.(type) {
		case *pb.ListQueuesResponse:
			l.Queues = visible(g, r.perm, l.Queues, (*pb.QueueInfo).GetName)
		case *pb.ListSchedulesResponse:
			l.Schedules = visible(g, r.perm, l.Schedules, (*pb.Schedule).GetQueue)
		}
	}
	return resp, err
}

// visible keeps the items whose queue the grant has perm on.
func visible[T any](g *auth.Grant, perm auth.Permission, items []T, queue func(T) string) []T {
	kept := items[:0]
	for _, it := range items {
		if g.Allows(perm, queue(it)) {
			kept = append(kept, it)
		}
	}
	return kept
}

func (a *authorizer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	gen := a.tokens.Generation() // before the lookup: a reload after it is seen
	g, r, err := a.grant(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	if g == nil {
		return h(srv, ss)
	}
	s := a.checked(ss, g, r, gen)
	defer s.end()
	if err := s.revoked(); err != nil {
		return err // revoked before the handler began
	}
	err = h(srv, s)
	if rerr := s.revoked(); rerr != nil {
		// Whatever the handler made of its context's end (Canceled), or of
		// a send refused, the client is told why.
		return rerr
	}
	return err
}

// checked wraps a stream that g, looked up in generation gen of the
// tokens, was allowed to open, and starts watching the tokens for a
// reload that revokes or narrows g.
func (a *authorizer) checked(ss grpc.ServerStream, g *auth.Grant, r rule, gen uint64) *checkedStream {
	ctx, cancel := context.WithCancelCause(ss.Context())
	s := &checkedStream{ServerStream: ss, tokens: a.tokens, token: bearer(ss.Context()), r: r, ctx: ctx, cancel: cancel}
	s.g.Store(g)
	s.gen.Store(gen)
	s.watch()
	// A reload between the lookup and watch had no watcher to wake.
	_ = s.current()
	return s
}

// checkedStream checks every message a client sends on a stream against
// the token's grant as it is now: a PublishStream request may name any
// queue, and a Consume stream names its queue in its Subscribe. A stream
// outlives the token file it was opened under, so after each reload it
// checks its token again: a token removed from the file ends the stream
// (Unauthenticated), one that no longer holds the permission on a queue
// the stream subscribed to ends it too (PermissionDenied), and a later
// request is checked against what the token holds now. Messages the
// broker would send after the reload are not sent. An idle stream is woken
// by the reload itself (OnReload), which cancels its context.
type checkedStream struct {
	grpc.ServerStream
	tokens *auth.Tokens
	token  string
	r      rule
	ctx    context.Context // the stream's, ended with the status when the token is revoked
	cancel context.CancelCauseFunc

	g   atomic.Pointer[auth.Grant] // as of gen
	gen atomic.Uint64              // the tokens' generation g was looked up in

	mu     sync.Mutex
	held   []string // queues a Consume stream subscribed to
	err    error    // the status that ended the stream, once it has
	ended  bool     // the handler returned
	unwait func() bool
}

// Context is the stream's context, cancelled once the token is revoked.
func (s *checkedStream) Context() context.Context { return s.ctx }

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if err := s.current(); err != nil {
		return err
	}
	if err := check(s.g.Load(), s.r, m); err != nil {
		return err
	}
	if s.r.holds != nil {
		if qs := s.r.holds(m); len(qs) > 0 {
			s.mu.Lock()
			s.held = append(s.held, qs...)
			s.mu.Unlock()
			// A reload between the check and now was checked without
			// these queues: check again.
			return s.recheck()
		}
	}
	return nil
}

func (s *checkedStream) SendMsg(m any) error {
	if err := s.current(); err != nil {
		return err
	}
	return s.ServerStream.SendMsg(m)
}

// current returns nil while the stream's token allows what the stream
// does, checking it again after a reload; else the status that ends the
// stream. Between reloads it costs one atomic load.
func (s *checkedStream) current() error {
	if s.gen.Load() == s.tokens.Generation() {
		return nil
	}
	return s.recheck()
}

// recheck looks the token up in the tokens now in force. The first time
// the token no longer allows the stream, it records why and cancels the
// stream's context with it.
func (s *checkedStream) recheck() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	gen := s.tokens.Generation() // before the lookup: a later reload is seen next time
	g, err := s.tokens.Lookup(s.token)
	switch {
	case err != nil:
		s.err = status.Error(codes.Unauthenticated, "token not recognised: it was revoked while this stream was open; the stream ends")
	case !s.r.any:
		for _, q := range s.held {
			if err := g.Check(s.r.perm, q); err != nil {
				s.err = status.Error(codes.PermissionDenied, strings.TrimPrefix(err.Error(), "auth: ")+" any more: the token file changed while this stream was open; the stream ends")
				break
			}
		}
	}
	if s.err != nil {
		s.cancel(s.err)
		return s.err
	}
	s.g.Store(g)
	s.gen.Store(gen)
	return nil
}

// watch checks the token again at the next reload, and so on until the
// stream ends.
func (s *checkedStream) watch() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.err != nil {
		return
	}
	s.unwait = s.tokens.OnReload(func() {
		s.watch() // first, so that no reload slips between the two
		_ = s.current()
	})
}

// end stops watching the tokens; the handler has returned.
func (s *checkedStream) end() {
	s.mu.Lock()
	s.ended = true
	if s.unwait != nil {
		s.unwait()
	}
	s.mu.Unlock()
	s.cancel(context.Canceled)
}

// revoked is the status that ended the stream, if a reload did.
func (s *checkedStream) revoked() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
