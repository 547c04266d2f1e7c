package broker

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/harbinger-mq/harbinger/internal/delivery"
)

// train teaches queue q that job type "short" takes 1 ms and "long" 10 s,
// in the proportions that make "long" the long class (most of the work).
func train(t *testing.T, tb *testBundle, q string) {
	t.Helper()
	c := tb.sub(t, q, 1)
	cost := map[string]time.Duration{"short": time.Millisecond, "long": 10 * time.Second}
	for i := range 200 {
		jt := "short"
		if i%5 == 0 {
			jt = "long"
		}
		tb.publish(t, msg(q, jt))
		d := next(t, c)
		if err := c.Ack(d.ID, cost[d.JobType]); err != nil {
			t.Fatal(err)
		}
		c.AddCredit(1)
	}
	c.Close()
}

// waiting returns the queue's waiting message with id.
func waiting(t *testing.T, tb *testBundle, queue, id string) *delivery.Job {
	t.Helper()
	q, err := tb.b.lookup(queue, false)
	if err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var found *delivery.Job
	q.line.Each(func(j *delivery.Job) {
		if j.ID() == id {
			found = j
		}
	}, nil, nil, nil)
	if found == nil {
		t.Fatalf("%s is not waiting in %s", id, queue)
	}
	return found
}

// The long-job bound protects the jobs marked Long; a job that comes back
// through a scheduler reset (a requeued dead letter, or a retry after a
// redeclare) must be marked and tiered as a fresh one would be.
func TestResetKeepsLongAndTier(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	train(t, tb, "q")
	fresh := waiting(t, tb, "q", tb.publish(t, msg("q", "long"))[0])
	if !fresh.Long() {
		t.Fatal("training did not make the long job Long; the test needs a different workload")
	}
	wantTier := fresh.Tier()
	if _, err := tb.b.Purge("q"); err != nil {
		t.Fatal(err)
	}

	t.Run("requeued dead letter", func(t *testing.T) {
		id := tb.publish(t, msg("q", "long"))[0]
		c := tb.sub(t, "q", 1)
		d := next(t, c)
		if err := c.Nack(d.ID, NackDeadLetter, 0, "poison"); err != nil {
			t.Fatal(err)
		}
		if n, err := tb.b.RequeueDeadLetters("q", nil); err != nil || n != 1 {
			t.Fatalf("requeued %d, %v", n, err)
		}
		m := waiting(t, tb, "q", id)
		if !m.Long() || m.Tier() != wantTier {
			t.Fatalf("requeued job: long %v tier %d, want long tier %d", m.Long(), m.Tier(), wantTier)
		}
		c.Close()
		_, _ = tb.b.Purge("q")
	})

	t.Run("retry after redeclare", func(t *testing.T) {
		id := tb.publish(t, msg("q", "long"))[0]
		c := tb.sub(t, "q", 1)
		d := next(t, c)
		// Redeclaring swaps the scheduler while the job is out.
		if _, err := tb.b.Declare("q", QueueConfig{MaxAttempts: 7}); err != nil {
			t.Fatal(err)
		}
		if err := c.Nack(d.ID, NackRequeue, 0, ""); err != nil {
			t.Fatal(err)
		}
		m := waiting(t, tb, "q", id)
		if !m.Long() || m.Tier() != wantTier {
			t.Fatalf("retried job: long %v tier %d, want long tier %d", m.Long(), m.Tier(), wantTier)
		}
		c.Close()
	})
}

func TestPublishEachAnswersEveryMessage(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{MaxKeyLen: 8, Queue: QueueConfig{MaxDepth: 2}})
	msgs := []*Message{
		msg("q", "a"),
		{Queue: "q", Producer: "far-too-long"}, // invalid: refused alone
		msg("q", "b"),
		msg("q", "c"), // the queue is full now
		msg("other", "d"),
	}
	res := tb.b.PublishEach(msgs, nil)
	if len(res) != len(msgs) {
		t.Fatalf("%d results for %d messages", len(res), len(msgs))
	}
	want := []error{nil, ErrInvalid, nil, ErrQueueFull, nil}
	for i, r := range res {
		switch {
		case want[i] == nil && (r.Err != nil || r.ID == ""):
			t.Errorf("message %d: %+v, want stored", i, r)
		case want[i] != nil && (!errors.Is(r.Err, want[i]) || r.ID != ""):
			t.Errorf("message %d: %+v, want %v", i, r, want[i])
		}
	}
	// Publish reports the same as ids plus a BatchError naming the failures.
	ids, err := tb.b.Publish(msg("q", "e"), msg("other", "f"))
	var be *BatchError
	if !errors.As(err, &be) || len(be.Failed) != 1 || be.Failed[0].Index != 0 || !errors.Is(err, ErrQueueFull) || len(ids) != 1 {
		t.Fatalf("ids %v, err %v", ids, err)
	}
	if !strings.Contains(err.Error(), "1 of 2 messages not stored; message 0: queue \"q\" is full") {
		t.Fatalf("error text: %v", err)
	}
	// What is held is exactly what was stored.
	for name, n := range map[string]int{"q": 2, "other": 2} {
		if in, _ := tb.b.Queue(name); in.Ready != n {
			t.Errorf("%s holds %d, want %d", name, in.Ready, n)
		}
	}
}

// A nack reason cut mid-rune used to poison the dead-letter list: every
// later read of it failed to encode.
func TestLongReasonStaysValidUTF8(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	tb.publish(t, msg("q", "a"), msg("q", "b"))
	c := tb.sub(t, "q", 2)
	for _, reason := range []string{strings.Repeat("é", 2000), "bad \xff\xfe bytes"} {
		d := next(t, c)
		if err := c.Nack(d.ID, NackDeadLetter, 0, reason); err != nil {
			t.Fatal(err)
		}
	}
	dls, _ := tb.b.DeadLetters("q", 0)
	for _, d := range dls {
		if !utf8.ValidString(d.Reason) || len(d.Reason) > maxReason+len("nacked: ") {
			t.Errorf("reason of %d bytes, valid %v", len(d.Reason), utf8.ValidString(d.Reason))
		}
	}
}

func TestReturnChargesNoAttempt(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	tb.publish(t, msg("q", "a"))
	c := tb.sub(t, "q", 1)
	d := next(t, c)
	c.Return(d.ID) // its send failed
	c.AddCredit(1)
	if d2 := next(t, c); d2.ID != d.ID || d2.Attempt != 1 {
		t.Fatalf("after Return: %s attempt %d, want %s attempt 1", d2.ID, d2.Attempt, d.ID)
	}
	in, _ := tb.b.Queue("q")
	if in.Delivered != 1 || in.Redelivered != 0 {
		t.Fatalf("delivered %d redelivered %d", in.Delivered, in.Redelivered)
	}
}

// The byte budget bounds everything the broker holds, from many producers
// and consumers at once, and never costs an accepted job.
func TestByteBudgetUnderFlood(t *testing.T) {
	t.Parallel()
	const (
		budget   = 4 << 20
		payload  = 16 << 10
		perProd  = 400
		prods    = 8
		conss    = 4
		attempts = 2
	)
	tb := setup(t, Config{MaxBytes: budget, MaxPayload: 64 << 10, Queue: QueueConfig{MaxAttempts: attempts}})
	var (
		mu       sync.Mutex
		accepted = map[string]bool{}
		refused  int
	)
	var wg sync.WaitGroup
	for p := range prods {
		wg.Go(func() {
			for i := range perProd {
				m := &Message{Queue: fmt.Sprintf("q%d", p%3), Producer: "flood", JobType: "j",
					Payload: make([]byte, payload), Headers: map[string]string{"ключ": "значение"}}
				ids, err := tb.b.Publish(m)
				if held := tb.b.bytes.Load(); held > budget {
					t.Errorf("held %d bytes, over the budget of %d", held, budget)
				}
				mu.Lock()
				switch {
				case err == nil:
					accepted[ids[0]] = true
				case errors.Is(err, ErrOverBudget):
					var ob *OverBudgetError
					if !errors.As(err, &ob) || ob.Limit != budget || !strings.Contains(err.Error(), "max bytes") {
						t.Errorf("refusal does not name the limit: %v", err)
					}
					refused++
				default:
					t.Errorf("publish %d/%d: %v", p, i, err)
				}
				mu.Unlock()
			}
		})
	}
	// Consumers ack most jobs, nack some for a retry and dead-letter a few.
	settled := map[string]int{}
	var cmu sync.Mutex
	cons := make([]*Consumer, 0, conss*3)
	for i := range conss * 3 {
		cons = append(cons, tb.sub(t, fmt.Sprintf("q%d", i%3), 4))
	}
	ctx, stop := context.WithCancel(context.Background())
	var cwg sync.WaitGroup
	for _, c := range cons {
		cwg.Go(func() {
			for n := 0; ; n++ {
				d, err := c.Next(ctx)
				if err != nil {
					return
				}
				switch n % 10 {
				case 7:
					_ = c.Nack(d.ID, NackRequeue, 0, "retry")
				case 9:
					_ = c.Nack(d.ID, NackDeadLetter, 0, "dead")
				default:
					if err := c.Ack(d.ID, time.Millisecond); err != nil {
						t.Error(err)
					}
					cmu.Lock()
					settled[d.ID]++
					cmu.Unlock()
				}
				c.AddCredit(1)
			}
		})
	}
	wg.Wait()
	// Let the consumers finish everything that was accepted.
	for {
		total := 0
		for _, in := range tb.b.Queues() {
			total += in.Ready + in.InFlight
		}
		if total == 0 {
			break
		}
		runtime.Gosched()
	}
	stop()
	cwg.Wait()
	if refused == 0 {
		t.Fatal("the flood never met the budget; make it larger")
	}
	// Every accepted job was acked or dead-lettered exactly once (a retry
	// nack is not a settlement), and nothing else was.
	dead := 0
	for _, in := range tb.b.Queues() {
		dls, _ := tb.b.DeadLetters(in.Name, 0)
		for _, d := range dls {
			settled[d.ID]++
		}
		dead += len(dls)
	}
	for id := range accepted {
		if settled[id] != 1 {
			t.Errorf("job %s settled %d times", id, settled[id])
		}
	}
	if len(settled) != len(accepted) {
		t.Errorf("%d settled, %d accepted", len(settled), len(accepted))
	}
	// Dead letters still hold their bytes, exactly what they were
	// charged; acked jobs gave theirs back.
	j := &delivery.Job{}
	j.SetPayload(make([]byte, payload))
	j.SetOptions(map[string]string{"ключ": "значение"}, 0, 0, 0)
	each := jobSize(j, delivery.Names{Producer: "flood", JobType: "j"}, "q0")
	if held := tb.b.bytes.Load(); dead == 0 || held != int64(dead)*each {
		t.Errorf("held %d bytes for %d dead letters of %d bytes each", held, dead, each)
	}
	held := tb.b.bytes.Load()
	t.Logf("accepted %d, refused %d, dead %d, held %d bytes", len(accepted), refused, dead, held)
}

// The budget is what the broker's jobs really cost: filled to the brim,
// the heap grows by about the budget, not more.
func TestByteBudgetBoundsHeap(t *testing.T) {
	const budget = 32 << 20
	tb := setup(t, Config{MaxBytes: budget})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	stored := 0
	for i := 0; ; i++ {
		_, err := tb.b.Publish(&Message{Queue: fmt.Sprintf("q%d", i%4), Producer: "p", JobType: "j", Payload: make([]byte, 16<<10)})
		if errors.Is(err, ErrOverBudget) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		stored++
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	const slack = 8 << 20 // queue structures, predictor, id generator
	if grown > budget+slack {
		t.Fatalf("heap grew %d bytes for a budget of %d (%d jobs)", grown, budget, stored)
	}
	t.Logf("%d jobs, heap +%d bytes, budget %d", stored, grown, budget)
}

// A consumer's name is bounded as a producer's is: it is repeated beside
// every job the consumer holds and not charged to the memory budget, so a
// name of megabytes made every listing of the queue's jobs megabytes too.
func TestSubscribeChecksConsumerName(t *testing.T) {
	b, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{strings.Repeat("w", DefaultMaxKeyLen+1), strings.Repeat("w", 4<<20), "worker-\xff"} {
		c, err := b.Subscribe("q", name, 1)
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Field != "consumer" {
			t.Errorf("Subscribe with a %d-byte name = %v, want an InvalidError for consumer", len(name), err)
		}
		if c != nil {
			c.Close()
		}
	}
	longest := strings.Repeat("ü", DefaultMaxKeyLen/2)
	c, err := b.Subscribe("q", longest, 1)
	if err != nil {
		t.Fatalf("a name of exactly the limit: %v", err)
	}
	c.Close()
	if n := b.consumers.Load(); n != 0 {
		t.Errorf("%d consumers counted after every one closed or was refused", n)
	}
}
