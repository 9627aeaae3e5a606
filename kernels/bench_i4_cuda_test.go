//go:build cuda

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkGemvI4: the TinyLlama-1.1B projections at batch 1 with int4
// weights (groups of 32, fp16 scales), weights rotated over copies larger
// than L2 so each call streams from HBM, PDL on (as in a decode step).
// Reports weight GB/s (packed values plus scales), registers and resident
// blocks per SM.
func BenchmarkGemvI4(b *testing.B) {
	d, err := Open(0)
	if err != nil {
		b.Skip(err)
	}
	defer d.Close()
	for _, s := range []struct {
		name string
		kind GemvKind
		N, K int
	}{{"qkv", GemvNorm, 2560, 2048}, {"o", GemvResid, 2048, 2048}, {"gateup", GemvSwiGLU, 11264, 2048},
		{"down", GemvResid, 2048, 5632}, {"lmhead", GemvNorm, 32000, 2048}} {
		b.Run(fmt.Sprintf("%s-M1", s.name), func(b *testing.B) {
			err := d.Do(func(c *Ctx) error {
				prev := c.SetPDL(true)
				defer c.SetPDL(prev)
				tb := fatalPanics{b}
				bytes := s.N*s.K/2 + 2*s.N*s.K/I4Group
				copies := max(2, (400<<20)/bytes)
				ws, ss := make([]DevicePtr, copies), make([]DevicePtr, copies)
				for i := range ws {
					ws[i], _ = c.Alloc(s.N * s.K / 2)
					ss[i], _ = c.Alloc(2 * s.N * s.K / I4Group)
					if err := c.FillRandomI4(ws[i], ss[i], s.N, s.K, uint64(i), 0.02); err != nil {
						tb.Fatal(err)
					}
				}
				r := rand.New(rand.NewPCG(1, 2))
				x := devBuf(tb, c, randF32(r, s.K, 1), 4)
				nw := devBuf(tb, c, randF16(r, s.K, 1), 2)
				y, _ := c.Alloc(s.N * 4)
				name := fmt.Sprintf("%s_m1", gemvI4Names[s.kind])
				if regs, per, err := c.KernelInfo(name, 256, GemvSmem(1, s.K)); err == nil {
					b.ReportMetric(float64(regs), "regs")
					b.ReportMetric(float64(per), "blocks/SM")
				}
				us := timeLaunches(tb, c, max(b.N, 50), func(i int) error {
					return c.GemvI4(s.kind, ws[i%copies], ss[i%copies], x, 0, nw, 1e-5, y, 1, s.N, s.K)
				})
				b.ReportMetric(us, "us/call")
				b.ReportMetric(float64(bytes)/us/1e3, "GB/s")
				for _, p := range append(append(ws, ss...), x, nw, y) {
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
