package engine

// A request's speculative statistics (Result.Spec: the API's
// usage.speculative, the gateway's per-source counters and time saved) and
// the engine's (Stats.SpecProposed, SpecAccepted, AcceptedAt: /metrics)
// count what the caller took. A step runs while the caller still reads
// earlier outputs (maxAhead), and the caller stops inside an output the
// scheduler cannot foresee (a stop string, a failed emit, a cancelled
// context; an end token inside an accepted path): an accepted draft token
// after the one the caller stopped at, or a whole step run ahead of it,
// reached no one. So a verified step's counts wait with its output: they
// are counted when the caller acknowledges the output (it took all of it),
// or, for the outputs still unacknowledged when the request is released,
// up to the tokens the caller kept (Result.CompletionTokens, the end token
// included): such a step counts when the caller took a token of its
// output, its tree's nodes all as proposed (verified for a token the
// caller took) and its accepted nodes only up to the last token taken. A
// step none of whose tokens the caller took counts nowhere. The proposers'
// own feedback (ProposeRequest.Proposed/Accepted, acceptance estimates)
// is the verifier's and is counted at once (record).

// specOut is the speculative part of one output handed to the caller.
type specOut struct {
	tree     bool // the output is a verified tree's (else nothing to count)
	approx   bool // an approximate acceptance rule (Typical) decided a token
	start    int  // index in the request's generated tokens of the output's first token (depth 1)
	proposed int  // the tree's nodes
	srcs     []srcTally
	path     []string // the accepted nodes' sources, depth 1 first
}

// stage returns the record of the output the step being verified hands
// the caller next (handed marks it handed).
func (sp *specState) stage(r *request, e *Engine) *specOut {
	if sp.outN == len(sp.outs) {
		// cannot happen: a step serves a request with fewer than maxOut
		// outputs unacknowledged (servable); counted as taken, not lost
		sp.count(r, e, -1)
	}
	sp.staged = true
	return &sp.outs[(sp.outHead+sp.outN)%len(sp.outs)]
}

// handed notes an output handed to the caller (handOut): the staged tree's,
// or one with nothing to count.
func (sp *specState) handed(r *request, e *Engine) {
	if !sp.staged {
		if sp.outN == len(sp.outs) {
			sp.count(r, e, -1)
		}
		sp.outs[(sp.outHead+sp.outN)%len(sp.outs)].tree = false
	}
	sp.staged = false
	sp.outN++
}

// count counts the oldest unacknowledged output: all of it (took < 0: the
// caller acknowledged it), or the part within the first took tokens of
// the request's output.
func (sp *specState) count(r *request, e *Engine, took int) {
	if sp.outN == 0 {
		return
	}
	o := &sp.outs[sp.outHead]
	sp.outHead = (sp.outHead + 1) % len(sp.outs)
	sp.outN--
	if !o.tree || (took >= 0 && o.start >= took) {
		return
	}
	a := len(o.path)
	if took >= 0 {
		a = min(a, took-o.start)
	}
	st := &r.stats
	st.Steps++
	st.Proposed += o.proposed
	st.Accepted += a
	if o.approx {
		st.Exact = false
	}
	// accepted per source, tallied beside the proposed ones: one map
	// update per source, not one per node
	for i := range o.srcs {
		o.srcs[i].a = 0
	}
	for _, src := range o.path[:a] {
		for i := range o.srcs {
			if o.srcs[i].src == src {
				o.srcs[i].a++
				break
			}
		}
	}
	if st.BySource == nil {
		st.BySource = map[string]SourceStats{}
	}
	for _, x := range o.srcs {
		s := st.BySource[x.src]
		s.Proposed += x.p
		s.Accepted += x.a
		st.BySource[x.src] = s
	}
	for d := range a {
		if d >= len(st.AcceptedAt) {
			st.AcceptedAt = append(st.AcceptedAt, make([]int, d+1-len(st.AcceptedAt))...)
		}
		st.AcceptedAt[d]++
		if d < statDepths {
			e.acceptedAt[d].Add(1)
		}
	}
	e.specProposed.Add(int64(o.proposed))
	e.specAccepted.Add(int64(a))
}

// countKept counts the request's unacknowledged outputs when it is
// released, up to the tokens its caller kept.
func (sp *specState) countKept(r *request, e *Engine) {
	took := len(r.keptTokens())
	for sp.outN > 0 {
		sp.count(r, e, took)
	}
}
