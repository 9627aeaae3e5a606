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
