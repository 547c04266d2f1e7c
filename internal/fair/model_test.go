package fair

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/harbinger-mq/harbinger/internal/sched"
)

// model is the reference: the same rules as Fair, by scanning every group,
// lane and key on every call, with FIFO lanes (each lane a plain list in
// ID order). It keeps the state Fair's rules depend on (tags, counters,
// buckets, who had work when) in the plainest form.
type model struct {
	cfg     Config
	workers int
	items   map[uint64]mItem // waiting, by ID
	run     map[uint64]Keys
	gtag    map[string]float64 // groups present (Fair forgets a group only when forgetting is harmless)
	ltag    map[Keys]bool      // lanes present: dropped when nothing waits or runs in them
	vtime   float64
	tokens  map[ruleKey]*mBucket
	idleAt  map[string]int64      // when each group without waiting or running jobs last had some
	use     map[string][2]float64 // decayed running time and when, per group (as Fair.useAt)
	costAvg map[string]float64    // moving average predicted cost, per group that started a job
	now     int64
	// Which lanes and groups were eligible after the last call: one that
	// is now (a bucket refilled) rejoins as Fair's heaps have it.
	lastLs map[Keys]bool
	lastGs map[string]bool
}

type mItem struct {
	id   uint64
	cost time.Duration
	keys Keys
}

type mBucket struct {
	tokens float64
	at     int64
	until  int64 // blocked until
}

func newModel(cfg Config) *model {
	return &model{
		cfg: cfg.WithDefaults(), items: map[uint64]mItem{}, run: map[uint64]Keys{},
		gtag: map[string]float64{}, ltag: map[Keys]bool{},
		tokens: map[ruleKey]*mBucket{}, idleAt: map[string]int64{}, use: map[string][2]float64{}, costAvg: map[string]float64{},
	}
}

func (m *model) laneKey(k Keys) Keys {
	used := map[string]bool{m.cfg.GroupBy: true}
	for _, l := range m.cfg.Limits {
		used[l.Field] = true
	}
	for _, r := range m.cfg.Rates {
		used[r.Field] = true
	}
	if !used[Producer] {
		k.Producer = ""
	}
	if !used[JobType] {
		k.JobType = ""
	}
	if !used[Tenant] {
		k.Tenant = ""
	}
	return k
}

func (m *model) group(k Keys) string {
	if m.cfg.GroupBy == "" {
		return ""
	}
	return k.get(m.cfg.GroupBy)
}

func (m *model) weight(g string) float64 {
	if w, ok := m.cfg.Weights[g]; ok {
		return float64(w)
	}
	return 1
}

func (m *model) ensureLane(lk Keys) {
	g := m.group(lk)
	if _, ok := m.gtag[g]; !ok {
		m.gtag[g] = m.vtime - m.cfg.Credit.Seconds()
	}
	m.ltag[lk] = true
}

// op runs change at now the way Fair sees a call: what became eligible
// while time passed rejoins, then what the change makes eligible.
func (m *model) op(now int64, change func()) {
	m.now = now
	m.rejoin(m.lastLs, m.lastGs, now)
	ls, gs := m.eligibility(now)
	active, running := map[string]bool{}, map[string]int{}
	for g := range m.gtag {
		active[g], running[g] = m.active(g), m.running(g)
	}
	change()
	for g := range m.gtag {
		if active[g] && !m.active(g) {
			m.idleAt[g] = now
		}
		if r := m.running(g); r != running[g] {
			u := m.use[g]
			tau := m.cfg.ReserveWindow.Seconds()
			d := math.Exp(-(float64(now) - u[1]) / 1e9 / tau)
			if float64(now) <= u[1] {
				d = 1
			}
			m.use[g] = [2]float64{u[0]*d + float64(running[g])*tau*(1-d), float64(now)}
		}
	}
	m.rejoin(ls, gs, now)
	m.forget()
	m.lastLs, m.lastGs = m.eligibility(now)
}

func (m *model) push(id uint64, cost time.Duration, k Keys, now int64) {
	m.op(now, func() {
		lk := m.laneKey(k)
		m.ensureLane(lk)
		m.items[id] = mItem{id: id, cost: cost, keys: lk}
	})
}

// active reports whether g has waiting or running jobs.
func (m *model) active(g string) bool {
	if m.running(g) > 0 {
		return true
	}
	for _, it := range m.items {
		if m.group(it.keys) == g {
			return true
		}
	}
	return false
}

// inWindow reports whether g is active or went idle within the window.
func (m *model) inWindow(g string) bool {
	if m.active(g) {
		return true
	}
	at, ok := m.idleAt[g]
	return ok && m.now-at <= int64(m.cfg.ReserveWindow)
}

// blocked reports whether lane key lk has a key at its limit or out of
// tokens at now.
func (m *model) blocked(lk Keys, now int64) bool {
	for i, l := range m.cfg.Limits {
		v := lk.get(l.Field)
		if l.Value != "" && l.Value != v {
			continue
		}
		n := 0
		for _, rk := range m.run {
			if rk.get(l.Field) == v {
				n++
			}
		}
		_ = i
		if n >= l.Max {
			return true
		}
	}
	for i, r := range m.cfg.Rates {
		v := lk.get(r.Field)
		if r.Value != "" && r.Value != v {
			continue
		}
		if b := m.tokens[ruleKey{rate: true, rule: i, value: v}]; b != nil && now < b.until {
			return true
		}
	}
	return false
}

func (m *model) laneWaiting(lk Keys) []mItem {
	var out []mItem
	for _, it := range m.items {
		if it.keys == lk {
			out = append(out, it)
		}
	}
	slices.SortFunc(out, func(a, b mItem) int { return cmp.Compare(a.id, b.id) })
	return out
}

func (m *model) laneEligible(lk Keys, now int64) bool {
	if _, ok := m.ltag[lk]; !ok {
		return false
	}
	return len(m.laneWaiting(lk)) > 0 && !m.blocked(lk, now)
}

func (m *model) groupEligible(g string, now int64) bool {
	for lk := range m.ltag {
		if m.group(lk) == g && m.laneEligible(lk, now) {
			return true
		}
	}
	return false
}

// eligibility snapshots which lanes and groups are eligible, so that a
// change can be seen and a lane or group that becomes eligible takes
// max(its tag, virtual time) as Fair's heaps do.
func (m *model) eligibility(now int64) (map[Keys]bool, map[string]bool) {
	ls, gs := map[Keys]bool{}, map[string]bool{}
	for lk := range m.ltag {
		if m.laneEligible(lk, now) {
			ls[lk] = true
			gs[m.group(lk)] = true
		}
	}
	return ls, gs
}

func (m *model) rejoin(ls map[Keys]bool, gs map[string]bool, now int64) {
	for g := range m.gtag {
		if !gs[g] && m.groupEligible(g, now) {
			m.gtag[g] = max(m.gtag[g], m.vtime-m.cfg.Credit.Seconds())
		}
	}
}

func (m *model) running(g string) int {
	n := 0
	for _, k := range m.run {
		if m.group(k) == g {
			n++
		}
	}
	return n
}

func (m *model) activeWeight() float64 {
	act := map[string]bool{}
	for _, it := range m.items {
		act[m.group(it.keys)] = true
	}
	for _, k := range m.run {
		act[m.group(k)] = true
	}
	w := 0.0
	for g := range act {
		w += m.weight(g)
	}
	return w
}

// head is the lane an eligible group g would start from and that lane's
// first item: FIFO lanes, so the lane whose first item came first.
func (m *model) head(g string, now int64) (Keys, mItem) {
	var lanes []Keys
	for lk := range m.ltag {
		if m.group(lk) == g && m.laneEligible(lk, now) {
			lanes = append(lanes, lk)
		}
	}
	slices.SortFunc(lanes, func(a, b Keys) int {
		return cmp.Compare(m.laneWaiting(a)[0].id, m.laneWaiting(b)[0].id)
	})
	return lanes[0], m.laneWaiting(lanes[0])[0]
}

func (m *model) pop(now int64) (id uint64, ok bool) {
	m.op(now, func() { id, ok = m.choose(now) })
	return id, ok
}

func (m *model) choose(now int64) (uint64, bool) {
	var cands []string
	for g := range m.gtag {
		if m.groupEligible(g, now) {
			cands = append(cands, g)
		}
	}
	// The smallest finish tag: the start tag plus the next job's cost over
	// the weight.
	finish := func(g string) float64 {
		_, it := m.head(g, now)
		return m.gtag[g] + float64(max(it.cost, minCost))/1e9/m.weight(g)
	}
	slices.SortFunc(cands, func(a, b string) int {
		return cmp.Or(cmp.Compare(finish(a), finish(b)), cmp.Compare(a, b))
	})
	reserve := !m.cfg.NoReserve && m.cfg.GroupBy != "" && m.workers > 0 && m.workers-len(m.run) <= m.cfg.Reserve
	var g string
	found := false
	for _, c := range cands {
		if reserve && m.pastShare(c) && m.long(c, now) && m.othersActive(c, now) {
			continue
		}
		g, found = c, true
		break
	}
	if !found {
		return 0, false
	}
	lk, it := m.head(g, now)
	delete(m.items, it.id)
	c := float64(max(it.cost, minCost)) / 1e9
	m.vtime = max(m.vtime, m.gtag[g])
	m.gtag[g] += c / m.weight(g)
	m.run[it.id] = lk
	cs := float64(max(it.cost, minCost)) / 1e9
	if a, ok := m.costAvg[g]; ok {
		m.costAvg[g] = a + 0.1*(cs-a)
	} else {
		m.costAvg[g] = cs
	}
	for i, r := range m.cfg.Rates {
		v := lk.get(r.Field)
		if r.Value != "" && r.Value != v {
			continue
		}
		id := ruleKey{rate: true, rule: i, value: v}
		b := m.tokens[id]
		if b == nil {
			b = &mBucket{tokens: float64(r.Burst), at: now}
			m.tokens[id] = b
		}
		per := r.PerSecond / 1e9
		if now > b.at {
			b.tokens = min(float64(r.Burst), b.tokens+float64(now-b.at)*per)
			b.at = now
		}
		b.tokens--
		if b.tokens < 1 {
			b.until = b.at + int64(math.Ceil((1-b.tokens)/per))
		}
	}
	return it.id, true
}

func (m *model) pastShare(g string) bool {
	if m.running(g) == 0 {
		return false
	}
	w := 0.0
	for o := range m.gtag {
		if m.inWindow(o) {
			w += m.weight(o)
		}
	}
	u := m.use[g]
	tau := m.cfg.ReserveWindow.Seconds()
	d := math.Exp(-(float64(m.now) - u[1]) / 1e9 / tau)
	if float64(m.now) <= u[1] {
		d = 1
	}
	use := (u[0]*d + float64(m.running(g))*tau*(1-d)) / tau
	return use >= float64(m.workers)*m.weight(g)/max(w, m.weight(g))
}

// long reports whether g's next job is predicted at least ReserveAbove
// times the mean of the average costs of the other groups in the window.
func (m *model) long(g string, now int64) bool {
	sum, n := 0.0, 0
	for o := range m.gtag {
		if o != g && m.inWindow(o) {
			sum += m.costAvg[o]
			n++
		}
	}
	if n == 0 {
		return true
	}
	_, head := m.head(g, now)
	return float64(head.cost)/1e9 >= m.cfg.ReserveAbove*sum/float64(n)
}

func (m *model) othersActive(g string, now int64) bool {
	for o := range m.gtag {
		if o != g && m.inWindow(o) {
			return true
		}
	}
	return false
}

func (m *model) done(id uint64, now int64) {
	m.op(now, func() { delete(m.run, id) })
}

func (m *model) remove(id uint64, now int64) {
	m.op(now, func() { delete(m.items, id) })
}

// forget drops the tags of lanes with nothing waiting or running, as Fair
// lets such a lane go.
func (m *model) forget() {
	for lk := range m.ltag {
		if len(m.laneWaiting(lk)) > 0 {
			continue
		}
		busy := false
		for _, rk := range m.run {
			if rk == lk {
				busy = true
			}
		}
		if !busy {
			delete(m.ltag, lk)
		}
	}
}

// keysItem is a test item with its keys.
type keysItem struct {
	it   sched.Item
	keys Keys
}

func itemKeys(it *sched.Item) Keys {
	return (*keysItem)(unsafe.Pointer(it)).keys
}

var fifo = sched.Config{Levels: 1, Discipline: sched.Strict}

func randomConfig(r *rand.Rand) Config {
	var c Config
	fields := Fields
	if r.IntN(4) > 0 {
		c.GroupBy = fields[r.IntN(3)]
		if r.IntN(2) == 0 {
			c.Weights = map[string]int{"a": 1 + r.IntN(4), "ü": 1 + r.IntN(4)}
		}
	}
	for i := range r.IntN(3) {
		l := Limit{Field: fields[r.IntN(3)], Max: 1 + r.IntN(3)}
		if r.IntN(2) == 0 {
			l.Value = []string{"a", "b", "ü"}[i]
		}
		c.Limits = append(c.Limits, l)
	}
	for i := range r.IntN(2) {
		c.Rates = append(c.Rates, Rate{Field: fields[r.IntN(3)], Value: []string{"", "a"}[i], PerSecond: float64(1 + r.IntN(20)), Burst: 1 + r.IntN(3)})
	}
	if c.GroupBy != "" && r.IntN(3) == 0 {
		c.NoReserve = true
	}
	if c.Validate() != nil {
		return Config{GroupBy: Producer}
	}
	return c
}

// TestFairMatchesModel drives Fair and the reference model with the same
// random pushes, pops, ends and removals at random times, and checks that
// they start the same jobs in the same order, and that no limit is ever
// exceeded.
func TestFairMatchesModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 45))
			cfg := randomConfig(r)
			f, err := New(cfg, fifo, itemKeys)
			if err != nil {
				t.Fatal(err)
			}
			m := newModel(cfg)
			if r.IntN(2) == 0 {
				f.SetWorkers(2+r.IntN(4), epoch)
				m.workers = f.workers
			}
			values := []string{"a", "b", "ü", "\xff\xfe", ""}
			all := map[uint64]*keysItem{}
			var running []uint64
			now := int64(0)
			var id uint64
			for step := range 400 {
				now += int64(r.IntN(300)) * int64(time.Millisecond)
				at := epoch.Add(time.Duration(now))
				switch op := r.IntN(10); {
				case op < 4:
					id++
					ki := &keysItem{keys: Keys{Producer: values[r.IntN(5)], JobType: values[r.IntN(3)], Tenant: values[r.IntN(4)]}}
					ki.it.ID = id
					ki.it.Cost = time.Duration(r.IntN(50))*time.Millisecond + time.Duration(r.IntN(1000))
					if r.IntN(4) == 0 {
						ki.it.Cost *= 10 // some long jobs, for the reservation
					}
					all[id] = ki
					if err := f.Push(&ki.it, at); err != nil {
						t.Fatal(err)
					}
					m.push(id, ki.it.Cost, ki.keys, now)
				case op < 7:
					f.Wake(at)
					got := f.Pop(at)
					want, ok := m.pop(now)
					switch {
					case got == nil && ok:
						t.Fatalf("step %d: Fair started nothing, the model %d (cfg %+v)", step, want, cfg)
					case got != nil && !ok:
						t.Fatalf("step %d: Fair started %d, the model nothing (cfg %+v)", step, got.ID, cfg)
					case got != nil && got.ID != want:
						for k, l := range f.lanes {
							t.Logf("lane %q: waiting %d blocked %d idx %d head %d level %d", k, l.waiting, l.blocked, l.idx, l.head, l.level)
							l.s.Each(func(it *sched.Item) { t.Logf("   %d", it.ID) })
						}
						t.Fatalf("step %d: Fair started %d, the model %d (cfg %+v)", step, got.ID, want, cfg)
					}
					if got != nil {
						running = append(running, got.ID)
					}
				case op < 9 && len(running) > 0:
					i := r.IntN(len(running))
					done := running[i]
					running = slices.Delete(running, i, i+1)
					f.Done(&all[done].it, at)
					m.done(done, now)
				default:
					if id > 0 {
						rm := 1 + uint64(r.IntN(int(id)))
						f.Wake(at) // Remove takes the time of the latest call
						f.Remove(&all[rm].it)
						m.remove(rm, now)
					}
				}
				checkLimits(t, cfg, f, all, running)
				if err := f.Check(); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				if f.Len() != len(m.items) || f.Running() != len(m.run) {
					t.Fatalf("step %d: Fair has %d waiting, %d running; the model %d, %d", step, f.Len(), f.Running(), len(m.items), len(m.run))
				}
			}
		})
	}
}

// checkLimits counts the running jobs of every limit key the plain way.
func checkLimits(t *testing.T, cfg Config, f *Fair, all map[uint64]*keysItem, running []uint64) {
	t.Helper()
	for _, l := range cfg.Limits {
		n := map[string]int{}
		for _, id := range running {
			v := all[id].keys.get(l.Field)
			if l.Value == "" || l.Value == v {
				n[v]++
			}
		}
		for v, c := range n {
			if c > l.Max {
				t.Fatalf("%s %q runs %d jobs, limit %d", l.Field, v, c, l.Max)
			}
		}
	}
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
