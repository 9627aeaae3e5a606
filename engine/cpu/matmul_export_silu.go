package cpu

// AddSiLU sets x[i] += SiLU(t[i] + b[i mod len(b)]) for x and t of the same
// length, a multiple of len(b); t is overwritten. It is Mat.ResBlock's
// epilogue (the backend's SiLU kernel), for proposers whose residual block
// has a non-square or split matmul (Hydra heads' first block, which reads
// the hidden row and the path's token vectors).
func AddSiLU(x, t, b []float32) {
	if len(t) < len(x) || len(b) == 0 || len(x)%len(b) != 0 {
		panic("engine: AddSiLU: t shorter than x, or len(x) not a multiple of len(b)")
	}
	addSiLU(x, t, b)
}
