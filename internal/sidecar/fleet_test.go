package sidecar

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/rabbitmq"
)

// member is one sidecar of a fleet without RabbitMQ: its predictor and its
// fleet view, exchanging reports by hand.
type member struct {
	id    string
	local *rabbitmq.Local
	fleet *Fleet
	seq   uint64
}

func newMember(t *testing.T, id string) *member {
	t.Helper()
	l, err := rabbitmq.NewLocal(rabbitmq.LocalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// One observation sets the typical duration cold keys are predicted
	// at, and cold keys are long: 100 ms each.
	if err := l.Observe(context.Background(), rabbitmq.Key{Queue: "other"}, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	f := NewFleet(id, DefaultBacklogExpiry)
	l.SetPeers(f)
	return &member{id: id, local: l, fleet: f}
}

// send delivers m's report to every other member at now.
func (m *member) send(now time.Time, to ...*member) {
	m.fleet.Expire(now)
	m.seq++
	r := m.fleet.Report(m.seq, m.local.Totals())
	for _, o := range to {
		if o != m {
			o.fleet.Update(m.id, now, r)
		}
	}
}

func (m *member) predict(t *testing.T) rabbitmq.Priority {
	t.Helper()
	pr, err := m.local.Predict(context.Background(), rabbitmq.Key{Queue: "jobs", JobType: "new"})
	if err != nil || !pr.Long || pr.Predicted != 100*time.Millisecond {
		t.Fatalf("Predict = %+v, %v; want long at 100 ms", pr, err)
	}
	return pr
}

// complete reports a completion of pr's message to m. It goes under
// another key than the one predicted, which must stay cold (so long) for
// the test's arithmetic; the backlog is per queue.
func (m *member) complete(t *testing.T, pr rabbitmq.Priority) {
	t.Helper()
	err := m.local.ObserveStamped(context.Background(), rabbitmq.Key{Queue: "jobs", JobType: "done"},
		rabbitmq.Stamp{Predicted: pr.Predicted, Tier: pr.Tier, Cold: true}, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
}

func held(wait time.Duration) time.Duration {
	return time.Duration(rabbitmq.DefaultHold * float64(wait))
}

// Publishes through one sidecar and completions through another add up:
// the publisher's sidecar holds by the fleet's backlog and handlers, not
// by its own (it has no handlers, so alone it would hold nothing), and a
// completion through the other sidecar shortens the next hold once its
// report arrives.
func TestFleetCombinesBacklogs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1000, 0))
	pubSide, workSide := newMember(t, "a"), newMember(t, "b")
	all := []*member{pubSide, workSide}
	workSide.local.Attach(ctx, "jobs", 2)
	workSide.send(clk.Now(), all...)
	var prs []rabbitmq.Priority
	for range 4 {
		prs = append(prs, pubSide.predict(t))
	}
	// 0, 100, 200, 300 ms ahead over the two handlers of b.
	for i, want := range []time.Duration{0, held(50 * time.Millisecond), held(100 * time.Millisecond), held(150 * time.Millisecond)} {
		if prs[i].Hold != want {
			t.Errorf("hold %d = %v, want %v", i, prs[i].Hold, want)
		}
	}
	// b completes three; until its report arrives a still counts 400 ms.
	for _, pr := range prs[:3] {
		workSide.complete(t, pr)
	}
	if h := pubSide.predict(t).Hold; h != held(200*time.Millisecond) {
		t.Errorf("hold before b's report = %v, want %v (400 ms ahead, b's completions not yet known)", h, held(200*time.Millisecond))
	}
	clk.Advance(DefaultReportEvery)
	workSide.send(clk.Now(), all...)
	// a published five (500 ms), b completed three (300 ms): 200 ms.
	if h := pubSide.predict(t).Hold; h != held(100*time.Millisecond) {
		t.Errorf("hold after b's report = %v, want %v", h, held(100*time.Millisecond))
	}
	// b sees a's publishes once a reports.
	pubSide.send(clk.Now(), all...)
	if h := workSide.predict(t).Hold; h != held(150*time.Millisecond) {
		t.Errorf("hold through b = %v, want %v (300 ms ahead over 2 handlers)", h, held(150*time.Millisecond))
	}
}

// A sidecar that stops reporting stops counting: its handlers at once
// after the expiry, while its net work is adopted by the live sidecar with
// the smallest id, who reports it on, so the survivors' completions of its
// messages do not drive the backlog below the truth.
func TestFleetExpiresAndAdopts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1000, 0))
	a, b, c := newMember(t, "a"), newMember(t, "b"), newMember(t, "c")
	all := []*member{a, b, c}
	// c publishes 300 ms and has one handler; b has one handler.
	c.local.Attach(ctx, "jobs", 1)
	b.local.Attach(ctx, "jobs", 1)
	var prs []rabbitmq.Priority
	for range 3 {
		prs = append(prs, c.predict(t))
	}
	for _, m := range all {
		m.send(clk.Now(), all...)
	}
	if h := a.predict(t).Hold; h != held(150*time.Millisecond) {
		t.Fatalf("hold with c alive = %v, want %v", h, held(150*time.Millisecond))
	}
	// a's own prediction added 100 ms. c dies; a and b keep reporting.
	for clk.Now().Sub(time.Unix(1000, 0)) <= DefaultBacklogExpiry {
		clk.Advance(DefaultReportEvery)
		a.send(clk.Now(), a, b)
		b.send(clk.Now(), a, b)
	}
	if live, adopted := a.fleet.Peers(); live != 1 || adopted != 1 {
		t.Fatalf("a knows %d live peers and adopted %d; want b live and c adopted", live, adopted)
	}
	if _, adopted := b.fleet.Peers(); adopted != 0 {
		t.Errorf("b adopted %d, want none: a has the smaller id", adopted)
	}
	// 400 ms ahead (c's 300, a's 100), b's one handler: c's no longer counts.
	if h := a.predict(t).Hold; h != held(400*time.Millisecond) {
		t.Errorf("hold after c expired = %v, want %v", h, held(400*time.Millisecond))
	}
	b.send(clk.Now(), a, b)
	a.send(clk.Now(), a, b)
	// b completes c's three messages: 500 - 300 = 200 ms left (a's two).
	for _, pr := range prs {
		b.complete(t, pr)
	}
	b.send(clk.Now(), a, b)
	a.send(clk.Now(), a, b)
	for _, m := range []*member{a, b} {
		if h := m.predict(t).Hold; h != held(200*time.Millisecond) {
			t.Errorf("%s: hold after c's messages completed = %v, want %v", m.id, h, held(200*time.Millisecond))
		}
	}
	// A report from c (it was only cut off) ends the adoption.
	c.send(clk.Now(), a, b)
	if _, adopted := a.fleet.Peers(); adopted != 0 {
		t.Errorf("a still adopts c after c reported again")
	}
}

// Two sidecars that both adopted a dead peer (each thought itself the
// smallest live id) settle on the smaller one once they hear each other.
func TestFleetDoubleAdoption(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	a, b := NewFleet("a", time.Second), NewFleet("b", time.Second)
	dead := backlogReport{Seq: 1, Queues: map[string]queueTotals{"jobs": {Net: int64(time.Second)}}}
	a.Update("x", now, dead)
	b.Update("x", now, dead)
	a.Expire(now.Add(2 * time.Second))
	b.Expire(now.Add(2 * time.Second))
	if _, n := b.Peers(); n != 1 {
		t.Fatalf("b adopted %d, want 1 (it heard of no smaller live id)", n)
	}
	b.Update("a", now.Add(2*time.Second), a.Report(1, nil))
	a.Update("b", now.Add(2*time.Second), b.Report(1, nil))
	if _, n := b.Peers(); n != 0 {
		t.Errorf("b still adopts after a reported the same adoption")
	}
	if _, n := a.Peers(); n != 1 {
		t.Errorf("a dropped its adoption")
	}
	if w, _ := b.Backlog("jobs"); w != time.Second {
		t.Errorf("b counts %v of the dead peer's work, want it once (1s, through a's report)", w)
	}
}

// A fleet whose sidecars restart for ever (each start a new id) keeps its
// reports small: an adoption is folded into the adopter's inherited nets
// once old, so the list of adopted ids stays at the ids that died lately,
// far under the MaxFleetPeers past which peers would ignore the report,
// and every dead sidecar's work still counts once, at every sidecar.
func TestFleetFoldsOldAdoptions(t *testing.T) {
	t.Parallel()
	const expiry, step, restarts = time.Second, 250 * time.Millisecond, 3 * MaxFleetPeers
	a, b := NewFleet("a", expiry), NewFleet("b", expiry)
	now := time.Unix(1000, 0)
	var seq uint64
	var want time.Duration
	most := 0
	for i := range restarts {
		now = now.Add(step)
		// Sidecar i starts, reports its net once and dies.
		id := fmt.Sprintf("p%05d", i)
		net := time.Duration(1+i%7) * time.Millisecond
		want += net
		r := backlogReport{Seq: 1, Queues: map[string]queueTotals{"jobs": {Net: int64(net), Consumers: 1}}}
		a.Update(id, now, r)
		b.Update(id, now, r)
		a.Expire(now)
		b.Expire(now)
		seq++
		ra, rb := a.Report(seq, nil), b.Report(seq, nil)
		b.Update("a", now, ra)
		a.Update("b", now, rb)
		most = max(most, len(ra.Adopted))
	}
	// Every sidecar has died by the expiry after the last start, and its
	// adoption is folded FoldAfter expiries later.
	for range int((FoldAfter + 4) * expiry / step) {
		now = now.Add(step)
		a.Expire(now)
		b.Expire(now)
		seq++
		b.Update("a", now, a.Report(seq, nil))
		a.Update("b", now, b.Report(seq, nil))
	}
	if limit := int((FoldAfter*expiry+2*expiry)/step) + 1; most > limit {
		t.Errorf("a's report listed up to %d adopted ids, want at most %d (those of the last %v)", most, limit, FoldAfter*expiry)
	}
	if live, adopted := a.Peers(); live != 1 || adopted != 0 {
		t.Errorf("a knows %d live peers and %d adoptions, want b and none left unfolded", live, adopted)
	}
	for name, f := range map[string]*Fleet{"a": a, "b": b} {
		if got, consumers := f.Backlog("jobs"); got != want || consumers != 0 {
			t.Errorf("%s counts %v of the dead sidecars' work and %d handlers, want %v and none", name, got, consumers, want)
		}
	}
	if _, n := b.Peers(); n != 0 {
		t.Errorf("b adopted %d, want none: a has the smaller id", n)
	}
}

// Stale and foreign reports are ignored.
func TestFleetIgnoresOldReports(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	f := NewFleet("self", time.Second)
	f.Update("p", now, backlogReport{Seq: 2, Queues: map[string]queueTotals{"jobs": {Net: 5, Consumers: 2}}})
	f.Update("p", now, backlogReport{Seq: 1, Queues: map[string]queueTotals{"jobs": {Net: 9, Consumers: 9}}})
	f.Update("self", now, backlogReport{Seq: 3, Queues: map[string]queueTotals{"jobs": {Net: 9, Consumers: 9}}})
	if w, c := f.Backlog("jobs"); w != 5 || c != 2 {
		t.Errorf("backlog %v, %d; want the newest report of p only (5ns, 2)", w, c)
	}
}

// Two holding sidecars on the real RabbitMQ exchange their totals: the
// handlers attached through one make the other hold, and a stopped
// sidecar's handlers stop counting after the expiry.
func TestFleetThroughRabbitMQ(t *testing.T) {
	t.Parallel()
	requireRabbit(t)
	ex := testExchange(t)
	cfg := Config{Hold: true, Share: ShareConfig{Exchange: ex, ReportEvery: 20 * time.Millisecond, BacklogExpiry: 200 * time.Millisecond}}
	pubSide, workSide := startWith(t, cfg), startWith(t, cfg)
	ctx := context.Background()
	rp, rw := dialRemote(t, pubSide), dialRemote(t, workSide)
	if err := rp.Observe(ctx, rabbitmq.Key{Queue: "other"}, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	rw.Attach(ctx, "jobs", 2)
	eventually(t, 10*time.Second, "the publishing sidecar to hear of the other's handlers", func() bool {
		_, c := pubSide.Fleet().Backlog("jobs")
		return c == 2
	})
	k := rabbitmq.Key{Queue: "jobs", JobType: "new"}
	if _, err := rp.Predict(ctx, k); err != nil {
		t.Fatal(err)
	}
	if pr, _ := rp.Predict(ctx, k); pr.Hold <= 0 {
		t.Errorf("second long message through the publishing sidecar: hold %v, want one (the other sidecar's handlers drain the queue)", pr.Hold)
	}
	_ = workSide.Close()
	eventually(t, 10*time.Second, "the stopped sidecar's handlers to expire", func() bool {
		_, c := pubSide.Fleet().Backlog("jobs")
		return c == 0
	})
	if pr, _ := rp.Predict(ctx, k); pr.Hold != 0 {
		t.Errorf("hold with no live handlers = %v, want 0", pr.Hold)
	}
	if st := pubSide.Stats().Share; st.ReportsSent == 0 || st.ReportsRead == 0 {
		t.Errorf("share stats %+v, want reports both ways", st)
	}
}

// Peer ids and report sizes come from messages anything publishing to the
// exchange can send: a fleet keeps at most MaxFleetPeers peers and ignores
// reports no sidecar could send, and what it keeps still counts.
func TestFleetBoundsPeers(t *testing.T) {
	t.Parallel()
	f := NewFleet("self", time.Minute)
	now := time.Unix(1000, 0)
	one := backlogReport{Seq: 1, Queues: map[string]queueTotals{"jobs": {Net: int64(time.Second), Consumers: 1}}}
	for i := range 3 * MaxFleetPeers {
		f.Update(fmt.Sprint("peer-", i), now, one)
	}
	if live, _ := f.Peers(); live != MaxFleetPeers {
		t.Fatalf("%d peers kept, want %d", live, MaxFleetPeers)
	}
	big := backlogReport{Seq: 2, Queues: map[string]queueTotals{}}
	for i := range rabbitmq.DefaultMaxQueues + 1 {
		big.Queues[fmt.Sprint("q", i)] = queueTotals{Net: 1, Consumers: 1}
	}
	f.Update("peer-0", now, big)
	// Nor can a queue name longer than a client may give.
	long := backlogReport{Seq: 3, Queues: map[string]queueTotals{"jobs": {Net: 1, Consumers: 1}, strings.Repeat("ü", 1<<19): {Net: 1, Consumers: 1}}}
	f.Update("peer-1", now, long)
	if net, c := f.Backlog("jobs"); net != time.Duration(MaxFleetPeers)*time.Second || c != MaxFleetPeers {
		t.Errorf("fleet backlog of jobs: %v over %d handlers, want %v over %d (the oversized report ignored)",
			net, c, time.Duration(MaxFleetPeers)*time.Second, MaxFleetPeers)
	}
}

// A sidecar that adopted a peer with as many queues as a report may name,
// besides queues of its own, still reports no more than that: its own
// queues, then the adopted nets largest first, so its peers keep
// accepting its reports (they ignore a larger one and would declare it
// dead), while its own view keeps every net.
func TestFleetReportFitsPeers(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	a, b, c := NewFleet("a", time.Minute), NewFleet("b", time.Minute), NewFleet("c", time.Minute)
	full := backlogReport{Seq: 1, Queues: map[string]queueTotals{}}
	for i := range rabbitmq.DefaultMaxQueues {
		full.Queues[fmt.Sprintf("lot-%d-ü", i)] = queueTotals{Net: int64(i+1) * int64(time.Millisecond), Consumers: 1}
	}
	a.Update("z", now, full)
	now = now.Add(2 * time.Minute)
	if dead := a.Expire(now); len(dead) != 1 {
		t.Fatalf("a declared %v dead, want z", dead)
	}
	own := map[string]rabbitmq.QueueTotals{}
	for i := range 100 {
		own[fmt.Sprint("own-", i)] = rabbitmq.QueueTotals{Net: time.Second, Consumers: 2}
	}
	own["lot-0-ü"] = rabbitmq.QueueTotals{Net: time.Second, Consumers: 1} // named by both
	r := a.Report(2, own)
	if len(r.Queues) != rabbitmq.DefaultMaxQueues {
		t.Fatalf("the report names %d queues, want %d", len(r.Queues), rabbitmq.DefaultMaxQueues)
	}
	for q := range own {
		if _, ok := r.Queues[q]; !ok {
			t.Fatalf("the report leaves out a queue of its own, %s", q)
		}
	}
	if got := r.Queues["lot-0-ü"].Net; got != int64(time.Second+time.Millisecond) {
		t.Errorf("a queue named by both carries %v, want own plus adopted", time.Duration(got))
	}
	// Left out: the 100 smallest adopted nets of the queues only z named.
	for i := 1; i < rabbitmq.DefaultMaxQueues; i++ {
		_, ok := r.Queues[fmt.Sprintf("lot-%d-ü", i)]
		if want := i > 100; ok != want {
			t.Fatalf("queue lot-%d in the report: %v, want %v", i, ok, want)
		}
	}
	for _, peer := range []*Fleet{b, c} {
		peer.Update("a", now, r)
		if live, _ := peer.Peers(); live != 1 {
			t.Fatalf("a peer ignored the report")
		}
	}
	if net, _ := b.Backlog("lot-4095-ü"); net != 4096*time.Millisecond {
		t.Errorf("a peer sees %v of the largest adopted net, want 4.096s", net)
	}
	if net, _ := a.Backlog("lot-1-ü"); net != 2*time.Millisecond {
		t.Errorf("a's own view of a net it left out of its report: %v, want 2ms", net)
	}
}

// Sidecars cut off together leave their nets to the smallest survivor,
// whether their reports expire in the same tick or a tick apart: a dead
// peer left to a smaller one that is dying too must not be lost, or the
// survivors' completions of its messages drive the backlog below the
// truth for good.
func TestFleetAdoptsPeersThatDieTogether(t *testing.T) {
	t.Parallel()
	const queue = "jöbs-\ufffd" // invalid UTF-8 as a decoded report carries it
	for _, gap := range []time.Duration{0, DefaultReportEvery / 2} {
		start := time.Unix(1000, 0)
		f := NewFleet("c", DefaultBacklogExpiry)
		report := func(net time.Duration) backlogReport {
			return backlogReport{Seq: 1, Queues: map[string]queueTotals{queue: {Net: int64(net), Consumers: 1}}}
		}
		f.Update("a", start, report(time.Second))
		f.Update("b", start.Add(gap), report(2*time.Second))
		var seq uint64
		for now := start; now.Sub(start) <= DefaultBacklogExpiry+2*DefaultReportEvery; now = now.Add(DefaultReportEvery) {
			seq++
			f.Update("d", now, backlogReport{Seq: seq}) // a larger id, alive
			f.Expire(now)
		}
		if live, adopted := f.Peers(); live != 1 || adopted != 2 {
			t.Errorf("gap %v: %d live peers and %d adopted, want d live and a and b adopted", gap, live, adopted)
		}
		if net, c := f.Backlog(queue); net != 3*time.Second || c != 0 {
			t.Errorf("gap %v: backlog %v over %d handlers, want both dead peers' 3s over none", gap, net, c)
		}
	}
}

// A dead peer left to a live sidecar with a smaller id is that one's once
// it reports the adoption: this sidecar does not adopt it later too.
func TestFleetLeavesAdoptionToSmallerPeer(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	a, c := NewFleet("a", DefaultBacklogExpiry), NewFleet("c", DefaultBacklogExpiry)
	dead := backlogReport{Seq: 1, Queues: map[string]queueTotals{"jobs": {Net: int64(time.Second)}}}
	a.Update("x", now, dead)
	c.Update("x", now, dead)
	later := now.Add(DefaultBacklogExpiry + time.Millisecond)
	c.Update("a", now, a.Report(1, nil))
	a.Expire(later)
	c.Expire(later)
	c.Update("a", later, a.Report(2, nil))
	// a dies too: c adopts a's nets, which hold x's, and not x's again.
	c.Expire(later.Add(DefaultBacklogExpiry + time.Millisecond))
	if w, _ := c.Backlog("jobs"); w != time.Second {
		t.Errorf("c counts %v of the dead peers' work, want x's 1s once (through a's last report)", w)
	}
}

// A dead peer left to a smaller sidecar that joined after the dead one's
// last report (so never heard of it) is adopted by one that did once an
// expiry passes with no adoption reported: otherwise nobody ever adopts
// it, and the survivors' completions of its messages drive the backlog
// below the truth for good. TestFleetMatchesModel found it.
func TestFleetAdoptsWhatTheSmallestNeverKnew(t *testing.T) {
	t.Parallel()
	start := time.Unix(1000, 0)
	c, a := NewFleet("c", DefaultBacklogExpiry), NewFleet("a", DefaultBacklogExpiry)
	c.Update("x", start, backlogReport{Seq: 1, Queues: map[string]queueTotals{"jobs": {Net: int64(time.Second)}}})
	var seq uint64
	var adoptedAt time.Duration
	for now := start; now.Sub(start) <= 3*DefaultBacklogExpiry; now = now.Add(DefaultReportEvery) {
		seq++
		a.Expire(now)
		c.Update("a", now, a.Report(seq, nil)) // a joined after x's last word
		c.Expire(now)
		a.Update("c", now, c.Report(seq, nil))
		if _, adopted := c.Peers(); adopted == 1 && adoptedAt == 0 {
			adoptedAt = now.Sub(start)
		}
	}
	if w, _ := c.Backlog("jobs"); w != time.Second {
		t.Fatalf("c counts %v of x's work, want its 1s: adopted by c since a never knew x", w)
	}
	// Found dead one expiry after its last report, adopted one more
	// expiry later, each at c's next tick.
	if lo, hi := 2*DefaultBacklogExpiry, 2*DefaultBacklogExpiry+2*DefaultReportEvery; adoptedAt <= lo || adoptedAt > hi {
		t.Errorf("c adopted x %v after its last report, want after one expiry of waiting for a (in (%v, %v])", adoptedAt, lo, hi)
	}
	if w, _ := a.Backlog("jobs"); w != time.Second {
		t.Errorf("a counts %v of x's work through c's reports, want 1s", w)
	}
}

// cutter forwards TCP connections to RabbitMQ until cut, when it closes
// every one and refuses new ones: a lost connection the test controls.
type cutter struct {
	url   string // RabbitMQ's URL through the cutter
	lis   net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newCutter(t *testing.T) *cutter {
	t.Helper()
	u, err := amqp.ParseURI(amqpURL())
	if err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort(u.Host, strconv.Itoa(u.Port))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.Host, u.Port = "127.0.0.1", lis.Addr().(*net.TCPAddr).Port
	x := &cutter{url: u.String(), lis: lis}
	x.wg.Go(func() {
		for {
			down, err := lis.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = down.Close()
				continue
			}
			x.mu.Lock()
			x.conns = append(x.conns, down, up)
			x.mu.Unlock()
			x.wg.Go(func() { _, _ = io.Copy(up, down); _ = up.Close() })
			x.wg.Go(func() { _, _ = io.Copy(down, up); _ = down.Close() })
		}
	})
	t.Cleanup(func() { x.cut(); x.wg.Wait() })
	return x
}

func (x *cutter) cut() {
	_ = x.lis.Close()
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, c := range x.conns {
		_ = c.Close()
	}
	x.conns = nil
}

// A holding sidecar cut off from RabbitMQ hears from no peer: after the
// expiry it stops counting their handlers (docs/sidecar.md, failure modes
// of the fleet), instead of holding by their last reports for as long as
// it stays cut off while its own net grows.
func TestFleetExpiresPeersWhileDisconnected(t *testing.T) {
	t.Parallel()
	requireRabbit(t)
	clk := clock.NewFake(time.Unix(1000, 0))
	x := newCutter(t)
	s, err := Start(Config{Listen: "127.0.0.1:0", HTTP: "-", AMQPURL: x.url, Hold: true, Clock: clk,
		Share: ShareConfig{Exchange: testExchange(t)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	select {
	case <-s.Connected():
	case <-time.After(5 * time.Second):
		t.Fatal("sidecar did not connect to RabbitMQ")
	}
	const queue = "jöbs"
	s.Fleet().Update("peer-ü", clk.Now(), backlogReport{Seq: 1, Queues: map[string]queueTotals{queue: {Net: int64(time.Second), Consumers: 2}}})
	if _, c := s.Fleet().Backlog(queue); c != 2 {
		t.Fatalf("%d handlers of the peer counted, want 2", c)
	}
	x.cut()
	eventually(t, 10*time.Second, "the sidecar to lose RabbitMQ", func() bool { return !s.Stats().Connected })
	for range 2 * int(DefaultBacklogExpiry/DefaultReportEvery) {
		clk.Advance(DefaultReportEvery)
	}
	if _, c := s.Fleet().Backlog(queue); c != 0 {
		t.Errorf("%d handlers of a peer unheard of for %v still counted, want none", c, 2*DefaultBacklogExpiry)
	}
	if live, _ := s.Fleet().Peers(); live != 0 {
		t.Errorf("%d peers live while cut off, want none", live)
	}
}
