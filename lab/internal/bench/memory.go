package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harbinger-mq/harbinger/client"
)

// DefaultMemoryJobs is the backlog the memory phase measures.
const DefaultMemoryJobs = 1_000_000

// memorySettle is how long the memory phase waits after the last publish
// before reading the broker's resident set, so that it reads the backlog
// and not the garbage of the requests that carried it.
const memorySettle = 5 * time.Second

// MemoryConfig configures RunMemory.
type MemoryConfig struct {
	// Jobs is how many waiting jobs to measure; default DefaultMemoryJobs.
	Jobs int
	// Binary is the harbinger executable (see HarbingerBinary).
	Binary string
	// DataDir is where the durable broker's data directory goes; default
	// os.TempDir().
	DataDir  string
	Progress io.Writer
	// Settle is how long to wait after the last publish before reading
	// the resident set; default memorySettle.
	Settle time.Duration
}

// MemoryResult is what one broker process holds for a backlog of
// 64-byte jobs that no worker takes.
type MemoryResult struct {
	Arm   string `json:"arm"`
	Serve string `json:"serve"` // how harbinger serve ran
	Jobs  int    `json:"jobs"`
	// RSS is the broker process's resident set (VmRSS) with the queue
	// declared and empty, and memorySettle after the last publish was
	// answered; PeakRSS its high-water mark (VmHWM).
	RSSBeforeBytes int64   `json:"rss_before_bytes"`
	RSSAfterBytes  int64   `json:"rss_after_bytes"`
	PeakRSSBytes   int64   `json:"peak_rss_bytes"`
	BytesPerJob    float64 `json:"bytes_per_job"` // (after - before) / jobs
	// DiskBytesPerJob is the data directory's size per job (durable only).
	DiskBytesPerJob *float64 `json:"disk_bytes_per_job,omitempty"`
	PublishSeconds  float64  `json:"publish_s"`
}

// RunMemory measures the memory per waiting job of `harbinger serve`,
// in memory mode and in durable mode (fsync always): a fresh broker
// process each, one queue with the default policy, cfg.Jobs 64-byte
// jobs published through one Producer, no worker.
func RunMemory(ctx context.Context, cfg MemoryConfig) ([]MemoryResult, error) {
	if cfg.Jobs == 0 {
		cfg.Jobs = DefaultMemoryJobs
	}
	if cfg.Settle == 0 {
		cfg.Settle = memorySettle
	}
	if cfg.Jobs < 1 {
		return nil, fmt.Errorf("bench: --memory-jobs must be positive, got %d", cfg.Jobs)
	}
	var out []MemoryResult
	for _, m := range []struct {
		arm  string
		mode HarbingerMode
	}{{"harbinger", ServeMemory}, {"harbinger-durable", ServeDurable}} {
		r, err := memoryRun(ctx, cfg, m.arm, m.mode)
		if err != nil {
			return nil, fmt.Errorf("memory phase, %s: %w", m.arm, err)
		}
		progressf(cfg.Progress, "bench cost: memory, %s: %d waiting jobs, RSS %.1f -> %.1f MiB, %.0f bytes per job",
			r.Arm, r.Jobs, mib(r.RSSBeforeBytes), mib(r.RSSAfterBytes), r.BytesPerJob)
		out = append(out, r)
	}
	return out, nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func memoryRun(ctx context.Context, cfg MemoryConfig, arm string, mode HarbingerMode) (MemoryResult, error) {
	// The default depth limit is exactly a million ready jobs, and the byte
	// budget a GiB; neither is what is measured here.
	d := NewHarbinger(HarbingerOptions{Name: arm, Mode: mode, Binary: cfg.Binary, DataDir: cfg.DataDir,
		ServeArgs: []string{"--max-depth", strconv.Itoa(cfg.Jobs + 1000), "--max-bytes", strconv.FormatInt(16<<30, 10)}})
	defer d.Close()
	res := MemoryResult{Arm: arm, Serve: d.Version(ctx), Jobs: cfg.Jobs}
	qq, err := d.Setup(ctx, QueueSpec{Name: fmt.Sprintf("memory-%s-%d", arm, time.Now().UnixNano()), Policy: PolicyPredictive})
	if err != nil {
		return res, err
	}
	q := qq.(*HarbingerQueue)
	defer q.Teardown(context.WithoutCancel(ctx))
	pid := q.BrokerPID()
	if res.RSSBeforeBytes, err = ProcRSS(pid); err != nil {
		return res, err
	}
	p := q.Client().NewProducer(client.ProducerConfig{})
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	start := time.Now()
	for i := range cfg.Jobs {
		wg.Add(1)
		m := &client.Message{Queue: q.Name(), Producer: "memory", JobType: "noop", SizeHint: costPayload,
			Payload: EncodeBody(uint64(i), start, costPayload)}
		if err := p.PublishAsync(m, func(_ string, err error) {
			if err != nil && failed.Add(1) == 1 {
				firstErr.Store(err)
			}
			wg.Done()
		}); err != nil {
			wg.Done()
			p.Close()
			return res, err
		}
		if ctx.Err() != nil {
			break
		}
	}
	wg.Wait()
	p.Close()
	res.PublishSeconds = time.Since(start).Seconds()
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if n := failed.Load(); n > 0 {
		return res, fmt.Errorf("%d of %d publishes failed, the first with: %v", n, cfg.Jobs, firstErr.Load())
	}
	info, err := q.Client().Queue(ctx, q.Name())
	if err != nil {
		return res, err
	}
	if int(info.Ready) != cfg.Jobs {
		return res, fmt.Errorf("the queue holds %d ready jobs, want %d", info.Ready, cfg.Jobs)
	}
	t := time.NewTimer(cfg.Settle)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return res, ctx.Err()
	}
	if res.RSSAfterBytes, err = ProcRSS(pid); err != nil {
		return res, err
	}
	res.PeakRSSBytes, _ = ProcStatusKB(pid, "VmHWM:")
	res.BytesPerJob = float64(res.RSSAfterBytes-res.RSSBeforeBytes) / float64(cfg.Jobs)
	if q.DataDir() != "" {
		v := float64(DirSize(q.DataDir())) / float64(cfg.Jobs)
		res.DiskBytesPerJob = &v
	}
	return res, nil
}

// MemoryMethod is the method sentence of the memory phase.
func MemoryMethod() string {
	return fmt.Sprintf("Memory per waiting job: a fresh harbinger serve process per mode (--memory, and --fsync always on a fresh data directory), "+
		"one queue with the default policy, the jobs published through one client Producer (pipelined batches) with no worker; "+
		"RSS (VmRSS of /proc/PID/status) read with the queue declared and empty, and again %s after the last publish was answered; "+
		"bytes per job = the difference / the jobs; peak RSS is VmHWM; disk bytes per job = the data directory's size / the jobs.", memorySettle)
}
