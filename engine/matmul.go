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

// rowBlock is the number of weight rows reused across a token tile.
const rowBlock = 16

// matmulT computes out[t][o] = sum_k x[t][k] * w[o][k] for t in [0, T),
// o in [0, outDim): x is [T][in], w is [outDim][in] (nn.Linear layout), out
// is [T][outDim], all row-major. Work is split over output rows across
// threads; tokens are processed in tiles so that prefill is a GEMM that
// reuses each weight row for 2 tokens at a time while the tile stays in cache.
//
// Batch invariance: every output element is computed with the same sequence
// of float32 operations (dot's 4-lane order) whatever T, the tile and the
// thread split are, so a token's logits do not depend on what it is batched
// with (speculative verification relies on this for exact greedy equality).
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
			// a block of weight rows stays in L1 while the token tile (in L2) streams past.
			for ob := olo; ob < ohi; ob += rowBlock {
				oe := min(ob+rowBlock, ohi)
				t := t0
				for ; t+2 <= t1; t += 2 {
					x0 := x[t*in : t*in+in]
					x1 := x[(t+1)*in : (t+1)*in+in]
					r0 := out[t*outDim : (t+1)*outDim]
					r1 := out[(t+1)*outDim : (t+2)*outDim]
					for o := ob; o < oe; o++ {
						r0[o], r1[o] = dot2(w[o*in:o*in+in], x0, x1)
					}
				}
				for ; t < t1; t++ {
					xt := x[t*in : t*in+in]
					rt := out[t*outDim : (t+1)*outDim]
					for o := ob; o < oe; o++ {
						rt[o] = dot(w[o*in:o*in+in], xt)
					}
				}
			}
		}
	})
}

// dot is the float32 dot product of a and b[:len(a)]. With AVX2+FMA
// (useAVX2) it is dotAVX2 over the first len&^7 elements plus the tail
// products added in increasing k; otherwise dotGo. Either way one binary on
// one machine always computes a given dot with the same operations, which
// is what batch invariance needs.
func dot(a, b []float32) float32 {
	if useAVX2 && len(a) >= 8 {
		b = b[:len(a)]
		n := len(a) &^ 7
		s := dotAVX2(&a[0], &b[0], n)
		for i := n; i < len(a); i++ {
			s += a[i] * b[i]
		}
		return s
	}
	return dotGo(a, b)
}

// dotGo is a float32 dot product with 4 lane accumulators (lane j sums the
// products at k = j mod 4, in increasing k; the tail goes to lane 0), summed
// as (l0+l1)+(l2+l3).
func dotGo(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	for len(a) >= 4 && len(b) >= 4 {
		s0 += a[0] * b[0]
		s1 += a[1] * b[1]
		s2 += a[2] * b[2]
		s3 += a[3] * b[3]
		a, b = a[4:], b[4:]
	}
	b = b[:len(a)]
	for i, v := range a {
		s0 += v * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// dot2 computes dot(w, x0) and dot(w, x1) with exactly dot's order of
// operations, reading w once.
func dot2(w, x0, x1 []float32) (float32, float32) {
	if useAVX2 && len(w) >= 8 {
		x0, x1 = x0[:len(w)], x1[:len(w)]
		n := len(w) &^ 7
		a, b := dot2AVX2(&w[0], &x0[0], &x1[0], n)
		for i := n; i < len(w); i++ {
			a += w[i] * x0[i]
			b += w[i] * x1[i]
		}
		return a, b
	}
	return dot2Go(w, x0, x1)
}

// dot2Go is dot2 with dotGo's order of operations.
func dot2Go(w, x0, x1 []float32) (float32, float32) {
	x0, x1 = x0[:len(w)], x1[:len(w)]
	var a0, a1, a2, a3, b0, b1, b2, b3 float32
	for len(w) >= 4 && len(x0) >= 4 && len(x1) >= 4 {
		a0 += w[0] * x0[0]
		b0 += w[0] * x1[0]
		a1 += w[1] * x0[1]
		b1 += w[1] * x1[1]
		a2 += w[2] * x0[2]
		b2 += w[2] * x1[2]
		a3 += w[3] * x0[3]
		b3 += w[3] * x1[3]
		w, x0, x1 = w[4:], x0[4:], x1[4:]
	}
	x0, x1 = x0[:len(w)], x1[:len(w)]
	for i, v := range w {
		a0 += v * x0[i]
		b0 += v * x1[i]
	}
	return (a0 + a1) + (a2 + a3), (b0 + b1) + (b2 + b3)
}
