package storetest

import (
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/store"
)

var cuts = flag.Int("power-cuts", 0, "power cuts to simulate in TestPowerCut (0: a size that suits the build)")

// cutCount is how many cut points a power-cut test tries: -power-cuts, or
// fewer under the race detector, which slows every run tenfold.
func cutCount(full, short int) int {
	switch {
	case *cuts > 0:
		return *cuts
	case raceEnabled || testing.Short():
		return short
	}
	return full
}

// segmentBytes is small, so that a few hundred records rotate through
// several segments and a cut can fall in a rotation.
const segmentBytes = 16 << 10

// logWorkload appends records to a file store on fsys, waiting for most of
// them, and checkpoints now and then (Mark, the state again, Compact), until
// fsys has taken its cut or steps run out. It returns every record
// appended, in order, the position each Mark started at, and the last
// position a Wait answered while the cut had not yet been taken.
type logRun struct {
	appended  []*store.Record
	marks     []int // positions (counts of records before) of each Mark
	confirmed int   // records answered by Wait before the cut
}

func logWorkload(t *testing.T, dir string, fsys *CrashFS, seed uint64, steps int) logRun {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	s, err := store.OpenFile(dir, store.FileOptions{FS: fsys, SegmentBytes: segmentBytes, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Replay(func(*store.Record) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var run logRun
	var live []string
	var later []store.Pos // publishes to wait for at a later step
	appendRecs := func(recs ...*store.Record) store.Pos {
		pos, err := s.Append(recs...)
		if err != nil {
			t.Fatal(err)
		}
		run.appended = append(run.appended, recs...)
		return pos
	}
	wait := func(pos store.Pos) {
		if err := s.Wait(pos); err != nil {
			t.Fatal(err)
		}
		if !fsys.Cut() {
			run.confirmed = max(run.confirmed, int(pos))
		}
	}
	for i := 0; i < steps && !fsys.Cut(); i++ {
		switch x := rng.IntN(100); {
		case x < 5 && len(live) > 0:
			// A checkpoint: the live jobs' state again after the mark.
			m, err := s.Mark()
			if err != nil {
				t.Fatal(err)
			}
			at := len(run.appended)
			run.marks = append(run.marks, at)
			var state []*store.Record
			for _, id := range live {
				state = append(state, job(rng, id))
			}
			wait(appendRecs(state...))
			if err := s.Compact(m); err != nil {
				t.Fatal(err)
			}
		case x < 30 && len(live) > 0:
			// Acks and deliveries: nobody waits for them.
			k := rng.IntN(len(live))
			id := live[k]
			appendRecs(&store.Record{Kind: store.KindDeliver, Queue: "q", ID: id}, &store.Record{Kind: store.KindAck, Queue: "q", ID: id, Duration: time.Duration(rng.IntN(1e9))})
			live = append(live[:k], live[k+1:]...)
		default:
			// Publishes, confirmed most of the time.
			var recs []*store.Record
			for range 1 + rng.IntN(4) {
				id := fmt.Sprintf("job-%d-%d", seed, len(run.appended)+len(recs))
				live = append(live, id)
				recs = append(recs, job(rng, id))
			}
			pos := appendRecs(recs...)
			switch rng.IntN(10) {
			case 0, 1, 2, 3, 4:
				wait(pos)
			case 5, 6:
				// Waited for later, once the flusher may have written it
				// with nobody waiting.
				later = append(later, pos)
			}
		}
		if len(later) > 0 && rng.IntN(2) == 0 {
			for _, pos := range later {
				wait(pos)
			}
			later = later[:0]
		}
	}
	return run
}

// job is a job record with a payload of up to 6 KiB, some of it not ASCII
// and not valid UTF-8.
func job(rng *rand.Rand, id string) *store.Record {
	payload := []byte(strings.Repeat("é✓\xff", 1+rng.IntN(1024)))
	return &store.Record{Kind: store.KindJob, Queue: "q", ID: id, Job: &store.Job{
		ID: id, Producer: "wéb", JobType: "thumbnail", Payload: payload, Seq: rng.Uint64N(1 << 40),
		PublishedAt: time.Unix(0, rng.Int64N(1<<62)).UTC(), Enqueued: time.Unix(0, rng.Int64N(1<<62)).UTC(),
	}}
}

// TestPowerCut runs the log through power cuts at random points, in both
// modes: what the cut leaves must always open (a power cut alone makes a
// torn tail, never corruption), hold every record a Wait confirmed before
// the cut, hold no record that was never appended, and keep the records in
// the order they were appended, from the start of a checkpoint on.
func TestPowerCut(t *testing.T) {
	t.Parallel()
	const steps = 120
	// One run without a cut counts the workload's operations.
	probe := New()
	logWorkload(t, t.TempDir(), probe, 0, steps)
	total := probe.Ops()
	n := cutCount(3000, 300)
	rng := rand.New(rand.NewPCG(42, 42))
	tails := 0
	for i := range n {
		mode := CutMode(i % 2)
		seed := uint64(i + 1)
		fsys := New()
		at := 1 + rng.IntN(total)
		fsys.CutAt(at, mode, rand.New(rand.NewPCG(seed, 7)))
		dir := t.TempDir()
		run := logWorkload(t, dir, fsys, seed, steps)
		img := fsys.Image()
		if img == nil {
			continue // the workload ended before the cut point
		}
		got, torn, err := reopen(dir, img)
		if err != nil {
			t.Fatalf("cut %d (%s at operation %d of seed %d): the log a power cut left does not open: %v", i, mode, at, seed, err)
		}
		if torn {
			tails++
		}
		if err := checkPrefix(run, got); err != nil {
			t.Fatalf("cut %d (%s at operation %d of seed %d): %v", i, mode, at, seed, err)
		}
	}
	t.Logf("%d power cuts at random points of %d operations; %d left a torn tail that recovery cut off", n, total, tails)
}

// reopen opens the log on img and replays it; torn reports whether it
// cut off a torn tail (and kept it beside the log).
func reopen(dir string, img *CrashFS) (recs []*store.Record, torn bool, err error) {
	s, err := store.OpenFile(dir, store.FileOptions{FS: img, SegmentBytes: segmentBytes, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, false, err
	}
	defer s.Close()
	err = s.Replay(func(r *store.Record) error { recs = append(recs, r); return nil })
	ents, _ := img.ReadDir(dir)
	for _, e := range ents {
		torn = torn || strings.Contains(e.Name(), ".corrupt")
	}
	return recs, torn, err
}

// checkPrefix checks that got is appended[k:j] for a k no later than the
// last checkpoint's mark (a Compact drops whole segments before its mark,
// and the segment the mark's records start in may start a little before
// it, where a rotation for size took its place) and a j no less than what
// was confirmed.
func checkPrefix(run logRun, got []*store.Record) error {
	last := 0
	if len(run.marks) > 0 {
		last = run.marks[len(run.marks)-1]
	}
	for k := 0; k <= last && k <= len(run.appended); k++ {
		if k+len(got) >= run.confirmed && k+len(got) <= len(run.appended) && equalRun(got, run.appended[k:]) {
			return nil
		}
	}
	return fmt.Errorf("recovered %d records that are not the appended ones from a checkpoint on, through every confirmed one (appended %d, confirmed %d, marks %v)",
		len(got), len(run.appended), run.confirmed, run.marks)
}

func equalRun(got, want []*store.Record) bool {
	for i := range got {
		if !reflect.DeepEqual(got[i], want[i]) {
			return false
		}
	}
	return true
}
