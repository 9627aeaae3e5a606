package speculative

import (
	"fmt"
	"math"
	"sort"

	"github.com/specgate/specgate/engine"
)

// proposal is one step's draft tree with the draft distributions it was
// drawn from.
type proposal struct {
	tree *Tree
	// q[v+1] is the draft distribution ([VocabSize]) at node v (v = -1: the
	// root) from which v's children were chosen; nil for unexpanded nodes.
	// Greedy proposals hold the temperature-1 ranking distribution.
	q      [][]float64
	greedy bool
	// kids[v+1] lists v's children in proposal (draw) order.
	kids [][]int
	// conf[d] is the draft's top probability where the depth-d+1 node of a
	// confidence-stopped greedy chain was drawn (see propose).
	conf []float64
}

// greedyParams is the distribution greedy proposals rank candidates by: the
// request's penalties (so the draft ranks what the target will argmax), at
// temperature 1 without truncation.
func greedyParams(p engine.SamplingParams) engine.SamplingParams {
	return engine.SamplingParams{Temperature: 1, PresencePenalty: p.PresencePenalty, FrequencyPenalty: p.FrequencyPenalty}
}

// noPenalties reports whether the request's distribution ignores history.
func noPenalties(p engine.SamplingParams) bool {
	return p.PresencePenalty == 0 && p.FrequencyPenalty == 0
}

// dist is the draft distribution at a node whose path below the root is
// path: under sampling exactly the target's transforms (s.Probs), under
// greedy decoding the ranking distribution (softmax at temperature 1 after
// the request's penalties). Greedy chains only need the argmax: they get a
// one-hot vector without the softmax.
func (d *Draft) dist(s *engine.SpecState, row []float32, path []int32, greedy bool) []float64 {
	if greedy && noPenalties(s.Params) {
		out := make([]float64, len(row))
		if d.cfg.Method == MethodChain {
			out[engine.Argmax(row)] = 1
			return out
		}
		return softmax64(row, out)
	}
	var p []float32
	if greedy {
		hist := append(append(make([]int32, 0, len(s.Generated)+len(path)), s.Generated...), path...)
		p = engine.Probs(row, greedyParams(s.Params), hist)
	} else {
		p = s.Probs(row, path)
	}
	out := make([]float64, len(p))
	for i, v := range p {
		out[i] = float64(v)
	}
	return out
}

// maxProb is the largest probability of softmax(row) (row non-empty).
func maxProb(row []float32) float64 {
	mx := row[0]
	for _, v := range row {
		mx = max(mx, v)
	}
	var sum float64
	for _, v := range row {
		if x := float64(v - mx); x > -40 {
			sum += math.Exp(x)
		}
	}
	return 1 / sum
}

// softmax64 writes softmax(row) into out (len(row)) and returns it.
func softmax64(row []float32, out []float64) []float64 {
	mx := float64(row[0])
	for _, v := range row {
		mx = max(mx, float64(v))
	}
	var sum float64
	for i, v := range row {
		e := math.Exp(float64(v) - mx)
		out[i] = e
		sum += e
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

// propose builds the draft tree of at most depth levels below Pending. The
// draft sequence ends at Pending on entry (rootRow is its last logits row);
// on return it holds the same tokens (trees) or Pending plus the chain's
// first depth-1 tokens (chains), which the next sync trims.
//
// With cm non-nil (adaptive greedy chains that the controller's plan chose
// to speculate: the first level is always proposed) the chain stops at the
// depth D >= 1 that maximizes the step's expected tokens per cost, E(D)/cost(D), where
// E(D) = 1 + Σ_{d≤D} Π_{i≤d} c_i with c_i the draft's top probability at
// level i (its confidence, read before level i's token is added) and
// cost(D) = cm.forward(1+D) + cm.draft·max(D, 1) (the catch-up forward is
// paid either way). Greedy output does not depend on the proposal, so
// this stays lossless.
func (d *Draft) propose(s *engine.SpecState, st *reqState, rootRow []float32, depth int, cm *costModel) (*proposal, error) {
	// (c_i is calibrated per request: controller.acceptProb.)
	greedy := s.Params.Temperature <= 0
	p := &proposal{tree: &Tree{}, greedy: greedy}
	confStop := cm != nil && greedy && d.cfg.Method == MethodChain
	var expTok, run, bestRatio float64
	if confStop {
		expTok, run, bestRatio = 1, 1, 1/(1+cm.draft)
	}
	lastRow := rootRow
	p.q = [][]float64{d.dist(s, rootRow, nil, greedy)}
	cums := []float64{1} // cumulative draft probability, indexed like q
	frontier := []int{-1}
	budget := d.cfg.Budget
	V := d.draft.Config.VocabSize
	for lvl := 1; lvl <= depth; lvl++ {
		if confStop {
			conf := maxProb(lastRow)
			c := st.ctl.acceptProb(conf)
			e := expTok + run*c
			ratio := e / (cm.forward(1+lvl) + cm.draft*float64(lvl))
			if ratio <= bestRatio && lvl > 1 {
				break
			}
			expTok, run, bestRatio = e, run*c, ratio
			p.conf = append(p.conf, conf)
		}
		counts := d.allocate(p, cums, frontier, lvl, budget-p.tree.Len())
		var fresh []int
		for i, f := range frontier {
			if counts[i] == 0 {
				continue
			}
			q := p.q[f+1]
			var toks []int32
			if greedy || d.rule == ruleTopKChildren {
				toks = topN(q, counts[i])
			} else {
				toks = drawWithoutReplacement(q, counts[i], s.Rand.Float64)
			}
			for _, tok := range toks {
				n := p.tree.Add(tok, int32(f))
				cums = append(cums, cums[f+1]*q[tok])
				p.q = append(p.q, nil)
				fresh = append(fresh, n)
			}
		}
		if len(fresh) == 0 || lvl == depth || p.tree.Len() >= budget {
			break
		}
		rows, err := d.forwardLevel(st, p.tree, fresh)
		if err != nil {
			st.seq.KeepTree(nil) //nolint:errcheck // no tree pending is fine
			return nil, err
		}
		for j, n := range fresh {
			p.q[n+1] = d.dist(s, rows[j*V:(j+1)*V], p.tree.PathTokens(n), greedy)
		}
		lastRow = rows[:V]
		frontier = fresh
	}
	if st.seq.TreeLen() > 0 {
		if err := st.seq.KeepTree(nil); err != nil {
			return nil, err
		}
	}
	p.kids = make([][]int, p.tree.Len()+1)
	for i, par := range p.tree.Parents {
		p.kids[par+1] = append(p.kids[par+1], i)
	}
	return p, nil
}

// forwardLevel runs one draft forward that yields the logits rows of the
// nodes fresh (row-major [len(fresh)][VocabSize]). Chains commit the one new
// token (cheap; trimmed by the next sync); trees append only the new level
// to the draft's pending tree (parents index the tree so far, -1 = Pending,
// the last committed draft token), so depth d costs d levels of draft
// compute in all, not d². fresh must be the tree's last len(fresh) nodes,
// in index order (Tree.Add order); propose drops the pending tree at the end.
func (d *Draft) forwardLevel(st *reqState, t *Tree, fresh []int) ([]float32, error) {
	if d.cfg.Method == MethodChain {
		return st.seq.Forward([]int32{t.Tokens[fresh[0]]}, nil, nil)
	}
	from := st.seq.TreeLen()
	if from != fresh[0] || fresh[len(fresh)-1] != t.Len()-1 {
		return nil, fmt.Errorf("speculative: draft tree holds %d nodes, level is nodes [%d, %d] of %d", from, fresh[0], fresh[len(fresh)-1], t.Len())
	}
	return st.seq.Forward(t.Tokens[from:], t.Parents[from:], nil)
}

// allocate returns how many children each frontier node gets at level lvl,
// at most left in all. Chains: one. Static trees: Branching[lvl-1] per node,
// nodes in order of cumulative probability. Dynamic trees: the Width child
// slots with the highest cumulative probability cum(parent)*q(j-th best
// token of the parent) over the whole frontier (EAGLE-2's global
// re-ranking, decided from the parents' distributions before any child is
// drawn, so that sampled trees stay lossless).
func (d *Draft) allocate(p *proposal, cums []float64, frontier []int, lvl, left int) []int {
	counts := make([]int, len(frontier))
	if left <= 0 {
		return counts
	}
	order := make([]int, len(frontier))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return cums[frontier[order[a]]+1] > cums[frontier[order[b]]+1] })
	switch d.cfg.Method {
	case MethodChain:
		counts[order[0]] = 1
	case MethodTree:
		b := d.cfg.Branching[min(lvl-1, len(d.cfg.Branching)-1)]
		for _, i := range order {
			c := min(b, left)
			counts[i] = c
			left -= c
		}
	case MethodDynamic:
		type slot struct {
			i     int
			score float64
		}
		w := min(d.cfg.Width, left)
		var slots []slot
		for _, i := range order {
			q := p.q[frontier[i]+1]
			for _, tok := range topN(q, w) {
				slots = append(slots, slot{i, cums[frontier[i]+1] * q[tok]})
			}
		}
		sort.SliceStable(slots, func(a, b int) bool { return slots[a].score > slots[b].score })
		for _, sl := range slots[:min(w, len(slots))] {
			counts[sl.i]++
		}
	}
	return counts
}

// topN returns the n most likely tokens of q with nonzero probability, most
// likely first (ties: lower id first). One pass, O(len(q)*n).
func topN(q []float64, n int) []int32 {
	if n <= 0 {
		return nil
	}
	out := make([]int32, 0, n+1)
	for i, v := range q {
		if v <= 0 || (len(out) == n && v <= q[out[n-1]]) {
			continue
		}
		j := len(out)
		for j > 0 && q[out[j-1]] < v {
			j--
		}
		out = append(out, 0)
		copy(out[j+1:], out[j:])
		out[j] = int32(i)
		if len(out) > n {
			out = out[:n]
		}
	}
	return out
}

// drawWithoutReplacement draws up to n distinct tokens from q: the j-th draw
// is distributed as q restricted to the tokens not drawn yet, renormalized
// (the proposal distribution that stochastic verification divides by). It
// stops early when q's support is exhausted. u returns uniforms in [0, 1).
func drawWithoutReplacement(q []float64, n int, u func() float64) []int32 {
	out := make([]int32, 0, n)
	taken := make([]bool, len(q))
	for len(out) < n {
		var total float64
		for i, v := range q {
			if !taken[i] {
				total += v
			}
		}
		if total <= 0 {
			break
		}
		x := u() * total
		pick, last := -1, -1
		var cum float64
		for i, v := range q {
			if taken[i] || v <= 0 {
				continue
			}
			last = i
			cum += v
			if x < cum {
				pick = i
				break
			}
		}
		if pick < 0 {
			pick = last
		}
		taken[pick] = true
		out = append(out, int32(pick))
	}
	return out
}
