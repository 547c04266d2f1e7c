package server

import (
	"math"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/broker"
)

// duration converts an optional proto duration; nil is zero. Invalid or
// negative durations are an error naming field.
func duration(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, invalidArg("%s: %v", field, err)
	}
	if d.Seconds < 0 || d.Nanos < 0 {
		return 0, invalidArg("%s must not be negative", field)
	}
	if d.Seconds > math.MaxInt64/int64(time.Second)-1 {
		return 0, invalidArg("%s is too long", field)
	}
	return d.AsDuration(), nil
}

// fromMessage fills bm with m, the request's i-th message.
func fromMessage(i int, m *pb.Message, bm *broker.Message) error {
	if m == nil {
		return invalidArg("messages[%d] is empty", i)
	}
	if paths := badUTF8(m); paths != "" {
		return utf8Error(paths)
	}
	ttl, err := duration("ttl", m.Ttl)
	if err != nil {
		return err
	}
	delay, err := duration("delay", m.Delay)
	if err != nil {
		return err
	}
	*bm = broker.Message{
		Queue: m.Queue, Producer: m.Producer, JobType: m.JobType, SizeHint: m.SizeHint,
		Payload: m.Payload, Headers: m.Headers, TTL: ttl, MaxAttempts: int(m.MaxAttempts), Delay: delay,
	}
	if bm.RetryBase, err = duration("retry_base", m.RetryBase); err != nil {
		return err
	}
	if bm.RetryMax, err = duration("retry_max", m.RetryMax); err != nil {
		return err
	}
	bm.UniqueKey = m.UniqueKey
	if bm.UniqueFor, err = duration("unique_for", m.UniqueFor); err != nil {
		return err
	}
	if m.RunAt != nil {
		if err := m.RunAt.CheckValid(); err != nil {
			return invalidArg("run_at: %v", err)
		}
		bm.RunAt = m.RunAt.AsTime()
	}
	return nil
}

// deliveryResponse holds a delivery's response and every message in it, so
// that one allocation serves a delivery instead of five. Each delivery gets
// a fresh one: gRPC may still read a message after Send returns (stats
// handlers and tracing may use it lazily).
type deliveryResponse struct {
	resp  pb.ConsumeResponse
	oneof pb.ConsumeResponse_Delivery
	item  deliveryItem
}

// toDeliveryResponse is d as the response that delivers it.
func toDeliveryResponse(d *broker.Delivery) *pb.ConsumeResponse {
	r := new(deliveryResponse)
	fillDelivery(&r.item, d)
	r.oneof.Delivery = &r.item.delivery
	r.resp.Response = &r.oneof
	return &r.resp
}

// deliveryItem is one delivery of a batch and the messages in it; a
// batch's items are allocated together.
type deliveryItem struct {
	delivery pb.Delivery
	at       timestamppb.Timestamp
	lease    durationpb.Duration
}

// batchResponse holds a DeliveryBatch response and its wrappers.
type batchResponse struct {
	resp  pb.ConsumeResponse
	oneof pb.ConsumeResponse_Deliveries
	batch pb.DeliveryBatch
}

// toBatchResponse is ds as one response that delivers them all, in order.
// Like toDeliveryResponse, each batch gets fresh messages.
func toBatchResponse(ds []broker.Delivery) *pb.ConsumeResponse {
	items := make([]deliveryItem, len(ds))
	ptrs := make([]*pb.Delivery, len(ds))
	for i := range ds {
		fillDelivery(&items[i], &ds[i])
		ptrs[i] = &items[i].delivery
	}
	r := new(batchResponse)
	r.batch.Deliveries = ptrs
	r.oneof.Deliveries = &r.batch
	r.resp.Response = &r.oneof
	return &r.resp
}

func fillDelivery(it *deliveryItem, d *broker.Delivery) {
	pd := &it.delivery
	pd.Id, pd.Queue, pd.Producer, pd.JobType = d.ID, d.Queue, d.Producer, d.JobType
	pd.SizeHint, pd.Payload, pd.Headers = d.SizeHint, d.Payload, d.Headers
	pd.Attempt, pd.Tier = uint32(d.Attempt), uint32(d.Tier)
	pd.PredictedMs = float64(d.Predicted) / float64(time.Millisecond)
	// As timestamppb.New and durationpb.New compute them.
	it.at.Seconds, it.at.Nanos = d.PublishedAt.Unix(), int32(d.PublishedAt.Nanosecond())
	it.lease.Seconds, it.lease.Nanos = int64(d.Lease/time.Second), int32(d.Lease%time.Second)
	pd.PublishedAt, pd.Lease = &it.at, &it.lease
}

// deliveryFixed bounds what a delivery's encoding takes beyond its
// strings, payload and headers: every other field with its tag, the
// timestamp's and the lease's messages, and the delivery's own tag and
// length inside a batch.
const deliveryFixed = 128

// headerEntryFixed bounds a header's encoding beyond its key and value:
// the entry's tag and length, and the key's and value's, with lengths of
// up to four bytes each (256 MiB).
const headerEntryFixed = 15

// deliverySize bounds the encoded size of d inside a DeliveryBatch, without
// encoding it: a frame is cut before it would pass the client's receive
// limit.
func deliverySize(d *broker.Delivery) int {
	n := deliveryFixed + len(d.ID) + len(d.Queue) + len(d.Producer) + len(d.JobType) + len(d.Payload)
	for k, v := range d.Headers {
		n += headerEntryFixed + len(k) + len(v)
	}
	return n
}

// Bounds on config fields before they are narrowed to int.
const (
	maxTiersField = 1 << 10
	maxDepthField = 1 << 40
)

func fromQueueConfig(c *pb.QueueConfig) (broker.QueueConfig, error) {
	if c == nil {
		return broker.QueueConfig{}, nil
	}
	if c.Tiers > maxTiersField {
		return broker.QueueConfig{}, invalidArg("tiers: %d is far too many", c.Tiers)
	}
	if c.MaxDepth > maxDepthField {
		return broker.QueueConfig{}, invalidArg("max_depth: %d is over the limit of %d", c.MaxDepth, uint64(maxDepthField))
	}
	if len(c.Weights) > maxTiersField || len(c.Aging) > maxTiersField {
		return broker.QueueConfig{}, invalidArg("weights and aging need one entry per tier")
	}
	q := broker.QueueConfig{
		Policy: c.Policy, Tiers: int(c.Tiers), AgingOff: c.AgingOff,
		MaxDepth: int(c.MaxDepth), MaxAttempts: int(min(c.MaxAttempts, math.MaxInt32)), Shadow: c.Shadow,
		MaxInFlight: int(min(c.MaxInFlight, math.MaxInt32)), KeepDone: int(min(c.KeepDone, math.MaxInt32)),
	}
	for _, w := range c.Weights {
		q.Weights = append(q.Weights, int(min(w, math.MaxInt32)))
	}
	for i, a := range c.Aging {
		d, err := duration("aging", a)
		if err != nil {
			return broker.QueueConfig{}, err
		}
		if a == nil {
			return broker.QueueConfig{}, invalidArg("aging[%d] is empty", i)
		}
		q.Aging = append(q.Aging, d)
	}
	if len(c.StaticTiers) > 0 {
		q.StaticTiers = make(map[string]int, len(c.StaticTiers))
		for k, v := range c.StaticTiers {
			q.StaticTiers[k] = int(min(v, maxTiersField))
		}
	}
	var err error
	if q.Lease, err = duration("lease", c.Lease); err != nil {
		return broker.QueueConfig{}, err
	}
	if q.DefaultTTL, err = duration("default_ttl", c.DefaultTtl); err != nil {
		return broker.QueueConfig{}, err
	}
	if q.RetryBase, err = duration("retry_base", c.RetryBase); err != nil {
		return broker.QueueConfig{}, err
	}
	if q.RetryMax, err = duration("retry_max", c.RetryMax); err != nil {
		return broker.QueueConfig{}, err
	}
	q.RetryJitter = c.RetryJitter
	q.GroupBy, q.Limits, q.RateLimits = c.GroupBy, c.Limits, c.RateLimits
	q.Reserve, q.NoReserve = int(min(c.Reserve, math.MaxInt32)), c.NoReserve
	q.ReserveAbove, q.NoCredit = c.ReserveAbove, c.NoCredit
	if q.ReserveWindow, err = duration("reserve_window", c.ReserveWindow); err != nil {
		return broker.QueueConfig{}, err
	}
	if q.Credit, err = duration("credit", c.Credit); err != nil {
		return broker.QueueConfig{}, err
	}
	if len(c.GroupWeights) > 0 {
		q.GroupWeights = make(map[string]int, len(c.GroupWeights))
		for k, v := range c.GroupWeights {
			q.GroupWeights[k] = int(min(v, math.MaxInt32))
		}
	}
	return q, nil
}

func toQueueConfig(q broker.QueueConfig) *pb.QueueConfig {
	c := &pb.QueueConfig{
		Policy: q.Policy, Tiers: uint32(q.Tiers), AgingOff: q.AgingOff,
		MaxDepth: uint64(q.MaxDepth), MaxAttempts: uint32(q.MaxAttempts), MaxInFlight: uint32(q.MaxInFlight),
		KeepDone: uint32(q.KeepDone), Lease: durationpb.New(q.Lease), Shadow: q.Shadow,
		RetryBase: durationpb.New(q.RetryBase), RetryMax: durationpb.New(q.RetryMax), RetryJitter: q.RetryJitter,
	}
	if q.DefaultTTL > 0 {
		c.DefaultTtl = durationpb.New(q.DefaultTTL)
	}
	for _, w := range q.Weights {
		c.Weights = append(c.Weights, uint32(w))
	}
	for _, a := range q.Aging {
		c.Aging = append(c.Aging, durationpb.New(a))
	}
	c.GroupBy, c.Limits, c.RateLimits = q.GroupBy, q.Limits, q.RateLimits
	c.Reserve, c.NoReserve = uint32(max(q.Reserve, 0)), q.NoReserve
	c.ReserveAbove, c.NoCredit = q.ReserveAbove, q.NoCredit
	if q.ReserveWindow != 0 {
		c.ReserveWindow = durationpb.New(q.ReserveWindow)
	}
	if q.Credit != 0 {
		c.Credit = durationpb.New(q.Credit)
	}
	if len(q.GroupWeights) > 0 {
		c.GroupWeights = make(map[string]uint32, len(q.GroupWeights))
		for k, v := range q.GroupWeights {
			c.GroupWeights[k] = uint32(max(v, 0))
		}
	}
	if len(q.StaticTiers) > 0 {
		c.StaticTiers = make(map[string]uint32, len(q.StaticTiers))
		for k, v := range q.StaticTiers {
			c.StaticTiers[k] = uint32(v)
		}
	}
	return c
}

func toQueueInfo(in broker.QueueInfo) *pb.QueueInfo {
	out := &pb.QueueInfo{
		Name: in.Name, Config: toQueueConfig(in.Config), Ready: uint64(in.Ready),
		InFlight: uint64(in.InFlight), DeadLetters: uint64(in.DeadLetters),
		Consumers: uint32(in.Consumers), Published: in.Published, Acked: in.Acked, Paused: in.Paused,
		Delayed: uint64(in.Delayed),
	}
	if in.Ready > 0 {
		out.OldestWait = durationpb.New(in.OldestWait)
	}
	if in.RunTime.Count > 0 {
		out.RunP50, out.RunP99 = durationpb.New(in.RunTime.P50), durationpb.New(in.RunTime.P99)
	}
	for _, n := range in.DepthPerTier {
		out.DepthPerTier = append(out.DepthPerTier, uint64(n))
	}
	return out
}

// QueueConfigProto is q as the Admin API carries it: what `harbinger
// admin declare-queue` sends for the settings it reads.
func QueueConfigProto(q broker.QueueConfig) *pb.QueueConfig { return toQueueConfig(q) }

// QueueConfigFromProto is a queue's settings as the broker takes them from
// their wire form, refusing what cannot be a setting.
func QueueConfigFromProto(c *pb.QueueConfig) (broker.QueueConfig, error) { return fromQueueConfig(c) }
