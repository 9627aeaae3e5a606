package speculative

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/specgate/specgate/engine"
)

// tinyConfig is a 12-token model: small enough to enumerate every
// two-token continuation exactly.
func tinyConfig() engine.Config {
	return engine.Config{HiddenSize: 16, IntermediateSize: 32, NumLayers: 1, NumHeads: 2, NumKVHeads: 1, HeadDim: 8,
		RMSNormEps: 1e-5, RopeTheta: 10000, RopeScaling: engine.RopeScaling{Type: engine.RopeDefault}, MaxPositions: 64,
		VocabSize: 12, BOS: 0}
}

func tinyPair() (target, draft *engine.Model) {
	o := engine.LoadOptions{KVTokens: 512, BlockSize: 4, Threads: 1, DisablePrefixCache: true}
	return engine.NewRandomModel(tinyConfig(), 5, o), engine.NewRandomModel(tinyConfig(), 77, o)
}

// exactDists returns the target's exact sampling distribution of the first
// and the third token generated after prompt + g0 (the third marginalized
// over the first two by enumeration).
func exactDists(t *testing.T, m *engine.Model, prompt []int32, g0 int32, sp engine.SamplingParams) (p1, p3 []float64) {
	t.Helper()
	V := m.Config.VocabSize
	next := func(gen []int32) []float64 {
		s := m.NewSequence()
		defer s.Free()
		toks := append(append([]int32(nil), prompt...), gen...)
		lg, err := s.Forward(toks, nil, []int32{int32(len(toks) - 1)})
		if err != nil {
			t.Fatal(err)
		}
		pr := engine.Probs(lg, sp, gen)
		out := make([]float64, V)
		for i, v := range pr {
			out[i] = float64(v)
		}
		return out
	}
	p1 = next([]int32{g0})
	p3 = make([]float64, V)
	for t1 := range V {
		if p1[t1] == 0 {
			continue
		}
		p2 := next([]int32{g0, int32(t1)})
		for t2 := range V {
			if p2[t2] == 0 {
				continue
			}
			for x, v := range next([]int32{g0, int32(t1), int32(t2)}) {
				p3[x] += p1[t1] * p2[t2] * v
			}
		}
	}
	return p1, p3
}

// specSamples runs n independent speculative generations of 3 tokens after
// prompt + g0 through d.Step (as the engine drives it) and counts the first
// and third tokens. It also returns the mean accepted draft tokens per step.
func specSamples(t *testing.T, d *Draft, target *engine.Model, prompt []int32, g0 int32, sp engine.SamplingParams, n int, seed uint64) (c1, c3 []int, tau float64) {
	t.Helper()
	V := target.Config.VocabSize
	c1, c3 = make([]int, V), make([]int, V)
	seq := target.NewSequence()
	defer seq.Free()
	if _, err := seq.Forward(prompt, nil, []int32{}); err != nil {
		t.Fatal(err)
	}
	var stats engine.SpecStats
	s := &engine.SpecState{Ctx: context.Background(), Target: target, Seq: seq, Prompt: prompt, Params: sp,
		Rand: rand.New(rand.NewPCG(seed, seed+1)), Active: 1, Stats: &stats}
	defer d.Release(s)
	steps := 0
	for range n {
		seq.Truncate(len(prompt))
		gen := []int32{g0}
		for len(gen) < 4 {
			s.Generated, s.Pending, s.MaxNew = gen, gen[len(gen)-1], 8
			toks, err := d.Step(s)
			if err != nil {
				t.Fatal(err)
			}
			steps++
			if len(toks) == 0 || len(toks) > s.MaxNew {
				t.Fatalf("Step returned %d tokens", len(toks))
			}
			gen = append(gen, toks...)
			if seq.Len() != len(prompt)+len(gen)-1 {
				t.Fatalf("target KV holds %d tokens, want %d", seq.Len(), len(prompt)+len(gen)-1)
			}
		}
		c1[gen[1]]++
		c3[gen[3]]++
	}
	return c1, c3, float64(stats.Accepted) / float64(steps)
}

type samplingCase struct {
	name   string
	cfg    Config
	params engine.SamplingParams
	rule   rule
	n      int
	lossy  bool // a negative control: must be detected
	minTau float64
}

func samplingCases() []samplingCase {
	return []samplingCase{
		{name: "chain", cfg: Config{Method: MethodChain, K: 3}, params: engine.SamplingParams{Temperature: 1}, n: 100000, minTau: 0.2},
		{name: "tree", cfg: Config{Method: MethodTree, K: 3, Branching: []int{3, 2, 1}, Budget: 9},
			params: engine.SamplingParams{Temperature: 0.8, TopP: 0.95}, n: 100000, minTau: 0.2},
		{name: "dynamic", cfg: Config{Method: MethodDynamic, K: 3, Width: 3, Budget: 8},
			params: engine.SamplingParams{Temperature: 1.3, TopK: 8}, n: 100000, minTau: 0.2},
		{name: "wrong-bonus-from-p", cfg: Config{Method: MethodChain, K: 3}, params: engine.SamplingParams{Temperature: 1},
			rule: ruleBonusFromP, n: 30000, lossy: true},
		{name: "wrong-topk-children", cfg: Config{Method: MethodTree, K: 3, Branching: []int{3, 2, 1}, Budget: 9},
			params: engine.SamplingParams{Temperature: 0.8, TopP: 0.95}, rule: ruleTopKChildren, n: 30000, lossy: true},
	}
}

// TestLosslessSampling: with speculation, the empirical distribution of the
// first and the third generated token matches the target's exact
// distribution (chi-square, p > 0.01, 100k samples) for chain, static and
// dynamic trees on a tiny-vocabulary random pair whose draft differs from
// the target; two deliberately wrong acceptance rules are detected
// (p < 1e-4). Slow: -short runs 10x fewer samples.
func TestLosslessSampling(t *testing.T) {
	target, draft := tinyPair()
	prompt := []int32{0, 5, 9, 2, 7}
	const g0 = 3
	for i, c := range samplingCases() {
		t.Run(c.name, func(t *testing.T) {
			n := c.n
			if testing.Short() {
				n /= 10
			}
			p1, p3 := exactDists(t, target, prompt, g0, c.params)
			q1, _ := exactDists(t, draft, prompt, g0, c.params)
			var tv float64
			for x := range p1 {
				tv += max(0, p1[x]-q1[x])
			}
			if tv < 0.2 {
				t.Fatalf("draft too close to the target (TV %.3f): the test would not exercise rejection", tv)
			}
			d, err := NewDraft(target, draft, c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			d.rule = c.rule
			c1, c3, tau := specSamples(t, d, target, prompt, g0, c.params, n, uint64(100+i))
			s1, df1, pv1 := chiSquare(c1, p1)
			s3, df3, pv3 := chiSquare(c3, p3)
			t.Logf("%d samples, TV(p,q) %.3f, accepted/step %.2f: first token chi2 %.1f df %d p %.4f; third token chi2 %.1f df %d p %.4f",
				n, tv, tau, s1, df1, pv1, s3, df3, pv3)
			if c.lossy {
				if min(pv1, pv3) > 1e-4 {
					t.Fatalf("wrong rule not detected: p-values %.4f, %.4f", pv1, pv3)
				}
				return
			}
			if pv1 <= 0.01 || pv3 <= 0.01 {
				t.Fatalf("speculative distribution differs from the target's: p-values %.4f (first), %.4f (third)\nfirst  counts %v\n       probs  %.4v\nthird  counts %v\n       probs  %.4v",
					pv1, pv3, c1, p1, c3, p3)
			}
			if tau < c.minTau {
				t.Fatalf("accepted %.2f draft tokens per step, want >= %.2f: speculation barely exercised", tau, c.minTau)
			}
		})
	}
}
