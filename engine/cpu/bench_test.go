package cpu

import (
	"fmt"
	"testing"
)

// BenchmarkMatmul: GMAC/s of the CPU matmul at the target's MLP shape, for a
// decode (T=1) and a prefill tile (T=64), on one thread and on GOMAXPROCS.
func BenchmarkMatmul(b *testing.B) {
	const in, out = 384, 1024
	for _, T := range []int{1, 64} {
		for _, threads := range []int{1, 0} {
			b.Run(fmt.Sprintf("T=%d/threads=%d", T, threads), func(b *testing.B) {
				x, w, y := make([]float32, T*in), make([]float32, in*out), make([]float32, T*out)
				for i := range w {
					w[i] = float32(i%7) * 0.1
				}
				for b.Loop() {
					matmulT(threads, y, x, w, T, in, out)
				}
				b.ReportMetric(float64(b.N*T*in*out)/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
		}
	}
}

// BenchmarkMatmulShapes: the packed (or portable) matmul at each matmul
// shape of the shipped target (binary16 weights) for T = 1, 4, 8 tokens on
// one thread; GMAC/s shows whether a shape runs at the FMA rate.
func BenchmarkMatmulShapes(b *testing.B) {
	for _, sh := range []struct {
		name    string
		in, out int
	}{{"qkv", 384, 640}, {"o", 384, 384}, {"gateup", 384, 2048}, {"down", 1024, 384}, {"lmhead", 384, 8192}} {
		w := make([]float32, sh.in*sh.out)
		for i := range w {
			w[i] = float32(i%13-6) * 0.125
		}
		wm := newWmat(w, sh.out, sh.in, true)
		for _, T := range []int{1, 4, 8} {
			b.Run(fmt.Sprintf("%s/T=%d", sh.name, T), func(b *testing.B) {
				x, y := make([]float32, T*sh.in), make([]float32, T*sh.out)
				for i := range x {
					x[i] = float32(i%5) * 0.25
				}
				for b.Loop() {
					matmulJobs(fan(1), x, T, sh.in, mmJob{y, &wm, sh.out})
				}
				b.ReportMetric(float64(b.N*T*sh.in*sh.out)/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
		}
	}
}
