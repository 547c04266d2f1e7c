package bench

import (
	"context"
	"sync"
)

// window keeps a publisher's unconfirmed publishes: take a place before
// each publish, hand its confirmation (a future of type T) to pending, and
// the confirm goroutine frees the place once it resolves, in publish
// order, keeping the first error.
type window[T any] struct {
	places  chan struct{}
	pending chan T
	done    chan struct{}

	mu  sync.Mutex
	err error
}

func newWindow[T any](n int) *window[T] {
	return &window[T]{places: make(chan struct{}, n), pending: make(chan T, n), done: make(chan struct{})}
}

// take waits for a place, and returns the first error a confirmation
// brought, if any, instead.
func (w *window[T]) take(ctx context.Context) error {
	if err := w.firstErr(); err != nil {
		return err
	}
	select {
	case w.places <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// give frees a place taken for a publish that did not go out.
func (w *window[T]) give() { <-w.places }

// confirm resolves every pending future with wait, in order, until close.
func (w *window[T]) confirm(wait func(T) error) {
	defer close(w.done)
	for f := range w.pending {
		if err := wait(f); err != nil {
			w.fail(err)
		}
		<-w.places
	}
}

func (w *window[T]) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
}

func (w *window[T]) firstErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// close waits for every confirmation and returns the first error.
func (w *window[T]) close() error {
	close(w.pending)
	<-w.done
	return w.firstErr()
}
