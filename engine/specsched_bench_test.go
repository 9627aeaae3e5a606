package engine

import (
	"context"
	"fmt"
	"sync"
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

// neverPaysHidden is neverPays as a hidden-state proposer (Medusa-like:
// the engine fetches hidden rows for it and probes it with them).
type neverPaysHidden struct{ neverPays }

func (*neverPaysHidden) NeedsHidden() bool { return true }

// BenchmarkDormantBatch: the host cost per step of speculative requests
// whose drafts never pay, at concurrency 8 and 32, against the same
// requests without proposers (the adaptive rows of bench spec at c=8/32,
// which propose almost nothing): metrics cpu-µs/step and wall-µs/step
// (all steps of the run, per scheduler step), cpu-ms/run (c requests of
// 128 tokens), on a tiny random model whose
// forward is cheap so that the scheduler's and the budget's work shows.
// Read "dormant" or "dormant-hidden" minus "plain" as the overhead of
// speculation that does not pay, per step of c requests.
func BenchmarkDormantBatch(b *testing.B) {
	cfg := genConfig()
	m := NewRandomModel(cfg, 61, LoadOptions{KVTokens: 16384, BlockSize: 16, Threads: 1, DisablePrefixCache: true})
	for _, c := range []int{8, 32} {
		for _, mode := range []string{"plain", "dormant", "dormant-hidden"} {
			b.Run(fmt.Sprintf("c%d/%s", c, mode), func(b *testing.B) {
				var opts Options
				switch mode {
				case "dormant":
					opts.Proposers = []Proposer{&neverPays{}}
				case "dormant-hidden":
					opts.Proposers = []Proposer{&neverPaysHidden{}}
				}
				e := New(m, opts)
				defer e.Close()
				s0 := e.Stats()
				c0 := cpuTime()
				for b.Loop() {
					var wg sync.WaitGroup
					for i := range c {
						wg.Add(1)
						go func() {
							defer wg.Done()
							req := GenerateRequest{Prompt: []int32{5, 7, 9, int32(11 + i)}, MaxTokens: 128, Sampling: SamplingParams{SkipLogprobs: true}}
							if _, err := e.Generate(context.Background(), req, func(Chunk) error { return nil }); err != nil {
								b.Error(err)
							}
						}()
					}
					wg.Wait()
				}
				s1 := e.Stats()
				steps := float64(s1.Steps - s0.Steps)
				b.ReportMetric(float64(cpuTime()-c0)/1e6/float64(b.N), "cpu-ms/run")
				b.ReportMetric(steps/float64(b.N), "steps/run")
				b.ReportMetric(float64(b.Elapsed().Microseconds())/steps, "wall-µs/step")
				b.ReportMetric(float64((s1.ProposeTime-s0.ProposeTime).Nanoseconds())/1e3/steps, "propose-µs/step")
				b.ReportMetric(float64(s1.SpecProposed-s0.SpecProposed)/float64(b.N), "proposed/run")
			})
		}
	}
}
