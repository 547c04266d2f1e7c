package broker

import (
	"container/heap"
	"fmt"
	"time"

	"github.com/harbinger-mq/harbinger/internal/store"
)

// uniqueIndex is a queue's unique keys whose window is open: key -> the
// job that took it. Windows close lazily: the expiry heap is pruned before
// each lookup, so memory follows the keys whose window is open.
type uniqueIndex struct {
	keys map[string]uniqueEntry
	exp  uniqueHeap
}

type uniqueEntry struct {
	id    string
	until time.Time
}

type uniqueExp struct {
	until time.Time
	key   string
}

type uniqueHeap []uniqueExp

func (h uniqueHeap) Len() int           { return len(h) }
func (h uniqueHeap) Less(i, j int) bool { return h[i].until.Before(h[j].until) }
func (h uniqueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *uniqueHeap) Push(x any)        { *h = append(*h, x.(uniqueExp)) }
func (h *uniqueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = uniqueExp{}
	*h = old[:len(old)-1]
	return x
}

// prune closes the windows that ended by now.
func (u *uniqueIndex) prune(now time.Time) {
	for len(u.exp) > 0 && !u.exp[0].until.After(now) {
		e := heap.Pop(&u.exp).(uniqueExp)
		if cur, ok := u.keys[e.key]; ok && cur.until.Equal(e.until) {
			delete(u.keys, e.key)
		}
	}
}

// uniqueLocked looks key up: dup with the first job's id while its window
// is open, or an error when the index is full.
func (q *queue) uniqueLocked(key string, now time.Time) (id string, dup bool, err error) {
	if q.unique.keys == nil {
		q.unique.keys = map[string]uniqueEntry{}
	}
	q.unique.prune(now)
	if e, ok := q.unique.keys[key]; ok {
		return e.id, true, nil
	}
	if n := len(q.unique.keys); n >= q.b.cfg.MaxUniqueKeys {
		return "", false, fmt.Errorf("%w: queue %q holds %d unique keys with open windows (max unique keys); shorten the windows or raise the limit", ErrTooManyUniqueKeys, q.name, n)
	}
	return "", false, nil
}

// claimLocked gives key to job id until the window ends, and logs it; it
// returns the record's position, which the publish's answer waits for as
// it does for the job's.
func (q *queue) claimLocked(key, id string, until time.Time) store.Pos {
	q.unique.keys[key] = uniqueEntry{id: id, until: until}
	heap.Push(&q.unique.exp, uniqueExp{until: until, key: key})
	return q.logLocked(&store.Record{Kind: store.KindUnique, Queue: q.name, ID: id, Reason: key, At: until})
}

// uniqueRecords calls emit with the index as records, for a checkpoint.
func (q *queue) uniqueRecords(now time.Time, emit func(*store.Record)) {
	q.unique.prune(now)
	for key, e := range q.unique.keys {
		emit(&store.Record{Kind: store.KindUnique, Queue: q.name, ID: e.id, Reason: key, At: e.until})
	}
}
