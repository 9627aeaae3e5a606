package engine

import (
	"context"
	"testing"
)

// BenchmarkDormantSpeculation: host cost per token of a lone greedy
// request whose drafts never pay (the adaptive budget stops granting them)
// against the same request without proposers, on a tiny random model whose
// forward is cheap, so that the scheduler's per-step overhead shows (on
// the GPU a step of the shipped target is ~0.13 ms).
func BenchmarkDormantSpeculation(b *testing.B) {
	cfg := genConfig()
	m := NewRandomModel(cfg, 61, LoadOptions{KVTokens: 4096, BlockSize: 16, Threads: 1, DisablePrefixCache: true})
	prompt := []int32{5, 7, 9, 11}
	for _, mode := range []string{"plain", "dormant"} {
		b.Run(mode, func(b *testing.B) {
			var opts Options
			if mode == "dormant" {
				opts.Proposers = []Proposer{&neverPays{}}
			}
			e := New(m, opts)
			defer e.Close()
			req := GenerateRequest{Prompt: prompt, MaxTokens: 200, Sampling: SamplingParams{SkipLogprobs: true}}
			n := 0
			c0 := cpuTime()
			for b.Loop() {
				if _, err := e.Generate(context.Background(), req, func(c Chunk) error { n += len(c.Tokens); return nil }); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/token")
			b.ReportMetric(float64(cpuTime()-c0)/float64(n), "cpu-ns/token")
		})
	}
}
