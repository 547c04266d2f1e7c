package harness

import (
	"context"
	"fmt"
	"os"
	"time"
)

// CPUPerMsg is CPU time per delivered message in one timed window, in
// microseconds: the broker process's own (utime + stime from
// /proc/PID/stat, 10 ms resolution) and the harness process's (producers,
// consumers and their client libraries; for an in-process broker, the
// broker too).
type CPUPerMsg struct {
	// BrokerUS is nil where the broker has no process of its own on this
	// machine that the harness can read (the in-process arm).
	BrokerUS  *float64 `json:"broker_us"`
	HarnessUS float64  `json:"harness_us"`
}

// brokerPID is implemented by queues whose broker is a process on this
// machine that the harness can account for.
type brokerPID interface {
	BrokerPID() int // 0 when unknown
}

// CPUSample is the CPU a broker process and the harness had used at one
// moment.
type CPUSample struct {
	broker  time.Duration
	ok      bool
	harness time.Duration
	Log     LogSample // a durable Harbinger's log counters
	LogOK   bool
}

func SampleCPU(q Queue) CPUSample {
	s := CPUSample{harness: SelfCPU()}
	if ls, ok := q.(logSampler); ok {
		s.Log, s.LogOK = ls.LogSample(context.Background())
	}
	if bp, isProc := q.(brokerPID); isProc {
		if pid := bp.BrokerPID(); pid > 0 {
			if d, err := ProcCPU(pid); err == nil {
				s.broker, s.ok = d, true
			}
		}
	}
	return s
}

// perMsg is the CPU between two samples per message.
func PerMsg(a, b CPUSample, msgs int64) CPUPerMsg {
	if msgs <= 0 {
		return CPUPerMsg{}
	}
	out := CPUPerMsg{HarnessUS: float64((b.harness - a.harness).Microseconds()) / float64(msgs)}
	if a.ok && b.ok {
		v := float64((b.broker - a.broker).Microseconds()) / float64(msgs)
		out.BrokerUS = &v
	}
	return out
}

// ProcStatusKB reads a "kB" field of /proc/PID/status, in bytes.
func ProcStatusKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return statusKB(string(b), field)
}

func (c CPUPerMsg) String() string {
	b := "n/a"
	if c.BrokerUS != nil {
		b = fmt.Sprintf("%.1f µs", *c.BrokerUS)
	}
	return fmt.Sprintf("broker %s, harness %.1f µs", b, c.HarnessUS)
}
