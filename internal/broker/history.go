package broker

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/delivery"
	"github.com/harbinger-mq/harbinger/internal/history"
)

// A queue's history (internal/history) is a rolling record of its settled
// deliveries, kept under the queue's lock: each ack or nack appends one
// 48-byte entry to it, the cheapest part of the settle. It holds no
// payloads or headers, and it is never part of a job's durability: in
// durable mode it is saved beside the log every few minutes
// (SaveHistoryEvery) and at a clean shutdown (SaveHistory), and loaded at
// the next start (LoadHistory), so a crash loses the history since the
// last save, never a job.

// settling is what a settle needs to know of a delivery before the line
// lets go of it, for the queue's history.
type settling struct {
	j       *delivery.Job
	arrived time.Time
	started time.Time
	attempt int
	dead    uint64 // the line's dead-letter count before the settle
}

// beforeSettleLocked notes, for the history, what the settle of the
// delivery id is about to forget. ok is false when there is no record or
// the id is not held.
func (q *queue) beforeSettleLocked(id string) (s settling, ok bool) {
	if q.record == nil {
		return s, false
	}
	j, st := q.line.Lookup(id) // a held job is found at once, by the line's lease map
	if j == nil || st != delivery.Running {
		return s, false
	}
	_, started, ok := q.line.Flight(j)
	if !ok {
		return s, false
	}
	return settling{j: j, arrived: j.Enqueued(), started: started, attempt: j.Attempt(), dead: q.line.Stats.DeadLettered}, true
}

// recordLocked appends a settled delivery to the queue's history. Past
// the broker's total for every queue's history, the queue sheds its own
// oldest entries: the busy queues pay, the quiet ones keep theirs.
func (q *queue) recordLocked(s settling, d time.Duration, out history.Outcome, now time.Time) {
	if out == history.Nack && q.line.Stats.DeadLettered > s.dead {
		out = history.Dead
	}
	q.record.Add(history.Entry{
		Arrived: s.arrived, Producer: s.j.Producer(), Key: s.j.JobType(), Size: s.j.SizeHint(), Attempt: s.attempt,
		Started: s.started, Done: now, Duration: d, Outcome: out,
	}, now)
	if over := q.histSyncLocked() - q.b.cfg.History.MaxTotalBytes; over > 0 {
		q.record.ShrinkTo(q.record.Bytes() - over)
		q.histSyncLocked()
	}
}

// histSyncLocked brings the broker's count of history bytes up to date
// with the queue's record after a change, and returns the new total.
func (q *queue) histSyncLocked() int64 {
	var n int64
	if q.record != nil && !q.deleted {
		n = q.record.Bytes()
	}
	d := n - q.histBytes
	q.histBytes = n
	return q.b.histBytes.Add(d)
}

// HistoryBytes is the memory every queue's history counts together.
func (b *Broker) HistoryBytes() int64 { return b.histBytes.Load() }

// History is a queue's recorded history since the given time, oldest
// first, with the header of its export. It returns ErrHistoryOff when the
// broker keeps none.
func (b *Broker) History(name string, since time.Time) (history.Header, []history.Entry, error) {
	q, err := b.lockQueue(name, false)
	if err != nil {
		return history.Header{}, nil, err
	}
	defer q.mu.Unlock()
	if q.record == nil {
		return history.Header{}, nil, ErrHistoryOff
	}
	now := b.clk.Now()
	es := q.record.Window(since, now)
	q.histSyncLocked() // the window dropped what aged out
	h := history.Header{Queue: q.name, Policy: q.cfg.Policy, WorkersSeen: history.WorkersSeen(es),
		Since: since, Until: now, Jobs: len(es), Dropped: q.record.Dropped}
	if since.IsZero() && len(es) > 0 {
		h.Since = es[0].Done
	}
	if h.Since.After(h.Until) {
		h.Since = h.Until
	}
	return h, es, nil
}

// ErrHistoryOff is returned by History when the broker keeps no history
// (Config.History.Off).
var ErrHistoryOff = errors.New("broker: the history record is off")

// historyDir is where SaveHistory and LoadHistory keep the records, under
// the data directory.
const historyDir = "history"

// historyFile is the file of a queue's record: its name in hex, as a
// queue name may hold any character a file name may not. It is the
// export's format gzipped, which keeps it well under the record's cap in
// memory (a full 16 MiB record of 100,000 keys saves to 3.7 MB: TestHistoryFileUnderCap).
func historyFile(dir, queue string) string {
	return filepath.Join(dir, historyDir, hex.EncodeToString([]byte(queue))+historyExt)
}

const historyExt = ".jsonl.gz"

// SaveHistory writes every queue's record to files under dir (the data
// directory), replacing the last save. A queue with an empty record
// leaves no file.
func (b *Broker) SaveHistory(dir string) error {
	if b.cfg.History.Off {
		return nil
	}
	tmp := filepath.Join(dir, historyDir+".new")
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	for _, name := range b.queueNames() {
		h, es, err := b.History(name, time.Time{})
		if err != nil || len(es) == 0 {
			continue
		}
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		if err := history.Encode(zw, h, es); err != nil {
			return err
		}
		if err := zw.Close(); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(tmp, filepath.Base(historyFile(dir, name))), buf.Bytes(), 0o600); err != nil {
			return err
		}
	}
	final := filepath.Join(dir, historyDir)
	if err := os.RemoveAll(final); err != nil {
		return err
	}
	return os.Rename(tmp, final)
}

// LoadHistory reads the records SaveHistory left under dir into the
// queues that exist; files of queues gone since, or that do not parse,
// are skipped (history is not job data). It returns the entries loaded.
func (b *Broker) LoadHistory(dir string) (int, error) {
	if b.cfg.History.Off {
		return 0, nil
	}
	files, err := os.ReadDir(filepath.Join(dir, historyDir))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	var bad []string
	for _, f := range files {
		raw, ok := strings.CutSuffix(f.Name(), historyExt)
		name, herr := hex.DecodeString(raw)
		if !ok || herr != nil {
			continue
		}
		q, err := b.lockQueue(string(name), false)
		if err != nil {
			continue
		}
		func() {
			defer q.mu.Unlock()
			file, err := os.Open(historyFile(dir, string(name)))
			if err != nil {
				bad = append(bad, err.Error())
				return
			}
			defer file.Close()
			zr, err := gzip.NewReader(file)
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: %v", f.Name(), err))
				return
			}
			_, es, err := history.Decode(zr)
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: %v", f.Name(), err))
				return
			}
			if q.record == nil {
				return
			}
			q.record.Reset()
			now := b.clk.Now()
			for _, e := range es {
				q.record.Add(e, now)
			}
			q.record.Trim(now)
			q.record.ShrinkTo(max(b.cfg.History.MaxTotalBytes-(b.histBytes.Load()-q.histBytes), 0))
			q.histSyncLocked()
			n += len(es)
		}()
	}
	if len(bad) > 0 {
		b.log.Warn("history files skipped", "errors", strings.Join(bad, "; "))
	}
	return n, nil
}

// DefaultHistorySaveEvery is how often serve saves the history in
// durable mode (SaveHistoryEvery): a crash loses at most that much of it.
const DefaultHistorySaveEvery = 5 * time.Minute

// SaveHistoryEvery saves the history under dir every interval on the
// broker's clock until stop is called; stop waits for a save under way.
// A failed save is logged and tried again at the next interval.
func (b *Broker) SaveHistoryEvery(dir string, every time.Duration) (stop func()) {
	var mu sync.Mutex
	stopped := false
	var t clock.Timer
	var tick func()
	tick = func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if err := b.SaveHistory(dir); err != nil {
			b.log.Warn("harbinger: history not saved", "err", err)
		}
		t = b.clk.AfterFunc(every, tick)
	}
	mu.Lock()
	t = b.clk.AfterFunc(every, tick)
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// queueNames lists the queues' names.
func (b *Broker) queueNames() []string {
	qs := *b.queues.Load()
	names := make([]string, 0, len(qs))
	for name := range qs {
		names = append(names, name)
	}
	return names
}
