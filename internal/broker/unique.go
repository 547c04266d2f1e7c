package broker

import (
	"fmt"
	"time"

	"github.com/harbinger-mq/harbinger/internal/store"
)

// uniqueLocked looks key up: dup with the first job's id while its window
// is open, or an error when the index is full.
func (q *queue) uniqueLocked(key string, now time.Time) (id string, dup bool, err error) {
	if e, ok := q.unique.Lookup(key, now); ok {
		return e.ID, true, nil
	}
	if n := q.unique.Len(now); n >= q.b.cfg.MaxUniqueKeys {
		return "", false, fmt.Errorf("%w: queue %q holds %d unique keys with open windows (max unique keys); shorten the windows or raise the limit", ErrTooManyUniqueKeys, q.name, n)
	}
	return "", false, nil
}

// claimLocked gives key to job id until the window ends, and logs it; it
// returns the record's position, which the publish's answer waits for as
// it does for the job's.
func (q *queue) claimLocked(key, id string, until time.Time) store.Pos {
	q.unique.Claim(key, id, until)
	return q.logLocked(&store.Record{Kind: store.KindUnique, Queue: q.name, ID: id, Reason: key, At: until})
}
