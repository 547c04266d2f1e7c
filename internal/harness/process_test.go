package harness

import (
	"os"
	"testing"
	"time"
)

func TestServeReady(t *testing.T) {
	t.Parallel()
	line := `{"time":"2026-01-01T00:00:00Z","level":"INFO","msg":"harbinger: serving","grpc":"127.0.0.1:40123","http":"127.0.0.1:40124"}`
	if addr, http, ok := serveReady(line); !ok || addr != "127.0.0.1:40123" || http != "127.0.0.1:40124" {
		t.Errorf("serveReady = %q, %q, %v", addr, http, ok)
	}
	for _, l := range []string{`{"msg":"harbinger: stopped"}`, "not json", `{"msg":"harbinger: serving"}`} {
		if _, _, ok := serveReady(l); ok {
			t.Errorf("serveReady accepted %q", l)
		}
	}
}

func TestProcAccounting(t *testing.T) {
	t.Parallel()
	// Burn a little CPU so the 10 ms ticks have something to count.
	deadline := time.Now().Add(30 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	cpu, err := ProcCPU(os.Getpid())
	if err != nil || cpu <= 0 {
		t.Errorf("ProcCPU(self) = %v, %v", cpu, err)
	}
	rss, err := ProcRSS(os.Getpid())
	if err != nil || rss < 1<<20 {
		t.Errorf("ProcRSS(self) = %d, %v", rss, err)
	}
	if v, err := statusKB("Name:\tx\nVmHWM:\t  2048 kB\n", "VmHWM:"); err != nil || v != 2048<<10 {
		t.Errorf("statusKB = %d, %v", v, err)
	}
}
