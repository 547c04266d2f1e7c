package bench

import (
	"context"
	"strings"
	"testing"
)

// TestCostBareUnary runs the bare queue published to one call per message
// beside the memory-mode arm published to the same way, and checks that
// the arm says how it publishes and that the ratio to it is reported.
func TestCostBareUnary(t *testing.T) {
	drivers := harbingerProcessDrivers(t, HarbingerMemoryUnary, BareGRPC)
	arms := []Arm{DurableArms[1], {BareUnaryArm, BareGRPC, PolicyFIFO}}
	res := shortCost(t, arms, drivers)
	if got := res.Arms[BareUnaryArm].Broker; !strings.Contains(got, "one client.Publish call per message") {
		t.Errorf("%s broker = %q, want it to say it publishes one call per message", BareUnaryArm, got)
	}
	if res.Arms[BareUnaryArm].PeakCPU.BrokerUS == nil {
		t.Errorf("%s: no broker CPU figure", BareUnaryArm)
	}
	env := Describe(context.Background(), drivers)
	if m := CostMethod(CostConfig{Arms: arms}, env); !strings.Contains(m, BareUnaryArm+" = bare-grpc (bare gRPC queue server from this build, its own process; one client.Publish call per message)") {
		t.Errorf("method does not say how %s publishes: %s", BareUnaryArm, m)
	}
	if res.ratio("memory_unary_vs_bare_unary") == nil {
		t.Error("memory-unary / bare-unary ratio missing")
	}
}
