//go:build cuda

package kernels

import "math"

// gemvRef is the float64 reference of Gemv and of its int8 / int4 forms for
// M tokens: token m reads row xrow[m] of X (row m when xrow is nil), the norm
// kinds scale it by rsqrt(mean square + eps) and nw, w(n, k) is the weight
// (dequantized for the quantized forms), GemvResid adds Y0 and GemvSwiGLU
// combines rows 2u and 2u+1.
func gemvRef(kind GemvKind, X []float32, xrow []int32, nw []uint16, Y0 []float32, M, N, K int, eps float64,
	w func(n, k int) float64) []float64 {
	outW := N
	if kind == GemvSwiGLU {
		outW = N / 2
	}
	want := make([]float64, M*outW)
	for m := 0; m < M; m++ {
		src := m
		if xrow != nil {
			src = int(xrow[m])
		}
		in := make([]float64, K)
		var ss float64
		for k := 0; k < K; k++ {
			in[k] = float64(X[src*K+k])
			ss += in[k] * in[k]
		}
		if kind == GemvNorm || kind == GemvSwiGLU {
			s := 1 / math.Sqrt(ss/float64(K)+eps)
			for k := range in {
				in[k] *= s * h2f(nw[k])
			}
		}
		dot := func(n int) float64 {
			var a float64
			for k := 0; k < K; k++ {
				a += w(n, k) * in[k]
			}
			return a
		}
		for u := 0; u < outW; u++ {
			switch kind {
			case GemvResid:
				want[m*outW+u] = float64(Y0[m*outW+u]) + dot(u)
			case GemvSwiGLU:
				g, up := dot(2*u), dot(2*u+1)
				want[m*outW+u] = g / (1 + math.Exp(-g)) * up
			default:
				want[m*outW+u] = dot(u)
			}
		}
	}
	return want
}
