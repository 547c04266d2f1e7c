package experiment

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/harbinger-mq/harbinger/internal/workload"
)

// The regression tree stands in for "a much more complex model": a CART
// tree over (producer, job type, log2 size) fitted to log durations of the
// most recent completed jobs and refitted as more complete.
const (
	treeWindow     = 4096 // completed jobs the tree is fitted on
	treeRefitEvery = 512  // completions between refits
	treeMinFit     = 64   // completions before the first fit
	treeMaxDepth   = 10
	treeMinLeaf    = 8
)

// sample is one completed job as the tree sees it.
type sample struct {
	x   [3]float64 // producer id, job type id, log2 size (0 without a hint)
	y   float64    // log of the duration in ms: splits are chosen on it
	dur float64    // duration in ms: leaves predict its mean, the cost shortest-first wants
}

// categorical reports whether feature f is a category id.
func categorical(f int) bool { return f < 2 }

type node struct {
	leaf    bool
	value   float64 // leaf: mean duration, ms
	feature int
	thresh  float64          // numeric: x <= thresh goes left
	left    map[float64]bool // categorical: these ids go left, others right
	lo, hi  *node
}

func (n *node) predict(x [3]float64) float64 {
	for !n.leaf {
		var goLeft bool
		if categorical(n.feature) {
			goLeft = n.left[x[n.feature]]
		} else {
			goLeft = x[n.feature] <= n.thresh
		}
		if goLeft {
			n = n.lo
		} else {
			n = n.hi
		}
	}
	return n.value
}

// treeModel learns online: completed jobs go into a ring, and the tree is
// refitted on the ring every treeRefitEvery completions.
type treeModel struct {
	ids      map[string]float64
	ring     []sample
	pos      int
	sinceFit int
	root     *node
}

func newTreeModel() *treeModel { return &treeModel{ids: map[string]float64{}} }

func (m *treeModel) id(s string) float64 {
	v, ok := m.ids[s]
	if !ok {
		v = float64(len(m.ids))
		m.ids[s] = v
	}
	return v
}

func (m *treeModel) features(t *workload.JobType, size int64) [3]float64 {
	return [3]float64{m.id("p\x00" + t.Producer), m.id("t\x00" + t.Name), float64(bits.Len64(uint64(max(size, 0))))}
}

// predict returns the tree's cost in ms, or false before the first fit.
func (m *treeModel) predict(x [3]float64) (float64, bool) {
	if m.root == nil {
		return 0, false
	}
	return m.root.predict(x), true
}

func (m *treeModel) observe(x [3]float64, d time.Duration) {
	ms := float64(d) / float64(time.Millisecond)
	s := sample{x: x, y: math.Log(ms), dur: ms}
	if len(m.ring) < treeWindow {
		m.ring = append(m.ring, s)
	} else {
		m.ring[m.pos] = s
		m.pos = (m.pos + 1) % treeWindow
	}
	m.sinceFit++
	if (m.root == nil && len(m.ring) >= treeMinFit) || m.sinceFit >= treeRefitEvery {
		m.root = fit(slices.Clone(m.ring), 0)
		m.sinceFit = 0
	}
}

// fit grows a CART regression tree on s, splitting where the squared error
// of log durations drops most; categories are ordered by their mean target,
// which finds the best two-way grouping of a category in one scan.
func fit(s []sample, depth int) *node {
	var sumDur float64
	for _, v := range s {
		sumDur += v.dur
	}
	leaf := &node{leaf: true, value: sumDur / float64(len(s))}
	if depth >= treeMaxDepth || len(s) < 2*treeMinLeaf {
		return leaf
	}
	bestGain, bestF, bestCut := 0.0, -1, 0.0
	var bestOrder []float64
	total, totalSq := 0.0, 0.0
	for _, v := range s {
		total += v.y
		totalSq += v.y * v.y
	}
	n := float64(len(s))
	parentSSE := totalSq - total*total/n
	for f := range 3 {
		key := func(v sample) float64 { return v.x[f] }
		var order []float64 // categorical: ids by mean target
		if categorical(f) {
			sum, cnt := map[float64]float64{}, map[float64]float64{}
			for _, v := range s {
				sum[v.x[f]] += v.y
				cnt[v.x[f]]++
			}
			for id := range sum {
				order = append(order, id)
			}
			slices.SortFunc(order, func(a, b float64) int {
				return cmp.Or(cmp.Compare(sum[a]/cnt[a], sum[b]/cnt[b]), cmp.Compare(a, b))
			})
			rank := make(map[float64]float64, len(order))
			for i, id := range order {
				rank[id] = float64(i)
			}
			key = func(v sample) float64 { return rank[v.x[f]] }
		}
		slices.SortFunc(s, func(a, b sample) int { return cmp.Compare(key(a), key(b)) })
		ls, lsq := 0.0, 0.0
		for i := 0; i < len(s)-1; i++ {
			ls += s[i].y
			lsq += s[i].y * s[i].y
			k, next := key(s[i]), key(s[i+1])
			if k == next || i+1 < treeMinLeaf || len(s)-i-1 < treeMinLeaf {
				continue
			}
			nl, nr := float64(i+1), n-float64(i+1)
			sse := (lsq - ls*ls/nl) + ((totalSq - lsq) - (total-ls)*(total-ls)/nr)
			if gain := parentSSE - sse; gain > bestGain+1e-9 {
				bestGain, bestF, bestCut, bestOrder = gain, f, k, order
			}
		}
	}
	if bestF < 0 {
		return leaf
	}
	nd := &node{feature: bestF, thresh: bestCut}
	if categorical(bestF) {
		nd.left = map[float64]bool{}
		for i, id := range bestOrder {
			if float64(i) <= bestCut {
				nd.left[id] = true
			}
		}
	}
	var lo, hi []sample
	for _, v := range s {
		if (categorical(bestF) && nd.left[v.x[bestF]]) || (!categorical(bestF) && v.x[bestF] <= bestCut) {
			lo = append(lo, v)
		} else {
			hi = append(hi, v)
		}
	}
	nd.lo, nd.hi = fit(lo, depth+1), fit(hi, depth+1)
	return nd
}

// Estimate implements sim.Model: the tree's cost for the job, once fitted.
func (m *treeModel) Estimate(t *workload.JobType, j *workload.Job) (time.Duration, bool) {
	ms, ok := m.predict(m.features(t, j.Size))
	return time.Duration(ms * float64(time.Millisecond)), ok
}

// Observe implements sim.Model.
func (m *treeModel) Observe(t *workload.JobType, j *workload.Job, d time.Duration) {
	m.observe(m.features(t, j.Size), d)
}
