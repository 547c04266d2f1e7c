package sidecar

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/harbinger-mq/harbinger/internal/rmqcluster"
)

// startRMQCluster starts an n-node RabbitMQ cluster on this machine
// (package rmqcluster) and tears it down in t.Cleanup, keeping its
// directory for the nodes' logs when the test failed. An error means the
// cluster could not start; whatever did start is torn down already.
func startRMQCluster(t testing.TB, n int) (*rmqcluster.Cluster, error) {
	c, err := rmqcluster.Start(context.Background(), rmqcluster.Config{Nodes: n})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		if !t.Failed() {
			if err := c.Close(); err != nil {
				t.Error(err)
			}
			return
		}
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
		t.Logf("rmqcluster: keeping %s for its logs", c.Dir())
	})
	return c, nil
}

// errClusterGate is why the cluster tests skip.
var errClusterGate = errors.New("set HARBINGER_RABBITMQ_CLUSTER=1 to start a three-node RabbitMQ cluster on this machine (needs rabbitmq-server and rabbitmqctl)")

// clusterForTest skips the test unless HARBINGER_RABBITMQ_CLUSTER=1, and
// starts a cluster of n nodes; a cluster that cannot start skips too, or
// fails the test with HARBINGER_REQUIRE_SERVICES=1.
func clusterForTest(t *testing.T, n int) *rmqcluster.Cluster {
	t.Helper()
	if os.Getenv("HARBINGER_RABBITMQ_CLUSTER") != "1" {
		t.Skip(errClusterGate)
	}
	c, err := startRMQCluster(t, n)
	if err != nil {
		if os.Getenv("HARBINGER_REQUIRE_SERVICES") == "1" {
			t.Fatalf("%d-node RabbitMQ cluster did not start and HARBINGER_REQUIRE_SERVICES=1: %v", n, err)
		}
		t.Skipf("%d-node RabbitMQ cluster did not start (HARBINGER_REQUIRE_SERVICES=1 fails instead): %v", n, err)
	}
	return c
}
