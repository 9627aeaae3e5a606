package medusa

import (
	"errors"
	"fmt"

	"github.com/specgate/specgate/engine"
)

// ErrHydraOnHost is DeviceError's answer for Hydra heads: they read the
// tokens of the path they extend, which are known only as the tree is
// built (head 0 needs the pending token, sampled after the forward), so
// they never run inside a backend's forward (engine.HeadsBackend, the CPU
// backend's in-forward heads) and always take the host path from
// ProposeRequest.Hidden.
var ErrHydraOnHost = errors.New("medusa: Hydra heads read the path's tokens: they run on the host, from the hidden row")

// hydraNode is one node of a request's Hydra tree under construction.
type hydraNode struct {
	path   int   // index into the tree's paths
	parent int32 // node index, -1 = the pending token
	depth  int   // 1 = a child of the pending token
	// k: candidates its children need from the next head (largest
	// child rank + 1; 0: no children)
	k int
}

// hydraPlan is one request's tree: the tree's first paths that fit its
// budget and depth, in priority order (parents first), and the tokens
// filled in depth by depth.
type hydraPlan struct {
	req   int // index into the step's requests
	x1    int32
	nodes []hydraNode
	rootK int // candidates the depth-1 nodes need from head 0
	toks  []int32
	kids  [][]int32 // per node, then the root last: child node indices in order
}

// proposeHydra is Propose for Hydra heads: per request it takes the same
// prefix of the tree as layTree would (budget, MaxDepth), then builds the
// tree depth by depth: head d runs on every depth-d node that has children
// (depth 0: the pending token) with that node's path tokens, batched over
// all requests of the step (one matmul per layer), and its children take
// their ranks of that head's top-k. ProposeRequest.HeadTop is ignored
// (Hydra heads are never registered on a backend).
func (p *Proposer) proposeHydra(reqs []engine.ProposeRequest) ([]engine.Proposal, error) {
	H, V, R := p.heads.Hidden, p.heads.Vocab, p.heads.Rows()
	out := make([]engine.Proposal, len(reqs))
	var plans []*hydraPlan
	maxD := 0
	for i, r := range reqs {
		if r.Hidden == nil || r.Budget <= 0 || r.MaxDepth <= 0 || len(r.Generated) == 0 {
			continue
		}
		if len(r.Hidden) != H {
			return nil, fmt.Errorf("medusa: request %d: hidden row of %d values, want hidden_size %d", r.ID, len(r.Hidden), H)
		}
		x1 := r.Generated[len(r.Generated)-1]
		if x1 < 0 || int(x1) >= V {
			return nil, fmt.Errorf("medusa: request %d: pending token %d outside the vocabulary [0, %d)", r.ID, x1, V)
		}
		pl := &hydraPlan{req: i, x1: x1}
		p.tree.lay(r.Budget, r.MaxDepth, func(_, rank int) bool { return rank < R }, func(pi int, par int32) {
			path := p.tree.Paths[pi]
			k := path[len(path)-1] + 1
			if par < 0 {
				pl.rootK = max(pl.rootK, k)
			} else {
				pl.nodes[par].k = max(pl.nodes[par].k, k)
			}
			pl.nodes = append(pl.nodes, hydraNode{path: pi, parent: par, depth: len(path)})
			maxD = max(maxD, len(path))
		})
		if len(pl.nodes) == 0 {
			continue
		}
		pl.toks = make([]int32, len(pl.nodes))
		pl.kids = make([][]int32, len(pl.nodes)+1)
		for n, nd := range pl.nodes {
			par := int(nd.parent)
			if par < 0 {
				par = len(pl.nodes)
			}
			pl.kids[par] = append(pl.kids[par], int32(n))
		}
		plans = append(plans, pl)
	}
	if len(plans) == 0 {
		return out, nil
	}
	// the requests' hidden rows, once
	hidden := make([]float32, len(plans)*H)
	for q, pl := range plans {
		copy(hidden[q*H:], reqs[pl.req].Hidden)
	}
	type expand struct {
		plan int   // index into plans
		node int32 // -1: the pending token
		k    int
	}
	var (
		exps []expand
		row  []int32
		toks []int32
		top  []int32
	)
	for d := 0; d < maxD; d++ {
		// head d on every depth-d node with children (d = 0: the root)
		exps, row, toks = exps[:0], row[:0], toks[:0]
		for q, pl := range plans {
			if d == 0 {
				if pl.rootK > 0 {
					exps = append(exps, expand{q, -1, pl.rootK})
					row = append(row, int32(q))
					toks = append(toks, pl.x1)
				}
				continue
			}
			for n, nd := range pl.nodes {
				if nd.depth != d || nd.k == 0 {
					continue
				}
				exps = append(exps, expand{q, int32(n), nd.k})
				row = append(row, int32(q))
				start := len(toks)
				toks = append(toks, make([]int32, d+1)...)
				path := toks[start:]
				path[0] = pl.x1
				for a := int32(n); a >= 0; a = pl.nodes[a].parent {
					path[pl.nodes[a].depth] = pl.toks[a]
				}
			}
		}
		if len(exps) == 0 {
			break
		}
		p.buf = p.heads.HydraLogits(d, hidden, len(plans), row, toks, p.buf)
		for e, x := range exps {
			top = TopK(p.buf[e*R:(e+1)*R], x.k, top[:0])
			pl := plans[x.plan]
			par := int(x.node)
			if par < 0 {
				par = len(pl.nodes)
			}
			for _, c := range pl.kids[par] {
				rank := p.tree.Paths[pl.nodes[c].path][d]
				pl.toks[c] = p.heads.TokenOf(int(top[rank]))
			}
		}
	}
	for _, pl := range plans {
		parents := make([]int32, len(pl.nodes))
		for n, nd := range pl.nodes {
			parents[n] = nd.parent
		}
		out[pl.req] = engine.Proposal{Tokens: pl.toks, Parents: parents, Source: SourceHydra}
	}
	return out, nil
}
