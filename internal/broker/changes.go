package broker

import (
	"sync"
	"sync/atomic"
)

// changes wakes whoever waits for the broker's state to change. Nothing is
// allocated or locked on the hot path while nobody waits.
type changes struct {
	waiting atomic.Bool
	mu      sync.Mutex
	ch      chan struct{}
}

func (c *changes) next() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	c.waiting.Store(true)
	return c.ch
}

func (c *changes) notify() {
	if !c.waiting.Load() {
		return
	}
	c.mu.Lock()
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
	c.waiting.Store(false)
	c.mu.Unlock()
}

// Changed returns a channel that is closed at the broker's next change of
// state that its inspector shows: a publish, delivery, ack or nack, expiry,
// lease timeout, requeue, consumer joining or leaving, reconfiguration,
// purge, or the start of a drain. Take the channel before reading the
// inspector and wait on it afterwards, and no change is missed.
func (b *Broker) Changed() <-chan struct{} { return b.changes.next() }

// unlockChanged releases q.mu after a change the inspector can see and
// wakes whoever waits for one.
func (q *queue) unlockChanged() {
	q.mu.Unlock()
	q.b.changes.notify()
}
