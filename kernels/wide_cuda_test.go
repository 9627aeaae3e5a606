//go:build cuda

package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestGemvWide: a GEMV of 9..64 tokens (one 2-D launch over chunks of at
// most GemvMaxM tokens) gives every token exactly the bits of a launch
// over that token alone (the exact tree-verification contract), for every
// kind, with and without row indices, at the shipped target's shapes and a
// 1.1B-like one.
func TestGemvWide(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(rand.Uint64(), 7))
	for _, kind := range []GemvKind{GemvNorm, GemvResid, GemvPlain, GemvSwiGLU} {
		for _, shape := range [][2]int{{640, 384}, {2048, 384}, {384, 1024}, {136, 2048}} {
			N, K := shape[0], shape[1]
			for _, M := range []int{2, 5, 8, 9, 13, 24, 64} {
				err := d.Do(func(c *Ctx) error {
					t := fatalPanics{t}
					W := randF16(r, N*K, 1/math.Sqrt(float64(K)))
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
					Y0 := randF32(r, M*outW, 1)
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
					dY := out(M*outW, Y0)
					prev := c.SetPDL(true)
					if err := c.Gemv(kind, dW, dX, dxr, dnw, 1e-5, dY, M, N, K); err != nil {
						t.Fatal(err)
					}
					got := make([]float32, M*outW)
					if err := Download(c, got, dY); err != nil {
						t.Fatal(err)
					}
					one := make([]float32, outW)
					for m := 0; m < M; m++ {
						x, xr := dX+DevicePtr(m*K*4), DevicePtr(0)
						if dxr != 0 {
							x, xr = dX, dxr+DevicePtr(m*4)
						}
						d1 := out(outW, Y0[m*outW:(m+1)*outW])
						if err := c.Gemv(kind, dW, x, xr, dnw, 1e-5, d1, 1, N, K); err != nil {
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
					c.SetPDL(prev)
					for _, p := range []DevicePtr{dW, dX, dnw, dxr, dY} {
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
	for _, M := range []int{0, GemvWideMaxM + 1} {
		err := d.Do(func(c *Ctx) error {
			if err := c.Gemv(GemvNorm, 0, 0, 0, 0, 1e-5, 0, M, 64, 64); err == nil {
				panic("no error for M out of range")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestGemvQKVRopeWide: the fused QKV+RoPE+append GEMV over 9..64 tokens in
// one launch writes, for every token, the qkv row and cache rows a launch
// over that token alone writes (bits).
func TestGemvQKVRopeWide(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(rand.Uint64(), 9))
	for _, sh := range []struct{ H, nh, nkv, hd int }{{384, 6, 2, 64}, {2048, 32, 4, 64}, {264, 4, 2, 16}} {
		for _, M := range []int{3, 8, 9, 17, 64} {
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
				qkv, kc, vc := poisoned(t, c, M*N), poisoned(t, c, slots*kvdim), poisoned(t, c, slots*kvdim)
				q1, kc1, vc1 := poisoned(t, c, N), poisoned(t, c, slots*kvdim), poisoned(t, c, slots*kvdim)
				prev := c.SetPDL(true)
				if err := c.GemvQKVRope(dW, dX, 0, dnw, 1e-5, qkv, dpos, dsl, dinv, kc, vc, M, H, nh, nkv, hd); err != nil {
					t.Fatal(err)
				}
				get := func(p DevicePtr, n int) []float32 {
					h := make([]float32, n)
					if err := Download(c, h, p); err != nil {
						t.Fatal(err)
					}
					return h
				}
				all, allK, allV := get(qkv, M*N), get(kc, slots*kvdim), get(vc, slots*kvdim)
				for m := 0; m < M; m++ {
					o := DevicePtr(m * 4)
					if err := c.GemvQKVRope(dW, dX+DevicePtr(m*H*4), 0, dnw, 1e-5, q1, dpos+o, dsl+o, dinv, kc1, vc1, 1, H, nh, nkv, hd); err != nil {
						t.Fatal(err)
					}
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
				c.SetPDL(prev)
				for _, p := range []DevicePtr{dW, dX, dnw, dpos, dsl, dinv, qkv, kc, vc, q1, kc1, vc1} {
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
