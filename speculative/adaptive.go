package speculative

// controller is one request's adaptive speculation state: an EWMA of the
// conditional acceptance rate at every tree depth. It is a pure function of
// the request's history (no clocks), so the same history gives the same
// decisions.
type controller struct {
	acc      []float64 // acc[d-1] ≈ P(a node at depth d is accepted | depth d-1 was)
	plainRun int       // consecutive plain steps chosen by plan since the last probe
	interval int       // plain steps before the next probe (doubles after each probe, up to maxProbeEvery)
	// calib[b] ≈ P(a greedy chain node is accepted | its parent was, and the
	// draft's top probability where it was drawn fell in bin b of confBins
	// equal bins); seen[b] counts the observations (running mean, then EWMA).
	calib [confBins]float64
	seen  [confBins]int
}

// confBins is the number of draft-confidence bins of the calibration.
const confBins = 10

// accept estimates the acceptance probability of a node drawn where the
// draft's top probability was c: the calibrated rate of c's bin (prior: c).
func (c *controller) acceptProb(conf float64) float64 {
	b := min(max(int(conf*confBins), 0), confBins-1)
	if c.seen[b] == 0 {
		return conf
	}
	return c.calib[b]
}

// calibrate records greedy chain nodes drawn at confidences confs (root
// first) of which the first accepted were accepted (the rest untried after
// the first rejection).
func (c *controller) calibrate(confs []float64, accepted int) {
	for d, conf := range confs {
		if d > accepted {
			break
		}
		x := 0.0
		if d < accepted {
			x = 1
		}
		b := min(max(int(conf*confBins), 0), confBins-1)
		c.seen[b]++
		w := max(ewmaWeight, 1/float64(c.seen[b]))
		c.calib[b] += w * (x - c.calib[b])
	}
}

const (
	ewmaWeight    = 0.15 // weight of the newest observation
	priorAccept   = 0.6  // initial acc at every depth
	probeEvery    = 8    // after this many plain steps, probe with depth 1 ...
	maxProbeEvery = 128  // ... backing off exponentially up to this interval
	minGainRatio  = 1.0  // speculate only when the expected gain exceeds plain decoding
	measuredGain  = 1.08 // ... by this much with a measured cost table (costModel.margin)
)

func newController(maxDepth int) controller {
	c := controller{acc: make([]float64, maxDepth), interval: probeEvery}
	for i := range c.acc {
		c.acc[i] = priorAccept
	}
	return c
}

// expected returns the expected tokens of one step of the given depth:
// 1 (the bonus) + sum over d of prod_{i<=d} acc[i-1].
func (c *controller) expected(depth int) float64 {
	e, run := 1.0, 1.0
	for d := range depth {
		run *= c.acc[d]
		e += run
	}
	return e
}

// costModel prices forwards in units of a one-token target forward.
type costModel struct {
	// fwd[n-1] is the time of an n-token target forward (a chain-shaped tree
	// below the last committed token) over a one-token forward's, measured
	// on this machine (see measureCosts); nil: linear in verify.
	fwd    []float64
	verify float64 // per extra token, beyond the table (or without one)
	draft  float64 // one draft forward
	// margin is the expected gain over plain decoding a step must exceed
	// (0 = minGainRatio): measured tables carry timing noise and leave the
	// draft's catch-up after plain runs unpriced, so they ask for more.
	margin float64
}

// linearCosts is the cost model of a configured VerifyCost and DraftCost.
func linearCosts(verify, draft float64) costModel { return costModel{verify: verify, draft: draft} }

// forward is the cost of a target forward of n >= 1 tokens.
func (m costModel) forward(n int) float64 {
	if n <= len(m.fwd) {
		return m.fwd[n-1]
	}
	base := 1.0
	if k := len(m.fwd); k > 0 {
		base = m.fwd[k-1] - m.verify*float64(k-1)
	}
	return base + m.verify*float64(n-1)
}

// plan picks the depth (<= limit) maximizing expected tokens per unit of
// cost, or 0 for a plain step. Costs, in one-token target forwards:
// speculative step = forward(1 + nodes(depth)) + draft*depth (depth draft
// forwards); plain step of this request = its share of a batched forward
// with active requests: forward(active)/active. When even a draft that is
// always right could not pay (E = 1 + depth), it returns 0 without probing.
// Otherwise, while plain decoding wins, it probes with depth 1 after
// probeEvery plain steps, then after twice as many, up to maxProbeEvery, so
// the estimate can recover at a bounded cost.
func (c *controller) plan(limit int, nodes func(int) int, cm costModel, active int) int {
	active = max(active, 1)
	plain := cm.forward(active) / float64(active)
	best, bestGain := 0, minGainRatio
	if cm.margin > 0 {
		bestGain = cm.margin
	}
	canPay := false
	for depth := 1; depth <= min(limit, len(c.acc)); depth++ {
		cost := cm.forward(1+nodes(depth)) + cm.draft*float64(depth)
		gain := c.expected(depth) * plain / cost
		if gain > bestGain {
			best, bestGain = depth, gain
		}
		if float64(1+depth)*plain/cost > minGainRatio {
			canPay = true
		}
	}
	if best > 0 {
		c.plainRun, c.interval = 0, probeEvery
		return best
	}
	if !canPay {
		return 0
	}
	c.plainRun++
	if c.plainRun >= c.interval {
		c.plainRun = 0
		c.interval = min(2*c.interval, maxProbeEvery)
		return 1
	}
	return 0
}

// update records one verified step: at depths 1..trials a choice was tried,
// and the first accepted ones succeeded.
func (c *controller) update(trials, accepted int) {
	for d := 0; d < trials && d < len(c.acc); d++ {
		x := 0.0
		if d < accepted {
			x = 1
		}
		c.acc[d] += ewmaWeight * (x - c.acc[d])
	}
}
