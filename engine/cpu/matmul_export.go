package cpu

// Mat is a weight matrix prepared for the CPU backend's matmul, for the
// small extra projections of proposers that run beside the target (Medusa
// heads): packed once for the register-blocked kernels (binary16 when every
// value converts exactly, as the backend does for fp16 checkpoints).
// Read-only after NewMat; safe for concurrent use.
type Mat struct {
	w wmat
}

// NewMat prepares w ([out][in], nn.Linear layout, row-major; aliased, not
// copied: do not modify it afterwards).
func NewMat(w []float32, out, in int) *Mat {
	if len(w) < out*in {
		panic("engine: NewMat: weight smaller than [out][in]")
	}
	return &Mat{w: newWmat(w, out, in, newWmatExact(w[:out*in]))}
}

// Rows and Cols are the matrix's out and in sizes.
func (m *Mat) Rows() int { return m.w.out }
func (m *Mat) Cols() int { return m.w.in }

// MulT computes out[t][o] = sum_k x[t][k] * w[o][k] for t in [0, T): x is
// [T][Cols], out [T][Rows], row-major; threads as in the CPU backend (0 =
// GOMAXPROCS). The same kernels and order of operations as the backend's
// own matmuls.
func (m *Mat) MulT(threads int, out, x []float32, T int) {
	matmulJobs(fan(threads), x, T, m.w.in, mmJob{out: out, w: &m.w, n: m.w.out})
}
