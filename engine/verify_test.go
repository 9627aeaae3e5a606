package engine

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/specgate/specgate/internal/stattest"
)

// verifyFixture is a hand-made tree verification: target logits for the
// pending token's row and for each node, over a small vocabulary.
type verifyFixture struct {
	V    int
	rows []float32 // [1+n][V]
}

func softmaxF64(row []float32) []float64 {
	out := make([]float64, len(row))
	mx := math.Inf(-1)
	for _, v := range row {
		mx = math.Max(mx, float64(v))
	}
	var s float64
	for i, v := range row {
		out[i] = math.Exp(float64(v) - mx)
		s += out[i]
	}
	for i := range out {
		out[i] /= s
	}
	return out
}

// drawWO draws k distinct tokens from q without replacement.
func drawWO(q []float32, k int, rng *rand.Rand) []int32 {
	w := make([]float64, len(q))
	for i, x := range q {
		w[i] = float64(x)
	}
	var out []int32
	for range k {
		var tot float64
		for _, x := range w {
			tot += x
		}
		u := rng.Float64() * tot
		pick := -1
		for i, x := range w {
			if x <= 0 {
				continue
			}
			pick = i
			if u < x {
				break
			}
			u -= x
		}
		out = append(out, int32(pick))
		w[pick] = 0
	}
	return out
}

// TestVerifyTreeDistribution: the token verifyTree emits first follows the
// target's distribution at the root (chi-square, p > 0.01) for trees with
// two children drawn without replacement from a draft distribution far
// from the target, a deterministic child beside them, two independent
// draft groups, and deterministic children alone; and the second emitted
// token (after an accepted child or the bonus) follows the target's
// conditional. Negative controls: labelling the draft's top tokens as draws
// from q, and accepting a deterministic child whenever the target gives it
// at least 0.2, are detected (p < 1e-4).
func TestVerifyTreeDistribution(t *testing.T) {
	const V = 6
	rng := rand.New(rand.NewPCG(1, 2))
	root := []float32{2.0, 1.2, 0.3, 0.1, -0.5, -1.0}
	p := softmaxF64(root)
	q := []float32{0.05, 0.1, 0.4, 0.3, 0.1, 0.05} // far from p
	q2 := []float32{0.3, 0.3, 0.1, 0.1, 0.1, 0.1}
	params := SamplingParams{Temperature: 1}
	type build func(rng *rand.Rand) (toks, parents []int32, qs [][]float32)
	cases := []struct {
		name  string
		build build
		lossy bool
	}{
		{"two q-children", func(rng *rand.Rand) ([]int32, []int32, [][]float32) {
			d := drawWO(q, 2, rng)
			return d, []int32{-1, -1}, [][]float32{q, q}
		}, false},
		{"q-children and a deterministic child", func(rng *rand.Rand) ([]int32, []int32, [][]float32) {
			d := drawWO(q, 2, rng)
			return []int32{d[0], d[1], 1}, []int32{-1, -1, -1}, [][]float32{q, q, nil}
		}, false},
		{"two draft groups", func(rng *rand.Rand) ([]int32, []int32, [][]float32) {
			a, b := drawWO(q, 1, rng), drawWO(q2, 2, rng)
			return []int32{a[0], b[0], b[1]}, []int32{-1, -1, -1}, [][]float32{q, q2, q2}
		}, false},
		{"deterministic children", func(*rand.Rand) ([]int32, []int32, [][]float32) {
			return []int32{0, 2, 5}, []int32{-1, -1, -1}, nil
		}, false},
		{"wrong: top tokens labelled as draws", func(*rand.Rand) ([]int32, []int32, [][]float32) {
			return []int32{2, 3}, []int32{-1, -1}, [][]float32{q, q}
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			const n = 40000
			first := make([]int, V)
			second := make([][]int, V) // second[x]: tokens after an accepted child x
			for i := range second {
				second[i] = make([]int, V)
			}
			// below each node: its own logits row, a function of its token,
			// so that the second token's exact conditional is known.
			childRow := func(tok int32) []float32 {
				r := make([]float32, V)
				for i := range r {
					r[i] = float32((int(tok)*7+i*3)%V) * 0.4
				}
				return r
			}
			for range n {
				toks, parents, qs := c.build(rng)
				rows := append([]float32(nil), root...)
				for _, tk := range toks {
					rows = append(rows, childRow(tk)...)
				}
				vd := verifyTree(toks, parents, qs, rows, V, params, nil, rng, nil)
				emitted := append([]int32(nil), vd.bonus)
				if len(vd.path) > 0 {
					emitted = []int32{toks[vd.path[0]], vd.bonus}
					if len(vd.path) > 1 {
						t.Fatalf("path %v deeper than the tree", vd.path)
					}
				}
				first[emitted[0]]++
				if len(emitted) > 1 {
					second[emitted[0]][emitted[1]]++
				}
			}
			_, _, pv := stattest.ChiSquare(first, p)
			if c.lossy {
				if pv > 1e-4 {
					t.Fatalf("wrong rule not detected: p %.4f (counts %v, p %.3v)", pv, first, p)
				}
				return
			}
			if pv <= 0.01 {
				t.Fatalf("first token not the target's distribution: p %.4f\ncounts %v\nprobs  %.4v", pv, first, p)
			}
			t.Logf("first token p-value %.3f", pv)
			for x, cs := range second {
				total := 0
				for _, k := range cs {
					total += k
				}
				if total < 2000 {
					continue
				}
				if _, _, pv2 := stattest.ChiSquare(cs, softmaxF64(childRow(int32(x)))); pv2 <= 0.01 {
					t.Fatalf("token after accepted child %d not the target's conditional: p %.4f", x, pv2)
				} else {
					t.Logf("after child %d (%d samples): p-value %.3f", x, total, pv2)
				}
			}
		})
	}
	// power check: a rule that also takes a deterministic child the target
	// gives >= 0.2 half the time it was not sampled (a "likely enough"
	// shortcut) is biased, and this many samples detect it.
	t.Run("power: likely deterministic child shortcut", func(t *testing.T) {
		counts := make([]int, V)
		for range 40000 {
			vd := verifyTree([]int32{1}, []int32{-1}, nil, append(append([]float32(nil), root...), root...), V, params, nil, rng, nil)
			tok := vd.bonus
			if len(vd.path) > 0 {
				tok = 1
			}
			if p[1] >= 0.2 && len(vd.path) == 0 && rng.Float64() < 0.5 {
				tok = 1 // the shortcut
			}
			counts[tok]++
		}
		if _, _, pv := stattest.ChiSquare(counts, p); pv > 1e-4 {
			t.Fatalf("biased shortcut not detected: p %.4f", pv)
		}
	})
}

// TestVerifyTreeGreedy: greedy verification follows the argmax down the
// tree and returns the target's choice after the last match, whatever the
// other branches hold.
func TestVerifyTreeGreedy(t *testing.T) {
	const V = 5
	rows := []float32{
		0, 0, 3, 0, 0, // root: argmax 2
		0, 4, 0, 0, 0, // node 0 (token 2): argmax 1
		0, 0, 0, 0, 9, // node 1 (token 3, wrong branch)
		0, 0, 0, 7, 0, // node 2 (token 1 below node 0): argmax 3
	}
	toks := []int32{2, 3, 1}
	parents := []int32{-1, -1, 0}
	vd := verifyTree(toks, parents, nil, rows, V, SamplingParams{}, nil, nil, nil)
	if len(vd.path) != 2 || vd.path[0] != 0 || vd.path[1] != 2 || vd.bonus != 3 {
		t.Fatalf("path %v bonus %d, want [0 2] and 3", vd.path, vd.bonus)
	}
}
