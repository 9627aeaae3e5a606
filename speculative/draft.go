package speculative

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/specgate/specgate/engine"
)

// Draft is a draft-model speculator (engine.Speculator and
// engine.SpecReleaser). One Draft serves all requests of an engine: it keeps
// no mutable state of its own; each request's draft Sequence and adaptive
// controller live in SpecState.Data (a *reqState) and are freed by Release.
type Draft struct {
	target, draft *engine.Model
	cfg           Config

	// measure: calibrate costs once at the first adaptive Step (costOnce);
	// costs is the adaptive controller's cost model (read-only after that).
	measure  bool
	costOnce sync.Once
	costs    costModel

	// rule selects the stochastic acceptance rule; tests set deliberately
	// wrong ones (negative controls). Zero = the lossless rule.
	rule rule
}

var (
	_ engine.Speculator   = (*Draft)(nil)
	_ engine.SpecReleaser = (*Draft)(nil)
)

// rule is a stochastic acceptance variant.
type rule int

const (
	ruleLossless rule = iota
	// ruleBonusFromP (wrong): after rejections, sample the correction token
	// from the target p instead of the residual norm(max(0, p - q)).
	ruleBonusFromP
	// ruleTopKChildren (wrong): children are the draft's top tokens
	// (deterministic) but verified as if they were draws from q.
	ruleTopKChildren
)

// Config returns the speculator's configuration with defaults filled in.
func (d *Draft) Config() Config { return d.cfg }

// reqState is one request's speculator state (SpecState.Data).
type reqState struct {
	seq *engine.Sequence // draft KV; a prefix of target tokens + Pending, plus chain leftovers
	ctl controller
}

// Release frees the request's draft KV (engine.SpecReleaser).
func (d *Draft) Release(s *engine.SpecState) {
	if st, ok := s.Data.(*reqState); ok && st.seq != nil {
		st.seq.Free()
		st.seq = nil
	}
}

// Step implements engine.Speculator: sync the draft with the accepted
// tokens, propose a tree, verify it with one target forward, keep the
// accepted path. See the package doc for the acceptance rules.
func (d *Draft) Step(s *engine.SpecState) ([]int32, error) {
	st, _ := s.Data.(*reqState)
	if st == nil {
		st = &reqState{ctl: newController(d.cfg.K)}
		s.Data = st
	}
	committed := s.Seq.Len()
	// depth limits: tokens the engine still wants (accepted + bonus), and
	// positions: the deepest node sits at committed + depth.
	maxPos := min(d.target.Config.MaxPositions, d.draft.Config.MaxPositions)
	limit := min(d.cfg.K, s.MaxNew-1, maxPos-1-committed)
	depth := limit
	var conf *costModel // adaptive greedy chains: depth from the draft's confidence
	if d.cfg.Adaptive && limit > 0 {
		if d.measure {
			d.costOnce.Do(func() {
				if cm, err := measureCosts(d.target, d.draft, min(d.nodesAt(d.cfg.K)+1, 32), 12); err == nil {
					d.costs = cm
				}
			})
		}
		depth = st.ctl.plan(limit, d.nodesAt, d.costs, s.Active)
		if depth > 0 && d.cfg.Method == MethodChain && s.Params.Temperature <= 0 {
			// greedy chains: the plan decides whether to speculate; how deep
			// follows the draft's confidence per level (propose).
			depth, conf = limit, &d.costs
		}
	}
	if depth <= 0 {
		return s.PlainStep()
	}
	rootRow, err := d.sync(s, st)
	if errors.Is(err, engine.ErrKVExhausted) {
		// the draft's KV is shared by all requests: give ours back and decode plainly.
		st.seq.Truncate(0)
		return s.PlainStep()
	}
	if err != nil {
		return nil, fmt.Errorf("speculative: draft catch-up: %w", err)
	}
	p, err := d.propose(s, st, rootRow, depth, conf)
	if errors.Is(err, engine.ErrKVExhausted) {
		st.seq.Truncate(0)
		return s.PlainStep()
	}
	if err != nil {
		return nil, fmt.Errorf("speculative: draft proposal: %w", err)
	}
	if p.tree.Len() == 0 {
		return s.PlainStep()
	}
	logits, err := s.ForwardTree(p.tree.Tokens, p.tree.Parents)
	if errors.Is(err, engine.ErrKVExhausted) {
		return s.PlainStep() // the tree does not fit in the target's KV now; one token may
	}
	if err != nil {
		return nil, fmt.Errorf("speculative: target verification: %w", err)
	}
	path, bonus, trials := d.accept(s, p, logits)
	if err := s.KeepTree(path); err != nil {
		return nil, fmt.Errorf("speculative: keep accepted path: %w", err)
	}
	s.Stats.Proposed += p.tree.Len()
	s.Stats.Accepted += len(path)
	st.ctl.update(trials, len(path))
	st.ctl.calibrate(p.conf, len(path))
	out := make([]int32, 0, len(path)+1)
	for _, n := range path {
		out = append(out, p.tree.Tokens[n])
	}
	return append(out, bonus), nil
}

// sync brings the draft sequence to the target's committed tokens plus
// Pending (reusing the longest common prefix, truncating the rest) and
// returns the draft logits row after Pending ([VocabSize], owned by the caller).
func (d *Draft) sync(s *engine.SpecState, st *reqState) ([]float32, error) {
	if st.seq == nil {
		st.seq = d.draft.NewSequence()
	}
	tgt := s.Seq.Tokens()
	want := make([]int32, 0, len(tgt)+1)
	want = append(append(want, tgt...), s.Pending)
	have := st.seq.Tokens()
	lcp := 0
	for lcp < len(have) && lcp < len(want) && have[lcp] == want[lcp] {
		lcp++
	}
	// at least one token to forward, for the logits after Pending.
	lcp = min(lcp, len(want)-1)
	if st.seq.Len() > lcp {
		st.seq.Truncate(lcp)
	}
	rest := want[lcp:]
	return st.seq.Forward(rest, nil, []int32{int32(len(rest) - 1)})
}

// nodesAt is the number of tree nodes a full proposal of the given depth has
// (the cost model's verify width).
func (d *Draft) nodesAt(depth int) int {
	switch d.cfg.Method {
	case MethodChain:
		return depth
	case MethodDynamic:
		return min(d.cfg.Budget, d.cfg.Width*depth)
	}
	n, level := 0, 1
	for dd := range depth {
		level *= d.cfg.Branching[min(dd, len(d.cfg.Branching)-1)]
		n += level
		if n >= d.cfg.Budget {
			return d.cfg.Budget
		}
	}
	return n
}

// measureCosts times target forwards of n = 1..maxN tokens (a chain-shaped
// tree below a context of up to 64 tokens; maxN is capped at half the
// models' context length, dropped again) and one-token draft
// forwards, reps rounds interleaved, and returns the cost model of the
// fastest time of each (the least disturbed by other load): fwd[n-1] =
// t(n)/t(1), made non-decreasing; verify = the mean slope over the table
// (for larger forwards); draft = t_draft(1)/t(1). It allocates two short
// sequences from the models' KV pools and frees them.
func measureCosts(target, draft *engine.Model, maxN, reps int) (costModel, error) {
	V := min(target.Config.VocabSize, draft.Config.VocabSize)
	maxPos := min(target.Config.MaxPositions, draft.Config.MaxPositions)
	maxN = min(maxN, maxPos/2)
	ctx := make([]int32, max(min(64, maxPos-maxN-1), 1))
	for i := range ctx {
		ctx[i] = int32((5 + i%50) % V)
	}
	ts, ds := target.NewSequence(), draft.NewSequence()
	defer ts.Free()
	defer ds.Free()
	if _, err := ts.Forward(ctx, nil, []int32{}); err != nil {
		return costModel{}, err
	}
	if _, err := ds.Forward(ctx, nil, []int32{}); err != nil {
		return costModel{}, err
	}
	toks, par := make([]int32, maxN), make([]int32, maxN)
	for i := range toks {
		toks[i], par[i] = int32((7+i%50)%V), int32(i)-1
	}
	timeit := func(s *engine.Sequence, n int) (time.Duration, error) {
		t0 := time.Now()
		if _, err := s.Forward(toks[:n], par[:n], nil); err != nil {
			return 0, err
		}
		d := time.Since(t0)
		return d, s.KeepTree(nil)
	}
	best := make([]time.Duration, maxN+1) // best[n]; best[0] = draft
	for r := range reps + 1 {             // round 0 warms up
		for n := 0; n <= maxN; n++ {
			s, k := ts, n
			if n == 0 {
				s, k = ds, 1
			}
			dt, err := timeit(s, k)
			if err != nil {
				return costModel{}, err
			}
			if r == 1 || (r > 1 && dt < best[n]) {
				best[n] = dt
			}
		}
	}
	t1 := best[1].Seconds()
	if !(t1 > 0) {
		return costModel{}, fmt.Errorf("speculative: measureCosts: one-token forward took %v", best[1])
	}
	cm := costModel{fwd: make([]float64, maxN), draft: best[0].Seconds() / t1, margin: measuredGain}
	for n := 1; n <= maxN; n++ {
		cm.fwd[n-1] = best[n].Seconds() / t1
		if n > 1 {
			cm.fwd[n-1] = max(cm.fwd[n-1], cm.fwd[n-2])
		}
	}
	if maxN > 1 {
		cm.verify = (cm.fwd[maxN-1] - 1) / float64(maxN-1)
	}
	return cm, nil
}
