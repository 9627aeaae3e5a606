package medusa

import "math"

// Host head compute (the CPU side of Logits), kept apart from the format
// and loading code in heads.go.

// resBlock applies block j of head i to rows rows of x in place: x ← x +
// SiLU(W x + b); t is [rows][Hidden] scratch.
func (h *Heads) resBlock(i, j int, x, t []float32, rows int) {
	H := h.Hidden
	h.w[i][j].MulT(h.threads, t, x, rows)
	b := h.b[i][j]
	for r := range rows {
		xr, tr := x[r*H:(r+1)*H], t[r*H:(r+1)*H]
		for k := range xr {
			v := tr[k] + b[k]
			xr[k] += v / (1 + float32(math.Exp(float64(-v))))
		}
	}
}

// logitsShared is Logits for heads that share one projection (the
// target's lm_head, Shared): every head's residual blocks first, then one
// matmul of the projection over all heads' rows (head-major, the layout of
// out), so the projection's weights (1.5 MB for the shipped heads at a
// 2048-token limit) stream from memory once per step instead of once per
// head. Each output row is the projection of the same input row as in the
// per-head loop, and the CPU matmul gives a row the same bits whatever it
// is batched with, so the logits are identical.
func (h *Heads) logitsShared(hidden []float32, rows, nHeads int, out []float32) []float32 {
	H, R := h.Hidden, h.Rows()
	if len(out) < nHeads*rows*R {
		out = make([]float32, nHeads*rows*R)
	}
	x := make([]float32, nHeads*rows*H)
	t := make([]float32, rows*H)
	for i := range nHeads {
		xi := x[i*rows*H : (i+1)*rows*H]
		copy(xi, hidden[:rows*H])
		for j := range h.layers {
			h.resBlock(i, j, xi, t, rows)
		}
	}
	h.proj[0].MulT(h.threads, out[:nHeads*rows*R], x, nHeads*rows)
	return out[:nHeads*rows*R]
}
