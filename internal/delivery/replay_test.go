package delivery

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/store"
)

// replayView is what a restart must keep of every job: its state, attempt
// and place in line. A job in flight comes back ready with its attempt
// counted, or dead-lettered on its last attempt (no ack can come for it);
// one cancelled while in flight does not come back.
func replayView(l *Line, live bool) []string {
	var out []string
	add := func(state string) func(j *Job) {
		return func(j *Job) {
			out = append(out, fmt.Sprint(j.ID(), " ", state, " attempt ", j.Attempt(), " seq ", j.Seq(), " payload ", len(j.Payload())))
		}
	}
	running := add("running")
	if live {
		running = func(j *Job) {
			if j.Cancelled() {
				return // gone for good: it settles with its worker
			}
			if j.MaxAttempts > 0 && j.Attempt() >= int(j.MaxAttempts) && !j.Scheduled() {
				out = append(out, fmt.Sprint(j.ID(), " dead attempt ", j.Attempt()))
				return
			}
			add("ready")(j)
		}
	}
	l.Each(add("ready"), running, add("delayed"), func(d DeadLetterEntry) {
		out = append(out, fmt.Sprint(d.Job.ID(), " dead attempt ", d.Job.Attempt()))
	})
	slices.Sort(out)
	return out
}

// TestReplayRebuildsTheLine: every record a Line writes goes through a log
// (encoded and decoded) and, at random moments, the log is folded by
// Replay and restored into a new Line, which must hold the same jobs in
// the same states, attempts and order as the live one would after a
// crash. The operations are random: publishes (some delayed, some with a
// TTL), deliveries, acks, every kind of nack, returns, detaches, extends,
// cancels, purges, dead-letter requeues and deletions, reconfigurations
// and time passing.
func TestReplayRebuildsTheLine(t *testing.T) {
	t.Parallel()
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 99))
			cfg := modelConfig()
			l := newLine(t, cfg)
			log := store.NewMemory()
			now := t0
			write := func(extra ...*store.Record) {
				recs := append(l.Fx.Records, extra...)
				if len(recs) > 0 {
					if _, err := log.Append(recs...); err != nil {
						t.Fatal(err)
					}
				}
				l.Fx.Clear()
			}
			var holders []Holder
			held := map[Holder][]string{}
			n := 0
			for step := range 300 {
				switch op := rng.IntN(20); {
				case op < 6:
					n++
					j := newJob(fmt.Sprintf("j%d", n), []byte(strings.Repeat("é\xff", rng.IntN(600))))
					if rng.IntN(3) == 0 {
						j.SetOptions(nil, time.Duration(1+rng.IntN(40))*time.Second, 0, 0)
					}
					var runAt time.Time
					if rng.IntN(5) == 0 {
						runAt = now.Add(time.Duration(1+rng.IntN(30)) * time.Second)
					}
					if _, err := l.Admit(j, Names{Producer: fmt.Sprint("p", rng.IntN(3)), JobType: "t"}, runAt, now); err != nil {
						write()
						continue // full: refused, nothing written
					}
					write() // its record, stored before it is in line
					l.Commit(j, now)
				case op < 9:
					if len(holders) == 0 || rng.IntN(4) == 0 {
						holders = append(holders, l.Attach())
					}
					h := holders[rng.IntN(len(holders))]
					if j := l.Deliver(h, now); j != nil {
						held[h] = append(held[h], j.ID())
					}
				case op < 14 && len(holders) > 0:
					h := holders[rng.IntN(len(holders))]
					if len(held[h]) == 0 {
						break
					}
					k := rng.IntN(len(held[h]))
					id := held[h][k]
					held[h] = slices.Delete(held[h], k, k+1)
					switch rng.IntN(7) {
					case 0, 1:
						_, _ = l.Ack(h, id, time.Duration(1+rng.IntN(900))*time.Millisecond, now)
					case 2:
						_ = l.Nack(h, id, Requeue, 0, "again", false, now)
					case 3:
						_ = l.Nack(h, id, RequeueAfter, time.Duration(rng.IntN(20))*time.Second, "later", false, now)
					case 4:
						_ = l.Nack(h, id, DeadLetter, 0, "poison ✗", false, now)
					case 5:
						_ = l.Nack(h, id, Retry, 0, "retry", false, now)
					case 6:
						l.Return(h, id, now)
					}
				case op == 14 && len(holders) > 0:
					k := rng.IntN(len(holders))
					l.Detach(holders[k], now)
					delete(held, holders[k])
					holders = slices.Delete(holders, k, k+1)
				case op == 15:
					if n > 0 {
						_, _ = l.Cancel(fmt.Sprintf("j%d", 1+rng.IntN(n)), now)
					}
				case op == 16:
					switch rng.IntN(4) {
					case 0:
						l.Purge()
					case 1:
						l.TakeDead(nil, true, now)
					case 2:
						l.TakeDead(nil, false, now)
					case 3:
						// A new config: the broker logs it as a declare, which
						// the replay turns into Reconfigured.
						c := cfg
						c.MaxAttempts = 2 + rng.IntN(3)
						l.Reconfigure(c, newQueue(t, "fifo"), now)
						write(&store.Record{Kind: store.KindDeclare, Queue: "q", Data: []byte(fmt.Sprint(step))})
						continue
					}
				default:
					now = now.Add(time.Duration(rng.IntN(12)) * time.Second)
					l.Tick(now)
				}
				write()
				if rng.IntN(25) != 0 && step != 299 {
					continue
				}
				// A crash here: what the log holds, restored.
				l.Tick(now)
				write()
				p := NewReplay()
				err := log.Replay(func(r *store.Record) error {
					if !p.Apply(r) && r.Kind == store.KindDeclare {
						p.Reconfigured()
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				r := New("q", l.Config(), newQueue(t, "fifo"))
				for _, rj := range p.Jobs() {
					r.Restore(rj.Job, rj.Reset, now)
				}
				r.SortDead()
				want, got := replayView(l, true), replayView(r, false)
				if !slices.Equal(want, got) {
					t.Fatalf("step %d: the line rebuilt from its log holds\n%s\nwant\n%s", step, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			}
		})
	}
}
