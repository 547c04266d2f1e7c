package harness

import (
	"context"
	"fmt"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// logSampler is implemented by queues whose broker is a durable Harbinger
// that serves its write-ahead log's counters on /metrics.
type logSampler interface {
	LogSample(ctx context.Context) (LogSample, bool)
}

// LogSample is a durable broker's log counters at one moment.
type LogSample struct {
	records, syncs, waits float64
	syncSec, waitSec      float64
	SlowSyncs             float64 // fsyncs over SlowSync
}

// SlowSync is the fsync duration past which the report counts an fsync as
// a stall: the fixed-rate runs' limit on send lag.
const SlowSync = 10 * time.Millisecond

// LogFigures are what a durable Harbinger broker's write-ahead log did in
// one timed window, from the broker's own counters: how many publishes
// and records one fsync made durable, how long an fsync took, how long a
// publish waited for its record to be durable, and the share of the window
// the log spent in fsync.
type LogFigures struct {
	PublishesPerSync float64 `json:"publishes_per_sync"`
	RecordsPerSync   float64 `json:"records_per_sync"`
	SyncUS           float64 `json:"fsync_us"`
	WaitUS           float64 `json:"publish_wait_us"`
	SyncShare        float64 `json:"fsync_share"`
}

func (f *LogFigures) String() string {
	return fmt.Sprintf("%.2f publishes and %.1f records per fsync, fsync %.0f µs, publish wait %.0f µs, fsyncing %.0f%% of the time",
		f.PublishesPerSync, f.RecordsPerSync, f.SyncUS, f.WaitUS, 100*f.SyncShare)
}

// logFigures is the window between two samples, nil when either is
// missing or nothing was synced.
func LogFiguresBetween(a, b LogSample, okA, okB bool, window time.Duration) *LogFigures {
	syncs, waits := b.syncs-a.syncs, b.waits-a.waits
	if !okA || !okB || syncs <= 0 || window <= 0 {
		return nil
	}
	f := &LogFigures{
		PublishesPerSync: waits / syncs,
		RecordsPerSync:   (b.records - a.records) / syncs,
		SyncUS:           1e6 * (b.syncSec - a.syncSec) / syncs,
		SyncShare:        (b.syncSec - a.syncSec) / window.Seconds(),
	}
	if waits > 0 {
		f.WaitUS = 1e6 * (b.waitSec - a.waitSec) / waits
	}
	return f
}

// scrapeLog reads a broker's log counters from its /metrics at url.
func scrapeLog(ctx context.Context, url string) (LogSample, bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return LogSample{}, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return LogSample{}, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return LogSample{}, false
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return LogSample{}, false
	}
	return parseLog(fams)
}

// parseLog picks the log's counters out of a broker's metric families.
func parseLog(fams map[string]*dto.MetricFamily) (LogSample, bool) {
	one := func(name string) *dto.Metric {
		if f := fams[name]; f != nil && len(f.Metric) == 1 {
			return f.Metric[0]
		}
		return nil
	}
	rec, sync, wait := one("harbinger_log_records_total"), one("harbinger_log_fsync_duration_seconds"), one("harbinger_log_publish_wait_seconds")
	if rec.GetCounter() == nil || sync.GetHistogram() == nil || wait.GetHistogram() == nil {
		return LogSample{}, false
	}
	var upTo float64 // fsyncs of at most SlowSync
	for _, b := range sync.GetHistogram().GetBucket() {
		if b.GetUpperBound() == SlowSync.Seconds() {
			upTo = float64(b.GetCumulativeCount())
		}
	}
	return LogSample{
		SlowSyncs: float64(sync.GetHistogram().GetSampleCount()) - upTo,
		records:   rec.GetCounter().GetValue(),
		syncs:     float64(sync.GetHistogram().GetSampleCount()), syncSec: sync.GetHistogram().GetSampleSum(),
		waits: float64(wait.GetHistogram().GetSampleCount()), waitSec: wait.GetHistogram().GetSampleSum(),
	}, true
}
