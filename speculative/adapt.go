package speculative

// depthControl adapts how deep a model-free proposer drafts for one request
// from what the target actually generated: after each step the proposer's
// main chain of the previous step is compared with the tokens the request
// gained (the target's own choices, whether or not the engine verified the
// chain), so the control does not depend on the engine's budget split.
//
// Fully confirmed chains double the cap (up to max); a partial match sets
// it to twice the confirmed length; a chain rejected at its first token
// shrinks it to min and, from the second such miss in a row, pauses
// proposing for 1, 3, 7, ... steps (at most
// maxPause), so that a draft source that has stopped matching costs
// almost no verification.
type depthControl struct {
	cap, min, max int
	misses        int
	pause         int
	last          []int32 // main chain proposed at the previous call
	// confirmed draft tokens and rejections (a chain cut short) so far.
	confirmed, rejects int
}

// rate is the estimated probability that the next draft token is right
// given the previous one was: confirmed tokens over confirmed tokens plus
// rejections, with prior weight w at prior.
func (c *depthControl) rate(prior, w float64) float64 {
	return (float64(c.confirmed) + prior*w) / (float64(c.confirmed+c.rejects) + w)
}

// rateAt is the probability that draft token d (1-based, from the pending
// token) is right given tokens 1..d-1 of the same chain were: the
// posterior predictive of a Beta-Bernoulli model whose prior is rate's
// (confirmed + prior*w successes, rejects + (1-prior)*w failures) and
// whose evidence includes the chain's first d-1 tokens. rate is its d = 1.
// A draft source's requests differ more than its tokens do (a client's
// prediction of a file either survives the edit for long stretches or
// stops matching; a near miss's answer either is the same answer or
// another one), so a chain that has held for d-1 tokens is more likely to
// hold on than the pooled per-token rate says. With the per-token rate at
// every depth, the budget priced the first steps of an exact 160-token
// prediction (rate 0.90-0.94 from the tenant's record) at 10-13 nodes on
// the H100, and it took 7-11 verification steps where 3-4 do.
func (c *depthControl) rateAt(prior, w float64, d int) float64 {
	x := float64(max(d, 1) - 1)
	return (float64(c.confirmed) + prior*w + x) / (float64(c.confirmed+c.rejects) + w + x)
}

const maxPause = 31

func newDepthControl(start, lo, hi int) depthControl {
	return depthControl{cap: max(lo, min(start, hi)), min: lo, max: hi}
}

// observe compares the previous chain with the tokens gained since (the
// last one of them is the new pending token).
func (c *depthControl) observe(gained []int32) {
	if len(c.last) == 0 {
		return
	}
	a := 0
	for a < len(c.last) && a < len(gained) && c.last[a] == gained[a] {
		a++
	}
	c.confirmed += a
	if a < len(c.last) && a < len(gained) {
		c.rejects++
	}
	switch {
	case a == len(c.last) || a == len(gained): // no rejection seen
		c.cap = min(c.max, c.cap*2)
		c.misses = 0
	case a == 0:
		c.misses++
		c.cap = c.min
		c.pause = min(maxPause, 1<<(c.misses-1)-1)
	default:
		c.cap = max(c.min, min(c.max, 2*a))
		c.misses = 0
	}
	c.last = c.last[:0]
}

// paused reports whether this step proposes nothing (and counts it).
func (c *depthControl) paused() bool {
	if c.pause > 0 {
		c.pause--
		return true
	}
	return false
}

// proposed records the main chain of this step's proposal.
func (c *depthControl) proposed(chain []int32) { c.last = append(c.last[:0], chain...) }
