package cpu

import "sync/atomic"

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

// ResBlock applies the residual block x ← x + SiLU(m x + b) to rows rows
// of x ([rows][Cols]; m square, b [Rows]); t is [rows][Rows] scratch,
// overwritten. The matmul is MulT's; SiLU is the backend's activation
// kernel (the MLP's): with AVX-512 a float32 polynomial exp (<= 2 ulp),
// else float64 math.Exp. For Medusa heads.
func (m *Mat) ResBlock(threads int, x, t, b []float32, rows int) {
	n := rows * m.w.out
	m.MulT(threads, t[:n], x[:n], rows)
	addSiLU(x[:n], t[:n], b[:m.w.out])
}

// addSiLU sets x[i] += SiLU(t[i] + b[i mod len(b)]) for x and t of the same
// length, a multiple of len(b); t is overwritten.
func addSiLU(x, t, b []float32) {
	n := len(b)
	t = t[:len(x)]
	for o := 0; o < len(t); o += n {
		addTo(t[o:o+n], b)
	}
	siluMul(t, onesOf(len(t)))
	addTo(x, t)
}

// ones is a read-only slice of 1s (siluMul's multiplier for a plain SiLU).
var ones atomic.Pointer[[]float32]

func onesOf(n int) []float32 {
	if p := ones.Load(); p != nil && len(*p) >= n {
		return (*p)[:n]
	}
	s := make([]float32, max(n, 1024))
	for i := range s {
		s[i] = 1
	}
	ones.Store(&s)
	return s[:n]
}
