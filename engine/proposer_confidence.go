package engine

// Confident is an optional Proposer capability: the proposer's own
// estimate, before it proposes, of how likely its node at depth d (1 = a
// child of the pending token) is accepted given its parent was, for one
// request. Model-free drafts know this better than an average: a cursor
// aligned on a client's prediction that has matched every token so far is
// nearly certain, one that has lost its draft or keeps being rejected is
// worth nothing. The engine's per-step draft budget uses the estimate
// instead of its own acceptance history for that proposer and request.
//
// Confidence is called from the scheduler goroutine before Propose, at
// most once per depth a step considers. It returns a probability in
// [0, 1], or a negative value for "no opinion" (the engine's history or
// prior is used).
type Confident interface {
	Confidence(id RequestID, depth int) float64
}

// confidence is proposer k's own estimate for sp's request at depth d, or
// a negative value when it has none.
func (sp *specState) confidence(k, d int) float64 {
	var c Confident
	if k < len(sp.conf) {
		c = sp.conf[k]
	} else {
		c, _ = sp.props[k].(Confident)
	}
	if c == nil {
		return -1
	}
	v := c.Confidence(sp.id, d)
	if v > 1 {
		v = 1
	}
	return v
}

// specLookAhead is how many nodes deeper along one candidate the per-step
// budget looks when the next node alone does not pay.
const specLookAhead = 8

// lookAhead returns how many more nodes of candidate c to grant (0: none).
// The budget grants a node when the step's expected tokens per second
// grow; the step cost is not convex in the token count (on the CPU a
// forward of an odd number of tokens costs relatively more), so a node
// that does not pay alone may pay together with the next few of the same
// chain, which a model-free draft that keeps matching (a prediction, a
// copied prompt) needs to get long drafts at all. For j = 1 this is the
// plain one-node test. now is the step's current expected tokens per
// second, E its expected tokens, T its token count; cost prices the step
// with the new nodes (stepClasses); the rest are the budget's running
// limits and c's proposer's depth and per-level cost.
func (e *Engine) lookAhead(c *specCand, cost *stepCost, now, E float64, T int, propTime float64, used, room, perReq, depth int, levelCost float64) int {
	run, gain, extra := c.run, 0.0, 0.0
	for j := 1; j <= specLookAhead; j++ {
		if c.n+j > c.cap || perReq+j > e.opts.MaxDraft || used+j > e.opts.SpecBudget || used+j > room {
			return 0
		}
		run *= c.accAt(c.n + j)
		gain += run
		if c.n+j > depth {
			extra += levelCost
		}
		if (E+gain)/(cost.at(T+j)+propTime+extra) > now*specMargin {
			return j
		}
	}
	return 0
}
