package medusa

import (
	"context"
	"fmt"

	"github.com/specgate/specgate/engine"
)

// Source is the Proposal.Source of Medusa trees (per-source stats).
const Source = "medusa"

// Proposer drafts token trees from Medusa heads (an engine.Proposer and an
// engine.HiddenNeeder). Per step and request it reads the target's hidden
// row that predicted the pending token, runs the heads the tree needs (one
// batched matmul per head and layer over all requests of the step), takes
// each head's top-k and lays the tree's paths over them.
//
// Nodes are deterministic (Proposal.Q nil): greedy requests accept by the
// target's argmax, sampled ones by the target's own sample at each node,
// which is lossless; only the engine's opt-in typical acceptance is not.
// Safe for use by one engine (Propose is called from its scheduler).
type Proposer struct {
	heads *Heads
	tree  *Tree
	buf   []float32
	dev   deviceHeads // heads registered on a backend (device.go)
}

// NewProposer returns a proposer over heads with tree (nil: the heads
// directory's tuned tree, cut to its default node count; without one a
// chain over all heads).
func NewProposer(h *Heads, tree *Tree) (*Proposer, error) {
	if tree == nil {
		var err error
		tree, err = DefaultTree(h)
		if err != nil {
			return nil, err
		}
	}
	if tree.Depth() > h.NumHeads {
		return nil, fmt.Errorf("%w: tree depth %d > %d heads", ErrFormat, tree.Depth(), h.NumHeads)
	}
	return &Proposer{heads: h, tree: tree}, nil
}

// DefaultTree is the heads directory's specgate.tree cut to specgate.nodes
// (all when 0), or a chain over every head when the directory has no tree.
func DefaultTree(h *Heads) (*Tree, error) {
	paths := h.Config.Specgate.Tree
	if paths == nil {
		paths = ChainTree(h.NumHeads)
	}
	t, err := NewTree(paths, h.NumHeads)
	if err != nil {
		return nil, err
	}
	return t.Prefix(h.Config.Specgate.Nodes), nil
}

// Tree returns the proposer's tree.
func (p *Proposer) Tree() *Tree { return p.tree }

// Heads returns the proposer's heads.
func (p *Proposer) Heads() *Heads { return p.heads }

// NeedsHidden implements engine.HiddenNeeder.
func (p *Proposer) NeedsHidden() bool { return true }

// Release implements engine.Proposer (the proposer keeps nothing per request).
func (p *Proposer) Release(engine.RequestID) {}

// Propose implements engine.Proposer. A request without a hidden row gets
// an empty proposal.
func (p *Proposer) Propose(ctx context.Context, reqs []engine.ProposeRequest) ([]engine.Proposal, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if p.heads.hy != nil {
		return p.proposeHydra(reqs) // hydra_propose.go
	}
	H := p.heads.Hidden
	out := make([]engine.Proposal, len(reqs))
	var rows []int
	depth := 0
	for i, r := range reqs {
		if r.HeadTop != nil && r.Budget > 0 && r.MaxDepth > 0 {
			// the heads ran on the device: their top-k for this row
			pr, err := p.fromDevice(r)
			if err != nil {
				return nil, err
			}
			out[i] = pr
			continue
		}
		if r.Hidden == nil || r.Budget <= 0 || r.MaxDepth <= 0 {
			continue
		}
		if len(r.Hidden) != H {
			return nil, fmt.Errorf("medusa: request %d: hidden row of %d values, want hidden_size %d", r.ID, len(r.Hidden), H)
		}
		rows = append(rows, i)
		depth = max(depth, min(r.MaxDepth, p.tree.depthOf(r.Budget)))
	}
	if len(rows) == 0 {
		return out, nil
	}
	x := make([]float32, len(rows)*H)
	for k, i := range rows {
		copy(x[k*H:], reqs[i].Hidden)
	}
	R := p.heads.Rows()
	p.buf = p.heads.Logits(x, len(rows), depth, p.buf)
	top := make([][]int32, depth)
	for k, i := range rows {
		r := reqs[i]
		d := min(r.MaxDepth, p.tree.depthOf(r.Budget))
		for h := range d {
			top[h] = TopK(p.buf[(h*len(rows)+k)*R:(h*len(rows)+k+1)*R], p.tree.TopK[h], top[h][:0])
			for j, row := range top[h] {
				top[h][j] = p.heads.TokenOf(int(row))
			}
		}
		out[i] = p.layTree(top, r.Budget, d)
	}
	return out, nil
}

// layTree lays the tree's paths (in priority order, at most budget nodes,
// depth <= d) over the heads' candidates top[h] (best first).
func (p *Proposer) layTree(top [][]int32, budget, d int) engine.Proposal {
	var toks, parents []int32
	p.tree.lay(budget, d, func(depth, rank int) bool { return rank < len(top[depth-1]) }, func(pi int, par int32) {
		path := p.tree.Paths[pi]
		toks = append(toks, top[len(path)-1][path[len(path)-1]])
		parents = append(parents, par)
	})
	return engine.Proposal{Tokens: toks, Parents: parents, Source: Source}
}

// TopK appends to dst the indices of the k largest values of l, largest
// first (ties: lower index first; NaN counts as -Inf): engine.TopK, which
// the CPU backend's in-forward heads use too.
func TopK(l []float32, k int, dst []int32) []int32 { return engine.TopK(l, k, dst) }
