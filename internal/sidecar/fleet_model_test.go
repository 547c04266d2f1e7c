package sidecar

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/rabbitmq"
)

// TestFleetMatchesModel runs fleets of sidecars through random histories
// (own nets that move up and down, sidecars that die two expiries apart
// or more, new ones that join with ids above and below the others', reports
// that miss a peer now and then) and checks each against a model that
// needs no protocol: the work a
// queue has waiting is the live sidecars' own nets plus, for each dead one,
// the nets in the last report it sent. Once the fleet has settled (every
// death expired and adopted, every adoption reported), each live sidecar's
// own net plus its Backlog must equal that total for every queue: a dead
// sidecar's work counted exactly once, whoever adopted it and however
// often adopters died in turn, and through the fold of old adoptions into
// inherited nets.
func TestFleetMatchesModel(t *testing.T) {
	t.Parallel()
	const (
		every  = 200 * time.Millisecond
		expiry = 2 * time.Second
	)
	queues := []string{"jobs", "mail", "媒体"}
	for run := range 300 {
		rng := rand.New(rand.NewPCG(uint64(run), 7))
		type side struct {
			fleet *Fleet
			own   map[string]rabbitmq.QueueTotals
			seq   uint64
		}
		live := map[string]*side{}
		lastSent := map[string]map[string]time.Duration{} // by id: the nets its last report carried of its own
		deadNets := map[string]time.Duration{}            // the model's share of the dead, by queue
		now := time.Unix(1000, 0)
		lastDeath := now.Add(-time.Hour)
		join := func() {
			id := fmt.Sprintf("%08x", rng.Uint32())
			live[id] = &side{fleet: NewFleet(id, expiry), own: map[string]rabbitmq.QueueTotals{}}
		}
		tick := func(lossy bool) {
			now = now.Add(every)
			ids := slices.Sorted(maps.Keys(live))
			for _, id := range ids {
				s := live[id]
				s.fleet.Expire(now)
				s.seq++
				r := s.fleet.Report(s.seq, s.own)
				nets := map[string]time.Duration{}
				for q, t := range s.own {
					nets[q] = t.Net
				}
				lastSent[id] = nets
				for _, to := range ids {
					if to == id || lossy && rng.IntN(10) == 0 {
						continue
					}
					live[to].fleet.Update(id, now, r)
				}
			}
		}
		for range 1 + rng.IntN(3) {
			join()
		}
		steps := 20 + rng.IntN(200)
		for range steps {
			ids := slices.Sorted(maps.Keys(live))
			switch op := rng.IntN(20); {
			case op < 12: // work published or completed through a sidecar
				s := live[ids[rng.IntN(len(ids))]]
				q := queues[rng.IntN(len(queues))]
				t := s.own[q]
				t.Net += time.Duration(rng.IntN(2001)-1000) * time.Millisecond
				t.Consumers = rng.IntN(3)
				s.own[q] = t
			case op < 14 && len(live) > 1 && now.Sub(lastDeath) > 2*expiry+3*every:
				// One dies: what it last reported stays. A round that
				// reaches everyone first: a report lost on the way from a
				// dying sidecar leaves its peers with different last
				// words, and no protocol can tell which was last. And no
				// second death until it is adopted (two expiries at most:
				// one to find it dead, one more when the smallest live
				// sidecar joined too late to know it): a dead peer's net
				// is known only to the sidecars that heard its last
				// report until one of them adopts it, so if all of them
				// die first it is gone (docs/sidecar.md, Expiry).
				tick(false)
				lastDeath = now
				id := ids[rng.IntN(len(ids))]
				for q, n := range lastSent[id] {
					deadNets[q] += n
				}
				delete(live, id)
			case op < 16 && len(live) < 6:
				join()
			default:
				tick(true)
			}
		}
		// Settle: reliable reports until every death is expired, adopted
		// and reported, then past FoldAfter expiries so adoptions fold.
		for range int((FoldAfter+3)*expiry/every) + 10 {
			tick(false)
		}
		for id, s := range live {
			for _, q := range queues {
				back, _ := s.fleet.Backlog(q)
				want := deadNets[q]
				for _, o := range live {
					want += o.own[q].Net
				}
				if got := s.own[q].Net + back; got != want {
					t.Fatalf("run %d, sidecar %s of %d, queue %s: own %v + fleet %v = %v, want %v (live %v)",
						run, id, len(live), q, s.own[q].Net, back, got, want, slices.Sorted(maps.Keys(live)))
				}
			}
		}
	}
}
