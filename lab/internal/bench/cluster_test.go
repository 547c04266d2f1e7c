package bench

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// errClusterGate is why TestFlowCluster skips.
var errClusterGate = errors.New("set HARBINGER_RABBITMQ_CLUSTER=1 to start a three-node RabbitMQ cluster on this machine (needs rabbitmq-server and rabbitmqctl)")

// testLog is an io.Writer onto t.Log, for progress lines.
type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestFlowCluster runs a short flow of rabbitmq-fifo and
// rabbitmq-predictive-sidecars on a three-node RabbitMQ cluster started as
// `bench flow --rabbitmq-cluster 3` starts it, and checks that every arm
// completed every job and that the method line says where they ran.
func TestFlowCluster(t *testing.T) {
	if os.Getenv("HARBINGER_RABBITMQ_CLUSTER") != "1" {
		t.Skip(errClusterGate)
	}
	const nodes = 3
	arms, err := ParseArms("rabbitmq-fifo,rabbitmq-predictive-sidecars", FlowArms)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, err := ConnectFlow(ctx, arms, FlowConnect{ConnectOptions: ConnectOptions{BuildDir: t.TempDir(), Progress: testLog{t}}, RabbitCluster: nodes})
	if err != nil {
		unavailable(t, "a three-node RabbitMQ cluster", err)
	}
	t.Cleanup(func() {
		CloseAll(b.Drivers)
		if !t.Failed() {
			if err := b.Cluster.Close(); err != nil {
				t.Error(err)
			}
			return
		}
		if err := b.Cluster.Stop(); err != nil {
			t.Error(err)
		}
		t.Logf("keeping %s for the nodes' logs", b.Cluster.Dir())
	})
	for _, name := range []string{RabbitMQ, RabbitSidecars} {
		if v := b.Drivers[name].Version(ctx); !strings.Contains(v, "on a 3-node cluster") {
			t.Errorf("%s's version for the method line does not name the cluster: %s", name, v)
		}
	}

	src := productionFlow(t)
	const window = 20 * time.Second
	want := 0
	for _, j := range src.Generate(1) {
		if j.Arrival < window {
			want++
		}
	}
	res, err := RunFlow(ctx, FlowConfig{Source: src, Seeds: []uint64{1}, Arms: arms,
		TimeScale: 0.1, Window: window, DrainTimeout: 20 * time.Second}, b.Drivers)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != len(arms) {
		t.Fatalf("%d runs, want one per arm (%d)", len(res.Runs), len(arms))
	}
	for _, run := range res.Runs {
		if run.Sent != want {
			t.Errorf("%s: sent %d of the window's %d jobs", run.Arm, run.Sent, want)
		}
		if lost := run.Sent - len(run.Records); lost != 0 {
			t.Errorf("%s: lost %d of %d", run.Arm, lost, run.Sent)
		}
		t.Logf("%s: %d sent, %d completed, %d duplicates, wall %.1fs", run.Arm, run.Sent, len(run.Records), run.Duplicates, run.Wall.Seconds())
	}
}

// TestConnectFlowRefuses checks the cluster sizes and arm lists
// ConnectFlow refuses before it starts anything.
func TestConnectFlowRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		arms  string
		nodes int
		want  string
	}{
		{"rabbitmq-fifo", -1, "1 or more"},
		{"harbinger-fifo,redis-fifo", 3, "needs a RabbitMQ arm"},
	} {
		arms, err := ParseArms(tc.arms, FlowArms)
		if err != nil {
			t.Fatal(err)
		}
		b, err := ConnectFlow(context.Background(), arms, FlowConnect{RabbitCluster: tc.nodes})
		if err == nil {
			b.Close()
			t.Errorf("--rabbitmq-cluster %d with %s: no error", tc.nodes, tc.arms)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--rabbitmq-cluster %d with %s: %v, want it to say %q", tc.nodes, tc.arms, err, tc.want)
		}
	}
}
