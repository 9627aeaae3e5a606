//go:build cuda

package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Int4 group-wise kernels against float64 references computed from the
// same packed values and fp16 group scales (W[n][k] = GS[n][k/32] *
// q[n][k], byte j of a row: column 2j low nibble, 2j+1 high, each q+8).

// randI4 returns packed int4 values [N][K/2] (q uniform in [-8, 7], the
// extremes somewhere) and fp16 group scales [N][K/32] of either sign (the
// Q4_0 rule of model.QuantizeI4 makes a scale negative when its group's
// extreme is positive).
func randI4(r *rand.Rand, N, K int) ([]uint8, []uint16) {
	p := make([]uint8, N*K/2)
	for i := range p {
		p[i] = uint8(r.IntN(16)) | uint8(r.IntN(16))<<4
	}
	p[0], p[len(p)-1] = 0x0F, 0xF0 // 7 and -8
	s := make([]uint16, N*K/I4Group)
	for i := range s {
		v := (0.5 + r.Float64()) / (8 * math.Sqrt(float64(K)))
		if r.IntN(2) == 0 {
			v = -v
		}
		s[i] = f16(float32(v))
	}
	return p, s
}

// i4At is element (n, k) of packed int4 values and their scales.
func i4At(p []uint8, s []uint16, K, n, k int) float64 {
	b := p[n*K/2+k/2]
	if k%2 == 1 {
		b >>= 4
	}
	return float64(int(b&15)-8) * float64(h2f(s[n*K/I4Group+k/I4Group]))
}

func TestGemvI4(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(rand.Uint64(), 31))
	for _, kind := range []GemvKind{GemvNorm, GemvResid, GemvPlain, GemvSwiGLU} {
		for _, shape := range [][2]int{{200, 288}, {64, 2048}, {130, 1056}, {34, 5632}, {8192, 288}} {
			N, K := shape[0], shape[1]
			for _, M := range []int{1, 3, 8} {
				if M*K*4+1024 > d.MaxSmemOptin {
					continue
				}
				err := d.Do(func(c *Ctx) error {
					t := fatalPanics{t}
					Q, S := randI4(r, N, K)
					rowsX := M + 2
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
					dQ, dS, dX, dnw := devBuf(t, c, Q, 1), devBuf(t, c, S, 2), devBuf(t, c, X, 4), devBuf(t, c, nw, 2)
					var dxr DevicePtr
					if kind == GemvNorm || kind == GemvPlain {
						dxr = devBuf(t, c, xrow, 4)
					}
					fresh := func() DevicePtr {
						if kind == GemvResid {
							return devBuf(t, c, Y0, 4)
						}
						return poisoned(t, c, M*outW)
					}
					const eps = 1e-5
					run := func(m int, y DevicePtr) []float32 {
						if err := c.GemvI4(kind, dQ, dS, dX, dxr, dnw, eps, y, m, N, K); err != nil {
							t.Fatal(err)
						}
						got := make([]float32, m*outW)
						if err := Download(c, got, y); err != nil {
							t.Fatal(err)
						}
						return got
					}
					dY := fresh()
					got := run(M, dY)
					var xr []int32
					if dxr != 0 {
						xr = xrow
					}
					want := gemvRef(kind, X, xr, nw, Y0, M, N, K, eps, func(n, k int) float64 { return i4At(Q, S, K, n, k) })
					if e := relErr(got, want); e > 1e-5 {
						t.Errorf("int4 kind %d N=%d K=%d M=%d: rel err %.3g", kind, N, K, M, e)
					}
					// batch 1 (one-wave grid or not) equals row 0 of the batch
					for _, wave := range []bool{true, false} {
						prev := c.d.tune.NoGemvI8Wave
						c.d.tune.NoGemvI8Wave = !wave
						y := fresh()
						one := run(1, y)
						c.d.tune.NoGemvI8Wave = prev
						c.Free(y)
						for i := range one {
							if math.Float32bits(one[i]) != math.Float32bits(got[i]) {
								t.Fatalf("int4 kind %d N=%d K=%d: batch 1 (wave %v) differs from row 0 of M=%d at %d: %v vs %v",
									kind, N, K, wave, M, i, one[i], got[i])
							}
						}
					}
					for _, p := range []DevicePtr{dQ, dS, dX, dnw, dxr, dY} {
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
	err := d.Do(func(c *Ctx) error {
		if err := c.GemvI4(GemvPlain, 0, 0, 0, 0, 0, 0, 0, 1, 8, 48); err == nil {
			t.Errorf("K=48 accepted")
		}
		if err := c.GemvI4(GemvPlain, 0, 0, 0, 0, 0, 0, 0, GemvMaxM+1, 8, 64); err == nil {
			t.Errorf("M=%d accepted", GemvMaxM+1)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The fused int4 QKV+RoPE kernel gives the bits of the int4 norm GEMV over
// the same weight followed by rope_append_perm.
func TestGemvI4QKVRope(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(rand.Uint64(), 37))
	for _, sh := range []struct{ H, nh, nkv, hd int }{{288, 4, 2, 16}, {2048, 32, 4, 64}, {512, 4, 4, 128}} {
		for _, M := range []int{1, 3, 8} {
			err := d.Do(func(c *Ctx) error {
				t := fatalPanics{t}
				H, nh, nkv, hd := sh.H, sh.nh, sh.nkv, sh.hd
				N, kvdim, slots := (nh+2*nkv)*hd, nkv*hd, 64
				Q, S := randI4(r, N, H)
				X := randF32(r, M*H, 2)
				nw := randF16(r, H, 1)
				pos, sl := make([]int32, M), make([]int32, M)
				for i := range pos {
					pos[i] = int32(r.IntN(4000))
					sl[i] = int32(i*7 + 3)
				}
				inv := make([]float32, hd/2)
				for j := range inv {
					inv[j] = float32(math.Pow(10000, -2*float64(j)/float64(hd)))
				}
				dQ, dS, dX, dnw := devBuf(t, c, Q, 1), devBuf(t, c, S, 2), devBuf(t, c, X, 4), devBuf(t, c, nw, 2)
				dpos, dsl, dinv := devBuf(t, c, pos, 4), devBuf(t, c, sl, 4), devBuf(t, c, inv, 4)
				mk := func() [3]DevicePtr {
					return [3]DevicePtr{poisoned(t, c, M*N), poisoned(t, c, slots*kvdim), poisoned(t, c, slots*kvdim)}
				}
				ref, tmp, o := mk(), poisoned(t, c, M*N), mk()
				const eps = 1e-5
				if err := c.GemvI4(GemvNorm, dQ, dS, dX, 0, dnw, eps, tmp, M, N, H); err != nil {
					t.Fatal(err)
				}
				if err := c.RopeAppendPerm(tmp, ref[0], dpos, dsl, dinv, ref[1], ref[2], M, nh, nkv, hd); err != nil {
					t.Fatal(err)
				}
				prev := c.SetPDL(true)
				defer c.SetPDL(prev)
				if err := c.GemvI4QKVRope(dQ, dS, dX, 0, dnw, eps, o[0], dpos, dsl, dinv, o[1], o[2], M, H, nh, nkv, hd); err != nil {
					t.Fatal(err)
				}
				get := func(p DevicePtr, n int) []float32 {
					h := make([]float32, n)
					if err := Download(c, h, p); err != nil {
						t.Fatal(err)
					}
					return h
				}
				want, got := get(ref[0], M*N), get(o[0], M*N)
				for i := range want {
					if math.IsNaN(float64(want[i])) || math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("H=%d M=%d: qkv[%d][%d] = %v, want %v", H, M, i/N, i%N, got[i], want[i])
					}
				}
				wk, gk := get(ref[1], slots*kvdim), get(o[1], slots*kvdim)
				wv, gv := get(ref[2], slots*kvdim), get(o[2], slots*kvdim)
				for m := 0; m < M; m++ {
					for e := 0; e < kvdim; e++ {
						i := int(sl[m])*kvdim + e
						if math.Float32bits(gk[i]) != math.Float32bits(wk[i]) || math.Float32bits(gv[i]) != math.Float32bits(wv[i]) {
							t.Fatalf("H=%d M=%d: cache slot %d elem %d differs", H, M, sl[m], e)
						}
					}
				}
				for _, p := range append([]DevicePtr{dQ, dS, dX, dnw, dpos, dsl, dinv, tmp}, append(ref[:], o[:]...)...) {
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

// DequantI4F16 gives f16(s * q) (s the fp16 group scale widened, the
// product rounded once to fp16) and FillRandomI4 fills nibbles in [1, 15]
// (q in [-7, 7]) with scales f16(scale/7).
func TestDequantAndFillI4(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(rand.Uint64(), 41))
	err := d.Do(func(c *Ctx) error {
		t := fatalPanics{t}
		for _, sh := range [][2]int{{3, 32}, {37, 288}, {300, 2048}} {
			N, K := sh[0], sh[1]
			Q, S := randI4(r, N, K)
			dQ, dS := devBuf(t, c, Q, 1), devBuf(t, c, S, 2)
			out, err := c.Alloc(N * K * 2)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.DequantI4F16(dQ, dS, out, N, K); err != nil {
				t.Fatal(err)
			}
			got := make([]uint16, N*K)
			if err := Download(c, got, out); err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if want := f16(float32(i4At(Q, S, K, i/K, i%K))); got[i] != want {
					t.Fatalf("dequant N=%d K=%d at %d: %#04x, want %#04x", N, K, i, got[i], want)
				}
			}
			if err := c.FillRandomI4(dQ, dS, N, K, 99, 0.5); err != nil {
				t.Fatal(err)
			}
			fq, fs := make([]uint8, N*K/2), make([]uint16, N*K/I4Group)
			if err := Download(c, fq, dQ); err != nil {
				t.Fatal(err)
			}
			if err := Download(c, fs, dS); err != nil {
				t.Fatal(err)
			}
			seen := map[uint8]bool{}
			for _, b := range fq {
				if b&15 == 0 || b>>4 == 0 {
					t.Fatalf("fill_random_i4 wrote %#02x (a nibble 0: q = -8)", b)
				}
				seen[b&15], seen[b>>4] = true, true
			}
			if N*K >= 2048 && len(seen) != 15 {
				t.Fatalf("fill_random_i4: %d distinct nibbles", len(seen))
			}
			for i, s := range fs {
				if s != f16(float32(0.5)/7) {
					t.Fatalf("fill_random_i4 scale[%d] = %#04x", i, s)
				}
			}
			for _, p := range []DevicePtr{dQ, dS, out} {
				c.Free(p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
