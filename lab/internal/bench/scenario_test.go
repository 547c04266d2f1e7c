package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// natsMemoryForTest is natsForTest with memory-storage streams.
func natsMemoryForTest(t *testing.T) Driver {
	t.Helper()
	d := natsForTest(t).(*NATSDriver)
	d.memory = true
	return d
}

// TestWindowedDriversDeliverEachOnce runs every driver of the busy and
// bulk scenarios the way those scenarios do, windowed publishers and
// workers with several slots on connections of their own, and checks
// that every message published is delivered once and none is left.
func TestWindowedDriversDeliverEachOnce(t *testing.T) {
	drivers := harbingerProcessDrivers(t, HarbingerServe, HarbingerDurable)
	peers := map[string]func(*testing.T) Driver{
		RabbitMQ:     func(t *testing.T) Driver { return rabbitForTest(t) },
		RabbitQuorum: rabbitQuorumForTest,
		Redis:        func(t *testing.T) Driver { return redisForTest(t) },
		RedisAOF:     redisAOFForTest,
		NATS:         natsForTest,
		NATSMemory:   natsMemoryForTest,
	}
	for _, broker := range []string{HarbingerServe, HarbingerDurable, RabbitMQ, RabbitQuorum, Redis, RedisAOF, NATS, NATSMemory} {
		t.Run(broker, func(t *testing.T) {
			d := drivers[broker]
			if d == nil {
				d = peers[broker](t)
			}
			windowedOnce(t, d)
		})
	}
}

func windowedOnce(t *testing.T, d Driver) {
	t.Helper()
	const producers, per, workers, slots, window = 2, 300, 2, 4, 8
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	q, err := d.Setup(ctx, QueueSpec{Name: queueName("windowed", 0), Policy: PolicyFIFO})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Teardown(context.WithoutCancel(ctx))
	var mu sync.Mutex
	seen := map[uint64]int{}
	all := make(chan struct{})
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var ready, wg sync.WaitGroup
	errs := make(chan error, workers+producers)
	for w := range workers {
		ready.Add(1)
		wg.Go(func() {
			var once sync.Once
			signal := func() { once.Do(ready.Done) }
			defer signal()
			err := work(wctx, q, Arm{Name: d.Broker()}, slots, w, signal, func(_ context.Context, body []byte) error {
				seq, _, err := DecodeBody(body)
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				if wctx.Err() != nil {
					// The run is over: a worker stopping leaves its
					// unacked messages to the queue (as a crashed one
					// would), which may hand them to another still
					// stopping. Those deliveries are not the run's.
					return nil
				}
				seen[seq]++
				if len(seen) == producers*per && seen[seq] == 1 {
					close(all)
				}
				return nil
			})
			if err != nil {
				errs <- err
			}
		})
	}
	ready.Wait()
	var pwg sync.WaitGroup
	for p := range producers {
		pub, err := newWindowPublisher(ctx, q, Arm{Name: d.Broker()}, window)
		if err != nil {
			t.Fatal(err)
		}
		pwg.Go(func() {
			defer func() {
				if err := pub.Close(); err != nil {
					errs <- fmt.Errorf("close: %w", err)
				}
			}()
			for i := range per {
				if err := pub.Publish(ctx, Message{Key: Key{Producer: "p", JobType: "noop"}, Body: EncodeBody(uint64(p*per+i), time.Now(), 64)}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	pwg.Wait()
	select {
	case <-all:
	case err := <-errs:
		t.Fatal(err)
	case <-ctx.Done():
		mu.Lock()
		t.Fatalf("delivered %d distinct messages of %d", len(seen), producers*per)
	}
	stop()
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	mu.Lock()
	defer mu.Unlock()
	for seq, n := range seen {
		if n != 1 {
			t.Errorf("message %d delivered %d times", seq, n)
		}
	}
}

// TestCostScenariosShort runs the busy and bulk scenarios briefly, every
// arm side by side, and checks their ratios, goals and CPU figures.
func TestCostScenariosShort(t *testing.T) {
	drivers := harbingerProcessDrivers(t, HarbingerServe, HarbingerDurable)
	drivers[RabbitMQ] = rabbitForTest(t)
	drivers[RabbitQuorum] = rabbitQuorumForTest(t)
	drivers[Redis] = redisForTest(t)
	drivers[RedisAOF] = redisAOFForTest(t)
	drivers[NATS] = natsForTest(t)
	drivers[NATSMemory] = natsMemoryForTest(t)
	for _, sc := range []string{ScenarioBusy, ScenarioBulk} {
		t.Run(sc, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			res, err := RunCost(ctx, CostConfig{Scenario: sc, Duration: time.Second, Warmup: 300 * time.Millisecond, Reps: 1}, drivers)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range res.ArmOrder {
				a := res.Arms[name]
				if a.PeakPerS <= 0 || a.PeakCPU.BrokerUS == nil {
					t.Errorf("%s: peak %.0f msg/s, broker CPU %v", name, a.PeakPerS, a.PeakCPU.BrokerUS)
				}
				if len(a.Runs) != 0 {
					t.Errorf("%s: fixed-rate runs in a windowed scenario", name)
				}
				t.Logf("%s: peak %.0f/s (CPU per message: %s)", name, a.PeakPerS, a.PeakCPU)
			}
			if len(res.Goals) != 2 {
				t.Errorf("goals %+v, want two", res.Goals)
			}
			for _, r := range res.Ratios {
				t.Logf("%s: %.2fx", r.Label, r.Median)
			}
		})
	}
}
