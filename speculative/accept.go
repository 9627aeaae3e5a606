package speculative

import (
	"github.com/specgate/specgate/engine"
)

// accept walks the verified tree from the root and returns the accepted
// path (node indices, root first), the bonus/correction token sampled from
// the target, and the number of levels at which a choice was tried (for the
// adaptive controller). logits is ForwardTree's output ([1+n][VocabSize]).
//
// Greedy (temperature 0): at each node the target's choice t = argmax of
// s.Probs; the walk moves to the child whose token is t, else t is the bonus.
// The output is the target's greedy output whatever the draft proposed.
//
// Sampling: recursive rejection sampling over children drawn without
// replacement (SpecInfer's multi-step speculative sampling generalized as in
// SpecTr/Sequoia). At node v with target distribution r := p_v and draft
// distribution q_v, for the j-th child c_j (drawn from q_j := q_v restricted
// to the tokens not drawn before, renormalized): accept with probability
// min(1, r(c_j)/q_j(c_j)); on rejection r := norm(max(0, r - q_j)). When all
// children are rejected the correction token is drawn from r.
//
// Proof sketch (lossless). Claim: the token emitted at v (accepted child or
// correction) has distribution p_v. Induction on the number of children m.
// m = 0: drawn from r = p_v. m > 0: given the history (earlier children and
// their rejections), c_j ~ q_j, so P(accept c_j and c_j = y) = q_j(y)
// min(1, r(y)/q_j(y)) = min(q_j(y), r(y)), and P(reject) = 1 - sum min(q_j, r)
// = sum max(0, r - q_j) =: Z. After a rejection the rest of the procedure is
// the same procedure with m-1 children drawn from the next q's and target
// norm(max(0, r - q_j)), which by induction emits that residual; so
// P(emit y) = min(q_j(y), r(y)) + Z * max(0, r(y) - q_j(y))/Z = r(y). The
// induction needs only that each c_j, given everything decided before it,
// is distributed as the q_j the verifier divides by: true for draws without
// replacement, and true for how many children a node gets as long as that
// number is fixed before they are drawn (Draft.allocate decides from the
// parents' distributions only). An accepted child's subtree was drawn from
// the draft at that child's context, independently of the acceptance coin,
// so the argument repeats level by level: every emitted token has the
// target's conditional distribution given the emitted prefix. Deterministic
// top-k children violate the premise (ruleTopKChildren, a negative control
// in the tests, is measurably biased).
func (d *Draft) accept(s *engine.SpecState, p *proposal, logits []float32) (path []int, bonus int32, trials int) {
	V := d.target.Config.VocabSize
	v := -1
	var toks []int32
	for {
		row := logits[(v+1)*V : (v+2)*V]
		kids := p.kids[v+1]
		if len(kids) > 0 {
			trials++
		}
		if p.greedy {
			// plain greedy decoding's choice (engine.Sample): the logits'
			// argmax, or the argmax of the penalized distribution.
			var t int32
			if noPenalties(s.Params) {
				t = engine.Argmax(row)
			} else {
				t = engine.Argmax(s.Probs(row, toks))
			}
			next := -1
			for _, c := range kids {
				if p.tree.Tokens[c] == t {
					next = c
					break
				}
			}
			if next < 0 {
				return path, t, trials
			}
			path = append(path, next)
			toks = append(toks, t)
			v = next
			continue
		}
		probs := s.Probs(row, toks)
		pv := make([]float64, V)
		for i, x := range probs {
			pv[i] = float64(x)
		}
		next := -1
		if len(kids) > 0 {
			r := append([]float64(nil), pv...)
			q := append([]float64(nil), p.q[v+1]...)
			normalize(q)
			for _, c := range kids {
				x := p.tree.Tokens[c]
				u := s.Rand.Float64()
				if q[x] > 0 && u*q[x] < r[x] {
					next = c
					break
				}
				if d.rule != ruleBonusFromP {
					res := make([]float64, V)
					for i := range res {
						res[i] = max(0, r[i]-q[i])
					}
					// Z = 0 only through rounding (a rejection has probability Z);
					// keep r then.
					if normalize(res) {
						r = res
					}
				}
				q[x] = 0
				if !normalize(q) {
					break
				}
			}
			if next < 0 {
				pv = r
			}
		}
		if next < 0 {
			return path, sample64(pv, s.Rand.Float64()), trials
		}
		path = append(path, next)
		toks = append(toks, p.tree.Tokens[next])
		v = next
	}
}

// normalize scales p to sum 1 and reports whether its sum was positive.
func normalize(p []float64) bool {
	var s float64
	for _, v := range p {
		s += v
	}
	if !(s > 0) {
		return false
	}
	for i := range p {
		p[i] /= s
	}
	return true
}

// sample64 draws from probs with the uniform u: the first token whose
// cumulative probability exceeds u*total (the last nonzero one on rounding).
func sample64(probs []float64, u float64) int32 {
	var total float64
	for _, v := range probs {
		total += v
	}
	x := u * total
	var cum float64
	last := int32(0)
	for i, v := range probs {
		if v <= 0 {
			continue
		}
		cum += v
		last = int32(i)
		if x < cum {
			return int32(i)
		}
	}
	return last
}
