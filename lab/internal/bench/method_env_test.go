package bench

import (
	"strings"
	"testing"
)

// The method line says when GOMAXPROCS came from the environment, which the
// brokers the harness starts inherit, and says nothing when it did not.
func TestMethodNamesInheritedGOMAXPROCS(t *testing.T) {
	e := Environment{Brokers: map[string]string{"harbinger": "harbinger (devel)"}, GoVersion: "go1.26", CPUs: 2, MaxProcs: 1, EnvMaxProcs: "1"}
	for _, line := range []string{e.Host(), e.String()} {
		if !strings.Contains(line, "GOMAXPROCS=1 was set in the environment") || !strings.Contains(line, "harbinger serve") {
			t.Errorf("with GOMAXPROCS in the environment: %q", line)
		}
	}
	e.EnvMaxProcs = ""
	for _, line := range []string{e.Host(), e.String()} {
		if strings.Contains(line, "environment") {
			t.Errorf("without GOMAXPROCS in the environment: %q", line)
		}
	}
}
