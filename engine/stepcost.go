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
	if T == 1 {
		for range times {
			c.base.add(secs)
		}
	} else {
		if c.base.n == 0 {
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
			w.add(secs / c.base.v)
		}
	}
	c.keys = append(c.keys[:0], 1)
	for k := range c.ratios {
		c.keys = append(c.keys, k)
	}
	sort.Ints(c.keys[1:])
	c.ys = append(c.ys[:0], 1)
	for _, k := range c.keys[1:] {
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
	lo, prev := 0, -1 // the last dense index and the dense one before it
	dv := func(i int) float64 {
		if i == 0 {
			return 1
		}
		return c.ratios[c.keys[i]].v
	}
	for i := 1; i < len(c.keys); i++ {
		if c.ratios[c.keys[i]].n >= denseAt {
			lo, prev = i, lo
			continue
		}
		hi := i + 1
		for hi < len(c.keys) && c.ratios[c.keys[hi]].n < denseAt {
			hi++
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
	for i := len(c.ys) - 2; i >= 1; i-- {
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
func (c *stepCost) known() bool { return c.base.n > 0 }

// at estimates the seconds of a T-token step: the one-token cost times the
// ratio, linear between measured buckets, the last slope beyond the
// largest (at least 5% of a one-token step per token); never decreasing
// with T.
func (c *stepCost) at(T int) float64 {
	if c.base.n == 0 {
		return 1 + 0.1*float64(T-1) // unmeasured: a relative guess
	}
	return c.base.v * c.ratioAt(T)
}

func (c *stepCost) ratioAt(T int) float64 {
	keys, ys := c.keys, c.ys
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
