package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/harbinger-mq/harbinger/internal/delivery"
	"github.com/harbinger-mq/harbinger/internal/predict"
	"github.com/harbinger-mq/harbinger/internal/store"
	"github.com/harbinger-mq/harbinger/internal/unique"
)

// What the broker writes to its store, and when (all under the queue's
// lock, so a queue's records are in the order its changes happened):
//
//	publish            KindJob (the job's full state)
//	delivery           KindDeliver (the attempt counts)
//	send failed, or
//	shutdown cut short KindReturn (the attempt does not count)
//	ack                KindAck
//	nack with a delay  KindDelay
//	dead letter        KindDead (nack, attempts used up, expired)
//	dead letter dropped,
//	purge              KindRemove
//	requeue            KindRequeue
//	declare            KindDeclare
//	queue deleted      KindDrop
//	checkpoint,
//	shutdown           KindPredictor
//	checkpoint         KindRates (a queue with rate limits: its buckets;
//	                   its deliveries carry their start time)
//
// A retry (nack, lease expiry, consumer gone) writes nothing: a job whose
// last record is a delivery comes back ready at recovery, its attempt
// counted, exactly as a retry leaves it. Only publishes wait for their
// records to be durable; a lost ack or delivery record costs at most one
// more delivery, which at-least-once allows.

// logLocked appends records for q; a failed store is logged once and
// otherwise ignored here (publishes check it themselves).
func (q *queue) logLocked(recs ...*store.Record) store.Pos {
	st := q.b.cfg.Store
	if st == nil {
		return 0
	}
	pos, err := st.Append(recs...)
	if err != nil && q.b.storeFailed.CompareAndSwap(false, true) {
		q.b.log.Error("broker: the log refuses records; publishes are refused until the broker restarts", "err", err)
	}
	if pos > 0 {
		q.wrote = pos
	}
	q.b.maybeCheckpoint()
	return pos
}

// persisted waits, with no lock held, until the log holds the records an
// admin call appended, up to pos (its queue's wrote when it unlocked): an
// answered purge, cancel, pause, declare or dead-letter change is on disk,
// as an answered publish is. what names the change for the error.
func (b *Broker) persisted(pos store.Pos, what string) error {
	st := b.cfg.Store
	if st == nil || b.recovering.Load() {
		return nil
	}
	if b.storeFailed.Load() {
		return fmt.Errorf("%w: the log refuses records; %s took effect but a restart may undo it", ErrNotDurable, what)
	}
	if pos == 0 {
		return nil
	}
	if err := st.Wait(pos); err != nil {
		return fmt.Errorf("%w: %v; %s took effect but a restart may undo it", ErrNotDurable, err, what)
	}
	return nil
}

// pauseRecord is q's paused state.
func (q *queue) pauseRecord() *store.Record {
	v := byte(0)
	if q.paused {
		v = 1
	}
	return &store.Record{Kind: store.KindPause, Queue: q.name, Data: []byte{v}}
}

// declareRecord is q's config.
func (q *queue) declareRecord() *store.Record {
	data, err := json.Marshal(q.cfg)
	if err != nil {
		panic(fmt.Sprintf("broker: encoding a queue config: %v", err)) // plain data always encodes
	}
	return &store.Record{Kind: store.KindDeclare, Queue: q.name, Data: data}
}

// recover rebuilds the broker's queues from its store.
func (b *Broker) recover() error {
	st := b.cfg.Store
	start := time.Now() // wall time: this measures the replay, not the broker's clock
	decls := map[string][]byte{}
	preds := map[string][]byte{}
	paused := map[string]bool{}
	scheds := map[string][]byte{}
	uniques := map[string]map[string]unique.Entry{} // queue -> key -> entry
	now := b.clk.Now()
	// Each queue's job records fold in the delivery line's own replay.
	lines := map[string]*delivery.Replay{}
	line := func(name string) *delivery.Replay {
		p := lines[name]
		if p == nil {
			p = delivery.NewReplay()
			lines[name] = p
		}
		return p
	}
	records := 0
	// A queue a publish or subscribe created has the broker's default
	// config, and no declare record until a checkpoint or declare.
	defaultDecl, err := json.Marshal(b.cfg.Queue)
	if err != nil {
		return fmt.Errorf("broker: encoding the default queue config: %w", err)
	}
	err = st.Replay(func(r *store.Record) error {
		records++
		switch r.Kind {
		case store.KindDrop:
			delete(decls, r.Queue)
			delete(preds, r.Queue)
			delete(paused, r.Queue)
			delete(uniques, r.Queue)
			delete(lines, r.Queue)
			return nil
		case store.KindDeclare:
			prev, ok := decls[r.Queue]
			if !ok {
				prev = defaultDecl
			}
			decls[r.Queue] = r.Data
			if p := lines[r.Queue]; p != nil && !bytes.Equal(prev, r.Data) {
				p.Reconfigured()
			}
			return nil
		case store.KindPredictor:
			preds[r.Queue] = r.Data
			if p := lines[r.Queue]; p != nil {
				p.Snapshotted()
			}
			return nil
		case store.KindPause:
			paused[r.Queue] = len(r.Data) == 1 && r.Data[0] == 1
			return nil
		case store.KindSchedule:
			if len(r.Data) == 0 {
				delete(scheds, r.ID)
			} else {
				scheds[r.ID] = r.Data
			}
			return nil
		case store.KindUnique:
			if r.At.After(now) {
				if uniques[r.Queue] == nil {
					uniques[r.Queue] = map[string]unique.Entry{}
				}
				uniques[r.Queue][r.Reason] = unique.Entry{ID: r.ID, Until: r.At}
			}
			return nil
		}
		if !line(r.Queue).Apply(r) {
			return fmt.Errorf("broker: a record of kind %v that no part of the broker writes (queue %q)", r.Kind, r.Queue)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var ready, delayed, dead, learned int
	b.recovering.Store(true)
	defer b.recovering.Store(false)
	for name, data := range decls {
		var cfg QueueConfig
		if err := json.Unmarshal(data, &cfg); err != nil {
			return fmt.Errorf("broker: recovering queue %q: its config does not decode: %w", name, err)
		}
		if _, err := b.Declare(name, cfg); err != nil {
			return fmt.Errorf("broker: recovering queue %q: %w", name, err)
		}
	}
	for name, p := range lines {
		q, err := b.lookup(name, true)
		if err != nil {
			return fmt.Errorf("broker: recovering queue %q: %w", name, err)
		}
		q.mu.Lock()
		learned += q.restoreLearning(preds[name], p.Observations())
		delete(preds, name)
		q.line.RestoreRates(p)
		for _, rj := range p.Jobs() {
			j := q.line.Restore(rj.Job, rj.Reset, now)
			b.forceReserve(j, q.name)
			switch {
			case rj.Job.State == store.Ready, rj.Job.State == store.Delayed && !rj.Job.Until.After(now):
				ready++
			case rj.Job.State == store.Delayed:
				delayed++
			case rj.Job.State == store.Dead:
				dead++
			}
		}
		q.line.SortDead()
		q.applyLocked(now)
		q.unlockChanged()
	}
	keys := 0
	for name, idx := range uniques {
		q, err := b.lookup(name, true)
		if err != nil {
			return fmt.Errorf("broker: recovering queue %q: %w", name, err)
		}
		q.mu.Lock()
		for key, e := range idx {
			q.unique.Claim(key, e.ID, e.Until)
			keys++
		}
		q.mu.Unlock()
	}
	for name, p := range paused {
		if !p {
			continue
		}
		q, err := b.lookup(name, true)
		if err != nil {
			return fmt.Errorf("broker: recovering queue %q: %w", name, err)
		}
		q.mu.Lock()
		q.paused = true
		q.mu.Unlock()
	}
	if err := b.restoreSchedules(scheds); err != nil {
		return err
	}
	for name, snap := range preds { // queues with a predictor and no job record since
		q, err := b.lookup(name, true)
		if err != nil {
			return fmt.Errorf("broker: recovering queue %q: %w", name, err)
		}
		q.mu.Lock()
		learned += q.restoreLearning(snap, nil)
		q.mu.Unlock()
	}
	b.log.Info("broker: recovered", "records", records, "queues", len(*b.queues.Load()),
		"ready", ready, "delayed", delayed, "dead_letters", dead, "unique_keys", keys, "durations_relearned", learned,
		"log_bytes", st.Size(), "took", time.Since(start).Round(time.Millisecond))
	// The threshold follows the live jobs, not the log as found: a log
	// that grew through crashes (each restart used to double it) is
	// compacted as soon as the broker starts (see New).
	b.nextCheckpoint.Store(max(b.cfg.CheckpointBytes, 2*b.bytes.Load()))
	return nil
}

// restoreLearning loads q's predictor snapshot, if any, and teaches it the
// durations acked after it; it returns how many.
func (q *queue) restoreLearning(snap []byte, obs []delivery.Observation) int {
	if snap != nil {
		if err := q.sq().Predictor.Restore(q.name, snap); err != nil {
			q.b.log.Warn("broker: predictor state not restored", "queue", q.name, "err", err)
		}
	}
	n := 0
	for _, o := range obs {
		k := q.sq().Predictor.KeyFor(q.name, o.Producer, o.JobType, o.SizeHint)
		if q.sq().Learn(k, predict.Prediction{}, o.Took) == nil {
			n++
		}
	}
	return n
}

// forceReserve charges a recovered job to the budget; recovery never
// refuses what the broker had accepted.
func (b *Broker) forceReserve(j *delivery.Job, queueName string) {
	b.bytes.Add(jobSize(j, delivery.Names{Producer: j.Producer(), JobType: j.JobType()}, queueName))
}

// maybeCheckpoint starts a checkpoint when the log has grown past its
// threshold; one runs at a time. It is called after every append (it
// reads two atomics), so that the log's size follows the bytes written:
// a few large jobs, or acks alone, trigger it as surely as many
// publishes.
func (b *Broker) maybeCheckpoint() {
	st := b.cfg.Store
	// Not while recovering: the threshold is set once the jobs are back,
	// and records written then (a last attempt dead-lettered) must not
	// start a checkpoint of a broker half rebuilt.
	if st == nil || b.draining.Load() || b.recovering.Load() || st.Size() < b.nextCheckpoint.Load() || !b.checkpointing.CompareAndSwap(false, true) {
		return
	}
	b.bg.Go(func() {
		defer b.checkpointing.Store(false)
		if err := b.Checkpoint(context.Background()); err != nil {
			b.log.Error("broker: checkpoint failed; the log keeps growing until one succeeds", "err", err)
		}
	})
}

// Checkpoint writes the full state of every live job, queue and predictor
// to the log and drops the records before it, so the log's size follows
// the live jobs, not their history. It holds one queue's lock at a time,
// for one batch of records at a time (see appendState).
func (b *Broker) Checkpoint(ctx context.Context) error {
	return b.checkpoint(ctx, nil)
}

// checkpoint is Checkpoint; between, when set, runs after each batch of
// records with no lock held (tests interleave operations there).
func (b *Broker) checkpoint(ctx context.Context, between func()) error {
	st := b.cfg.Store
	if st == nil {
		return nil
	}
	start := time.Now()
	before := st.Size()
	mark, err := st.Mark()
	if err != nil {
		return err
	}
	var pos store.Pos
	jobs := 0
	for _, q := range *b.queues.Load() {
		if err := ctx.Err(); err != nil {
			return err
		}
		p, n, err := q.appendState(st, between)
		jobs += n
		if err != nil {
			return err
		}
		pos = max(pos, p)
	}
	if recs := b.scheduleRecords(); len(recs) > 0 {
		p, err := st.Append(recs...)
		if err != nil {
			return err
		}
		pos = p
	}
	if err := st.Wait(pos); err != nil {
		return err
	}
	if err := st.Compact(mark); err != nil {
		return err
	}
	after := st.Size()
	b.nextCheckpoint.Store(max(b.cfg.CheckpointBytes, 2*after))
	b.log.Info("broker: checkpoint", "jobs", jobs, "log_bytes_before", before, "log_bytes_after", after, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// appendState appends q's config, pause state, unique keys and predictor,
// then the state of every job it held at that moment (n of them), then
// its rate buckets (delivery.Line.RatesRecord), to st.
// The jobs go in batches of checkpointBatch records, each under q's lock
// and each job's record as it is at its batch: a job that changed between
// the snapshot and its batch has its change records before its state
// record, which replaces them at recovery; one that ended has no record;
// one published after the snapshot has all its records after the
// checkpoint's mark. So publishes to q wait for one batch at most, not for
// the whole queue to be written, and the batches hold one batch of
// records in memory, not one per job.
func (q *queue) appendState(st store.Store, between func()) (pos store.Pos, n int, err error) {
	q.mu.Lock()
	if q.deleted {
		// Deleted since the checkpoint listed the queues: its drop record
		// follows the mark, and nothing may be written after it.
		q.mu.Unlock()
		return 0, 0, nil
	}
	head := []*store.Record{q.declareRecord(), q.pauseRecord()}
	q.declared = true
	q.unique.Each(q.b.clk.Now(), func(key string, e unique.Entry) {
		head = append(head, &store.Record{Kind: store.KindUnique, Queue: q.name, ID: e.ID, Reason: key, At: e.Until})
	})
	head = append(head, &store.Record{Kind: store.KindPredictor, Queue: q.name, Data: q.sq().Predictor.Snapshot()})
	pos, err = st.Append(head...)
	snap := q.line.Snapshot()
	q.mu.Unlock()
	if err != nil {
		return pos, 0, err
	}
	size := checkpointBatch
	if q.b.batchJobs > 0 {
		size = q.b.batchJobs
	}
	size = min(size, snap.Len()) // an empty or small queue allocates no full batch
	// One batch of records, reused: the store encodes a record as it is
	// appended.
	recs, jobs := make([]store.Record, size), make([]store.Job, size)
	batch := make([]*store.Record, 0, size)
	var prev store.Pos // the batch before the last one appended
	for next := 0; next < snap.Len(); {
		if between != nil {
			between()
		}
		k := min(snap.Len()-next, size)
		q.mu.Lock()
		if q.deleted {
			q.mu.Unlock()
			return pos, n, nil
		}
		for i := next; i < next+k; i++ {
			r := &recs[len(batch)]
			r.Job = &jobs[len(batch)]
			if q.line.StateRecordTo(snap, i, r) {
				batch = append(batch, r)
			}
		}
		if len(batch) > 0 {
			pos, err = st.Append(batch...)
		}
		q.mu.Unlock()
		n += len(batch)
		batch = batch[:0]
		next += k
		if err != nil {
			return pos, n, err
		}
		// At most two batches on their way to the disk: a publish waits
		// for the log up to its own record, so a checkpoint that wrote
		// ahead unpaced would make it wait for the whole queue's state.
		if prev != 0 {
			if err = st.Wait(prev); err != nil {
				return pos, n, err
			}
		}
		prev = pos
	}
	// The rate buckets last, under the lock: the deliveries before this
	// record are in them, and those after it come after it in the log.
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.deleted {
		return pos, n, nil
	}
	if r := q.line.RatesRecord(q.b.clk.Now()); r != nil {
		pos, err = st.Append(r)
	}
	return pos, n, err
}

// checkpointBatch is how many jobs a checkpoint writes under one hold of
// a queue's lock.
const checkpointBatch = 1024

// saveLearning writes every queue's predictor to the log and waits for it.
func (b *Broker) saveLearning() error {
	st := b.cfg.Store
	if st == nil {
		return nil
	}
	var pos store.Pos
	for _, q := range *b.queues.Load() {
		q.mu.Lock()
		if q.deleted {
			q.mu.Unlock()
			continue
		}
		p, err := st.Append(&store.Record{Kind: store.KindPredictor, Queue: q.name, Data: q.sq().Predictor.Snapshot()})
		q.mu.Unlock()
		if err != nil {
			return err
		}
		pos = p
	}
	return st.Wait(pos)
}
