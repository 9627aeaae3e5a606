package engine

import (
	"math"
	"runtime"
	"sync"

	"github.com/specgate/specgate/engine/safetensors"
)

// workers is the process-wide pool that runs parallelFor's chunks: a few
// goroutines started once, parked on a channel between calls, so that the
// ~40 fan-outs of a decode step do not each spawn goroutines.
var workers struct {
	once  sync.Once
	tasks chan poolTask
}

type poolTask struct {
	fn     func(lo, hi int)
	lo, hi int
	wg     *sync.WaitGroup
}

func startWorkers() {
	n := max(runtime.GOMAXPROCS(0), 2)
	workers.tasks = make(chan poolTask, 4*n)
	for range n {
		go func() {
			for t := range workers.tasks {
				t.fn(t.lo, t.hi)
				t.wg.Done()
			}
		}()
	}
}

// parallelFor runs fn over [0, n) split into at most threads contiguous
// half-open chunks [lo, hi), each a multiple of align (except the last),
// the first on the calling goroutine and the others on the worker pool
// (the caller also runs queued chunks itself rather than idle), and waits
// for all of them. fn must not call parallelFor.
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
	workers.once.Do(startWorkers)
	chunk := (n + threads - 1) / threads
	chunk = (chunk + align - 1) / align * align
	var wg sync.WaitGroup
	for lo := chunk; lo < n; lo += chunk {
		wg.Add(1)
		workers.tasks <- poolTask{fn: fn, lo: lo, hi: min(lo+chunk, n), wg: &wg}
	}
	fn(0, min(chunk, n))
	// run queued chunks (ours or another caller's) instead of waiting for a
	// worker to be scheduled: on a busy machine that wake-up costs more
	// than a small matmul chunk.
	for done := false; !done; {
		select {
		case t := <-workers.tasks:
			t.fn(t.lo, t.hi)
			t.wg.Done()
		default:
			done = true
		}
	}
	wg.Wait()
}

// tokenTile is the number of activation rows kept hot while a block of
// weight rows streams past them.
const tokenTile = 64

// rowBlock is the number of weight rows reused across a token tile.
const rowBlock = 16

// wmat is a weight matrix as the CPU matmul reads it: f32 is [out][in]
// row-major (nn.Linear layout, aliasing Weights). h, when non-nil, holds the
// same values as IEEE binary16; it is only built when every value converts
// exactly, so a matmul over h is bit-identical to one over f32 while
// streaming half the bytes (the shipped models are stored in fp16).
type wmat struct {
	f32 []float32
	h   []uint16
}

// newWmat wraps w; with half it also builds the binary16 copy (the caller
// has checked with newWmatExact that every value converts exactly).
func newWmat(w []float32, half bool) wmat {
	m := wmat{f32: w}
	if half {
		m.h = make([]uint16, len(w))
		for i, v := range w {
			m.h[i] = safetensors.Float32ToF16(v)
		}
	}
	return m
}

// newWmatExact reports whether every value of w converts to binary16 exactly.
func newWmatExact(w []float32) bool {
	for _, v := range w {
		if math.Float32bits(safetensors.F16ToFloat32(safetensors.Float32ToF16(v))) != math.Float32bits(v) || v != v {
			return false
		}
	}
	return true
}

// rowDot is dot(row o of w, x) for a matrix with in columns.
func (w *wmat) rowDot(o, in int, x []float32) float32 {
	if w.h != nil && useAVX2 {
		return dotH(w.h[o*in:o*in+in], x)
	}
	return dot(w.f32[o*in:o*in+in], x)
}

// rowDot2 is rowDot for two activation rows, reading the weight row once.
func (w *wmat) rowDot2(o, in int, x0, x1 []float32) (float32, float32) {
	if w.h != nil && useAVX2 {
		return dot2H(w.h[o*in:o*in+in], x0, x1)
	}
	return dot2(w.f32[o*in:o*in+in], x0, x1)
}

// rowDot4 sets out[t] = rowDot(o, in, x[t*in:(t+1)*in]) for t in [0, 4),
// bit for bit, widening the binary16 row once (w.h != nil, useAVX512).
func (w *wmat) rowDot4(o, in int, x []float32, out *[4]float32) {
	_ = x[4*in-1]
	row := w.h[o*in : o*in+in]
	if in < 8 {
		for t := range 4 {
			out[t] = dotH(row, x[t*in:(t+1)*in])
		}
		return
	}
	n := in &^ 7
	dot4AVX512H(&row[0], &x[0], in, n, &out[0])
	for i := n; i < in; i++ {
		f := safetensors.F16ToFloat32(row[i])
		for t := range 4 {
			out[t] += f * x[t*in+i]
		}
	}
}

// mmJob is one matmul of a fused pass: out ([T][n]) = x · w^T, w [n][in].
type mmJob struct {
	out []float32
	w   *wmat
	n   int
}

// matmulT computes out[t][o] = sum_k x[t][k] * w[o][k] for t in [0, T),
// o in [0, outDim): x is [T][in], w is [outDim][in] (nn.Linear layout), out
// is [T][outDim], all row-major. See matmulJobs.
func matmulT(threads int, out, x, w []float32, T, in, outDim int) {
	wm := wmat{f32: w}
	matmulJobs(threads, x, T, in, mmJob{out: out, w: &wm, n: outDim})
}

// matmulJobs runs several matmuls that share the input x ([T][in]) as one
// parallel pass (e.g. Q, K and V; gate and up): the output rows of all jobs
// are split across threads as one range, so one fan-out serves them all.
// Tokens are processed in tiles so that a block of weight rows, read from
// memory once, stays in L1 while the tile's tokens (two at a time) stream
// past it: a T-token forward reads the weights about once, not T times.
//
// Batch invariance: every output element is computed with the same sequence
// of float32 operations (dot's order) whatever T, the tile, the fusion and
// the thread split are, so a token's logits do not depend on what it is
// batched with (speculative verification relies on this for exact greedy
// equality).
func matmulJobs(threads int, x []float32, T, in int, jobs ...mmJob) {
	_ = x[T*in-1]
	N := 0
	for _, j := range jobs {
		_ = j.out[T*j.n-1]
		if len(j.w.f32) < j.n*in {
			panic("engine: matmul weight smaller than [out][in]")
		}
		N += j.n
	}
	if T*N*in < 1<<15 {
		threads = 1
	}
	parallelFor(threads, N, 8, func(lo, hi int) {
		base := 0
		for _, j := range jobs {
			olo, ohi := max(lo-base, 0), min(hi-base, j.n)
			base += j.n
			if olo >= ohi {
				continue
			}
			matmulRange(j.out, x, j.w, T, in, j.n, olo, ohi)
		}
	})
}

// matmulRange computes output rows [olo, ohi) of one matmul for all tokens.
func matmulRange(out, x []float32, w *wmat, T, in, outDim, olo, ohi int) {
	for t0 := 0; t0 < T; t0 += tokenTile {
		t1 := min(t0+tokenTile, T)
		for ob := olo; ob < ohi; ob += rowBlock {
			oe := min(ob+rowBlock, ohi)
			t := t0
			if w.h != nil && useAVX2 && useAVX512 {
				var r4 [4]float32
				for ; t+4 <= t1; t += 4 {
					xs := x[t*in : (t+4)*in]
					for o := ob; o < oe; o++ {
						w.rowDot4(o, in, xs, &r4)
						out[t*outDim+o] = r4[0]
						out[(t+1)*outDim+o] = r4[1]
						out[(t+2)*outDim+o] = r4[2]
						out[(t+3)*outDim+o] = r4[3]
					}
				}
			}
			for ; t+2 <= t1; t += 2 {
				x0 := x[t*in : t*in+in]
				x1 := x[(t+1)*in : (t+1)*in+in]
				r0 := out[t*outDim : (t+1)*outDim]
				r1 := out[(t+1)*outDim : (t+2)*outDim]
				for o := ob; o < oe; o++ {
					r0[o], r1[o] = w.rowDot2(o, in, x0, x1)
				}
			}
			for ; t < t1; t++ {
				xt := x[t*in : t*in+in]
				rt := out[t*outDim : (t+1)*outDim]
				for o := ob; o < oe; o++ {
					rt[o] = w.rowDot(o, in, xt)
				}
			}
		}
	}
}

// dotH is dot with a given in binary16: the same operations on the same
// (exactly widened) float32 values.
func dotH(a []uint16, b []float32) float32 {
	if len(a) < 8 {
		f := make([]float32, len(a))
		for i, v := range a {
			f[i] = safetensors.F16ToFloat32(v)
		}
		return dot(f, b)
	}
	b = b[:len(a)]
	n := len(a) &^ 7
	s := dotAVX2H(&a[0], &b[0], n)
	for i := n; i < len(a); i++ {
		s += safetensors.F16ToFloat32(a[i]) * b[i]
	}
	return s
}

// dot2H is dot2 with w in binary16.
func dot2H(w []uint16, x0, x1 []float32) (float32, float32) {
	if len(w) < 8 {
		return dotH(w, x0), dotH(w, x1)
	}
	x0, x1 = x0[:len(w)], x1[:len(w)]
	n := len(w) &^ 7
	a, b := dot2AVX2H(&w[0], &x0[0], &x1[0], n)
	for i := n; i < len(w); i++ {
		f := safetensors.F16ToFloat32(w[i])
		a += f * x0[i]
		b += f * x1[i]
	}
	return a, b
}

// axpy sets y[k] += a*x[k] for k in [0, len(y)) (fused multiply-add in the
// AVX2 path, for the first len&^7 elements).
func axpy(y, x []float32, a float32) {
	x = x[:len(y)]
	n := 0
	if useAVX2 && len(y) >= 8 {
		n = len(y) &^ 7
		axpyAVX2(&y[0], &x[0], a, n)
	}
	for i := n; i < len(y); i++ {
		y[i] += a * x[i]
	}
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
