package rabbitmq

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// modelQueue is one queue as a predictor's backlog should see it.
type modelQueue struct {
	consumers int
	tracked   bool          // work is counted (a handler was attached when work came)
	work      time.Duration // published and not completed while tracked, never below 0
	inNet     bool          // given a place in the net totals (first come, up to the cap)
	net       time.Duration // published minus completed since it got that place
}

// othersOf sums the other predictors of a fleet, as Peers.
type othersOf struct {
	all  []backlog
	self int
}

func (o othersOf) Backlog(q string) (time.Duration, int) {
	var net time.Duration
	var c int
	for i, b := range o.all {
		if i != o.self {
			net += b.net[q]
			c += b.consumers[q]
		}
	}
	return net, c
}

// TestBacklogAgainstModel runs random publishes, completions and handler
// changes through a fleet of three predictors' backlogs and checks each
// against a reference model after every step: the work it counts, the
// queues it tracks (never more than the cap), its net totals, and the hold
// it gives alone and with the fleet as peers.
func TestBacklogAgainstModel(t *testing.T) {
	t.Parallel()
	const maxQueues = 4
	const share, maxHold = 0.95, 10 * time.Second
	for seed := range uint64(50) {
		r := rand.New(rand.NewPCG(seed, 99))
		fleet := make([]backlog, 3)
		models := make([]map[string]*modelQueue, 3)
		for i := range fleet {
			fleet[i] = newBacklog(maxQueues)
			fleet[i].net = map[string]time.Duration{}
			models[i] = map[string]*modelQueue{}
		}
		queue := func() string { return fmt.Sprint("q", r.IntN(6)) }
		cost := func() time.Duration { return time.Duration(r.Int64N(int64(2*time.Second))) - 200*time.Millisecond }
		for step := range 600 {
			i, q := r.IntN(len(fleet)), queue()
			b, m := fleet[i], models[i]
			mq := m[q]
			if mq == nil {
				mq = &modelQueue{}
				m[q] = mq
			}
			netPlace := func() bool {
				if !mq.inNet {
					n := 0
					for _, x := range m {
						if x.inNet {
							n++
						}
					}
					mq.inNet = n < maxQueues
				}
				return mq.inNet
			}
			var op string
			switch k := r.IntN(10); {
			case k < 4:
				c := cost()
				op = fmt.Sprintf("publish %v to %s", c, q)
				b.published(q, c)
				if mq.consumers > 0 {
					mq.tracked = true
					mq.work += max(0, c)
				}
				if netPlace() {
					mq.net += max(0, c)
				}
			case k < 7:
				c := cost()
				op = fmt.Sprintf("complete %v of %s", c, q)
				b.completed(q, c)
				if mq.tracked {
					mq.work = max(0, mq.work-max(0, c))
				}
				if netPlace() {
					mq.net -= max(0, c)
				}
			default:
				n := r.IntN(5) - 2
				op = fmt.Sprintf("attach %d handlers to %s", n, q)
				ok := b.attach(q, n, maxQueues)
				tracked := 0
				for _, x := range m {
					if x.consumers > 0 {
						tracked++
					}
				}
				switch c := mq.consumers + n; {
				case c <= 0:
					mq.consumers, mq.tracked, mq.work = 0, false, 0
					if !ok {
						t.Fatalf("seed %d step %d: %s refused", seed, step, op)
					}
				case mq.consumers == 0 && tracked >= maxQueues:
					if ok {
						t.Fatalf("seed %d step %d: %s taken past the cap of %d queues", seed, step, op, maxQueues)
					}
				default:
					mq.consumers = c
					if !ok {
						t.Fatalf("seed %d step %d: %s refused", seed, step, op)
					}
				}
			}
			for j, b := range fleet {
				check(t, fmt.Sprintf("seed %d step %d (%s), predictor %d", seed, step, op, j), b, models[j], maxQueues)
			}
			// The hold, alone and with the other two as peers.
			var fleetNet time.Duration
			var fleetC int
			for j := range fleet {
				fleetNet += models[j][q].netOr0()
				fleetC += models[j][q].consumersOr0()
			}
			want := holdFor(share, mq.work, mq.consumers, maxHold)
			if got := b.hold(q, share, maxHold, nil); got != want {
				t.Fatalf("seed %d step %d (%s): hold of %s alone %v, want %v", seed, step, op, q, got, want)
			}
			want = holdFor(share, max(0, fleetNet), fleetC, maxHold)
			if got := b.hold(q, share, maxHold, othersOf{fleet, i}); got != want {
				t.Fatalf("seed %d step %d (%s): hold of %s in the fleet %v, want %v", seed, step, op, q, got, want)
			}
		}
	}
}

func (m *modelQueue) netOr0() time.Duration {
	if m == nil {
		return 0
	}
	return m.net
}

func (m *modelQueue) consumersOr0() int {
	if m == nil {
		return 0
	}
	return m.consumers
}

func holdFor(share float64, work time.Duration, consumers int, maxHold time.Duration) time.Duration {
	if consumers <= 0 {
		return 0
	}
	h := time.Duration(share * float64(work) / float64(consumers))
	if h < minHold {
		return 0
	}
	return min(h, maxHold)
}

// check compares one backlog with its model.
func check(t *testing.T, where string, b backlog, m map[string]*modelQueue, maxQueues int) {
	t.Helper()
	if len(b.consumers) > maxQueues || len(b.net) > maxQueues {
		t.Fatalf("%s: %d queues with handlers and %d with net totals, cap %d", where, len(b.consumers), len(b.net), maxQueues)
	}
	for q, mq := range m {
		if got := b.consumers[q]; got != mq.consumers {
			t.Fatalf("%s: %s has %d handlers, want %d", where, q, got, mq.consumers)
		}
		if w, ok := b.work[q]; ok != mq.tracked || w != mq.work || w < 0 {
			t.Fatalf("%s: %s work %v (tracked %v), want %v (%v)", where, q, w, ok, mq.work, mq.tracked)
		}
		if n, ok := b.net[q]; ok != mq.inNet || n != mq.net {
			t.Fatalf("%s: %s net %v (kept %v), want %v (%v)", where, q, n, ok, mq.net, mq.inNet)
		}
	}
}
