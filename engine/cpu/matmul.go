package cpu

import (
	"math"
	"runtime"
	"sync"
	"unsafe"

	"github.com/specgate/specgate/safetensors"
	"github.com/specgate/specgate/vecmath"
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
	// waits: fn may wait for the goroutine that queued it (the draft-heads
	// job waits for its forward's hidden rows, heads.go), so a caller
	// draining the queue in parallelFor must not run it itself: it gets a
	// goroutine of its own, as a worker would have run it.
	waits bool
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
			if t.waits {
				go func() { t.fn(t.lo, t.hi); t.wg.Done() }()
				continue
			}
			t.fn(t.lo, t.hi)
			t.wg.Done()
		default:
			done = true
		}
	}
	wg.Wait()
}

// rowBlock is the number of weight rows reused across the token pairs of
// the portable path.
const rowBlock = 16

// panelGroup is the number of 16-row panels whose weights stay in L1/L2
// while all token tiles of a forward pass them (packed path).
const panelGroup = 12

// wmat is a weight matrix as the CPU matmul reads it: f32 is [out][in]
// row-major (nn.Linear layout, aliasing Weights). Where the CPU has
// AVX2+FMA the same values are also kept packed for the register-blocked
// kernels (packW): h as IEEE binary16 when every value converts exactly
// (fp16 checkpoints: half the bytes streamed, same float32 values after the
// exact widening), else s as float32.
type wmat struct {
	f32     []float32
	out, in int
	h       []uint16
	s       []float32
	i8      *wmatI8 // int8 weight-only (matmul_i8.go); f32, h and s are then nil
}

// newWmat wraps w ([out][in]); with AVX2+FMA it builds the packed copy,
// binary16 when half is set and the CPU converts binary16 (the caller has
// checked with newWmatExact that every value converts exactly), else
// float32.
func newWmat(w []float32, out, in int, half bool) wmat {
	if len(w) < out*in {
		panic("engine: weight smaller than [out][in]")
	}
	m := wmat{f32: w, out: out, in: in}
	if !useAVX2 {
		return m
	}
	if half && hasF16C {
		m.h = packW(w, out, in, safetensors.Float32ToF16)
	} else {
		m.s = packW(w, out, in, func(v float32) float32 { return v })
	}
	return m
}

// packW returns w ([out][in]) as ceil(out/16) panels of in*16 values:
// panel q holds, for k in [0, in), the 16 values w[16q+j][k], j in [0, 16)
// (rows past out are zero). A kernel reads one panel row (16 consecutive
// values) per k and multiplies it by one broadcast activation per token.
func packW[E uint16 | float32](w []float32, out, in int, conv func(float32) E) []E {
	np := (out + 15) / 16
	p := make([]E, np*in*16)
	for o := range out {
		q, j := o/16, o%16
		base := q * in * 16
		row := w[o*in : (o+1)*in]
		for k, v := range row {
			p[base+k*16+j] = conv(v)
		}
	}
	return p
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

// panelPtr is the address of packed panel q (h or s).
func (w *wmat) panelPtr(q int) unsafe.Pointer {
	if w.h != nil {
		return unsafe.Pointer(&w.h[q*w.in*16])
	}
	return unsafe.Pointer(&w.s[q*w.in*16])
}

// packed reports whether the packed kernels serve this matrix now.
func (w *wmat) packed() bool { return useAVX2 && (w.h != nil || w.s != nil || w.i8 != nil) }

// rowDot is dot(row o of w, x) for a matrix with in columns.
func (w *wmat) rowDot(o, in int, x []float32) float32 {
	if w.i8 != nil {
		return w.i8.rowDot(o, x)
	}
	if w.f32 == nil {
		return w.halfRowDot(o, x) // F16 tensor: panels only (matmul_f16.go)
	}
	return dot(w.f32[o*in:o*in+in], x)
}

// rowDot2 is rowDot for two activation rows, reading the weight row once.
func (w *wmat) rowDot2(o, in int, x0, x1 []float32) (float32, float32) {
	if w.i8 != nil {
		return w.i8.rowDot(o, x0), w.i8.rowDot(o, x1)
	}
	if w.f32 == nil {
		return w.halfRowDot(o, x0), w.halfRowDot(o, x1)
	}
	return dot2(w.f32[o*in:o*in+in], x0, x1)
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
	wm := newWmat(w, outDim, in, false)
	matmulJobs(fan(threads), x, T, in, mmJob{out: out, w: &wm, n: outDim})
}

// matmulJobs runs several matmuls that share the input x ([T][in]) as one
// parallel pass (e.g. Q, K and V; gate and up): the output rows of all jobs
// are split across threads as one range, so one fan-out serves them all.
//
// Packed path (AVX2+FMA): the rows go in 16-row panels; a kernel holds a
// block of P panels x K tokens of outputs in registers (K <= 8 with
// AVX-512, 6 with AVX2) and, per input column k, widens each panel's 16
// weights once and multiplies them by every token's broadcast activation,
// so a forward of up to 8 tokens reads every weight once. Portable path:
// a block of 16 weight rows stays in L1 while the tokens pass it, two at
// a time.
//
// Batch invariance: every output element is computed with the same sequence
// of float32 operations whatever T, the tiling, the fusion and the thread
// split are (packed: one sequential chain of FMAs over k from 0, the same
// in every kernel variant, AVX2 or AVX-512, binary16 or float32 weights;
// portable: dot's order), so a token's logits do not depend on what it is
// batched with (speculative verification relies on this for exact greedy
// equality).
func matmulJobs(p fanout, x []float32, T, in int, jobs ...mmJob) {
	_ = x[T*in-1]
	N, packed := 0, true
	for _, j := range jobs {
		_ = j.out[T*j.n-1]
		if (j.w.i8 == nil && j.w.h == nil && len(j.w.f32) < j.n*in) || (j.w.in != 0 && (j.w.in != in || j.w.out < j.n)) {
			panic("engine: matmul weight smaller than [out][in]")
		}
		N += j.n
		packed = packed && j.w.packed()
	}
	threads := p.threadsFor(T * N * in)
	if packed {
		NP := 0
		for _, j := range jobs {
			NP += (j.n + 15) / 16
		}
		parallelFor(threads, NP, 4, func(lo, hi int) {
			base := 0
			for _, j := range jobs {
				np := (j.n + 15) / 16
				plo, phi := max(lo-base, 0), min(hi-base, np)
				base += np
				if plo < phi {
					j.w.gemmPanels(j.out, x, T, in, j.n, plo, phi)
				}
			}
		})
		return
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

// fanout is how a CPU backend spreads a pass (Options, filled in): over at
// most threads threads (<= 0: GOMAXPROCS), from minMACs multiply-adds.
type fanout struct{ threads, minMACs int }

// fan is the fan-out of threads threads with the default threshold (Mat,
// tests).
func fan(threads int) fanout { return fanout{threads, DefaultMinParallelMACs} }

// threadsFor is the number of threads for a pass of macs multiply-adds:
// one below minMACs (a fan-out costs more than it saves there), else
// threads.
func (p fanout) threadsFor(macs int) int {
	if macs < p.minMACs {
		return 1
	}
	return p.threads
}

// gemmFn is one packed kernel (dot_gen.go).
type gemmFn = func(w unsafe.Pointer, in int, x *float32, xs int, out *float32, os int)

// gemmTable holds the kernels of one instruction set and weight type by
// [panels P][tokens K]; nil where a variant does not exist.
type gemmTable [9][9]gemmFn

// gemmPanels computes output rows [16*plo, min(16*phi, outDim)) of one
// matmul for all T tokens with the packed kernels: panel groups outermost
// (their weights stay in cache while all token tiles pass), then token
// tiles of up to kmax tokens, then kernels of as many panels as fit.
func (w *wmat) gemmPanels(out, x []float32, T, in, outDim, plo, phi int) {
	var tab *gemmTable
	kmax, tile := 6, 6
	var base unsafe.Pointer
	var pbytes uintptr
	switch {
	case w.i8 != nil:
		base, pbytes = unsafe.Pointer(&w.i8.panels[0]), uintptr(in*16)
		tab = &gemmTable256B
		if useAVX512 {
			tab, kmax = &gemmTable512B, 8
		}
		defer w.i8.scaleRows(out, T, outDim, 16*plo, min(16*phi, outDim))
	case w.h != nil:
		base, pbytes = unsafe.Pointer(&w.h[0]), uintptr(in*16*2)
		tab = &gemmTable256H
		if useAVX512 {
			tab, kmax = &gemmTable512H, 8
		}
	default:
		base, pbytes = unsafe.Pointer(&w.s[0]), uintptr(in*16*4)
		tab = &gemmTable256S
		if useAVX512 {
			tab, kmax = &gemmTable512S, 8
		}
	}
	full := outDim / 16 // panels whose 16 rows are all outputs
	var scratch [8 * 16]float32
	for g := plo; g < phi; g += panelGroup {
		ge := min(g+panelGroup, phi)
		for t0 := 0; t0 < T; {
			K := T - t0
			if K > kmax {
				K = min(tile, K)
			}
			xp := &x[t0*in]
			for p := g; p < ge; {
				wp := unsafe.Add(base, uintptr(p)*pbytes)
				if p >= full {
					// the last panel has fewer than 16 rows: through scratch
					tab[1][K](wp, in, xp, in, &scratch[0], 16)
					n := outDim - p*16
					for t := range K {
						copy(out[(t0+t)*outDim+p*16:(t0+t)*outDim+p*16+n], scratch[t*16:t*16+n])
					}
					p++
					continue
				}
				P := 1
				for _, c := range [...]int{8, 4, 3, 2} {
					if tab[c][K] != nil && p+c <= min(ge, full) {
						P = c
						break
					}
				}
				_ = out[(t0+K-1)*outDim+p*16+16*P-1]
				tab[P][K](wp, in, xp, in, &out[t0*outDim+p*16], outDim)
				p += P
			}
			t0 += K
		}
	}
}

// matmulRange computes output rows [olo, ohi) of one matmul for all tokens
// (portable path).
func matmulRange(out, x []float32, w *wmat, T, in, outDim, olo, ohi int) {
	for ob := olo; ob < ohi; ob += rowBlock {
		oe := min(ob+rowBlock, ohi)
		t := 0
		for ; t+2 <= T; t += 2 {
			x0 := x[t*in : t*in+in]
			x1 := x[(t+1)*in : (t+1)*in+in]
			r0 := out[t*outDim : (t+1)*outDim]
			r1 := out[(t+1)*outDim : (t+2)*outDim]
			for o := ob; o < oe; o++ {
				r0[o], r1[o] = w.rowDot2(o, in, x0, x1)
			}
		}
		for ; t < T; t++ {
			xt := x[t*in : t*in+in]
			rt := out[t*outDim : (t+1)*outDim]
			for o := ob; o < oe; o++ {
				rt[o] = w.rowDot(o, in, xt)
			}
		}
	}
}

// attnKernels are the AVX-512 attention kernels of one head dim
// (dot_gen.go): scores of one query head against 16 keys at a time, and
// value sums of 1..4 heads that share the value rows (values[h]).
type attnKernels struct {
	scores func(q, base *float32, slots *int32, n, stride int, out *float32)
	values [5]valuesFn
}

type valuesFn = func(acc, base *float32, slots *int32, w *float32, ws, n, stride int)

// hasAttn512 reports whether the AVX-512 attention kernels serve head dim hd.
func hasAttn512(hd int) bool {
	return useAVX512 && hd%16 == 0 && hd <= 128 && attnKernels512[hd/16].scores != nil
}

// scores512 sets out[i] = q . key_i for the keys of slots (key_i = base +
// slots[i]*stride floats, hd floats each; hasAttn512(hd)) in groups of 16
// keys; with 16 keys or more a last partial group is the last 16 keys
// (their scores are written again, the same values), else the group is
// padded with its first key. A key's score is the same whatever group and
// lane it is computed in.
func scores512(q, base *float32, slots []int32, stride, hd int, out []float32) {
	k := attnKernels512[hd/16].scores
	n := len(slots) &^ 15
	out = out[:len(slots)]
	if n > 0 {
		k(q, base, &slots[0], n, stride, &out[0])
	}
	r := len(slots) - n
	switch {
	case r == 0:
	case n > 0:
		// k is a func value: arrays passed to it escape to the heap, so
		// the overlap avoids a padded copy (a heap allocation per call)
		k(q, base, &slots[len(slots)-16], 16, stride, &out[len(slots)-16])
	default:
		var pad [16]int32
		var tmp [16]float32
		copy(pad[:], slots[n:])
		for i := r; i < 16; i++ {
			pad[i] = slots[n]
		}
		k(q, base, &pad[0], 16, stride, &tmp[0])
		copy(out[n:], tmp[:r])
	}
}

// values512 is axpysAVX2 for h heads that share the value rows, with
// 16-lane registers (the same FMAs per element): for each head j,
// acc[j*hd+d] = fma(w[j*ws+i], value_i[d], acc[j*hd+d]) for the keys i in
// order.
// Value i of the shared rows is base + slots[i]*stride floats.
func values512(acc []float32, base *float32, slots []int32, w []float32, ws, h, stride, hd int) {
	if len(slots) == 0 {
		return
	}
	n := len(slots)
	_ = w[(h-1)*ws+n-1]
	_ = acc[h*hd-1]
	ks := &attnKernels512[hd/16].values
	for j := 0; j < h; {
		g := min(h-j, 4)
		for ks[g] == nil {
			g--
		}
		ks[g](&acc[j*hd], base, &slots[0], &w[j*ws], ws, n, stride)
		j += g
	}
}

// siluMul sets g[i] = SiLU(g[i]) * u[i] for i in [0, len(g)): with
// AVX-512 in float32 vector arithmetic (siluMulAVX512: exp by a
// polynomial, about 1e-7 relative error), else through float64 math.Exp.
// Either way every element gets the same operations wherever it sits.
func siluMul(g, u []float32) {
	u = u[:len(g)]
	if useAVX512 && len(g) > 0 {
		siluMulAVX512(&g[0], &u[0], len(g))
		return
	}
	for i := range g {
		g[i] = silu(g[i]) * u[i]
	}
}

// softmaxScaled sets x = softmax(x * scale) in place (len(x) >= 1): with
// AVX-512 by softmaxAVX512 (float32 exp and a 16-lane sum), else scalar
// with float64 math.Exp and a float64 sum. The result of a row depends only
// on the row.
func softmaxScaled(x []float32, scale float32) {
	if useAVX512 && len(x) > 0 {
		softmaxAVX512(&x[0], len(x), scale)
		return
	}
	mx := float32(math.Inf(-1))
	for i := range x {
		x[i] *= scale
		mx = max(mx, x[i])
	}
	var sum float64
	for i, v := range x {
		e := float32(math.Exp(float64(v - mx)))
		x[i] = e
		sum += float64(e)
	}
	inv := float32(1 / sum)
	for i := range x {
		x[i] *= inv
	}
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
// (useAVX2) it is vecmath.DotBlocksAVX2 over the first len&^7 elements plus the tail
// products added in increasing k; otherwise dotGo. Either way one binary on
// one machine always computes a given dot with the same operations, which
// is what batch invariance needs.
func dot(a, b []float32) float32 {
	if useAVX2 && len(a) >= 8 {
		b = b[:len(a)]
		s := vecmath.DotBlocksAVX2(a, b)
		for i := len(a) &^ 7; i < len(a); i++ {
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
