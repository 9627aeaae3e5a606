package engine

import (
	"runtime"
	"sync"
)

// parallelFor runs fn over [0, n) split into at most threads contiguous
// half-open chunks [lo, hi), each a multiple of align (except the last), on
// separate goroutines, and waits for all of them.
func parallelFor(threads, n, align int, fn func(lo, hi int)) {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	if align <= 0 {
		align = 1
	}
	if threads == 1 || n <= align {
		fn(0, n)
		return
	}
	chunk := (n + threads - 1) / threads
	chunk = (chunk + align - 1) / align * align
	var wg sync.WaitGroup
	for lo := chunk; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	fn(0, min(chunk, n))
	wg.Wait()
}

// tokenTile is the number of activation rows kept hot while a block of
// weight rows streams past them.
const tokenTile = 64

// matmulT computes out[t][o] = sum_k x[t][k] * w[o][k] for t in [0, T),
// o in [0, outDim): x is [T][in], w is [outDim][in] (nn.Linear layout), out
// is [T][outDim], all row-major. Work is split over output rows across
// threads; tokens are processed in tiles so that prefill is a GEMM that
// reuses each weight row for 4 tokens at a time.
func matmulT(threads int, out, x, w []float32, T, in, outDim int) {
	_ = out[T*outDim-1]
	_ = x[T*in-1]
	_ = w[outDim*in-1]
	work := T * outDim * in
	if work < 1<<15 {
		threads = 1
	}
	parallelFor(threads, outDim, 8, func(olo, ohi int) {
		for t0 := 0; t0 < T; t0 += tokenTile {
			t1 := min(t0+tokenTile, T)
			t := t0
			for ; t+4 <= t1; t += 4 {
				x0 := x[t*in : t*in+in]
				x1 := x[(t+1)*in : (t+1)*in+in]
				x2 := x[(t+2)*in : (t+2)*in+in]
				x3 := x[(t+3)*in : (t+3)*in+in]
				for o := olo; o < ohi; o++ {
					s0, s1, s2, s3 := dot4(w[o*in:o*in+in], x0, x1, x2, x3)
					out[t*outDim+o] = s0
					out[(t+1)*outDim+o] = s1
					out[(t+2)*outDim+o] = s2
					out[(t+3)*outDim+o] = s3
				}
			}
			for ; t < t1; t++ {
				xt := x[t*in : t*in+in]
				for o := olo; o < ohi; o++ {
					out[t*outDim+o] = dot(w[o*in:o*in+in], xt)
				}
			}
		}
	})
}

// dot is a float32 dot product with 8 independent accumulators.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	k := 0
	for ; k+8 <= len(a); k += 8 {
		aa := a[k : k+8 : k+8]
		bb := b[k : k+8 : k+8]
		s0 += aa[0] * bb[0]
		s1 += aa[1] * bb[1]
		s2 += aa[2] * bb[2]
		s3 += aa[3] * bb[3]
		s4 += aa[4] * bb[4]
		s5 += aa[5] * bb[5]
		s6 += aa[6] * bb[6]
		s7 += aa[7] * bb[7]
	}
	for ; k < len(a); k++ {
		s0 += a[k] * b[k]
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}

// dot4 computes the dot products of w with four vectors, reading w once,
// with two accumulators per vector.
func dot4(w, x0, x1, x2, x3 []float32) (float32, float32, float32, float32) {
	n := len(w)
	x0, x1, x2, x3 = x0[:n], x1[:n], x2[:n], x3[:n]
	var a0, a1, a2, a3, b0, b1, b2, b3 float32
	k := 0
	for ; k+2 <= n; k += 2 {
		w0, w1 := w[k], w[k+1]
		a0 += w0 * x0[k]
		a1 += w0 * x1[k]
		a2 += w0 * x2[k]
		a3 += w0 * x3[k]
		b0 += w1 * x0[k+1]
		b1 += w1 * x1[k+1]
		b2 += w1 * x2[k+1]
		b3 += w1 * x3[k+1]
	}
	for ; k < n; k++ {
		a0 += w[k] * x0[k]
		a1 += w[k] * x1[k]
		a2 += w[k] * x2[k]
		a3 += w[k] * x3[k]
	}
	return a0 + b0, a1 + b1, a2 + b2, a3 + b3
}
