package rabbitmq

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/predict"
)

// A warm predictor keeps the bound on a key that carries most of a queue's
// work. Reports do 90% of the work here; the predictor's long cut, a fifth
// of the recent work, falls among the reports' own predicted costs, and
// before the fix most reports were not Long: AMQP priority 0 with no hold,
// served after every short job. Now every report of the second run (the
// predictor warm from the first) is Long, at the top priority, and held
// behind a backlog; the short jobs stay in the tiers.
func TestWarmDominantKeyStaysLong(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := NewLocal(LocalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(15, 1))
	jitter := func(d time.Duration) time.Duration { return time.Duration(float64(d) * (0.7 + 0.6*rng.Float64())) }
	email := Key{Queue: "jobs", Producer: "app", JobType: "email"}
	report := Key{Queue: "jobs", Producer: "app", JobType: "report"}
	// One run: a report after every nine emails, 900 ms against 10 ms.
	run := func() (reports, long, held, emailsLong int) {
		for i := range 2000 {
			k, d := email, jitter(10*time.Millisecond)
			if i%10 == 0 {
				k, d = report, jitter(900*time.Millisecond)
			}
			pr, err := l.Predict(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case k == report:
				reports++
				if pr.Long && pr.AMQP == DefaultMaxPriority {
					long++
				}
				if pr.Hold > 0 {
					held++
				}
			case pr.Long:
				emailsLong++
			}
			if err := l.Observe(ctx, k, d); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	run() // the first run warms the predictor
	l.Attach(ctx, "jobs", 2)
	reports, long, held, emailsLong := run()
	if long != reports {
		t.Errorf("warm run: %d of %d reports long at priority %d, want all", long, reports, DefaultMaxPriority)
	}
	// Nothing completes through Consume here, so the backlog only grows:
	// every report after the first (published to an empty queue) finds
	// work ahead of it.
	if held != reports-1 {
		t.Errorf("warm run: %d of %d reports held, want all but the first", held, reports)
	}
	if emailsLong != 0 {
		t.Errorf("warm run: %d emails long, want none", emailsLong)
	}
}

// The most expensive key of the window is long whatever its share of the
// work, others only by the predictor's verdict, and the rule follows the
// window.
func TestLongKeysTop(t *testing.T) {
	t.Parallel()
	key := func(s string) predict.Key { return predict.Key{JobType: s} }
	lk := newLongKeys(10, 1, 0.2)
	for range 8 {
		lk.mark(key("a"), 1, false)
	}
	lk.mark(key("c"), 3, false)
	if !lk.mark(key("b"), 5, false) {
		t.Error("the most expensive key is not long")
	}
	if lk.mark(key("c"), 3, false) || lk.mark(key("a"), 1, false) {
		t.Error("a key other than the most expensive one is long without the predictor's verdict")
	}
	if !lk.mark(key("c"), 3, true) {
		t.Error("the predictor's Long verdict was overruled")
	}
	// Ten more of "a": b and c leave the window and a, all its work, is long.
	for range 10 {
		lk.mark(key("a"), 1, false)
	}
	if !lk.mark(key("a"), 1, false) {
		t.Error("the only key of the window is not long")
	}
	off := newLongKeys(10, 1, -1)
	if off.mark(key("a"), 1, false) || !off.mark(key("a"), 1, true) {
		t.Error("with the long share off, the predictor's verdict must stand")
	}
}

// Local marks long the messages of the costliest twentieth of the warm
// keys, as the broker's default policy does: of 41 kinds, two rare ones
// that carry too little of the recent work for the cut and are not the
// single costliest key (a frequent 1 s kind is) are long by default, and
// not with LongKeys negative. No cheaper kind is made long.
func TestLocalLongKeys(t *testing.T) {
	t.Parallel()
	keyOf := func(i int) Key { return Key{Queue: "q", Producer: "wéb", JobType: "kind-" + strconv.Itoa(i)} }
	const big, rare1, rare2 = 38, 39, 40
	special := map[int]time.Duration{big: time.Second, rare1: 300 * time.Millisecond, rare2: 400 * time.Millisecond}
	cost := func(i int) time.Duration {
		if d, ok := special[i]; ok {
			return d
		}
		return time.Duration(i+1) * time.Millisecond
	}
	run := func(cfg LocalConfig) map[int]bool {
		l, err := NewLocal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 41 {
			for range 3 {
				if err := l.Observe(t.Context(), keyOf(i), cost(i)); err != nil {
					t.Fatal(err)
				}
			}
		}
		long := map[int]bool{}
		for n := range 7000 {
			i := n % 38
			switch {
			case n%200 == 0:
				i = rare1 + (n/200)%2
			case n%3 == 0:
				i = big
			}
			pr, err := l.Predict(t.Context(), keyOf(i))
			if err != nil {
				t.Fatal(err)
			}
			// Counted once the window of recent predictions is full:
			// before, the few in it are all the top key has to go by.
			if n >= 1024 && pr.Long {
				long[i] = true
			}
		}
		return long
	}
	if c := (LocalConfig{}).WithDefaults(); c.LongKeys != DefaultLongKeys {
		t.Fatalf("default LongKeys %v, want %v", c.LongKeys, DefaultLongKeys)
	}
	off := run(LocalConfig{LongShare: 0.01, LongKeys: -1})
	if !off[big] || off[rare1] || off[rare2] {
		t.Fatalf("without long keys: long kinds %v; the test needs the cut and the top key to take only the 1 s kind", off)
	}
	on := run(LocalConfig{LongShare: 0.01})
	if !on[big] || !on[rare1] || !on[rare2] {
		t.Errorf("by default the three costliest of 41 kinds are not all long: %v", on)
	}
	for i := range 38 {
		if on[i] {
			t.Errorf("kind %d (%v) is long: only the costliest twentieth of the kinds should be", i, cost(i))
		}
	}
}

// A short key whose measured times are spread by the wait for a core (a
// push of about 0.2 ms measured up to a few ms now and then) is not held
// like unknown long work: by default the spread gate takes only keys
// whose p99 is long, and the push gets its own short estimate and a
// priority above the middle tier's, with no hold. GateAll gates it, as
// the broker does, and then it is long. A key whose p99 is long is gated
// either way.
func TestNoisyShortKeyNotHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, all := range []bool{false, true} {
		l, err := NewLocal(LocalConfig{GateAll: all})
		if err != nil {
			t.Fatal(err)
		}
		l.Attach(ctx, "jobs", 4)
		rng := rand.New(rand.NewPCG(16, 1))
		push := Key{Queue: "jobs", Producer: "wéb", JobType: "push"}
		report := Key{Queue: "jobs", Producer: "wéb", JobType: "report"}
		var last, lastReport Priority
		for i := range 3000 {
			k, d := Key{Queue: "jobs", Producer: "wéb", JobType: fmt.Sprint("resize-", i%6)}, time.Duration(40+10*(i%6))*time.Millisecond
			switch {
			case i%4 == 0:
				k, d = push, time.Duration((0.1+0.2*rng.Float64())*float64(time.Millisecond))
				if i%40 == 0 {
					d = time.Duration((3 + 2*rng.Float64()) * float64(time.Millisecond)) // waited for a core
				}
			case i%9 == 0:
				k, d = report, 20*time.Millisecond
				if i%27 == 0 {
					d = 5 * time.Second
				}
			}
			pr, err := l.Predict(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			switch k {
			case push:
				last = pr
			case report:
				lastReport = pr
			}
			if err := l.Observe(ctx, k, d); err != nil {
				t.Fatal(err)
			}
		}
		if ks, _ := l.Lookup(push); ks.P99 < 16*ks.P50 {
			t.Fatalf("the push's p99 %v is not past the gate (median %v): the test does not test the gate", ks.P99, ks.P50)
		}
		if all != (last.Long && last.AMQP == DefaultMaxPriority) {
			t.Errorf("GateAll %v: the last push got %+v, want long at the top priority only with GateAll", all, last)
		}
		if !all && (last.Hold != 0 || last.AMQP <= DefaultMaxPriority/2) {
			t.Errorf("the last push got %+v, want no hold and a priority above the middle tier's", last)
		}
		if !lastReport.Long {
			t.Errorf("GateAll %v: the last report (p99 5 s) got %+v, want long", all, lastReport)
		}
	}
}
