// Package unique owns a queue's unique keys: which job took each key, until
// the key's window closes. It is pure: the time is passed in, windows close
// lazily (each call first drops those that ended), and memory follows the
// keys whose window is open.
package unique

import (
	"container/heap"
	"time"
)

// Index is one queue's unique keys with open windows. The zero value is
// empty and ready to use.
type Index struct {
	keys map[string]Entry
	exp  expiries
}

// Entry is the job a key was given to, and when its window ends.
type Entry struct {
	ID    string
	Until time.Time
}

// Lookup returns the job that holds key while its window is open.
func (x *Index) Lookup(key string, now time.Time) (Entry, bool) {
	x.prune(now)
	e, ok := x.keys[key]
	return e, ok
}

// Len is the number of keys whose window is open at now.
func (x *Index) Len(now time.Time) int {
	x.prune(now)
	return len(x.keys)
}

// Claim gives key to job id until the window ends, replacing whatever held
// it. Recovery claims each key its log holds, in any order.
func (x *Index) Claim(key, id string, until time.Time) {
	if x.keys == nil {
		x.keys = map[string]Entry{}
	}
	x.keys[key] = Entry{ID: id, Until: until}
	heap.Push(&x.exp, expiry{until: until, key: key})
}

// Each calls fn with every key whose window is open at now, in no order.
func (x *Index) Each(now time.Time, fn func(key string, e Entry)) {
	x.prune(now)
	for key, e := range x.keys {
		fn(key, e)
	}
}

// prune closes the windows that ended by now. A key claimed again keeps
// its newer window: only the expiry that matches its entry removes it.
func (x *Index) prune(now time.Time) {
	for len(x.exp) > 0 && !x.exp[0].until.After(now) {
		e := heap.Pop(&x.exp).(expiry)
		if cur, ok := x.keys[e.key]; ok && cur.Until.Equal(e.until) {
			delete(x.keys, e.key)
		}
	}
}

type expiry struct {
	until time.Time
	key   string
}

type expiries []expiry

func (h expiries) Len() int           { return len(h) }
func (h expiries) Less(i, j int) bool { return h[i].until.Before(h[j].until) }
func (h expiries) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiries) Push(x any)        { *h = append(*h, x.(expiry)) }
func (h *expiries) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = expiry{}
	*h = old[:len(old)-1]
	return x
}
