package medusa

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestLogitsSharedBitIdentical: heads sharing the target's lm_head project
// all heads' rows in one matmul (logitsShared); every logit must have the
// bits of the per-head computation (each head's blocks, then its own
// projection of its rows), for 1..5 heads, 1 and 3 rows, with and without
// a vocabulary limit. The shipped heads have their own projections since
// the fourth training round; ShareLMHead makes them share the lm_head.
func TestLogitsSharedBitIdentical(t *testing.T) {
	target, _ := shipped(t)
	for _, vocab := range []int{0, 2048} {
		h, err := Load(shippedHeads, target, LoadOptions{VocabLimit: vocab, ShareLMHead: true})
		if err != nil {
			t.Fatal(err)
		}
		if !h.Shared {
			t.Fatal("ShareLMHead: heads do not share the lm_head: the test covers nothing")
		}
		H, R := h.Hidden, h.Rows()
		rng := rand.New(rand.NewPCG(7, uint64(vocab)))
		for _, rows := range []int{1, 3} {
			hidden := make([]float32, rows*H)
			for i := range hidden {
				hidden[i] = float32(rng.NormFloat64())
			}
			for n := 1; n <= h.NumHeads; n++ {
				got := h.Logits(hidden, rows, n, nil)
				x, tmp := make([]float32, rows*H), make([]float32, rows*H)
				want := make([]float32, rows*R)
				for i := range n {
					copy(x, hidden)
					for j := range h.layers {
						h.resBlock(i, j, x, tmp, rows)
					}
					h.proj[i].MulT(1, want, x, rows)
					for k, w := range want {
						if g := got[i*rows*R+k]; math.Float32bits(g) != math.Float32bits(w) {
							t.Fatalf("vocab %d, rows %d, %d heads: head %d logit %d = %v, per-head %v", vocab, rows, n, i, k, g, w)
						}
					}
				}
			}
		}
	}
}
