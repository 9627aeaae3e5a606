package speculative

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/specgate/specgate/engine"
)

// Proposers runs engine.Proposers for one request through the engine's
// per-request Speculator hook (engine.GenerateRequest.Speculator): each
// step it asks every proposer for a tree (budget given first to the source
// with the best acceptance so far for this request), merges the trees
// into one (identical paths once), verifies it with one target forward and
// keeps the accepted path. Use one Proposers per request (NewProposers).
//
// Verification treats every node as deterministic (Proposal.Q is
// ignored): greedy requests take the target's argmax at each node (plain
// decoding's choice), sampled requests draw the target's own token at each
// node with the request's RNG, exactly as plain decoding draws it (one
// uniform per token, same transforms) and move to the child with that
// token. The output is therefore plain decoding's, token for token under
// greedy decoding and in distribution under sampling. Proposals with Q
// (draft-model samples) are verified the same way, which is lossless but
// wastes their sampled acceptance: use this only for model-free proposers.
//
// This is the bridge until the engine verifies Proposers inside its batched
// step (engine issue #10); it lets the gateway use the model-free
// proposers with the engine as it is.
type Proposers struct {
	list   []engine.Proposer
	tenant string
	known  []engine.KnownDraft
	budget int
	id     engine.RequestID
	prop   []int // per proposer: nodes proposed / on accepted paths
	acc    []int
	// lossyMinP > 0 is a deliberately wrong rule for the tests' negative
	// control: a child whose target probability is at least lossyMinP is
	// accepted without a draw.
	lossyMinP float32
}

var proposersID atomic.Uint64

// NewProposers returns the per-request speculator over list. budget is the
// most tree nodes verified per step (0: 24).
func NewProposers(list []engine.Proposer, tenant string, known []engine.KnownDraft, budget int) *Proposers {
	if budget <= 0 {
		budget = 24
	}
	return &Proposers{list: list, tenant: tenant, known: known, budget: budget,
		id: engine.RequestID(proposersID.Add(1) | 1<<62), prop: make([]int, len(list)), acc: make([]int, len(list))}
}

// Release implements engine.SpecReleaser: observers learn the request's
// output, then every proposer releases it.
func (p *Proposers) Release(s *engine.SpecState) {
	for _, pr := range p.list {
		if o, ok := pr.(engine.FinishObserver); ok && s != nil {
			o.Finished(p.id, p.tenant, s.Prompt, s.Generated)
		}
		pr.Release(p.id)
	}
}

// Step implements engine.Speculator.
func (p *Proposers) Step(s *engine.SpecState) ([]int32, error) {
	committed := s.Seq.Len()
	maxDepth := min(s.MaxNew-1, s.Target.Config.MaxPositions-1-committed)
	if maxDepth <= 0 || len(p.list) == 0 {
		return s.PlainStep()
	}
	// order: best acceptance so far first (Laplace-smoothed), ties in list order.
	order := make([]int, len(p.list))
	for i := range order {
		order[i] = i
	}
	rate := func(i int) float64 { return float64(p.acc[i]+1) / float64(p.prop[i]+2) }
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && rate(order[j]) > rate(order[j-1]); j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	m := newMerged()
	for _, i := range order {
		left := p.budget - len(m.tokens)
		if left <= 0 {
			break
		}
		props, err := p.list[i].Propose(s.Ctx, []engine.ProposeRequest{{
			ID: p.id, Tenant: p.tenant, Prompt: s.Prompt, Generated: s.Generated, Params: s.Params,
			Budget: left, MaxDepth: maxDepth, Known: p.known, Rand: s.Rand, Active: s.Active,
			Proposed: p.prop[i], Accepted: p.acc[i],
		}})
		if err != nil {
			return nil, fmt.Errorf("speculative: proposer %d: %w", i, err)
		}
		if len(props) != 1 {
			return nil, fmt.Errorf("speculative: proposer %d returned %d proposals for 1 request", i, len(props))
		}
		if err := m.add(&props[0], i, left, maxDepth); err != nil {
			return nil, fmt.Errorf("speculative: proposer %d: %w", i, err)
		}
	}
	if len(m.tokens) == 0 {
		return s.PlainStep()
	}
	logits, err := s.ForwardTree(m.tokens, m.parents)
	if errors.Is(err, engine.ErrKVExhausted) {
		return s.PlainStep()
	}
	if err != nil {
		return nil, fmt.Errorf("speculative: target verification: %w", err)
	}
	path, next := p.acceptDeterministic(s, m.tokens, m.parents, logits)
	if err := s.KeepTree(path); err != nil {
		return nil, fmt.Errorf("speculative: keep accepted path: %w", err)
	}
	onPath := make([]bool, len(m.tokens))
	for _, n := range path {
		onPath[n] = true
	}
	if s.Stats.BySource == nil {
		s.Stats.BySource = map[string]engine.SourceStats{}
	}
	for n := range m.tokens {
		ss := s.Stats.BySource[m.sources[n]]
		ss.Proposed++
		p.prop[m.owner[n]]++
		if onPath[n] {
			ss.Accepted++
			p.acc[m.owner[n]]++
		}
		s.Stats.BySource[m.sources[n]] = ss
	}
	s.Stats.Proposed += len(m.tokens)
	s.Stats.Accepted += len(path)
	for len(s.Stats.AcceptedAt) < len(path) {
		s.Stats.AcceptedAt = append(s.Stats.AcceptedAt, 0)
	}
	for d := range path {
		s.Stats.AcceptedAt[d]++
	}
	out := make([]int32, 0, len(path)+1)
	for _, n := range path {
		out = append(out, m.tokens[n])
	}
	return append(out, next), nil
}

// acceptDeterministic walks the verified tree: at each node the target's
// own next token (plain decoding's choice: argmax, or one draw from the
// request's RNG) moves the walk to the child with that token; the first
// token without such a child ends the step as the bonus.
func (p *Proposers) acceptDeterministic(s *engine.SpecState, tokens, parents []int32, logits []float32) (path []int, next int32) {
	V := s.Target.Config.VocabSize
	kids := make([][]int, len(tokens)+1)
	for i, par := range parents {
		kids[par+1] = append(kids[par+1], i)
	}
	v := -1
	var toks []int32
	for {
		row := logits[(v+1)*V : (v+2)*V]
		if p.lossyMinP > 0 && len(kids[v+1]) > 0 {
			pr := s.Probs(row, toks)
			if c := kids[v+1][0]; pr[tokens[c]] >= p.lossyMinP {
				path = append(path, c)
				toks = append(toks, tokens[c])
				v = c
				continue
			}
		}
		t := sampleLikePlain(s, row, toks)
		nx := -1
		for _, c := range kids[v+1] {
			if tokens[c] == t {
				nx = c
				break
			}
		}
		if nx < 0 {
			return path, t
		}
		path = append(path, nx)
		toks = append(toks, t)
		v = nx
	}
}

// sampleLikePlain is engine.Sample over the history Generated + extra.
func sampleLikePlain(s *engine.SpecState, row []float32, extra []int32) int32 {
	if s.Params.Temperature <= 0 && noPenalties(s.Params) {
		return engine.Argmax(row)
	}
	probs := s.Probs(row, extra)
	if s.Params.Temperature <= 0 {
		return engine.Argmax(probs)
	}
	return engine.SampleProbs(probs, s.Rand.Float64())
}

// merged is the union of several proposals as one tree.
type merged struct {
	tokens, parents []int32
	sources         []string
	owner           []int
	kids            map[uint64]int32
}

func newMerged() *merged { return &merged{kids: map[uint64]int32{}} }

// add merges the proposal's nodes (up to limit new ones, none deeper than
// maxDepth) and checks its shape.
func (m *merged) add(p *engine.Proposal, owner, limit, maxDepth int) error {
	if len(p.Parents) != len(p.Tokens) || (p.Sources != nil && len(p.Sources) != len(p.Tokens)) {
		return fmt.Errorf("proposal with %d tokens, %d parents, %d sources", len(p.Tokens), len(p.Parents), len(p.Sources))
	}
	at := make([]int32, len(p.Tokens)) // proposal index -> merged index (-2: dropped)
	depth := make([]int, len(p.Tokens))
	added := 0
	for i, tok := range p.Tokens {
		par := p.Parents[i]
		if par < -1 || int(par) >= i {
			return fmt.Errorf("node %d: parent %d not in [-1, %d)", i, par, i)
		}
		mp, d := int32(-1), 1
		if par >= 0 {
			if at[par] == -2 {
				at[i] = -2
				continue
			}
			mp, d = at[par], depth[par]+1
		}
		depth[i] = d
		k := uint64(uint32(mp+1))<<32 | uint64(uint32(tok))
		if j, ok := m.kids[k]; ok {
			at[i] = j
			continue
		}
		if added >= limit || d > maxDepth {
			at[i] = -2
			continue
		}
		src := p.Source
		if p.Sources != nil && p.Sources[i] != "" {
			src = p.Sources[i]
		}
		j := int32(len(m.tokens))
		m.tokens = append(m.tokens, tok)
		m.parents = append(m.parents, mp)
		m.sources = append(m.sources, src)
		m.owner = append(m.owner, owner)
		m.kids[k] = j
		at[i] = j
		added++
	}
	return nil
}

// WithProposers makes r draft with ps (model-free proposers) for tenant,
// with the caller's known drafts. With the engine of this commit it sets
// r.Speculator to a per-request Proposers (budget 0: the default); it also
// fills r.Proposers, r.Tenant and r.KnownDrafts, which an engine that
// verifies proposers in its batch reads directly.
func WithProposers(r *engine.GenerateRequest, ps []engine.Proposer, tenant string, known []engine.KnownDraft, budget int) {
	r.Tenant, r.KnownDrafts = tenant, known
	r.Speculator = NewProposers(ps, tenant, known, budget)
}
