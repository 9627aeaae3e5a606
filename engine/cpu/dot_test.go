package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/specgate/specgate/safetensors"
)

// kernelPaths runs f with the portable kernels and, where the CPU has
// them, the AVX2+FMA kernels and the AVX-512 kernels.
func kernelPaths(t *testing.T, f func(t *testing.T)) {
	saved2, saved512 := useAVX2, useAVX512
	defer func() { useAVX2, useAVX512 = saved2, saved512 }()
	type path struct{ avx2, avx512 bool }
	paths := []path{{false, false}}
	if saved2 {
		paths = append(paths, path{true, false})
	}
	if saved512 {
		paths = append(paths, path{true, true})
	}
	for _, p := range paths {
		useAVX2, useAVX512 = p.avx2, p.avx512
		t.Run(fmt.Sprintf("avx2=%v/avx512=%v", p.avx2, p.avx512), f)
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
			for i, v := range w {
				w[i] = safetensors.F16ToFloat32(safetensors.Float32ToF16(v))
			}
			mats := map[string]wmat{"f32": newWmat(w, out, in, false)}
			if hasF16C {
				mats["f16"] = newWmat(w, out, in, true)
			}
			for _, threads := range []int{1, 3} {
				for name, wm := range mats {
					y := make([]float32, T*out)
					matmulJobs(fan(threads), x, T, in, mmJob{y, &wm, out})
					for tt := range T {
						y1 := make([]float32, out)
						matmulJobs(fan(threads), x[tt*in:(tt+1)*in], 1, in, mmJob{y1, &wm, out})
						for o := range out {
							if y1[o] != y[tt*out+o] {
								t.Fatalf("%s shape %v threads %d: token %d row %d: batched %v, alone %v", name, sh, threads, tt, o, y[tt*out+o], y1[o])
							}
							if wm.packed() {
								continue
							}
							if want := dot(w[o*in:(o+1)*in], x[tt*in:(tt+1)*in]); y1[o] != want {
								t.Fatalf("%s shape %v: token %d row %d: %v, dot %v", name, sh, tt, o, y1[o], want)
							}
						}
					}
				}
			}
		}
	})
}

// roundF16 rounds every weight to binary16 in place (so the half path applies).
func roundF16(w *Weights) {
	r := func(s []float32) {
		for i, v := range s {
			s[i] = safetensors.F16ToFloat32(safetensors.Float32ToF16(v))
		}
	}
	r(w.Embed.F32)
	r(w.Norm.F32)
	if &w.LMHead.F32[0] != &w.Embed.F32[0] {
		r(w.LMHead.F32)
	}
	for _, l := range w.Layers {
		for _, m := range [][]float32{l.AttnNorm.F32, l.Wq.F32, l.Wk.F32, l.Wv.F32, l.Wo.F32, l.MLPNorm.F32, l.WGate.F32, l.WUp.F32, l.WDown.F32, l.Bq.F32, l.Bk.F32, l.Bv.F32} {
			r(m)
		}
	}
}

// TestHalfWeightsBitIdentical: with fp16-exact weights the backend streams
// binary16 copies, and its logits (prefill and a tree) equal the float32
// path's bit for bit; weights that are not fp16-exact keep float32.
func TestHalfWeightsBitIdentical(t *testing.T) {
	if !useAVX2 || !hasF16C {
		t.Skip("no AVX2+FMA+F16C")
	}
	for name, cfg := range testConfigs() {
		w := RandomWeights(cfg, 9)
		if b, err := NewCPUBackend(cfg, w, 64, 2); err != nil || b.HalfWeights() {
			t.Fatalf("%s: float32 random weights: half %v err %v", name, b != nil && b.HalfWeights(), err)
		}
		roundF16(w)
		half, err := NewCPUBackend(cfg, w, 64, 2)
		if err != nil {
			t.Fatal(err)
		}
		full, _ := NewCPUBackend(cfg, w, 64, 2)
		full.setWeights(false)
		if !half.HalfWeights() || full.HalfWeights() {
			t.Fatalf("%s: half %v full %v", name, half.HalfWeights(), full.HalfWeights())
		}
		V := cfg.VocabSize
		mk := func() []*ForwardRequest {
			seq := func(lo, n int) []int32 {
				s := make([]int32, n)
				for i := range s {
					s[i] = int32(lo + i)
				}
				return s
			}
			toks := []int32{1, 5, 9, 2, 7, 3, 11, 4, 6}
			return []*ForwardRequest{
				{Tokens: toks, Positions: seq(0, 9), Slots: seq(0, 9), Logits: make([]float32, 9*V)},
				{CachedSlots: seq(0, 4), Tokens: []int32{8, 10, 12}, Positions: []int32{4, 5, 5}, Slots: seq(20, 3), Parents: []int32{-1, 0, -1}, Logits: make([]float32, 3*V)},
			}
		}
		a, b := mk(), mk()
		if err := half.Forward(a[:1]); err != nil {
			t.Fatal(err)
		}
		if err := full.Forward(b[:1]); err != nil {
			t.Fatal(err)
		}
		if err := half.Forward(a[1:]); err != nil {
			t.Fatal(err)
		}
		if err := full.Forward(b[1:]); err != nil {
			t.Fatal(err)
		}
		for r := range a {
			for i := range a[r].Logits {
				if a[r].Logits[i] != b[r].Logits[i] {
					t.Fatalf("%s: request %d logit %d: half %v, float32 %v", name, r, i, a[r].Logits[i], b[r].Logits[i])
				}
			}
		}
	}
}

// TestAttentionKernels: the gathered score and value kernels equal, bit for
// bit, per-key dot and axpy calls (head dims 8..96, multiples of 8).
func TestAttentionKernels(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2+FMA")
	}
	r := rand.New(rand.NewPCG(9, 10))
	for _, hd := range []int{8, 16, 24, 32, 40, 64, 96} {
		stride, off := 3*hd, hd
		kc := make([]float32, 50*stride)
		for i := range kc {
			kc[i] = float32(r.NormFloat64())
		}
		q := make([]float32, hd)
		for i := range q {
			q[i] = float32(r.NormFloat64())
		}
		slots := []int32{7, 3, 49, 0, 12, 12, 30}
		w := make([]float32, len(slots))
		for i := range w {
			w[i] = float32(r.Float64())
		}
		got := make([]float32, len(slots))
		dotsAVX2(&q[0], &kc[off], &slots[0], len(slots), stride, hd, &got[0])
		acc, want := make([]float32, hd), make([]float32, hd)
		for i := range acc {
			acc[i] = float32(i) * 0.5
			want[i] = acc[i]
		}
		axpysAVX2(&acc[0], &kc[off], &slots[0], &w[0], len(slots), stride, hd)
		for i, s := range slots {
			o := int(s)*stride + off
			if d := dot(q, kc[o:o+hd]); got[i] != d {
				t.Fatalf("hd %d key %d: dots %v, dot %v", hd, i, got[i], d)
			}
			axpy(want, kc[o:o+hd], w[i])
		}
		for d := range acc {
			if acc[d] != want[d] {
				t.Fatalf("hd %d: acc[%d] %v, axpy %v", hd, d, acc[d], want[d])
			}
		}
	}
}
