//go:build cuda

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// timeLaunches captures n calls of launch in a CUDA graph, replays it
// between two events and returns device µs per call (launch overhead
// excluded, as in the backend's graph-replayed decode).
func timeLaunches(b testing.TB, c *Ctx, n int, launch func(i int) error) float64 {
	for i := 0; i < 3; i++ {
		if err := launch(i); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.BeginCapture(); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := launch(i); err != nil {
			c.EndCapture()
			b.Fatal(err)
		}
	}
	g, err := c.EndCapture()
	if err != nil {
		b.Fatal(err)
	}
	defer c.DestroyGraph(g)
	if err := c.LaunchGraph(g); err != nil { // warm
		b.Fatal(err)
	}
	e0, _ := c.NewEvent()
	e1, _ := c.NewEvent()
	defer c.DestroyEvent(e0)
	defer c.DestroyEvent(e1)
	c.Record(e0)
	if err := c.LaunchGraph(g); err != nil {
		b.Fatal(err)
	}
	c.Record(e1)
	ms, err := c.ElapsedMs(e0, e1)
	if err != nil {
		b.Fatal(err)
	}
	return float64(ms) * 1e3 / float64(n)
}

// BenchmarkGemv: the TinyLlama-1.1B projections at batch 1 (and 4), weights
// rotated over copies larger than L2 so each call streams from HBM.
// Reports weight GB/s.
func BenchmarkGemv(b *testing.B) {
	d, err := Open(0)
	if err != nil {
		b.Skip(err)
	}
	defer d.Close()
	shapes := []struct {
		name string
		kind GemvKind
		N, K int
	}{{"qkv", GemvNorm, 2560, 2048}, {"o", GemvResid, 2048, 2048}, {"gateup", GemvSwiGLU, 11264, 2048},
		{"down", GemvResid, 2048, 5632}, {"lmhead", GemvNorm, 32000, 2048}}
	for _, s := range shapes {
		for _, mp := range [][2]int{{1, 0}, {1, 1}, {4, 0}} {
			M, pdl := mp[0], mp[1] == 1
			b.Run(fmt.Sprintf("%s-M%d-pdl%v", s.name, M, pdl), func(b *testing.B) {
				err := d.Do(func(c *Ctx) error {
					prev := c.SetPDL(pdl) // consecutive calls overlap (tail + prologue hidden)
					defer c.SetPDL(prev)
					tb := fatalPanics{b} // Fatal must not run on the GPU worker
					bytes := s.N * s.K * 2
					copies := max(2, (400<<20)/bytes)
					ws := make([]DevicePtr, copies)
					for i := range ws {
						ws[i], _ = c.Alloc(bytes)
						c.FillRandomF16(ws[i], int64(s.N*s.K), uint64(i), 0.02)
					}
					r := rand.New(rand.NewPCG(1, 2))
					x := devBuf(tb, c, randF32(r, M*s.K, 1), 4)
					nw := devBuf(tb, c, randF16(r, s.K, 1), 2)
					y, _ := c.Alloc(M * s.N * 4)
					us := timeLaunches(tb, c, max(b.N, 50), func(i int) error {
						return c.Gemv(s.kind, ws[i%copies], x, 0, nw, 1e-5, y, M, s.N, s.K)
					})
					b.ReportMetric(us, "us/call")
					b.ReportMetric(float64(bytes)/us/1e3, "GB/s")
					for _, p := range append(ws, x, nw, y) {
						c.Free(p)
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkAttention: one decode token (T=1) or a 8-token chain, 32 heads,
// 4 KV heads, head_dim 64, over contexts of 256..4096 keys.
func BenchmarkAttention(b *testing.B) {
	d, err := Open(0)
	if err != nil {
		b.Skip(err)
	}
	defer d.Close()
	const nh, nkv, hd = 32, 4, 64
	for _, T := range []int{1, 8} {
		for _, ctx := range []int{256, 1024, 4096} {
			for _, full := range []bool{false, true} {
				name := fmt.Sprintf("T%d-ctx%d", T, ctx)
				if full {
					name += "-fullgrid" // MaxLen unknown: Tuning.AttnSplits blocks per head
				}
				b.Run(name, func(b *testing.B) {
					err := d.Do(func(c *Ctx) error {
						prev := c.SetPDL(true) // as in decode: the next call's preloads overlap this one
						defer c.SetPDL(prev)
						tb := fatalPanics{b} // Fatal must not run on the GPU worker
						r := rand.New(rand.NewPCG(3, 4))
						kvdim := nkv * hd
						kc := devBuf(tb, c, randF32(r, (ctx+T)*kvdim, 1), 4)
						vc := devBuf(tb, c, randF32(r, (ctx+T)*kvdim, 1), 4)
						qkv := devBuf(tb, c, randF32(r, T*(nh+2*nkv)*hd, 1), 4)
						perm := r.Perm(ctx + T)
						sl := make([]int32, ctx+T)
						for i, p := range perm {
							sl[i] = int32(p)
						}
						off, ln, cached, mo := make([]int32, T), make([]int32, T), make([]int32, T), make([]int32, T)
						for i := 0; i < T; i++ {
							ln[i], cached[i], mo[i] = int32(ctx+i+1), int32(ctx), -1
						}
						m := AttnMeta{SlotList: devBuf(tb, c, sl, 4), KVOff: devBuf(tb, c, off, 4), KVLen: devBuf(tb, c, ln, 4),
							Cached: devBuf(tb, c, cached, 4), MaskOff: devBuf(tb, c, mo, 4), Mask: devBuf(tb, c, []int32{0}, 4)}
						if !full {
							m.MaxLen = ctx + T
						}
						out, _ := c.Alloc(T * nh * hd * 4)
						us := timeLaunches(tb, c, max(b.N, 50), func(int) error {
							return c.Attention(qkv, out, kc, vc, m, T, nh, nkv, hd, 0.125)
						})
						b.ReportMetric(us, "us/call")
						for _, p := range []DevicePtr{kc, vc, qkv, out, m.SlotList, m.KVOff, m.KVLen, m.Cached, m.MaskOff, m.Mask} {
							c.Free(p)
						}
						return nil
					})
					if err != nil {
						b.Fatal(err)
					}
				})
			}
		}
	}
}

// BenchmarkRopeAppend: one decode token of the TinyLlama shape.
func BenchmarkRopeAppend(b *testing.B) {
	d, err := Open(0)
	if err != nil {
		b.Skip(err)
	}
	defer d.Close()
	err = d.Do(func(c *Ctx) error {
		tb := fatalPanics{b} // Fatal must not run on the GPU worker
		r := rand.New(rand.NewPCG(5, 6))
		qkv := devBuf(tb, c, randF32(r, 40*64, 1), 4)
		kc, _ := c.Alloc(1024 * 256 * 4)
		vc, _ := c.Alloc(1024 * 256 * 4)
		pos := devBuf(tb, c, []int32{100}, 4)
		slots := devBuf(tb, c, []int32{100}, 4)
		inv := devBuf(tb, c, randF32(r, 32, 1), 4)
		us := timeLaunches(tb, c, max(b.N, 50), func(int) error {
			return c.RopeAppend(qkv, pos, slots, inv, kc, vc, 1, 32, 4, 64)
		})
		b.ReportMetric(us, "us/call")
		for _, p := range []DevicePtr{qkv, kc, vc, pos, slots, inv} {
			c.Free(p)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}
