package speculative

import (
	"math"
	"sort"

	"github.com/specgate/specgate/engine"
)

// proposal is one request's draft tree with the draft distributions it
// was drawn from.
type proposal struct {
	tree *Tree
	// q[v+1] is the draft distribution ([VocabSize]) at node v (v = -1: the
	// root) from which v's children were chosen; nil for unexpanded nodes.
	// Greedy proposals hold the temperature-1 ranking distribution.
	q [][]float64
	// picks[v+1] is the one child token of node v in a greedy chain
	// (q[v+1] nil: the draft's argmax, no distribution needed), else -1.
	picks []int32
	// label, when set (negative controls only), is what export hands the
	// engine as Q instead of q.
	label  [][]float64
	greedy bool
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
// path: under sampling exactly the target's transforms (engine.Probs with
// the request's parameters and history), under greedy decoding the ranking
// distribution (softmax at temperature 1 after the request's penalties).
// Greedy chains only need the argmax: they get a one-hot vector.
func (d *Draft) dist(r *engine.ProposeRequest, row []float32, path []int32, greedy bool) []float64 {
	if greedy && noPenalties(r.Params) {
		return softmax64(row, make([]float64, len(row)))
	}
	hist := append(append(make([]int32, 0, len(r.Generated)+len(path)), r.Generated...), path...)
	params := r.Params
	if greedy {
		params = greedyParams(r.Params)
	}
	p := engine.Probs(row, params, hist)
	out := make([]float64, len(p))
	for i, v := range p {
		out[i] = float64(v)
	}
	return out
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
