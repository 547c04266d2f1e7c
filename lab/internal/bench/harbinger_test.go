package bench

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"
)

func harbingerForTest(t *testing.T) Driver {
	t.Helper()
	d := NewHarbinger(HarbingerOptions{})
	t.Cleanup(func() { d.Close() })
	return d
}

// testBinary is the harbinger executable the out-of-process tests start,
// built once per test binary and removed by TestMain.
var testBinary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if testBinary.dir != "" {
		os.RemoveAll(testBinary.dir)
	}
	os.Exit(code)
}

func harbingerBinaryForTest(t *testing.T) string {
	t.Helper()
	testBinary.once.Do(func() {
		if testBinary.dir, testBinary.err = os.MkdirTemp("", "harbinger-bench-test-"); testBinary.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		testBinary.path, testBinary.err = HarbingerBinary(ctx, testBinary.dir)
	})
	if testBinary.err != nil {
		t.Fatalf("building harbinger: %v", testBinary.err)
	}
	return testBinary.path
}

// harbingerProcessDrivers returns the out-of-process Harbinger-API drivers
// for the broker names given, as Connect makes them.
func harbingerProcessDrivers(t *testing.T, brokers ...string) map[string]Driver {
	t.Helper()
	var arms []Arm
	for _, b := range brokers {
		arms = append(arms, Arm{Name: b, Broker: b, Policy: PolicyFIFO})
	}
	drivers, err := Connect(context.Background(), arms, ConnectOptions{Binary: harbingerBinaryForTest(t), DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { CloseAll(drivers) })
	return drivers
}

// TestCostOutOfProcess runs the Harbinger-API arms that need no other
// service: harbinger serve in its own process, the bare gRPC queue and the
// in-process broker, and checks that the process arms report their
// broker's CPU and the in-process one does not.
func TestCostOutOfProcess(t *testing.T) {
	drivers := harbingerProcessDrivers(t, HarbingerServe, BareGRPC)
	drivers[Harbinger] = harbingerForTest(t)
	arms := []Arm{CostArms[0], CostArms[1], InProcessArm}
	res := shortCost(t, arms, drivers)
	for _, name := range []string{"harbinger", "bare-grpc"} {
		if res.Arms[name].PeakCPU.BrokerUS == nil || res.Arms[name].FixedRate.CPU.BrokerUS == nil {
			t.Errorf("%s: no broker CPU figure", name)
		}
	}
	if res.Arms[InProcessArm.Name].PeakCPU.BrokerUS != nil {
		t.Errorf("the in-process arm reports a broker CPU figure of its own")
	}
	for _, id := range []string{"harbinger_vs_bare_grpc", "inprocess_vs_harbinger"} {
		if res.ratio(id) == nil {
			t.Errorf("ratio %s missing", id)
		}
	}
}

// TestMemoryPhase measures a small backlog in both modes.
func TestMemoryPhase(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := RunMemory(ctx, MemoryConfig{Jobs: 2000, Binary: harbingerBinaryForTest(t), DataDir: t.TempDir(), Settle: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Arm != "harbinger" || res[1].Arm != "harbinger-durable" {
		t.Fatalf("memory results %+v, want harbinger and harbinger-durable", res)
	}
	for _, r := range res {
		if r.RSSBeforeBytes <= 0 || r.RSSAfterBytes <= 0 || r.PeakRSSBytes < r.RSSAfterBytes {
			t.Errorf("%s: RSS before %d, after %d, peak %d", r.Arm, r.RSSBeforeBytes, r.RSSAfterBytes, r.PeakRSSBytes)
		}
	}
	if res[0].DiskBytesPerJob != nil || res[1].DiskBytesPerJob == nil || *res[1].DiskBytesPerJob < 64 {
		t.Errorf("disk bytes per job: memory %v, durable %v; want none and at least the payload", res[0].DiskBytesPerJob, res[1].DiskBytesPerJob)
	}
}
