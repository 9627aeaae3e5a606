//go:build cuda

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// Int8 weight-only kernels against float64 references computed from the
// same int8 values and row scales (W[n][k] = s[n] * q[n][k]).

func randI8(r *rand.Rand, n int) []int8 {
	q := make([]int8, n)
	for i := range q {
		q[i] = int8(r.IntN(255) - 127)
	}
	// the extremes, somewhere in every test
	q[0], q[n-1] = -127, 127
	return q
}

func randScales(r *rand.Rand, n int, K int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32((0.5 + r.Float64()) / (127 * math.Sqrt(float64(K))))
	}
	return s
}

// i8Config is a batch-1 int8 GEMV configuration: family, one-wave grid,
// warps per block.
type i8Config struct {
	v     string
	wave  bool
	warps int
}

func (g i8Config) String() string { return fmt.Sprintf("%s/wave=%v/warps=%d", g.v, g.wave, g.warps) }

// i8Configs: every family, and the tunings decode measurements try.
var i8Configs = func() []i8Config {
	var out []i8Config
	for _, v := range GemvI8Families {
		out = append(out, i8Config{v, false, 8})
	}
	return append(out, i8Config{GemvI8Deep4Split, true, 8}, i8Config{GemvDeep, true, 8},
		i8Config{GemvI8Hybrid, true, 8}, i8Config{GemvI8Hybrid8, true, 8},
		i8Config{GemvI8Deep4Split, false, 4}, i8Config{GemvDeep, false, 4})
}()

// withI8 runs f with the int8 GEMV configuration g on c's device (on the
// GPU worker; restored after).
func withI8(c *Ctx, g i8Config, f func()) {
	prev := c.d.tune
	c.d.tune.GemvI8, c.d.tune.NoGemvI8Wave, c.d.tune.GemvWarps = g.v, !g.wave, g.warps
	defer func() { c.d.tune = prev }()
	f()
}

func TestGemvI8(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(rand.Uint64(), 11))
	for _, kind := range []GemvKind{GemvNorm, GemvResid, GemvPlain, GemvSwiGLU} {
		for _, shape := range [][2]int{{200, 272}, {64, 2048}, {130, 1040}, {136, 512}, {34, 5632}, {8192, 272}} {
			N, K := shape[0], shape[1]
			for _, M := range []int{1, 3, 6, 8} {
				if M*K*4+1024 > d.MaxSmemOptin {
					continue
				}
				err := d.Do(func(c *Ctx) error {
					t := fatalPanics{t}
					Q := randI8(r, N*K)
					S := randScales(r, N, K)
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
					dQ, dS, dX, dnw := devBuf(t, c, Q, 1), devBuf(t, c, S, 4), devBuf(t, c, X, 4), devBuf(t, c, nw, 2)
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
					run := func(v i8Config, m int, y DevicePtr) []float32 {
						withI8(c, v, func() {
							if err := c.GemvI8(kind, dQ, dS, dX, dxr, dnw, eps, y, m, N, K); err != nil {
								t.Fatal(err)
							}
						})
						got := make([]float32, m*outW)
						if err := Download(c, got, y); err != nil {
							t.Fatal(err)
						}
						return got
					}
					dY := fresh()
					got := run(i8Config{GemvDeep, false, 8}, M, dY)
					var xr []int32
					if dxr != 0 {
						xr = xrow
					}
					want := gemvRef(kind, X, xr, nw, Y0, M, N, K, eps, func(n, k int) float64 { return float64(Q[n*K+k]) * float64(S[n]) })
					if e := relErr(got, want); e > 1e-5 {
						t.Errorf("int8 kind %d N=%d K=%d M=%d: rel err %.3g", kind, N, K, M, e)
					}
					// Shallow and deep give the same bits at batch 1; the
					// batch-1 result equals row 0 of any batch (same sum
					// order whatever M and the chunks in flight).
					for _, v := range i8Configs {
						y := fresh() // GemvResid: row 0 of Y0 first, as in the batch
						one := run(v, 1, y)
						c.Free(y)
						for i := range one {
							if math.Float32bits(one[i]) != math.Float32bits(got[i]) {
								t.Fatalf("int8 kind %d N=%d K=%d: batch 1 (%s) differs from row 0 of M=%d at %d: %v vs %v",
									kind, N, K, v, M, i, one[i], got[i])
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
	// Malformed shapes are refused before any launch.
	err := d.Do(func(c *Ctx) error {
		if err := c.GemvI8(GemvPlain, 0, 0, 0, 0, 0, 0, 0, 1, 8, 24); err == nil {
			return fmt.Errorf("K=24 accepted")
		}
		if err := c.GemvI8(GemvPlain, 0, 0, 0, 0, 0, 0, 0, GemvMaxM+1, 8, 32); err == nil {
			return fmt.Errorf("M=%d accepted", GemvMaxM+1)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The fused int8 QKV+RoPE kernel gives the bits of the int8 norm GEMV over
// the same (RopeRows-ordered) weight followed by rope_append_perm, for both
// batch-1 families and batches up to 8.
func TestGemvI8QKVRope(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(rand.Uint64(), 13))
	for _, sh := range []struct{ H, nh, nkv, hd int }{{272, 4, 2, 16}, {2048, 32, 4, 64}, {512, 4, 4, 128}, {48, 6, 1, 8}} {
		for _, M := range []int{1, 3, 8} {
			err := d.Do(func(c *Ctx) error {
				t := fatalPanics{t}
				H, nh, nkv, hd := sh.H, sh.nh, sh.nkv, sh.hd
				N, kvdim, slots := (nh+2*nkv)*hd, nkv*hd, 64
				Q, S := randI8(r, N*H), randScales(r, N, H)
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
				dQ, dS, dX, dnw := devBuf(t, c, Q, 1), devBuf(t, c, S, 4), devBuf(t, c, X, 4), devBuf(t, c, nw, 2)
				dpos, dsl, dinv := devBuf(t, c, pos, 4), devBuf(t, c, sl, 4), devBuf(t, c, inv, 4)
				type out struct{ qkv, kc, vc DevicePtr }
				mk := func() out {
					return out{poisoned(t, c, M*N), poisoned(t, c, slots*kvdim), poisoned(t, c, slots*kvdim)}
				}
				ref, tmp := mk(), poisoned(t, c, M*N)
				const eps = 1e-5
				if err := c.GemvI8(GemvNorm, dQ, dS, dX, 0, dnw, eps, tmp, M, N, H); err != nil {
					t.Fatal(err)
				}
				if err := c.RopeAppendPerm(tmp, ref.qkv, dpos, dsl, dinv, ref.kc, ref.vc, M, nh, nkv, hd); err != nil {
					t.Fatal(err)
				}
				get := func(p DevicePtr, n int) []float32 {
					h := make([]float32, n)
					if err := Download(c, h, p); err != nil {
						t.Fatal(err)
					}
					return h
				}
				want, wk, wv := get(ref.qkv, M*N), get(ref.kc, slots*kvdim), get(ref.vc, slots*kvdim)
				for i, v := range want {
					if math.IsNaN(float64(v)) {
						t.Fatalf("reference qkv[%d] not written", i)
					}
				}
				prev := c.SetPDL(true)
				defer c.SetPDL(prev)
				for _, v := range i8Configs {
					o := mk()
					withI8(c, v, func() {
						if err := c.GemvI8QKVRope(dQ, dS, dX, 0, dnw, eps, o.qkv, dpos, dsl, dinv, o.kc, o.vc, M, H, nh, nkv, hd); err != nil {
							t.Fatal(err)
						}
					})
					got, gk, gv := get(o.qkv, M*N), get(o.kc, slots*kvdim), get(o.vc, slots*kvdim)
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s H=%d heads %d/%d hd %d M=%d: qkv[%d][%d] = %v, want %v", v, H, nh, nkv, hd, M, i/N, i%N, got[i], want[i])
						}
					}
					for m := 0; m < M; m++ {
						for e := 0; e < kvdim; e++ {
							i := int(sl[m])*kvdim + e
							if math.Float32bits(gk[i]) != math.Float32bits(wk[i]) || math.Float32bits(gv[i]) != math.Float32bits(wv[i]) {
								t.Fatalf("%s H=%d M=%d: cache slot %d elem %d differs", v, H, M, sl[m], e)
							}
						}
					}
					for _, p := range []DevicePtr{o.qkv, o.kc, o.vc} {
						c.Free(p)
					}
				}
				for _, p := range []DevicePtr{dQ, dS, dX, dnw, dpos, dsl, dinv, ref.qkv, ref.kc, ref.vc, tmp} {
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

// DequantI8F16 gives f16(s * q) exactly (the product is exact in float32
// for |q| <= 127 and the fp32 scale rounded once to fp16, both sides), and
// FillRandomI8 fills values in [-127, 127] with scale/127 per row.
func TestDequantAndFillI8(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(rand.Uint64(), 17))
	err := d.Do(func(c *Ctx) error {
		t := fatalPanics{t}
		for _, sh := range [][2]int{{3, 16}, {37, 272}, {300, 2048}} {
			N, K := sh[0], sh[1]
			Q, S := randI8(r, N*K), randScales(r, N, K)
			dQ, dS := devBuf(t, c, Q, 1), devBuf(t, c, S, 4)
			out, err := c.Alloc(N * K * 2)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.DequantI8F16(dQ, dS, out, N, K); err != nil {
				t.Fatal(err)
			}
			got := make([]uint16, N*K)
			if err := Download(c, got, out); err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if want := f16(S[i/K] * float32(Q[i])); got[i] != want {
					t.Fatalf("dequant N=%d K=%d at %d: %#04x, want %#04x (q %d s %g)", N, K, i, got[i], want, Q[i], S[i/K])
				}
			}
			if err := c.FillRandomI8(dQ, dS, N, K, 99, 0.5); err != nil {
				t.Fatal(err)
			}
			fq, fs := make([]int8, N*K), make([]float32, N)
			if err := Download(c, fq, dQ); err != nil {
				t.Fatal(err)
			}
			if err := Download(c, fs, dS); err != nil {
				t.Fatal(err)
			}
			seen := map[int8]bool{}
			for _, v := range fq {
				if v < -127 {
					t.Fatalf("fill_random_i8 wrote %d", v)
				}
				seen[v] = true
			}
			if N*K >= 2048 && len(seen) < 200 {
				t.Fatalf("fill_random_i8: only %d distinct values in %d", len(seen), N*K)
			}
			wantS := float32(0.5)
			wantS /= 127
			for i, s := range fs {
				if s != wantS {
					t.Fatalf("fill_random_i8 scale[%d] = %g", i, s)
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
