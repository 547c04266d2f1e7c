package sidecar

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/harbinger-mq/harbinger/rabbitmq"
)

// Fleet combines the per-queue backlog totals of every sidecar of a fleet,
// so that holding works when each sidecar sees only part of a queue's
// publishes and completions. Each sidecar reports its own totals (for every
// queue: net predicted work, published through it minus completed through
// it, and attached handlers) every ReportEvery; Fleet keeps the latest
// report of each peer and sums those still live. A queue's backlog is then
// the sidecar's own net work plus the peers' (floored at zero), over its
// handlers plus theirs.
//
// A peer whose report is older than Expiry is dead: its handlers stop
// counting at once. Its net work does not vanish with it: the messages it
// published stay in RabbitMQ and the survivors' consumers will complete
// them, taking their cost off their own nets; dropping the dead peer's
// positive net would leave those completions subtracting forever. So one
// live sidecar, the one with the smallest id among those it knows to be
// live, adopts the dead peer's last net and reports it with its own from
// then on; if that one never heard of the dead peer (it joined after its
// last report), another that did adopts it an expiry later. If two sidecars disagree on who is live, the net is adopted
// twice or not at all until their views agree; a report carries the ids a
// sidecar has adopted, and a sidecar drops its adoption of an id another
// live sidecar with a smaller id has adopted too.
//
// An adoption is kept by id only while it may still change: once held for
// FoldAfter expiries with no live peer reporting the same id, its nets are
// folded into the sidecar's inherited nets, which it reports with its own
// and which carry no id. Every restart of a sidecar is a new id, so without
// the fold a long-lived fleet would carry every id that ever died (and
// peers ignore a report listing more than MaxFleetPeers). The cost: a
// sidecar silent for longer than that and then back with the same id (a
// paused process; a restarted one has a new id) is counted twice.
//
// Fleet is pure: every method takes now, it starts nothing and does no
// I/O. It is safe for concurrent use (the share's consumer updates it while
// predictions read it).
type Fleet struct {
	self   string
	expiry time.Duration

	mu      sync.Mutex
	peers   map[string]*peerReport
	adopted map[string]adoption // dead peer id -> its last nets
	// inherited are the nets of adoptions folded in (see FoldAfter), by
	// queue: this sidecar's to report for good, as its own.
	inherited map[string]time.Duration
	// orphans are the last nets of dead peers this sidecar left to a live
	// sidecar with a smaller id, until that one reports adopting them,
	// this one becomes the smallest live, or an expiry passes without
	// either: a smaller peer that dies before it has reported its
	// adoptions (two sidecars cut off together) would otherwise take them
	// with it, and one that joined after the dead peer's last report never
	// knew it and never adopts it.
	orphans map[string]orphan
}

// orphan is a dead peer's last nets and when this sidecar found it dead.
type orphan struct {
	nets  map[string]time.Duration
	since time.Time
}

// adoption is a dead peer's last nets, by queue, and when this sidecar
// took them.
type adoption struct {
	nets  map[string]time.Duration
	since time.Time
}

// FoldAfter is how many expiries an adoption is kept by id before it is
// folded into the inherited nets.
const FoldAfter = 10

// peerReport is the latest report of one peer.
type peerReport struct {
	at      time.Time // when it arrived
	seq     uint64
	queues  map[string]rabbitmq.QueueTotals
	adopted map[string]bool // dead ids it adopted
}

// backlogReport is a sidecar's totals on the wire.
type backlogReport struct {
	Seq     uint64                 `json:"seq"`
	Queues  map[string]queueTotals `json:"q"`
	Adopted []string               `json:"adopted,omitempty"`
}

type queueTotals struct {
	Net       int64 `json:"w"` // nanoseconds, signed
	Consumers int   `json:"c"`
}

// NewFleet returns the fleet view of the sidecar self; a peer is dead once
// its latest report is older than expiry.
func NewFleet(self string, expiry time.Duration) *Fleet {
	return &Fleet{self: self, expiry: expiry, peers: make(map[string]*peerReport),
		adopted: make(map[string]adoption), inherited: make(map[string]time.Duration),
		orphans: make(map[string]orphan)}
}

// MaxFleetPeers bounds the peers a sidecar keeps reports of: the ids
// come from a header anything publishing to the exchange can set.
const MaxFleetPeers = 1024

// Update folds in a report from peer from that arrived at now. Reports
// older (by sequence) than the one kept are ignored; a report from a peer
// this sidecar had declared dead and adopted revives it: the adoption ends.
// A report from a new peer past MaxFleetPeers, with more queues than a
// sidecar tracks (rabbitmq.DefaultMaxQueues), or with a queue name a
// sidecar's clients cannot give (over 255 bytes), cannot be a sidecar's
// and is ignored.
func (f *Fleet) Update(from string, now time.Time, r backlogReport) {
	if from == "" || from == f.self || len(r.Queues) > rabbitmq.DefaultMaxQueues || len(r.Adopted) > MaxFleetPeers {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.peers[from]
	if p != nil && r.Seq <= p.seq || p == nil && len(f.peers) >= MaxFleetPeers {
		return
	}
	qs := make(map[string]rabbitmq.QueueTotals, len(r.Queues))
	for q, t := range r.Queues {
		if !queueName(q) {
			return
		}
		qs[q] = rabbitmq.QueueTotals{Net: time.Duration(t.Net), Consumers: max(t.Consumers, 0)}
	}
	ad := make(map[string]bool, len(r.Adopted))
	for _, id := range r.Adopted {
		ad[id] = true
		// Another sidecar adopted it too: the smaller id keeps it.
		if from < f.self {
			delete(f.adopted, id)
		}
		delete(f.orphans, id)
	}
	delete(f.adopted, from)
	delete(f.orphans, from)
	f.peers[from] = &peerReport{at: now, seq: r.Seq, queues: qs, adopted: ad}
}

// Expire declares dead every peer whose latest report is older than the
// expiry at now. This sidecar adopts a dead peer's nets when its own id is
// the smallest among the live sidecars it knows, then or later: until a
// sidecar with a smaller id reports adopting them, or dies too, or an
// expiry passes with no such report. Adoptions
// held for FoldAfter expiries that no live peer reports are folded into
// the inherited nets. It returns the ids that died.
func (f *Fleet) Expire(now time.Time) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var dead []string
	for id, p := range f.peers {
		if now.Sub(p.at) > f.expiry {
			dead = append(dead, id)
		}
	}
	// Every dead peer leaves first: one that dies with another of a
	// smaller id must not be left to that one.
	for _, id := range dead {
		p := f.peers[id]
		delete(f.peers, id)
		if len(f.orphans) >= MaxFleetPeers {
			continue
		}
		nets := make(map[string]time.Duration, len(p.queues))
		for q, t := range p.queues {
			if t.Net != 0 {
				nets[q] = t.Net
			}
		}
		f.orphans[id] = orphan{nets: nets, since: now}
	}
	// The smallest live sidecar adopts at once. Another adopts a dead peer
	// left to a smaller one when an expiry passes and that one has not
	// reported adopting it: it may have joined after the dead peer's last
	// report. Should two adopt the same peer, the larger drops it when the
	// smaller's report names it (Update).
	smallest := f.smallestLive()
	for id, o := range f.orphans {
		if smallest || now.Sub(o.since) > f.expiry {
			f.adopted[id] = adoption{nets: o.nets, since: now}
			delete(f.orphans, id)
		}
	}
	for id, a := range f.adopted {
		if now.Sub(a.since) > FoldAfter*f.expiry && !f.adoptedByPeer(id) {
			for q, n := range a.nets {
				if _, ok := f.inherited[q]; ok || len(f.inherited) < rabbitmq.DefaultMaxQueues {
					f.inherited[q] += n
				}
			}
			delete(f.adopted, id)
		}
	}
	return dead
}

// adoptedByPeer reports whether a live peer's latest report lists id as
// adopted. f.mu is held.
func (f *Fleet) adoptedByPeer(id string) bool {
	for _, p := range f.peers {
		if p.adopted[id] {
			return true
		}
	}
	return false
}

// smallestLive reports whether self has the smallest id of the live
// sidecars. f.mu is held.
func (f *Fleet) smallestLive() bool {
	for id := range f.peers {
		if id < f.self {
			return false
		}
	}
	return true
}

// Backlog implements rabbitmq.Peers: the live peers' net work and
// handlers for queue, plus the nets this sidecar adopted and inherited. A
// peer that has
// not been expired yet counts even if its report is stale; the sidecar
// calls Expire on every report tick.
func (f *Fleet) Backlog(queue string) (time.Duration, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var net time.Duration
	consumers := 0
	for _, p := range f.peers {
		t := p.queues[queue]
		net += t.Net
		consumers += t.Consumers
	}
	for _, a := range f.adopted {
		net += a.nets[queue]
	}
	net += f.inherited[queue]
	return net, consumers
}

// Report builds this sidecar's report from its own totals and seq: the
// nets it adopted and inherited are added to its own, so the peers count
// them too. A report names at most rabbitmq.DefaultMaxQueues queues, as
// many as a peer accepts (see Update): its own first, then the queues
// only its adopted and inherited nets name, the largest nets first. The
// nets of queues left out are counted by this sidecar alone (Backlog),
// not by its peers.
func (f *Fleet) Report(seq uint64, own map[string]rabbitmq.QueueTotals) backlogReport {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := backlogReport{Seq: seq, Queues: make(map[string]queueTotals, len(own))}
	for q, t := range own {
		r.Queues[q] = queueTotals{Net: int64(t.Net), Consumers: t.Consumers}
	}
	extra := make(map[string]time.Duration) // nets of queues own does not name
	add := func(q string, n time.Duration) {
		if t, ok := r.Queues[q]; ok {
			t.Net += int64(n)
			r.Queues[q] = t
		} else {
			extra[q] += n
		}
	}
	for id, a := range f.adopted {
		r.Adopted = append(r.Adopted, id)
		for q, n := range a.nets {
			add(q, n)
		}
	}
	for q, n := range f.inherited {
		add(q, n)
	}
	qs := slices.Collect(maps.Keys(extra))
	if room := rabbitmq.DefaultMaxQueues - len(r.Queues); len(qs) > room {
		slices.SortFunc(qs, func(a, b string) int {
			if c := cmp.Compare(extra[b].Abs(), extra[a].Abs()); c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		qs = qs[:max(room, 0)]
	}
	for _, q := range qs {
		r.Queues[q] = queueTotals{Net: int64(extra[q])}
	}
	return r
}

// Peers returns the numbers of live peers and of dead ones adopted and not
// yet folded in.
func (f *Fleet) Peers() (live, adopted int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.peers), len(f.adopted)
}
