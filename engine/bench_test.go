package engine

import (
	"fmt"
	"testing"
)

// benchConfig has roughly the shape of the shipped target (~15M parameters).
func benchConfig() Config {
	return Config{HiddenSize: 384, IntermediateSize: 1024, NumLayers: 6, NumHeads: 6, NumKVHeads: 2, HeadDim: 64,
		RMSNormEps: 1e-5, RopeTheta: 10000, RopeScaling: RopeScaling{Type: RopeDefault}, MaxPositions: 1024,
		VocabSize: 8192, BOS: -1, TieWordEmbeddings: true}
}

// BenchmarkPrefill: tokens/s of a 128-token prefill at batch 1.
func BenchmarkPrefill(b *testing.B) {
	for _, n := range []int{16, 128} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			m := NewRandomModel(benchConfig(), 1, LoadOptions{KVTokens: 256, DisablePrefixCache: true})
			toks := make([]int32, n)
			for i := range toks {
				toks[i] = int32(i * 37 % 8192)
			}
			b.ResetTimer()
			for b.Loop() {
				s := m.NewSequence()
				if _, err := s.Forward(toks, nil, []int32{int32(n - 1)}); err != nil {
					b.Fatal(err)
				}
				s.Free()
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}

// BenchmarkDecode: tokens/s of one-token decode steps at batch 1 after a 64-token prompt.
func BenchmarkDecode(b *testing.B) {
	m := NewRandomModel(benchConfig(), 1, LoadOptions{KVTokens: 1024, DisablePrefixCache: true})
	toks := make([]int32, 64)
	s := m.NewSequence()
	if _, err := s.Forward(toks, nil, []int32{}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if s.Len() >= 900 {
			s.Truncate(64)
		}
		if _, err := s.Forward([]int32{5}, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
}

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
					matmulJobs(1, x, T, sh.in, mmJob{y, &wm, sh.out})
				}
				b.ReportMetric(float64(b.N*T*sh.in*sh.out)/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
		}
	}
}
