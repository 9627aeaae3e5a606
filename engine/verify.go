package engine

import (
	"math"
	"math/rand/v2"
)

// verdict is the outcome of verifying one draft tree.
type verdict struct {
	path   []int // accepted nodes, root first (indices into the tree)
	bonus  int32 // the token the target chose after the path (pending next)
	approx bool  // a typical-acceptance decision was made
}

// verifyTree walks a draft tree verified in one target forward and decides
// which nodes are accepted. rows holds the target logits [1+n][V]: row 0
// predicts the token after the pending token, row j+1 the token after node
// j. hist is the request's generated tokens (penalties count them).
//
// Greedy (temperature 0): at each node the target's choice is plain
// decoding's (Sample: argmax of the logits, or of the penalized
// distribution); the walk moves to the first child with that token, else
// that token is the bonus. The output is plain greedy decoding's, whatever
// was proposed.
//
// Sampling, lossless: at node v with target distribution r := p_v, the
// children that carry a draft distribution are tried first, group by group
// (a group = the siblings that share one Q slice, drawn from it without
// replacement in index order): child c_j is accepted with probability
// min(1, r(c_j)/q_j(c_j)), where q_j is Q restricted to the tokens of the
// group not drawn before c_j, renormalized; on rejection r :=
// norm(max(0, r - q_j)). If none is accepted, the next token t is drawn
// from r (the residual), and the walk moves into a deterministic child
// whose token is t, if any; else t is the bonus.
//
// Why this is lossless: for the token emitted at v, induction on the
// number of tried children shows it is distributed as p_v (accept-or-
// residual: P(emit y) = min(q_j(y), r(y)) + Z·max(0, r(y)-q_j(y))/Z = r(y),
// where Z = Σ max(0, r - q_j) is the rejection probability); this needs
// each c_j, given everything decided before it, to be distributed as the
// q_j used — true for draws without replacement from Q made before the
// verification, and for groups drawn independently of each other.
// Deterministic children do not change the emitted token's distribution:
// t is drawn from the residual either way; a matching child only lets the
// walk continue into its verified subtree, whose rows were computed with
// the same prefix. So every emitted token has the target's conditional
// distribution given the emitted prefix.
//
// With typ (Medusa's typical acceptance, approximate), a sampled request
// accepts the first child x (in index order) with p(x) > min(ε, δ·e^{-H(p)});
// when none passes, the bonus is drawn from p.
func verifyTree(toks, parents []int32, q [][]float32, rows []float32, V int, params SamplingParams,
	hist []int32, rng *rand.Rand, typ *TypicalAcceptance) verdict {
	kids := treeKids(parents)
	var path []int32 // accepted tokens (penalties count them)
	h := func() []int32 {
		if len(path) == 0 {
			return hist
		}
		return append(append(make([]int32, 0, len(hist)+len(path)), hist...), path...)
	}
	if params.Temperature <= 0 {
		if params.PresencePenalty == 0 && params.FrequencyPenalty == 0 {
			return walkGreedy(toks, kids, func(v int) int32 { return Argmax(rows[(v+1)*V : (v+2)*V]) })
		}
		return walkGreedy(toks, kids, func(v int) int32 {
			if v >= 0 {
				path = append(path, toks[v])
			}
			return Argmax(Probs(rows[(v+1)*V:(v+2)*V], params, h()))
		})
	}
	var out verdict
	v := -1
	for {
		row := rows[(v+1)*V : (v+2)*V]
		ks := kids[v+1]
		next := -1
		var t int32
		probs := Probs(row, params, h())
		if typ != nil {
			next, t = typicalPick(probs, toks, ks, typ, rng)
			out.approx = out.approx || len(ks) > 0
		} else {
			next, t = rejectPick(probs, toks, q, ks, rng)
		}
		if next < 0 {
			for _, c := range ks {
				if toks[c] == t && (q == nil || q[c] == nil) {
					next = c
					break
				}
			}
		}
		if next < 0 {
			out.bonus = t
			return out
		}
		out.path = append(out.path, next)
		path = append(path, toks[next])
		v = next
	}
}

// treeKids lists each node's children in index order: kids[v+1] for node
// v, kids[0] for the root (the pending token).
func treeKids(parents []int32) [][]int {
	kids := make([][]int, len(parents)+1)
	for i, p := range parents {
		kids[p+1] = append(kids[p+1], i)
	}
	return kids
}

// walkGreedy is the greedy walk over a draft tree (verifyTree, temperature
// 0; verifyArgmax): at node v (-1: the root) the target's token is
// target(v), called once per node along the accepted path in order; the
// walk moves to the first child with that token, else that token is the
// bonus.
func walkGreedy(toks []int32, kids [][]int, target func(v int) int32) verdict {
	var out verdict
	v := -1
	for {
		t := target(v)
		next := -1
		for _, c := range kids[v+1] {
			if toks[c] == t {
				next = c
				break
			}
		}
		if next < 0 {
			out.bonus = t
			return out
		}
		out.path = append(out.path, next)
		v = next
	}
}

// rejectPick runs recursive rejection sampling over the children ks of one
// node (see verifyTree). It returns the accepted child (or -1) and, when
// none was accepted, the token drawn from the residual.
func rejectPick(probs []float32, toks []int32, q [][]float32, ks []int, rng *rand.Rand) (int, int32) {
	var r []float64 // residual, materialized at the first rejection
	load := func() {
		if r == nil {
			r = make([]float64, len(probs))
			for i, x := range probs {
				r[i] = float64(x)
			}
		}
	}
	pr := func(x int32) float64 {
		if r == nil {
			return float64(probs[x])
		}
		return r[x]
	}
	same := func(a, b []float32) bool { return len(a) > 0 && len(b) > 0 && &a[0] == &b[0] }
	var groups [][]float32 // distinct draft distributions of ks, in order of first use
	for _, c := range ks {
		if q == nil || q[c] == nil {
			continue
		}
		known := false
		for _, g := range groups {
			known = known || same(g, q[c])
		}
		if !known {
			groups = append(groups, q[c])
		}
	}
	for _, grp := range groups {
		qq := make([]float64, len(grp))
		for i, x := range grp {
			qq[i] = float64(max(x, 0))
		}
		if !normalize64(qq) {
			continue
		}
		for _, k := range ks {
			if !same(q[k], grp) {
				continue
			}
			x := toks[k]
			u := rng.Float64()
			if qq[x] > 0 && u*qq[x] < pr(x) {
				return k, x
			}
			load()
			res := make([]float64, len(r))
			for i := range res {
				res[i] = max(0, r[i]-qq[i])
			}
			if normalize64(res) { // Z = 0 only through rounding: keep r then
				r = res
			}
			qq[x] = 0
			if !normalize64(qq) {
				break
			}
		}
	}
	u := rng.Float64()
	if r == nil {
		return -1, SampleProbs(probs, u)
	}
	return -1, sampleF64(r, u)
}

// typicalPick is Medusa's typical acceptance at one node.
func typicalPick(probs []float32, toks []int32, ks []int, typ *TypicalAcceptance, rng *rand.Rand) (int, int32) {
	var ent float64
	for _, p := range probs {
		if p > 0 {
			ent -= float64(p) * math.Log(float64(p))
		}
	}
	thr := min(float64(typ.Epsilon), float64(typ.Delta)*math.Exp(-ent))
	for _, c := range ks {
		if float64(probs[toks[c]]) > thr {
			return c, toks[c]
		}
	}
	return -1, SampleProbs(probs, rng.Float64())
}

// normalize64 scales p to sum 1 and reports whether its sum was positive.
func normalize64(p []float64) bool {
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

// sampleF64 draws from probs with the uniform u (the last nonzero token on rounding).
func sampleF64(probs []float64, u float64) int32 {
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
