package medusa

// Host head compute (the CPU side of Logits), kept apart from the format
// and loading code in heads.go.

// resBlock applies block j of head i to rows rows of x in place: x ← x +
// SiLU(W x + b); t is [rows][Hidden] scratch.
func (h *Heads) resBlock(i, j int, x, t []float32, rows int) {
	H := h.Hidden
	h.w[i][j].ResBlock(h.threads, x[:rows*H], t[:rows*H], h.b[i][j], rows) // the backend's SiLU kernel (AVX-512: float32 exp)
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

// cpuRowHeads are the heads as the CPU backend runs them inside the
// target's forward (engine/cpu heads.go: on a worker, beside the LM head):
// the same Logits and TopK as Propose's host path, on every logits row of
// the step, for the heads the proposer's tree uses (depth); the other
// heads' candidates are -1 (fromDevice never reads past the tree's depth).
type cpuRowHeads struct {
	h     *Heads // a copy with threads 1: it runs on a pool worker
	depth int
	topk  []int // candidates per head (the tree's TopK)
	k     int   // row stride per head: max of topk
	buf   []float32
	top   []int32
}

func (c *cpuRowHeads) Width() int { return c.h.NumHeads * c.k }

func (c *cpuRowHeads) Top(hidden []float32, rows int, top []int32) {
	R, w := c.h.Rows(), c.Width()
	c.buf = c.h.Logits(hidden, rows, c.depth, c.buf)
	for r := range rows {
		for h := range c.h.NumHeads {
			dst := top[r*w+h*c.k : r*w+(h+1)*c.k]
			for j := range dst {
				dst[j] = -1
			}
			if h >= c.depth {
				continue
			}
			c.top = TopK(c.buf[(h*rows+r)*R:(h*rows+r+1)*R], c.topk[h], c.top[:0])
			for j, row := range c.top {
				dst[j] = c.h.TokenOf(int(row))
			}
		}
	}
}
