package bench

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

func natsForTest(t *testing.T) Driver {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, ok := LocateNATSServer(ctx)
	if !ok {
		if !requireServices() {
			unavailable(t, "nats-server 2.10 or later (HARBINGER_NATS_SERVER, or run `harbinger-lab bench cost --arms nats-jetstream` once to build "+NATSServerVersion+" into the cache)", nil)
		}
		// CI: the bench's own setup builds it.
		var err error
		if bin, err = FindNATSServer(ctx, nil); err != nil {
			t.Fatalf("HARBINGER_REQUIRE_SERVICES=1 and no nats-server: %v", err)
		}
	}
	return NewNATS(NATSOptions{Binary: bin, DataDir: t.TempDir()})
}

func redisAOFForTest(t *testing.T) Driver {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		unavailable(t, "redis-server on PATH", err)
	}
	d, err := StartRedisAOF(context.Background(), RedisAOFOptions{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func rabbitQuorumForTest(t *testing.T) Driver {
	t.Helper()
	d, err := DialRabbitQuorum(AMQPURL())
	if err != nil {
		unavailable(t, "RabbitMQ (HARBINGER_AMQP_URL)", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestCostDurableHarbinger runs Harbinger's two durable-comparison arms,
// which need no other service.
func TestCostDurableHarbinger(t *testing.T) {
	drivers := harbingerProcessDrivers(t, HarbingerDurable, HarbingerServe)
	res := shortCost(t, DurableArms[:2], drivers)
	if res.ratio("durable_vs_memory") == nil {
		t.Error("durable / memory ratio missing")
	}
	var ids []string
	for _, g := range res.Goals {
		ids = append(ids, g.ID)
	}
	if len(ids) != 2 || ids[0] != "D2" || ids[1] != "D3" {
		t.Errorf("goals %v, want D2 and D3 (D1 needs the other brokers)", ids)
	}
	// The durable serve's log was read over its peak window; the memory
	// one has no log.
	if l := res.Arms[DurableArms[0].Name].PeakLog; l == nil || l.PublishesPerSync <= 0 || l.SyncUS <= 0 {
		t.Errorf("%s: log figures %v", DurableArms[0].Name, l)
	}
	if l := res.Arms[DurableArms[1].Name].PeakLog; l != nil {
		t.Errorf("%s (memory mode) has log figures %v", DurableArms[1].Name, l)
	}
	if r := res.Arms[DurableArms[0].Name].Runs[0]; r.SlowFsyncs == nil || *r.SlowFsyncs < 0 {
		t.Errorf("%s: fixed-rate run without a count of slow fsyncs: %+v", DurableArms[0].Name, r)
	}
	if r := res.Arms[DurableArms[1].Name].Runs[0]; r.SlowFsyncs != nil {
		t.Errorf("%s (memory mode): a count of slow fsyncs", DurableArms[1].Name)
	}
}

// TestCostDurableShort runs every durable arm side by side, briefly.
func TestCostDurableShort(t *testing.T) {
	drivers := harbingerProcessDrivers(t, HarbingerDurable, HarbingerServe, BareGRPC)
	drivers[NATS] = natsForTest(t)
	drivers[RabbitQuorum] = rabbitQuorumForTest(t)
	drivers[RedisAOF] = redisAOFForTest(t)
	res := shortCost(t, DurableArms, drivers)
	if res.ratio("durable_vs_best_durable") == nil {
		t.Error("durable / best-other ratio missing")
	}
	if len(res.Goals) != 3 {
		t.Errorf("goals %+v, want D1-D3", res.Goals)
	}
	for _, name := range ArmNames(DurableArms) {
		if res.Arms[name].PeakCPU.BrokerUS == nil {
			t.Errorf("%s: no broker CPU figure", name)
		}
	}
}
