package speculative

import (
	"errors"
	"fmt"

	"github.com/specgate/specgate/engine"
)

// Draft is a draft-model speculator (engine.Speculator and
// engine.SpecReleaser). One Draft serves all requests of an engine: it keeps
// no mutable state of its own; each request's draft Sequence and adaptive
// controller live in SpecState.Data (a *reqState) and are freed by Release.
type Draft struct {
	target, draft *engine.Model
	cfg           Config

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
	if d.cfg.Adaptive && limit > 0 {
		depth = st.ctl.plan(limit, d.nodesAt, d.cfg.VerifyCost, d.cfg.DraftCost, s.Active)
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
	p, err := d.propose(s, st, rootRow, depth)
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
