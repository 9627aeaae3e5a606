package engine

import (
	"slices"
	"sort"
)

// stepCost models the seconds of one step (forward, sampling and
// verification) of T tokens from measured steps, for the per-step draft
// budget.
//
// It is a product: the cost of a one-token step (the median of its recent
// timings) times the ratio of a T-token step to it (per size bucket, the
// median of recent ratios, interpolated between buckets). Earlier the table
// held each bucket's own EWMA of seconds, lifted to a monotone envelope.
// On a shared machine timings have spikes of 3-10x, and load changes the
// absolute cost of every size together: a bucket timed in a spike or under
// a passing load kept that price for dozens of steps, the envelope carried
// it to every larger size, and the budget, finding those sizes too dear,
// stopped granting them, so they were never timed again. Seen in bench
// workload's code-edit trace (2 cores shared, before this change): a
// 2-token step priced at 1.84 ms and a 9-token one at 5.6 ms (timed in a run
// of the same trace: 0.66 and 1.68 ms), and an exactly matching prediction
// granted no draft node for 35 steps in a row. A ratio is what the budget
// compares, it moves little with load, and medians ignore spikes; the
// one-token cost that scales it is timed in every plain step.
type stepCost struct {
	base   costWindow          // seconds of a one-token step
	ratios map[int]*costWindow // bucket -> seconds / base at the time, for T > 1
	// keys (sorted) and ys (their ratios, monotone), rebuilt by observe;
	// keys[0] = 1 with ratio 1.
	keys []int
	ys   []float64
	// of, when set, makes this the curve of another class of steps (steps
	// that verify trees, steps that run draft heads; see stepClasses),
	// priced relative to of's one-token step: its timings of every size,
	// one token included, are ratios to that base, it has no anchor at
	// (1, 1), and while it has no timings at all it prices as of does.
	of *stepCost
}

// root is the plain curve whose one-token step scales c.
func (c *stepCost) root() *stepCost {
	for c.of != nil {
		c = c.of
	}
	return c
}

// costBucket maps T to its bucket: exact up to 16, then powers of two.
func costBucket(T int) int {
	if T <= 16 {
		return T
	}
	b := 16
	for b < T {
		b *= 2
	}
	return b
}

// observe records a step of T tokens that took secs. Steps before the
// first one-token step are not recorded (nothing to scale them by; the
// engine calibrates before its first speculative step).
func (c *stepCost) observe(T int, secs float64) { c.observeN(T, secs, 1) }

// observeCalibrated records a calibration timing (best of several forwards
// on a scratch sequence): it counts as denseAt timings, so that the size
// is priced by it until real steps of that size outvote it, and sparse
// sizes are held to it (see sparse caps in observeN).
func (c *stepCost) observeCalibrated(T int, secs float64) { c.observeN(T, secs, denseAt) }

// denseAt is how many timings make a size's price trusted on its own.
// A size with fewer is priced at most at the interpolation of its nearest
// trusted neighbours (above the largest, their extrapolation): its first timing is often an outlier (on the GPU the
// first step of a new (tokens, rows) shape runs eagerly and captures its
// CUDA graph, several times a replay's cost; on a shared CPU, a spike), and
// a size priced too high is never granted and timed again. Optimism about
// rarely timed sizes makes the budget try them, and the timings correct it.
const denseAt = 3

func (c *stepCost) observeN(T int, secs float64, times int) {
	if T <= 0 || !(secs > 0) {
		return
	}
	if T == 1 && c.of == nil {
		for range times {
			c.base.add(secs)
		}
	} else {
		base := &c.root().base
		if base.n == 0 {
			return
		}
		if c.ratios == nil {
			c.ratios = map[int]*costWindow{}
		}
		b := costBucket(T)
		w := c.ratios[b]
		if w == nil {
			w = &costWindow{}
			c.ratios[b] = w
		}
		for range times {
			w.add(secs / base.v)
		}
	}
	c.rebuild()
}

// rebuild recomputes keys and ys from the ratio windows.
func (c *stepCost) rebuild() {
	c.keys, c.ys = c.keys[:0], c.ys[:0]
	anchor := c.of == nil // the plain curve: (1, 1) by definition, dense
	if anchor {
		c.keys = append(c.keys, 1)
	}
	for k := range c.ratios {
		c.keys = append(c.keys, k)
	}
	if anchor {
		sort.Ints(c.keys[1:])
		c.ys = append(c.ys, 1)
	} else {
		sort.Ints(c.keys)
	}
	for _, k := range c.keys[len(c.ys):] {
		c.ys = append(c.ys, c.ratios[k].v)
	}
	// sparse sizes: at most the interpolation of the nearest dense ones
	// (the one-token size is dense: its ratio is 1 by definition), or above
	// the largest dense size at most the extrapolation of the last two
	// dense ones (at least sparseSlope per token; with only the one-token
	// size dense, sparseSlope). Before the extrapolation cap a sparse size
	// above every dense one kept its own timing and set the slope beyond
	// it: one spike (50 ms at T=40) priced every larger step from it, and
	// a size priced too high is never granted, so never timed again.
	lo, prev := -1, -1 // the last dense index and the dense one before it
	dense := func(i int) bool { return (anchor && i == 0) || c.ratios[c.keys[i]].n >= denseAt }
	dv := func(i int) float64 {
		if anchor && i == 0 {
			return 1
		}
		return c.ratios[c.keys[i]].v
	}
	for i := 0; i < len(c.keys); i++ {
		if dense(i) {
			lo, prev = i, lo
			continue
		}
		hi := i + 1
		for hi < len(c.keys) && !dense(hi) {
			hi++
		}
		switch {
		case lo < 0 && hi == len(c.keys):
			continue // nothing dense in this class: its own timings
		case lo < 0:
			c.ys[i] = min(c.ys[i], dv(hi)) // below the smallest dense size
			continue
		}
		if hi == len(c.keys) {
			slope := sparseSlope
			if prev >= 0 {
				slope = max(slope, (dv(lo)-dv(prev))/float64(c.keys[lo]-c.keys[prev]))
			}
			c.ys[i] = min(c.ys[i], dv(lo)+slope*float64(c.keys[i]-c.keys[lo]))
			continue
		}
		f := float64(c.keys[i]-c.keys[lo]) / float64(c.keys[hi]-c.keys[lo])
		c.ys[i] = min(c.ys[i], dv(lo)*(1-f)+dv(hi)*f)
	}
	// monotone: a size costs at most what the next larger measured size
	// costs (timings err upwards), and at least a one-token step.
	for i := len(c.ys) - 2; i >= 0; i-- {
		c.ys[i] = min(c.ys[i], c.ys[i+1])
	}
	for i := range c.ys {
		c.ys[i] = max(c.ys[i], 1)
	}
}

// sparseSlope is the least ratio a token adds beyond the largest measured
// size (5% of a one-token step), and the slope that caps sparse sizes above
// the largest dense one when the dense sizes give a smaller one.
const sparseSlope = 0.05

// known reports whether any step was measured.
func (c *stepCost) known() bool { return c.root().base.n > 0 }

// at estimates the seconds of a T-token step: the one-token cost times the
// ratio, linear between measured buckets, the last slope beyond the
// largest (at least 5% of a one-token step per token); never decreasing
// with T.
func (c *stepCost) at(T int) float64 {
	r := c.root()
	if r.base.n == 0 {
		return 1 + 0.1*float64(T-1) // unmeasured: a relative guess
	}
	return r.base.v * c.ratioAt(T)
}

func (c *stepCost) ratioAt(T int) float64 {
	keys, ys := c.keys, c.ys
	if len(keys) == 0 {
		if c.of != nil {
			return c.of.ratioAt(T) // no timings of this class yet
		}
		return 1
	}
	if T <= keys[0] {
		return ys[0]
	}
	for i := 1; i < len(keys); i++ {
		if T <= keys[i] {
			f := float64(T-keys[i-1]) / float64(keys[i]-keys[i-1])
			return ys[i-1] + f*(ys[i]-ys[i-1])
		}
	}
	n := len(keys)
	slope := sparseSlope
	if n >= 2 {
		slope = max(slope, (ys[n-1]-ys[n-2])/float64(keys[n-1]-keys[n-2]))
	}
	return ys[n-1] + slope*float64(T-keys[n-1])
}

// costWindowLen is how many recent values a costWindow keeps.
const costWindowLen = 5

// costWindow is the median of the most recent costWindowLen values: it
// ignores up to 2 spikes in 5 and follows a lasting change within 3 values.
type costWindow struct {
	xs   [costWindowLen]float64
	n, i int     // values held, next slot
	v    float64 // the median of the held values
}

func (w *costWindow) add(x float64) {
	w.xs[w.i] = x
	w.i = (w.i + 1) % costWindowLen
	w.n = min(w.n+1, costWindowLen)
	var buf [costWindowLen]float64
	s := buf[:w.n]
	copy(s, w.xs[:w.n])
	slices.Sort(s)
	if w.n%2 == 1 {
		w.v = s[w.n/2]
	} else {
		w.v = (s[w.n/2-1] + s[w.n/2]) / 2
	}
}

// Step classes. On the GPU a step's cost is not a function of its token
// count alone: a step that verifies trees runs another path than a plain
// step of the same size (exact chunked GEMVs beyond 8 tokens instead of
// one cuBLAS GEMM, each row's argmax), and draft heads add their own
// launches. One curve for all of them priced a tree of 33 tokens by plain
// 32-token steps and prefill chunks (measured on the H100: a tree step at
// concurrency 20 cost 3.2x the plain step the budget compared it with, and
// Medusa's adaptive mode ran at 0.50x plain). So the engine keeps a curve
// per class, all relative to the plain one-token step, and compares a
// step with drafts (tree, with heads when its proposer's heads run on the
// backend: speculating with them means running them every step) against
// the plain step it replaces.

// costOf is the cost curve of a step of the given class.
func (e *Engine) costOf(tree, heads bool) *stepCost {
	switch {
	case tree && heads:
		return &e.costTreeHeads
	case tree:
		return &e.costTree
	case heads:
		return &e.costHeads
	}
	return &e.cost
}

// fixedCost is the price Options.StepClassCost or StepCost sets for a
// step (ok false: none, the step's timing counts).
func (e *Engine) fixedCost(T int, tree, heads bool) (float64, bool) {
	switch {
	case e.opts.StepClassCost != nil:
		return e.opts.StepClassCost(T, tree, heads).Seconds(), true
	case e.opts.StepCost != nil:
		return e.opts.StepCost(T).Seconds(), true
	}
	return 0, false
}
