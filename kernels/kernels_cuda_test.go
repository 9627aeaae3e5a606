//go:build cuda

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// These tests need a GPU: go test -tags cuda ./kernels. Each kernel is
// checked against a float64 Go reference on fresh random inputs, with
// outputs poisoned (NaN) before the run so unwritten elements fail.

var (
	devOnce sync.Once
	dev     *Device
	devErr  error
)

func testDevice(t *testing.T) *Device {
	t.Helper()
	// The CUDA-core GEMV family's tests (TestGemv, TestGemvWide, ...) check
	// that family (pinned here, whatever the default): the tensor-core one
	// (GemvMMA) is turned on explicitly by TestGemvMMA.
	devOnce.Do(func() { dev, devErr = OpenTuned(0, Tuning{GemvMMA: GemvMMAOff}) })
	if devErr != nil {
		if os.Getenv("SPECGATE_EXPECT_GPU") != "" {
			t.Fatalf("Open: %v", devErr)
		}
		t.Skipf("no GPU: %v", devErr)
	}
	return dev
}

func TestMain(m *testing.M) {
	code := m.Run()
	if dev != nil {
		dev.Close()
	}
	os.Exit(code)
}

const nanBits = 0x7fc00000

// fatalPanics turns Fatal into a panic, which Device.Do recovers and returns
// as an error: runtime.Goexit (t.Fatal) on the GPU worker would kill it.
type fatalPanics struct{ testing.TB }

func (f fatalPanics) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }
func (f fatalPanics) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

func f16(v float32) uint16 {
	// round to nearest even via float64 path
	b := math.Float32bits(v)
	sign := uint16(b>>16) & 0x8000
	a := math.Abs(float64(v))
	if a >= 65520 {
		return sign | 0x7c00
	}
	if a < 6.103515625e-05 { // subnormal
		m := math.RoundToEven(a / 5.960464477539063e-08)
		return sign | uint16(m)
	}
	e := math.Floor(math.Log2(a))
	m := math.RoundToEven((a/math.Exp2(e) - 1) * 1024)
	if m == 1024 {
		m, e = 0, e+1
	}
	return sign | uint16(e+15)<<10 | uint16(m)
}

func h2f(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e := int(h>>10) & 0x1f
	m := float64(h & 0x3ff)
	if e == 0 {
		return sign * m * 5.960464477539063e-08
	}
	return sign * (1 + m/1024) * math.Exp2(float64(e-15))
}

func randF16(r *rand.Rand, n int, scale float64) []uint16 {
	out := make([]uint16, n)
	for i := range out {
		out[i] = f16(float32((2*r.Float64() - 1) * scale))
	}
	return out
}

func randF32(r *rand.Rand, n int, scale float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32((2*r.Float64() - 1) * scale)
	}
	return out
}

func relErr(got []float32, want []float64) float64 {
	var num, den float64
	for i := range want {
		g := float64(got[i])
		if math.IsNaN(g) || math.IsInf(g, 0) {
			return math.Inf(1)
		}
		num += (g - want[i]) * (g - want[i])
		den += want[i] * want[i]
	}
	return math.Sqrt(num / math.Max(den, 1e-300))
}

// devBuf uploads host data to a fresh device buffer.
func devBuf[T any](t testing.TB, c *Ctx, host []T, elemBytes int) DevicePtr {
	p, err := c.Alloc(max(len(host)*elemBytes, 16))
	if err == nil {
		err = Upload(c, p, host)
	}
	if err != nil {
		if t == nil {
			panic(err)
		}
		t.Fatal(err)
	}
	return p
}

func poisoned(t testing.TB, c *Ctx, n int) DevicePtr {
	t.Helper()
	p, err := c.Alloc(n * 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Memset32(p, nanBits, n); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDeviceInfo(t *testing.T) {
	d := testDevice(t)
	t.Logf("device %q cc %d.%d SMs %d smem optin %d arch %s driver %d cache hit %v cublas %v",
		d.Name, d.Major, d.Minor, d.SMs, d.MaxSmemOptin, d.Arch, d.DriverVer, d.CacheHit, HasCUBLAS())
	if d.SMs <= 0 || d.Major <= 0 {
		t.Fatalf("bad attributes %+v", d)
	}
}

// gemvConfig selects a GEMV family (and for the ring a grid cap) for a test.
type gemvConfig struct {
	variant   string
	maxBlocks int
}

var gemvConfigs = []gemvConfig{{GemvRing, 0}, {GemvRing, 1}, {GemvRing, 3}, {GemvDeep, 0}, {GemvShallow, 0}}

func (g gemvConfig) String() string {
	if g.maxBlocks > 0 {
		return fmt.Sprintf("%s(<=%d blocks)", g.variant, g.maxBlocks)
	}
	return g.variant
}

// with runs f with this family selected on c's device (on the GPU
// worker; restored after).
func (g gemvConfig) with(c *Ctx, f func()) {
	pv, pm := c.d.tune.Gemv, c.d.ringMaxBlocks
	c.d.tune.Gemv, c.d.ringMaxBlocks = g.variant, g.maxBlocks
	defer func() { c.d.tune.Gemv, c.d.ringMaxBlocks = pv, pm }()
	f()
}

func TestGemv(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(rand.Uint64(), 1))
	for _, kind := range []GemvKind{GemvNorm, GemvResid, GemvPlain, GemvSwiGLU} {
		for _, shape := range [][2]int{{200, 264}, {64, 2048}, {130, 1032}, {136, 512}} {
			N, K := shape[0], shape[1]
			// M=6 with K=2048 has exactly 48 KB of dynamic shared memory:
			// with the kernel's static bytes it needs the opt-in (issue #12).
			for _, M := range []int{1, 3, 6, 8} {
				err := d.Do(func(c *Ctx) error {
					t := fatalPanics{t} // t.Fatal must not run on the GPU worker
					W := randF16(r, N*K, 1/math.Sqrt(float64(K)))
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
					dW, dX, dnw := devBuf(t, c, W, 2), devBuf(t, c, X, 4), devBuf(t, c, nw, 2)
					var dxr DevicePtr
					if kind == GemvNorm || kind == GemvPlain {
						dxr = devBuf(t, c, xrow, 4)
					}
					var dY DevicePtr
					if kind == GemvResid {
						dY = devBuf(t, c, Y0, 4)
					} else {
						dY = poisoned(t, c, M*outW)
					}
					const eps = 1e-5
					if err := c.Gemv(kind, dW, dX, dxr, dnw, eps, dY, M, N, K); err != nil {
						t.Fatal(err)
					}
					got := make([]float32, M*outW)
					if err := Download(c, got, dY); err != nil {
						t.Fatal(err)
					}
					var xr []int32
					if dxr != 0 {
						xr = xrow
					}
					want := gemvRef(kind, X, xr, nw, Y0, M, N, K, eps, func(n, k int) float64 { return h2f(W[n*K+k]) })
					if e := relErr(got, want); e > 1e-5 {
						t.Errorf("kind %d N=%d K=%d M=%d: rel err %.3g", kind, N, K, M, e)
					}
					// Every GEMV family gives the same bits at batch 1, the
					// ring also when its grid is capped so that each warp
					// streams many units (crossing unit boundaries inside
					// its register ring).
					if M == 1 {
						for _, g := range gemvConfigs {
							var dY2 DevicePtr
							if kind == GemvResid {
								dY2 = devBuf(t, c, Y0, 4)
							} else {
								dY2 = poisoned(t, c, outW)
							}
							g.with(c, func() {
								if err := c.Gemv(kind, dW, dX, dxr, dnw, eps, dY2, 1, N, K); err != nil {
									t.Fatal(err)
								}
							})
							again := make([]float32, outW)
							if err := Download(c, again, dY2); err != nil {
								t.Fatal(err)
							}
							for i := range again {
								if math.Float32bits(again[i]) != math.Float32bits(got[i]) {
									t.Fatalf("kind %d N=%d K=%d: GEMV %s differs from %s at %d: %v vs %v", kind, N, K, g, c.d.tune.Gemv, i, again[i], got[i])
								}
							}
							c.Free(dY2)
						}
					}
					// Batch invariance: token 0 alone gives the same bits.
					if kind != GemvResid && M > 1 {
						dY1 := poisoned(t, c, outW)
						if err := c.Gemv(kind, dW, dX, dxr, dnw, eps, dY1, 1, N, K); err != nil {
							t.Fatal(err)
						}
						one := make([]float32, outW)
						if err := Download(c, one, dY1); err != nil {
							t.Fatal(err)
						}
						for i := range one {
							if one[i] != got[i] {
								t.Fatalf("kind %d: M=1 result differs from row 0 of M=%d at %d: %v vs %v", kind, M, i, one[i], got[i])
							}
						}
						c.Free(dY1)
					}
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
}

// refAttention: out for token t, head h over visible keys.
func TestRopeAttention(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(rand.Uint64(), 2))
	type tc struct {
		hd, nh, nkv, cached, n int
		tree                   bool
	}
	for _, c0 := range []tc{{64, 4, 2, 5, 3, false}, {128, 8, 2, 0, 6, false}, {64, 4, 1, 1500, 2, false},
		{64, 4, 4, 7, 7, true}, {32, 2, 1, 3, 40, true}, {8, 6, 2, 9, 5, true}, {16, 2, 1, 2, 4, false}, {256, 2, 2, 4, 3, false},
		{64, 4, 2, 300, 8, true}, {128, 4, 1, 97, 5, false}, {64, 6, 2, 100, 33, true}, {64, 6, 2, 700, 9, true},
		// attention_g2_hd128 (no case above has 2 query heads per KV head
		// at head dim 128), and 3 per KV head at 128 (not built: the
		// grouped setting must fall back to the per-head kernel)
		{128, 4, 2, 300, 8, true}, {128, 6, 2, 40, 5, false}} {
		hd, nh, nkv, nc, n := c0.hd, c0.nh, c0.nkv, c0.cached, c0.n
		kvdim, qdim := nkv*hd, nh*hd
		qkvdim := qdim + 2*kvdim
		numSlots := nc + n + 50
		perm := r.Perm(numSlots)
		cachedSlots, newSlots := perm[:nc], perm[nc:nc+n]
		kc := randF32(r, numSlots*kvdim, 1)
		vc := randF32(r, numSlots*kvdim, 1)
		qkv := randF32(r, n*qkvdim, 1)
		pos := make([]int32, n)
		parents := make([]int32, n)
		for i := range pos {
			parents[i] = int32(i - 1)
			if c0.tree && i > 0 {
				parents[i] = int32(r.IntN(i+1) - 1)
			}
			if parents[i] < 0 {
				pos[i] = int32(nc)
			} else {
				pos[i] = pos[parents[i]] + 1
			}
		}
		inv := make([]float32, hd/2)
		for i := range inv {
			inv[i] = float32(1 / math.Pow(10000, float64(2*i)/float64(hd)))
		}
		slotList := make([]int32, 0, nc+n)
		for _, s := range cachedSlots {
			slotList = append(slotList, int32(s))
		}
		slots := make([]int32, n)
		for i, s := range newSlots {
			slots[i] = int32(s)
			slotList = append(slotList, int32(s))
		}
		kvoff, kvlen, cached, maskoff := make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
		wpr := (n + 31) / 32
		var mask []int32
		for i := 0; i < n; i++ {
			kvlen[i], cached[i], maskoff[i] = int32(nc+i+1), int32(nc), -1
			if c0.tree {
				maskoff[i] = int32(len(mask))
				base := len(mask)
				mask = append(mask, make([]int32, wpr)...)
				for a := int32(i); a >= 0; a = parents[a] {
					mask[base+int(a)/32] |= int32(uint32(1) << (uint(a) % 32))
				}
			}
		}
		if mask == nil {
			mask = []int32{0}
		}
		// Reference: rope, then attention in float64.
		rq := make([]float64, n*qkvdim)
		for i := range rq {
			rq[i] = float64(qkv[i])
		}
		kcRef := make([]float64, len(kc))
		vcRef := make([]float64, len(vc))
		for i := range kc {
			kcRef[i], vcRef[i] = float64(kc[i]), float64(vc[i])
		}
		for ti := 0; ti < n; ti++ {
			row := rq[ti*qkvdim:]
			for h := 0; h < nh+nkv; h++ {
				for j := 0; j < hd/2; j++ {
					a := float64(float32(pos[ti]) * inv[j])
					s, c := math.Sincos(a)
					x1, x2 := row[h*hd+j], row[h*hd+j+hd/2]
					row[h*hd+j], row[h*hd+j+hd/2] = x1*c-x2*s, x2*c+x1*s
				}
			}
			for k := 0; k < kvdim; k++ {
				kcRef[int(slots[ti])*kvdim+k] = row[qdim+k]
				vcRef[int(slots[ti])*kvdim+k] = row[qdim+kvdim+k]
			}
		}
		want := make([]float64, n*qdim)
		scale := 1 / math.Sqrt(float64(hd))
		for ti := 0; ti < n; ti++ {
			for h := 0; h < nh; h++ {
				g := h / (nh / nkv)
				var sc []float64
				var vis []int
				for j := 0; j < nc+ti+1; j++ {
					if j >= nc && c0.tree {
						i := j - nc
						anc := false
						for a := int32(ti); a >= 0; a = parents[a] {
							if int(a) == i {
								anc = true
							}
						}
						if !anc {
							continue
						}
					}
					s := 0.0
					for e := 0; e < hd; e++ {
						s += rq[ti*qkvdim+h*hd+e] * scale * kcRef[int(slotList[j])*kvdim+g*hd+e]
					}
					sc = append(sc, s)
					vis = append(vis, j)
				}
				mx := math.Inf(-1)
				for _, s := range sc {
					mx = math.Max(mx, s)
				}
				var l float64
				for i := range sc {
					sc[i] = math.Exp(sc[i] - mx)
					l += sc[i]
				}
				for e := 0; e < hd; e++ {
					var a float64
					for i, j := range vis {
						a += sc[i] * vcRef[int(slotList[j])*kvdim+g*hd+e]
					}
					want[ti*qdim+h*hd+e] = a / l
				}
			}
		}
		// The batch launch with the per-head kernel, then with the grouped
		// one (ops_attn_g.go; one-token launches keep the per-head kernel).
		for _, group := range []int{-1, 2} {
			err := d.Do(func(c *Ctx) error {
				t := fatalPanics{t} // t.Fatal must not run on the GPU worker
				tu := c.d.tune
				tu.AttnGroupMin = group
				prevT, err := c.SetTuning(tu)
				if err != nil {
					t.Fatal(err)
				}
				defer c.SetTuning(prevT)
				dqkv, dkc, dvc := devBuf(t, c, qkv, 4), devBuf(t, c, kc, 4), devBuf(t, c, vc, 4)
				dpos, dslots, dinv := devBuf(t, c, pos, 4), devBuf(t, c, slots, 4), devBuf(t, c, inv, 4)
				m := AttnMeta{SlotList: devBuf(t, c, slotList, 4), KVOff: devBuf(t, c, kvoff, 4), KVLen: devBuf(t, c, kvlen, 4),
					Cached: devBuf(t, c, cached, 4), MaskOff: devBuf(t, c, maskoff, 4), Mask: devBuf(t, c, mask, 4)}
				out := poisoned(t, c, n*qdim)
				if err := c.RopeAppend(dqkv, dpos, dslots, dinv, dkc, dvc, n, nh, nkv, hd); err != nil {
					t.Fatal(err)
				}
				if err := c.Attention(dqkv, out, dkc, dvc, m, n, nh, nkv, hd, float32(scale)); err != nil {
					t.Fatal(err)
				}
				got := make([]float32, n*qdim)
				if err := Download(c, got, out); err != nil {
					t.Fatal(err)
				}
				if e := relErr(got, want); e > 1e-5 {
					t.Errorf("%+v group %d: attention rel err %.3g", c0, group, e)
				}
				// Batch invariance (split attention included): each token alone
				// gives the same bits as in the batch, also when the launch has
				// only the split blocks its key count needs (MaxLen).
				one := make([]float32, qdim)
				for ti := 0; ti < 2*n; ti++ {
					o := DevicePtr(4 * (ti % n))
					mi := AttnMeta{SlotList: m.SlotList, KVOff: m.KVOff + o, KVLen: m.KVLen + o, Cached: m.Cached + o,
						MaskOff: m.MaskOff + o, Mask: m.Mask}
					if ti >= n {
						mi.MaxLen = int(kvlen[ti-n])
					}
					ti := ti % n
					if err := c.Attention(dqkv+DevicePtr(4*ti*qkvdim), out, dkc, dvc, mi, 1, nh, nkv, hd, float32(scale)); err != nil {
						t.Fatal(err)
					}
					if err := Download(c, one, out); err != nil {
						t.Fatal(err)
					}
					for e, v := range one {
						if math.Float32bits(v) != math.Float32bits(got[ti*qdim+e]) {
							t.Errorf("%+v group %d: token %d alone differs from its batch at %d: %g vs %g", c0, group, ti, e, v, got[ti*qdim+e])
							break
						}
					}
				}
				gk := make([]float32, len(kc))
				if err := Download(c, gk, dkc); err != nil {
					t.Fatal(err)
				}
				if e := relErr(gk, kcRef); e > 1e-6 {
					t.Errorf("%+v: K cache after rope_append rel err %.3g", c0, e)
				}
				for _, p := range []DevicePtr{dqkv, dkc, dvc, dpos, dslots, dinv, m.SlotList, m.KVOff, m.KVLen, m.Cached, m.MaskOff, m.Mask, out} {
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

func TestArgmaxAndSample(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(rand.Uint64(), 3))
	const V, R = 3001, 4096
	logits := randF32(r, V, 3)
	logits[17], logits[2500] = 9, 9 // tie: lowest id wins
	rows := make([]float32, 0, R*V)
	for i := 0; i < R; i++ {
		rows = append(rows, logits...)
	}
	u := make([]float32, R)
	for i := range u {
		u[i] = float32(r.Float64())
	}
	err := d.Do(func(c *Ctx) error {
		t := fatalPanics{t} // t.Fatal must not run on the GPU worker
		dl, du := devBuf(t, c, rows, 4), devBuf(t, c, u, 4)
		out, _ := c.Alloc(R * 4)
		got := make([]int32, R)
		if err := c.ArgmaxRows(dl, out, 2, V); err != nil {
			t.Fatal(err)
		}
		if err := Download(c, got[:2], out); err != nil {
			t.Fatal(err)
		}
		if got[0] != 17 || got[1] != 17 {
			t.Errorf("argmax %v, want 17", got[:2])
		}
		for _, kp := range []struct {
			k int
			p float32
		}{{1, 1}, {0, 1e-6}} {
			if err := c.SampleRows(dl, du, out, 64, V, 1, kp.k, kp.p); err != nil {
				t.Fatal(err)
			}
			Download(c, got[:64], out)
			for i := 0; i < 64; i++ {
				if got[i] != 17 && got[i] != 2500 {
					t.Fatalf("top-k %d top-p %v: row %d sampled %d, want one of the max tokens", kp.k, kp.p, i, got[i])
				}
			}
		}
		// Full distribution at temperature 2 against softmax.
		const temp = 2
		if err := c.SampleRows(dl, du, out, R, V, temp, 0, 1); err != nil {
			t.Fatal(err)
		}
		Download(c, got, out)
		p := make([]float64, V)
		var z float64
		for i, l := range logits {
			p[i] = math.Exp(float64(l-9) / temp)
			z += p[i]
		}
		// Compare the mass of the 20 most likely tokens, and check every sample is valid.
		var top float64
		idx := make([]int, V)
		for i := range idx {
			idx[i] = i
		}
		for i := 0; i < 20; i++ {
			for j := i + 1; j < V; j++ {
				if p[idx[j]] > p[idx[i]] {
					idx[i], idx[j] = idx[j], idx[i]
				}
			}
			top += p[idx[i]] / z
		}
		inTop := map[int32]bool{}
		for _, i := range idx[:20] {
			inTop[int32(i)] = true
		}
		cnt := 0
		for _, g := range got {
			if g < 0 || g >= V {
				t.Fatalf("sampled %d outside vocab", g)
			}
			if inTop[g] {
				cnt++
			}
		}
		frac := float64(cnt) / R
		sd := math.Sqrt(top * (1 - top) / R)
		if math.Abs(frac-top) > 5*sd+1e-3 {
			t.Errorf("temperature sampling: top-20 mass %.4f, sampled fraction %.4f (sd %.4f)", top, frac, sd)
		}
		// top-k 5: only the 5 most likely appear.
		if err := c.SampleRows(dl, du, out, R, V, temp, 5, 1); err != nil {
			t.Fatal(err)
		}
		Download(c, got, out)
		top5 := map[int32]bool{}
		for _, i := range idx[:5] {
			top5[int32(i)] = true
		}
		seen := map[int32]int{}
		for _, g := range got {
			if !top5[g] {
				t.Fatalf("top-k 5 sampled %d (p %.3g) outside the top 5", g, p[g]/z)
			}
			seen[g]++
		}
		if len(seen) < 3 {
			t.Errorf("top-k 5 sampled only %v", seen)
		}
		c.Free(dl)
		c.Free(du)
		c.Free(out)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestKVCompaction(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(rand.Uint64(), 4))
	const L, S, kv = 3, 40, 96
	cache := randF32(r, L*S*kv, 1)
	src := []int32{5, 7, 9, 30}
	dst := []int32{4, 5, 7, 9} // overlapping: 5 and 7 are both read and written
	want := make([]float64, len(cache))
	for i, v := range cache {
		want[i] = float64(v)
	}
	for l := 0; l < L; l++ {
		for i := range src {
			for k := 0; k < kv; k++ {
				want[(l*S+int(dst[i]))*kv+k] = float64(cache[(l*S+int(src[i]))*kv+k])
			}
		}
	}
	err := d.Do(func(c *Ctx) error {
		t := fatalPanics{t} // t.Fatal must not run on the GPU worker
		dc := devBuf(t, c, cache, 4)
		tmp, _ := c.Alloc(len(src) * L * kv * 4)
		ds, dd := devBuf(t, c, src, 4), devBuf(t, c, dst, 4)
		if err := c.KVGather(dc, tmp, ds, len(src), L, kv, S*kv); err != nil {
			t.Fatal(err)
		}
		if err := c.KVScatter(dc, tmp, dd, len(src), L, kv, S*kv); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, len(cache))
		Download(c, got, dc)
		if e := relErr(got, want); e != 0 {
			t.Errorf("compaction rel err %g", e)
		}
		for _, p := range []DevicePtr{dc, tmp, ds, dd} {
			c.Free(p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestGemmF16AndHelpers(t *testing.T) {
	d := testDevice(t)
	if !HasCUBLAS() {
		t.Skip("no cuBLAS")
	}
	r := rand.New(rand.NewPCG(rand.Uint64(), 5))
	const M, N, K = 37, 120, 264
	W := randF16(r, N*K, 0.1)
	X := randF32(r, M*K, 1)
	nw := randF16(r, K, 1)
	Y0 := randF32(r, M*N, 1)
	err := d.Do(func(c *Ctx) error {
		t := fatalPanics{t} // t.Fatal must not run on the GPU worker
		dW, dX, dnw, dY := devBuf(t, c, W, 2), devBuf(t, c, X, 4), devBuf(t, c, nw, 2), devBuf(t, c, Y0, 4)
		h, _ := c.Alloc(M * K * 2)
		if err := c.RMSNormF16(dX, 0, dnw, 1e-5, h, M, K); err != nil {
			t.Fatal(err)
		}
		if err := c.GemmF16(dW, h, dY, M, N, K, 1, 1); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, M*N)
		Download(c, got, dY)
		want := make([]float64, M*N)
		for m := 0; m < M; m++ {
			var ss float64
			for k := 0; k < K; k++ {
				ss += float64(X[m*K+k]) * float64(X[m*K+k])
			}
			s := 1 / math.Sqrt(ss/K+1e-5)
			for n := 0; n < N; n++ {
				a := float64(Y0[m*N+n])
				for k := 0; k < K; k++ {
					a += h2f(W[n*K+k]) * float64(X[m*K+k]) * s * h2f(nw[k])
				}
				want[m*N+n] = a
			}
		}
		if e := relErr(got, want); e > 3e-3 {
			t.Errorf("rmsnorm+gemm (fp16 activations) rel err %.3g", e)
		}
		// SwiGLU helper.
		gu := randF32(r, M*2*N, 3)
		dgu := devBuf(t, c, gu, 4)
		out := poisoned(t, c, M*N)
		if err := c.SwiGLU(dgu, out, N, M); err != nil {
			t.Fatal(err)
		}
		got2 := make([]float32, M*N)
		Download(c, got2, out)
		want2 := make([]float64, M*N)
		for i := range want2 {
			tt, j := i/N, i%N
			g, u := float64(gu[tt*2*N+2*j]), float64(gu[tt*2*N+2*j+1])
			want2[i] = g / (1 + math.Exp(-g)) * u
		}
		if e := relErr(got2, want2); e > 1e-6 {
			t.Errorf("swiglu rel err %.3g", e)
		}
		for _, p := range []DevicePtr{dW, dX, dnw, dY, h, dgu, out} {
			c.Free(p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A captured graph replays the same launches over whatever the buffers hold
// at replay time.
func TestGraphReplay(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(rand.Uint64(), 6))
	const N, K = 64, 512
	W := randF16(r, N*K, 0.1)
	err := d.Do(func(c *Ctx) error {
		t := fatalPanics{t} // t.Fatal must not run on the GPU worker
		dW := devBuf(t, c, W, 2)
		dX, _ := c.Alloc(K * 4)
		dY := poisoned(t, c, N)
		if err := c.Gemv(GemvPlain, dW, dX, 0, 0, 0, dY, 1, N, K); err != nil { // warm: loads the function
			t.Fatal(err)
		}
		if err := c.BeginCapture(); err != nil {
			t.Fatal(err)
		}
		if err := c.Gemv(GemvPlain, dW, dX, 0, 0, 0, dY, 1, N, K); err != nil {
			t.Fatal(err)
		}
		g, err := c.EndCapture()
		if err != nil {
			t.Fatal(err)
		}
		defer c.DestroyGraph(g)
		for it := 0; it < 3; it++ {
			X := randF32(r, K, 1)
			if err := Upload(c, dX, X); err != nil {
				t.Fatal(err)
			}
			if err := c.LaunchGraph(g); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, N)
			Download(c, got, dY)
			want := make([]float64, N)
			for n := 0; n < N; n++ {
				for k := 0; k < K; k++ {
					want[n] += h2f(W[n*K+k]) * float64(X[k])
				}
			}
			if e := relErr(got, want); e > 1e-5 {
				t.Fatalf("replay %d: rel err %.3g", it, e)
			}
		}
		c.Free(dW)
		c.Free(dX)
		c.Free(dY)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestCopyBandwidth(t *testing.T) {
	d := testDevice(t)
	err := d.Do(func(c *Ctx) error {
		t := fatalPanics{t} // t.Fatal must not run on the GPU worker
		bw, err := c.CopyBandwidth(1<<30, 20)
		if err != nil {
			return err
		}
		t.Logf("device-to-device copy: %.0f GB/s (read+write)", bw/1e9)
		if bw <= 0 {
			t.Fatal("no bandwidth")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGemvQKVRope: the fused QKV GEMV + RoPE + KV append over the weight in
// RopeRows order gives the same bits as GemvNorm over the standard weight
// followed by RopeAppend (q, k, v rows and the cached k, v), and so does
// GemvNorm over the permuted weight followed by RopeAppendPerm (the prefill
// path). The fused launches run with programmatic dependent launch on where
// the device has it.
func TestGemvQKVRope(t *testing.T) {
	d := testDevice(t)
	r := rand.New(rand.NewPCG(rand.Uint64(), 3))
	for _, sh := range []struct{ H, nh, nkv, hd int }{{264, 4, 2, 16}, {2048, 32, 4, 64}, {520, 6, 6, 128}, {48, 6, 1, 8}} {
		for _, M := range []int{1, 3, 6, 8} { // M=6, H=2048: 48 KB of dynamic shared memory (issue #12)
			err := d.Do(func(c *Ctx) error {
				t := fatalPanics{t}
				H, nh, nkv, hd := sh.H, sh.nh, sh.nkv, sh.hd
				N, kvdim, slots := (nh+2*nkv)*hd, nkv*hd, 64
				W := randF16(r, N*H, 1/math.Sqrt(float64(H)))
				perm := RopeRows(nh, nkv, hd)
				Wp := make([]uint16, 0, N*H)
				for _, row := range perm {
					Wp = append(Wp, W[row*H:(row+1)*H]...)
				}
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
				dW, dWp, dX, dnw := devBuf(t, c, W, 2), devBuf(t, c, Wp, 2), devBuf(t, c, X, 4), devBuf(t, c, nw, 2)
				dpos, dsl, dinv := devBuf(t, c, pos, 4), devBuf(t, c, sl, 4), devBuf(t, c, inv, 4)
				type out struct{ qkv, kc, vc DevicePtr }
				mk := func() out {
					return out{poisoned(t, c, M*N), poisoned(t, c, slots*kvdim), poisoned(t, c, slots*kvdim)}
				}
				ref, pre := mk(), mk()
				tmp := poisoned(t, c, M*N)
				const eps = 1e-5
				gemvConfig{GemvDeep, 0}.with(c, func() {
					if err := c.Gemv(GemvNorm, dW, dX, 0, dnw, eps, ref.qkv, M, N, H); err != nil {
						t.Fatal(err)
					}
				})
				if err := c.RopeAppend(ref.qkv, dpos, dsl, dinv, ref.kc, ref.vc, M, nh, nkv, hd); err != nil {
					t.Fatal(err)
				}
				prev := c.SetPDL(true)
				outs := map[string]out{"rope_append_perm": pre}
				for _, g := range gemvConfigs {
					o := mk()
					g.with(c, func() {
						if err := c.GemvQKVRope(dWp, dX, 0, dnw, eps, o.qkv, dpos, dsl, dinv, o.kc, o.vc, M, H, nh, nkv, hd); err != nil {
							t.Fatal(err)
						}
					})
					outs["fused "+g.String()] = o
				}
				if err := c.Gemv(GemvNorm, dWp, dX, 0, dnw, eps, tmp, M, N, H); err != nil {
					t.Fatal(err)
				}
				if err := c.RopeAppendPerm(tmp, pre.qkv, dpos, dsl, dinv, pre.kc, pre.vc, M, nh, nkv, hd); err != nil {
					t.Fatal(err)
				}
				c.SetPDL(prev)
				get := func(p DevicePtr, n int) []float32 {
					h := make([]float32, n)
					if err := Download(c, h, p); err != nil {
						t.Fatal(err)
					}
					return h
				}
				want := get(ref.qkv, M*N)
				wk, wv := get(ref.kc, slots*kvdim), get(ref.vc, slots*kvdim)
				for name, o := range outs {
					got := get(o.qkv, M*N)
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s H=%d heads %d/%d hd %d M=%d: qkv[%d][%d] = %v, want %v", name, H, nh, nkv, hd, M, i/N, i%N, got[i], want[i])
						}
					}
					gk, gv := get(o.kc, slots*kvdim), get(o.vc, slots*kvdim)
					for m := 0; m < M; m++ {
						for e := 0; e < kvdim; e++ {
							i := int(sl[m])*kvdim + e
							if math.Float32bits(gk[i]) != math.Float32bits(wk[i]) || math.Float32bits(gv[i]) != math.Float32bits(wv[i]) {
								t.Fatalf("%s H=%d M=%d: cache slot %d elem %d: k %v v %v, want %v %v", name, H, M, sl[m], e, gk[i], gv[i], wk[i], wv[i])
							}
						}
					}
					for _, p := range []DevicePtr{o.qkv, o.kc, o.vc} {
						c.Free(p)
					}
				}
				for i, v := range want {
					if math.IsNaN(float64(v)) {
						t.Fatalf("reference qkv[%d] not written", i)
					}
				}
				for _, p := range []DevicePtr{dW, dWp, dX, dnw, dpos, dsl, dinv, ref.qkv, ref.kc, ref.vc, tmp} {
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

// TestDebugLaunchNamesFaultingKernel: with DebugLaunches, a kernel that
// faults on the device (an embedding gather far out of bounds) is reported
// by its launch, with the kernel's name and the driver's error. Runs in a
// child process: a fault poisons the CUDA context for good.
func TestDebugLaunchNamesFaultingKernel(t *testing.T) {
	if os.Getenv("SPECGATE_DEBUG_CHILD") == "1" {
		DebugLaunches = true
		d, err := Open(0)
		if err != nil {
			fmt.Printf("CHILD-OPEN: %v\n", err)
			os.Exit(0)
		}
		err = d.Do(func(c *Ctx) error {
			table, _ := c.Alloc(64 * 8 * 2)
			x, _ := c.Alloc(8 * 4)
			tokens := devBuf(fatalPanics{t}, c, []int32{1 << 30}, 4) // row 2^30 of a 64-row table
			return c.Embed(table, tokens, x, 1, 8)
		})
		fmt.Printf("CHILD-ERR: %v\n", err)
		os.Exit(0)
	}
	testDevice(t) // skips without a GPU
	cmd := exec.Command(os.Args[0], "-test.run", "^TestDebugLaunchNamesFaultingKernel$")
	cmd.Env = append(os.Environ(), "SPECGATE_DEBUG_CHILD=1")
	out, _ := cmd.CombinedOutput()
	line := ""
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "CHILD-") {
			line = l
		}
	}
	if !strings.HasPrefix(line, "CHILD-ERR: embed_f16") || !strings.Contains(line, "failed on the device") {
		t.Fatalf("child output %q, want the embed_f16 launch to report the fault:\n%s", line, out)
	}
	t.Log(line)
}
