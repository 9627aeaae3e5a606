//go:build cuda

package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"
)

// mmaKernelLog logs the registers and local (spill) bytes of the
// tensor-core kernels.
func mmaKernelLog(t testing.TB, c *Ctx) {
	for _, name := range []string{"gemv_mma_norm_t1", "gemv_mma_resid_t1", "gemv_mma_plain_t1", "gemv_mma_swiglu_t1",
		"gemv_mma_qkv_rope_t1", "gemv_mma_norm_t2", "gemv_mma_swiglu_t2", "gemv_mma_qkv_rope_t2", "gemv_mma_qkv_rope_t8"} {
		f, err := c.Func(name)
		if err != nil {
			t.Fatal(err)
		}
		regs, err := c.FuncRegisters(f)
		if err != nil {
			t.Fatal(err)
		}
		local := new(int32)
		cu.cuFuncGetAttribute.call(uintptr(unsafe.Pointer(local)), 3, uintptr(f)) // CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
		t.Logf("%s: %d registers, %d bytes of local memory per thread", name, regs, *local)
	}
}

// withMMA runs f with Tuning.GemvMMA = v on c's device (on the GPU worker;
// restored after).
func withMMA(c *Ctx, v int, f func()) {
	prev := c.d.tune.GemvMMA
	c.d.tune.GemvMMA = v
	defer func() { c.d.tune.GemvMMA = prev }()
	f()
}

// TestGemvMMA: the tensor-core projections (llama_mma.cu). For every kind,
// shapes of the shipped target and a 1.1B-like one (one, 136 x 2048, with a
// last row-tile of 8 rows), and 1..64 tokens (1 to 8 token tiles of 8,
// partial tiles; 1, 2 and 8 tiles per warp): (1) every token of the batch launch has exactly
// the bits of a launch over that token alone (the exact tree-verification
// contract: other rows of the M-tile never change a token's outputs), (2)
// the result is within fp16-input tolerance of a float64 reference on the
// unrounded inputs, and within fp32-accumulation tolerance of one on the
// inputs rounded to fp16 as the kernel stages them (f16(x * nw), norm scale
// on the result), which a wrong fragment layout or K split would miss by
// orders of magnitude, (3) nothing is written past the M output rows, and
// (4) above 16 tokens, block rows of 16 or 64 tokens give the same bits.
func TestGemvMMA(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(rand.Uint64(), 11))
	const eps = 1e-5
	if err := d.Do(func(c *Ctx) error { mmaKernelLog(fatalPanics{t}, c); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []GemvKind{GemvNorm, GemvResid, GemvPlain, GemvSwiGLU} {
		for _, shape := range [][2]int{{640, 384}, {2048, 384}, {384, 1024}, {136, 2048}, {4352, 384}, {64, 5632}} {
			N, K := shape[0], shape[1]
			start := time.Now()
			for _, M := range []int{1, 2, 7, 9, 16, 17, 33, 64} {
				if N*K > 1<<20 && M != 1 && M != 17 && M != 64 {
					continue // the large shape only where it adds M-tiles
				}
				err := d.Do(func(c *Ctx) error {
					t := fatalPanics{t}
					withMMA(c, GemvMMAOn, func() {
						if !c.useMMA(N, K) {
							t.Fatalf("N=%d K=%d: tensor-core kernels not used", N, K)
						}
						W := randF16(r, N*K, 1/math.Sqrt(float64(K)))
						Wf := make([]float64, len(W))
						for i, w := range W {
							Wf[i] = h2f(w)
						}
						rowsX := M + 3
						X := randF32(r, rowsX*K, 2)
						nw := randF16(r, K, 1)
						xrow := make([]int32, M)
						for i := range xrow {
							xrow[i] = int32(r.IntN(rowsX))
						}
						outW := N
						if kind == GemvSwiGLU {
							outW = N / 2
						}
						const pad = 16 // rows past M that must stay untouched
						Y0 := randF32(r, (M+pad)*outW, 1)
						dW, dX, dnw := devBuf(t, c, W, 2), devBuf(t, c, X, 4), devBuf(t, c, nw, 2)
						var dxr DevicePtr
						if kind == GemvNorm || kind == GemvPlain {
							dxr = devBuf(t, c, xrow, 4)
						}
						out := func(n int, init []float32) DevicePtr {
							if kind == GemvResid {
								return devBuf(t, c, init, 4)
							}
							return poisoned(t, c, n)
						}
						dY := out((M+pad)*outW, Y0)
						if err := c.Gemv(kind, dW, dX, dxr, dnw, eps, dY, M, N, K); err != nil {
							t.Fatal(err)
						}
						got := make([]float32, (M+pad)*outW)
						if err := Download(c, got, dY); err != nil {
							t.Fatal(err)
						}
						for i := M * outW; i < len(got); i++ {
							want := uint32(nanBits)
							if kind == GemvResid {
								want = math.Float32bits(Y0[i])
							}
							if math.Float32bits(got[i]) != want {
								t.Fatalf("kind %d N=%d K=%d M=%d: row %d written past the batch", kind, N, K, M, i/outW)
							}
						}
						got = got[:M*outW]
						// The launch shape of more than 8 tokens (block rows of 8
						// tokens, the default, 16 or 64: Tuning.GemvMMATiles 1,
						// 2, 4) never changes a bit.
						if M > 8 {
							prevTiles := c.d.tune.GemvMMATiles
							for _, tiles := range []int{1, mmaRows16, mmaTiles} {
								if tiles == prevTiles {
									continue
								}
								d1 := out((M+pad)*outW, Y0)
								c.d.tune.GemvMMATiles = tiles
								err := c.Gemv(kind, dW, dX, dxr, dnw, eps, d1, M, N, K)
								c.d.tune.GemvMMATiles = prevTiles
								if err != nil {
									t.Fatal(err)
								}
								again := make([]float32, M*outW)
								if err := Download(c, again, d1); err != nil {
									t.Fatal(err)
								}
								c.Free(d1)
								for i := range again {
									if math.Float32bits(again[i]) != math.Float32bits(got[i]) {
										t.Fatalf("kind %d N=%d K=%d M=%d: elem %d: %v with GemvMMATiles %d, %v with %d", kind, N, K, M, i, got[i], prevTiles, again[i], tiles)
									}
								}
							}
						}
						// (1) each token alone == its batch row, bits.
						one := make([]float32, outW)
						for m := 0; m < M; m++ {
							x, xr := dX+DevicePtr(m*K*4), DevicePtr(0)
							if dxr != 0 {
								x, xr = dX, dxr+DevicePtr(m*4)
							}
							d1 := out(outW, Y0[m*outW:(m+1)*outW])
							if err := c.Gemv(kind, dW, x, xr, dnw, eps, d1, 1, N, K); err != nil {
								t.Fatal(err)
							}
							if err := Download(c, one, d1); err != nil {
								t.Fatal(err)
							}
							c.Free(d1)
							for i, v := range one {
								g := got[m*outW+i]
								if math.Float32bits(v) != math.Float32bits(g) || math.IsNaN(float64(g)) {
									t.Fatalf("kind %d N=%d K=%d M=%d: token %d col %d: %v in the batch, %v alone", kind, N, K, M, m, i, g, v)
								}
							}
						}
						// (2) float64 references: exact inputs, and inputs
						// rounded to fp16 as staged.
						want, wantR := make([]float64, M*outW), make([]float64, M*outW)
						for m := 0; m < M; m++ {
							src := m
							if dxr != 0 {
								src = int(xrow[m])
							}
							in, inR := make([]float64, K), make([]float64, K)
							var ssf float32
							var ss64 float64
							for k := 0; k < K; k++ {
								xv := X[src*K+k]
								in[k] = float64(xv)
								ss64 += in[k] * in[k]
								ssf += xv * xv
								if kind == GemvNorm || kind == GemvSwiGLU {
									inR[k] = h2f(f16(xv * float32(h2f(nw[k]))))
								} else {
									inR[k] = h2f(f16(xv))
								}
							}
							s, sR := 1.0, 1.0
							if kind == GemvNorm || kind == GemvSwiGLU {
								s = 1 / math.Sqrt(ss64/float64(K)+eps)
								sR = 1 / math.Sqrt(float64(ssf)/float64(K)+eps)
								for k := range in {
									in[k] *= s * h2f(nw[k])
								}
							}
							dot := func(v []float64, n int) float64 {
								var a float64
								for k := 0; k < K; k++ {
									a += Wf[n*K+k] * v[k]
								}
								return a
							}
							for u := 0; u < outW; u++ {
								i := m*outW + u
								switch kind {
								case GemvResid:
									want[i] = float64(Y0[i]) + dot(in, u)
									wantR[i] = float64(Y0[i]) + dot(inR, u)
								case GemvSwiGLU:
									g, up := dot(in, 2*u), dot(in, 2*u+1)
									want[i] = g / (1 + math.Exp(-g)) * up
									g, up = dot(inR, 2*u)*sR, dot(inR, 2*u+1)*sR
									wantR[i] = g / (1 + math.Exp(-g)) * up
								case GemvNorm:
									want[i] = dot(in, u)
									wantR[i] = dot(inR, u) * sR
								default:
									want[i] = dot(in, u)
									wantR[i] = dot(inR, u)
								}
							}
						}
						if e := relErr(got, want); e > 2e-3 {
							t.Errorf("kind %d N=%d K=%d M=%d: rel err %.3g against the exact inputs", kind, N, K, M, e)
						}
						if e := relErr(got, wantR); e > 2e-5 {
							t.Errorf("kind %d N=%d K=%d M=%d: rel err %.3g against the fp16-staged inputs", kind, N, K, M, e)
						}
						for _, p := range []DevicePtr{dW, dX, dnw, dxr, dY} {
							c.Free(p)
						}
					})
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("kind %d N=%d K=%d: ok (%v)", kind, N, K, time.Since(start).Round(time.Millisecond))
		}
	}
}

// TestGemvQKVRopeMMA: the fused QKV + RoPE + KV-append step on the tensor
// cores: every token of a 2..64-token launch writes exactly the qkv row and
// cache rows of a launch over that token alone, and the result is within
// fp16-input tolerance of the CUDA-core kernel's (TestGemvQKVRope checks
// that one against a float64 reference).
func TestGemvQKVRopeMMA(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(rand.Uint64(), 13))
	for _, sh := range []struct{ H, nh, nkv, hd int }{{384, 6, 2, 64}, {2048, 32, 4, 64}, {512, 4, 4, 128}} {
		for _, M := range []int{2, 16, 17, 64} {
			err := d.Do(func(c *Ctx) error {
				t := fatalPanics{t}
				H, nh, nkv, hd := sh.H, sh.nh, sh.nkv, sh.hd
				N, kvdim, slots := (nh+2*nkv)*hd, nkv*hd, 2*M+8
				Wp := randF16(r, N*H, 1/math.Sqrt(float64(H)))
				X := randF32(r, M*H, 2)
				nw := randF16(r, H, 1)
				pos, sl := make([]int32, M), make([]int32, M)
				for i := range pos {
					pos[i] = int32(r.IntN(4000))
					sl[i] = int32(2*i + 5)
				}
				inv := make([]float32, hd/2)
				for j := range inv {
					inv[j] = float32(math.Pow(10000, -2*float64(j)/float64(hd)))
				}
				dW, dX, dnw := devBuf(t, c, Wp, 2), devBuf(t, c, X, 4), devBuf(t, c, nw, 2)
				dpos, dsl, dinv := devBuf(t, c, pos, 4), devBuf(t, c, sl, 4), devBuf(t, c, inv, 4)
				get := func(p DevicePtr, n int) []float32 {
					h := make([]float32, n)
					if err := Download(c, h, p); err != nil {
						t.Fatal(err)
					}
					return h
				}
				run := func(mma int) (q, k, v []float32) {
					qkv, kc, vc := poisoned(t, c, M*N), poisoned(t, c, slots*kvdim), poisoned(t, c, slots*kvdim)
					withMMA(c, mma, func() {
						if mma == GemvMMAOn && !c.useMMA(N, H) {
							t.Fatalf("H=%d: tensor-core kernels not used", H)
						}
						if err := c.GemvQKVRope(dW, dX, 0, dnw, 1e-5, qkv, dpos, dsl, dinv, kc, vc, M, H, nh, nkv, hd); err != nil {
							t.Fatal(err)
						}
					})
					q, k, v = get(qkv, M*N), get(kc, slots*kvdim), get(vc, slots*kvdim)
					for _, p := range []DevicePtr{qkv, kc, vc} {
						c.Free(p)
					}
					return q, k, v
				}
				all, allK, allV := run(GemvMMAOn)
				ref, refK, refV := run(GemvMMAOff)
				rel := func(a, b []float32) float64 {
					w := make([]float64, len(b))
					for i, v := range b {
						w[i] = float64(v)
						if math.IsNaN(w[i]) {
							w[i] = 0 // cache slots no token writes (NaN in both)
						}
					}
					g := append([]float32(nil), a...)
					for i := range g {
						if math.IsNaN(float64(b[i])) && math.IsNaN(float64(g[i])) {
							g[i] = 0
						}
					}
					return relErr(g, w)
				}
				if e := rel(all, ref); e > 2e-3 {
					t.Errorf("H=%d M=%d: qkv rel err %.3g against the CUDA-core kernel", H, M, e)
				}
				if e := rel(allK, refK) + rel(allV, refV); e > 4e-3 {
					t.Errorf("H=%d M=%d: cache rel err %.3g against the CUDA-core kernel", H, M, e)
				}
				q1, kc1, vc1 := poisoned(t, c, N), poisoned(t, c, slots*kvdim), poisoned(t, c, slots*kvdim)
				for m := 0; m < M; m++ {
					o := DevicePtr(m * 4)
					withMMA(c, GemvMMAOn, func() {
						if err := c.GemvQKVRope(dW, dX+DevicePtr(m*H*4), 0, dnw, 1e-5, q1, dpos+o, dsl+o, dinv, kc1, vc1, 1, H, nh, nkv, hd); err != nil {
							t.Fatal(err)
						}
					})
					row, k1, v1 := get(q1, N), get(kc1, slots*kvdim), get(vc1, slots*kvdim)
					for i, v := range row {
						if g := all[m*N+i]; math.Float32bits(g) != math.Float32bits(v) || math.IsNaN(float64(g)) {
							t.Fatalf("H=%d M=%d token %d: qkv[%d] = %v in the batch, %v alone", H, M, m, i, g, v)
						}
					}
					for e := 0; e < kvdim; e++ {
						i := int(sl[m])*kvdim + e
						if math.Float32bits(allK[i]) != math.Float32bits(k1[i]) || math.Float32bits(allV[i]) != math.Float32bits(v1[i]) {
							t.Fatalf("H=%d M=%d token %d: cache elem %d: k %v v %v in the batch, %v %v alone", H, M, m, e, allK[i], allV[i], k1[i], v1[i])
						}
					}
				}
				for _, p := range []DevicePtr{dW, dX, dnw, dpos, dsl, dinv, q1, kc1, vc1} {
					c.Free(p)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}
