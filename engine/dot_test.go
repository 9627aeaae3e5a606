package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// kernelPaths runs f with the portable kernels and, where the CPU has them,
// the AVX2+FMA kernels.
func kernelPaths(t *testing.T, f func(t *testing.T)) {
	saved := useAVX2
	defer func() { useAVX2 = saved }()
	paths := []bool{false}
	if saved {
		paths = append(paths, true)
	}
	for _, p := range paths {
		useAVX2 = p
		t.Run(fmt.Sprintf("avx2=%v", p), f)
	}
}

// TestDotKernels: dot matches a float64 reference for every length up to
// 100 (all block/tail splits), and dot2 equals two dots bit for bit.
func TestDotKernels(t *testing.T) {
	kernelPaths(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 4))
		for n := range 101 {
			w, x0, x1 := make([]float32, n), make([]float32, n+3), make([]float32, n)
			for i := range w {
				w[i], x0[i], x1[i] = float32(r.NormFloat64()), float32(r.NormFloat64()), float32(r.NormFloat64())
			}
			var ref float64
			for i := range w {
				ref += float64(w[i]) * float64(x0[i])
			}
			d := dot(w, x0)
			if math.Abs(float64(d)-ref) > 1e-5*(1+float64(n)) {
				t.Fatalf("n=%d: dot %v, float64 reference %v", n, d, ref)
			}
			a, b := dot2(w, x0, x1)
			if a != d || b != dot(w, x1) {
				t.Fatalf("n=%d: dot2 (%v, %v), dots (%v, %v)", n, a, b, d, dot(w, x1))
			}
		}
	})
}

// TestMatmulBatchInvariant: every row of a T-token matmul equals, bit for
// bit, the same token's 1-token matmul, for thread counts 1 and 3.
func TestMatmulBatchInvariant(t *testing.T) {
	kernelPaths(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		for _, sh := range [][3]int{{9, 37, 19}, {67, 64, 48}, {3, 384, 200}} {
			T, in, out := sh[0], sh[1], sh[2]
			x, w := make([]float32, T*in), make([]float32, out*in)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			for i := range w {
				w[i] = float32(r.NormFloat64())
			}
			for _, threads := range []int{1, 3} {
				y := make([]float32, T*out)
				matmulT(threads, y, x, w, T, in, out)
				for tt := range T {
					y1 := make([]float32, out)
					matmulT(threads, y1, x[tt*in:(tt+1)*in], w, 1, in, out)
					for o := range out {
						if y1[o] != y[tt*out+o] {
							t.Fatalf("shape %v threads %d: token %d row %d: batched %v, alone %v", sh, threads, tt, o, y[tt*out+o], y1[o])
						}
					}
				}
			}
		}
	})
}
