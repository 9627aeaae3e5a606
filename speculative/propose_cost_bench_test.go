package speculative

import (
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
)

// BenchmarkBudgetLongPrediction: the host time the engine's draft budget
// and the proposers spend per step (engine Stats.ProposeTime over steps;
// metric propose-µs/step) when an exact 160-token prediction is verified
// with a GPU-shaped step cost (a 64-token tree step costs 2.4x a
// one-token step, docs/cuda.md round 10), Known plus prompt lookup, up to
// 64 nodes a step, as bench workload's code-edit trace runs on the H100.
// The forwards are the CPU's; only the budget's decisions are fixed.
func BenchmarkBudgetLongPrediction(b *testing.B) {
	target, _ := shippedPair(b)
	e := engine.New(target, engine.Options{MaxDraft: 64, StepCost: h100TreeStep, ProposeCost: func() time.Duration { return time.Microsecond }})
	defer e.Close()
	prompt := target.Tokenizer.Encode(testPrompts(b)[0], true)
	want, _, err := generate(e, engine.GenerateRequest{Prompt: prompt, MaxTokens: 160, NoSpeculation: true})
	if err != nil {
		b.Fatal(err)
	}
	suf, err := NewSuffix(SuffixConfig{})
	if err != nil {
		b.Fatal(err)
	}
	k := NewKnown(KnownConfig{})
	s0 := e.Stats()
	for b.Loop() {
		req := engine.GenerateRequest{Prompt: prompt, MaxTokens: 160}
		WithProposers(&req, []engine.Proposer{k, suf}, "t", []engine.KnownDraft{{Source: SourcePrediction, Tokens: want}})
		if _, _, err := generate(e, req); err != nil {
			b.Fatal(err)
		}
	}
	s1 := e.Stats()
	steps := float64(s1.Steps - s0.Steps)
	b.ReportMetric(float64((s1.ProposeTime-s0.ProposeTime).Microseconds())/steps, "propose-µs/step")
	b.ReportMetric(float64(s1.SpecProposed-s0.SpecProposed)/float64(max(s1.SpecSteps-s0.SpecSteps, 1)), "nodes/draft-step")
}

// h100TreeStep is the H100 device time of an exact tree step of T tokens
// of the shipped target (docs/cuda.md round 10: the default tensor-core
// projections), interpolated between the measured sizes: a GPU-shaped
// Options.StepCost for CPU benchmarks.
func h100TreeStep(T int) time.Duration {
	pts := [][2]float64{{1, 76}, {2, 83}, {4, 84}, {8, 87}, {16, 103}, {32, 131}, {64, 181}}
	for i := 1; i < len(pts); i++ {
		if float64(T) <= pts[i][0] {
			f := (float64(T) - pts[i-1][0]) / (pts[i][0] - pts[i-1][0])
			return time.Duration((pts[i-1][1] + f*(pts[i][1]-pts[i-1][1])) * 1e3)
		}
	}
	return time.Duration((181 + 1.6*float64(T-64)) * 1e3)
}
