package bench

import (
	"context"
	"strings"
	"testing"
)

// TestCostUnary runs the unary arms (each message its own client.Publish
// call) and checks that every one says how it publishes, has its broker's
// CPU figure and its ratio, and that the durable goals, which belong to
// the streamed arms, are not claimed from them.
func TestCostUnary(t *testing.T) {
	drivers := harbingerProcessDrivers(t, HarbingerDurable, HarbingerServe, BareGRPC)
	res := shortCost(t, UnaryArms, drivers)
	for _, a := range UnaryArms {
		if got := res.Arms[a.Name].Broker; !strings.Contains(got, "one client.Publish call per message") {
			t.Errorf("%s broker = %q, want it to say it publishes one call per message", a.Name, got)
		}
		if res.Arms[a.Name].PeakCPU.BrokerUS == nil {
			t.Errorf("%s: no broker CPU figure", a.Name)
		}
	}
	env := Describe(context.Background(), drivers)
	m := CostMethod(CostConfig{Arms: UnaryArms}, env)
	if !strings.Contains(m, BareUnaryArm+" = bare-grpc (bare gRPC queue server from this build, its own process; one client.Publish call per message)") {
		t.Errorf("method does not say how %s publishes: %s", BareUnaryArm, m)
	}
	if strings.Contains(m, "a Producer stream per producer;") {
		t.Errorf("method describes a streamed arm that did not run: %s", m)
	}
	for _, id := range []string{"memory_unary_vs_bare_unary", "durable_unary_vs_memory_unary"} {
		if res.ratio(id) == nil {
			t.Errorf("ratio %s missing", id)
		}
	}
	if len(res.Goals) != 0 {
		t.Errorf("goals %+v from the unary arms, want none", res.Goals)
	}
}

// TestParseCostArmsGroups checks that the groups expand and an arm named
// by two groups runs once.
func TestParseCostArmsGroups(t *testing.T) {
	arms, err := ParseCostArms("registered,durable")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, a := range arms {
		seen[a.Name]++
	}
	for _, a := range append(append([]Arm{}, CostArms...), DurableArms...) {
		if seen[a.Name] != 1 {
			t.Errorf("arm %s runs %d times, want once", a.Name, seen[a.Name])
		}
	}
	if _, err := ParseCostArms("durable,harbinger-memory-unary"); err != nil {
		t.Errorf("a unary arm by name: %v", err)
	}
	if _, err := ParseCostArms("harbinger-durable,nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown arm: err = %v, want it named", err)
	}
}
