//go:build cuda

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkGemvI8: the TinyLlama-1.1B projections at batch 1 and 4 with
// int8 weights (every batch-1 configuration of i8Configs), weights rotated
// over copies larger than L2 so each call streams from HBM, PDL on (as in
// a decode step). Reports weight GB/s (int8 bytes plus the row scales)
// and the kernel's registers and resident blocks per SM.
func BenchmarkGemvI8(b *testing.B) {
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
		type run struct {
			M int
			g i8Config
		}
		var runs []run
		for _, g := range i8Configs {
			runs = append(runs, run{1, g})
		}
		for _, mv := range append(runs, run{4, i8Config{GemvDeep, false, 8}}) {
			b.Run(fmt.Sprintf("%s-M%d-%s", s.name, mv.M, mv.g), func(b *testing.B) {
				err := d.Do(func(c *Ctx) error {
					prev := c.SetPDL(true)
					defer c.SetPDL(prev)
					tb := fatalPanics{b}
					bytes := s.N*s.K + 4*s.N
					copies := max(2, (400<<20)/bytes)
					ws, ss := make([]DevicePtr, copies), make([]DevicePtr, copies)
					for i := range ws {
						ws[i], _ = c.Alloc(s.N * s.K)
						ss[i], _ = c.Alloc(4 * s.N)
						c.FillRandomI8(ws[i], ss[i], s.N, s.K, uint64(i), 0.02)
					}
					r := rand.New(rand.NewPCG(1, 2))
					x := devBuf(tb, c, randF32(r, mv.M*s.K, 1), 4)
					nw := devBuf(tb, c, randF16(r, s.K, 1), 2)
					y, _ := c.Alloc(mv.M * s.N * 4)
					var us float64
					withI8(c, mv.g, func() {
						name := c.gemvI8Name(gemvI8Names[s.kind], mv.M)
						if regs, per, err := c.KernelInfo(name, 32*mv.g.warps, GemvSmem(mv.M, s.K)); err == nil {
							b.ReportMetric(float64(regs), "regs")
							b.ReportMetric(float64(per), "blocks/SM")
						}
						us = timeLaunches(tb, c, max(b.N, 50), func(i int) error {
							return c.GemvI8(s.kind, ws[i%copies], ss[i%copies], x, 0, nw, 1e-5, y, mv.M, s.N, s.K)
						})
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
}
