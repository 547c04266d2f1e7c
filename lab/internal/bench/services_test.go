package bench

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/sim"
	"github.com/harbinger-mq/harbinger/internal/workload"
)

// requireServices reports whether an unreachable RabbitMQ or Redis fails a
// test (HARBINGER_REQUIRE_SERVICES=1) instead of skipping it.
func requireServices() bool { return os.Getenv("HARBINGER_REQUIRE_SERVICES") == "1" }

func unavailable(t *testing.T, what string, err error) {
	t.Helper()
	if requireServices() {
		t.Fatalf("%s unreachable and HARBINGER_REQUIRE_SERVICES=1: %v", what, err)
	}
	t.Skipf("skipping: %s unreachable (%v); set HARBINGER_REQUIRE_SERVICES=1 to make this a failure", what, err)
}

func rabbitForTest(t *testing.T) *RabbitDriver {
	t.Helper()
	d, err := DialRabbit(AMQPURL())
	if err != nil {
		unavailable(t, "RabbitMQ (HARBINGER_AMQP_URL)", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func redisForTest(t *testing.T) *RedisDriver {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	d, err := DialRedis(ctx, RedisAddr())
	if err != nil {
		unavailable(t, "Redis (HARBINGER_REDIS_ADDR)", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func productionFlow(t *testing.T) sim.Source {
	t.Helper()
	w, err := workload.Load("../../../workloads/production-flow.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return sim.FromWorkload(w)
}
