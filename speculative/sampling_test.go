package speculative

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/stattest"
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

// tokenDist is the model's exact sampling distribution of the k-th token
// generated after prompt (k >= 1), marginalized over the tokens generated
// before it by enumeration (penalties count the generated tokens, as in
// the engine).
func tokenDist(t *testing.T, m *engine.Model, prompt []int32, sp engine.SamplingParams, k int) []float64 {
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
	var marg func(gen []int32, k int) []float64
	marg = func(gen []int32, k int) []float64 {
		p := next(gen)
		if k == 1 {
			return p
		}
		out := make([]float64, V)
		for a := range V {
			if p[a] == 0 {
				continue
			}
			for x, v := range marg(append(append([]int32(nil), gen...), int32(a)), k-1) {
				out[x] += p[a] * v
			}
		}
		return out
	}
	return marg(nil, k)
}

// specSamples runs n independent speculative generations of 8 tokens after
// prompt through an engine with d as its proposer (16 requests in flight,
// one seed each) and counts the second and fourth tokens (the first comes
// from the prompt's forward). It also returns
// the mean accepted draft tokens per verified step.
func specSamples(t *testing.T, d *Draft, target *engine.Model, prompt []int32, sp engine.SamplingParams, n int, seed uint64) (c1, c3 []int, tau float64) {
	t.Helper()
	V := target.Config.VocabSize
	c1, c3 = make([]int, V), make([]int, V)
	e := engine.New(target, d.EngineOptions(engine.Options{}))
	defer e.Close()
	var mu sync.Mutex
	var accepted, steps int
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				s := seed*1_000_003 + uint64(i)
				p := sp
				p.Seed = &s
				var gen []int32
				res, err := e.Generate(context.Background(), engine.GenerateRequest{Prompt: prompt, MaxTokens: 8, Sampling: p},
					func(c engine.Chunk) error { gen = append(gen, c.Tokens...); return nil })
				if err != nil || len(gen) != 8 {
					t.Errorf("sample %d: %d tokens, %v", i, len(gen), err)
					return
				}
				mu.Lock()
				c1[gen[1]]++
				c3[gen[3]]++
				if res.Spec != nil {
					accepted += res.Spec.Accepted
					steps += res.Spec.Steps
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return c1, c3, float64(accepted) / float64(max(steps, 1))
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
		// the draft's head restricted to 6 of the 12 tokens (FR-Spec): Q is
		// zero outside them
		{name: "chain-vocab6", cfg: Config{Method: MethodChain, K: 3, VocabLimit: 6}, params: engine.SamplingParams{Temperature: 1}, n: 100000, minTau: 0.1},
		{name: "dynamic-vocab6", cfg: Config{Method: MethodDynamic, K: 3, Width: 3, Budget: 8, VocabLimit: 6},
			params: engine.SamplingParams{Temperature: 0.8, TopP: 0.95, PresencePenalty: 0.5}, n: 100000, minTau: 0.1},
		// drawn from the restricted head, labelled with the whole vocabulary's q
		{name: "wrong-unrestricted-q", cfg: Config{Method: MethodChain, K: 3, VocabLimit: 6}, params: engine.SamplingParams{Temperature: 1},
			rule: ruleUnrestrictedQ, n: 30000, lossy: true},
		{name: "wrong-topk-children", cfg: Config{Method: MethodTree, K: 3, Branching: []int{3, 2, 1}, Budget: 9},
			params: engine.SamplingParams{Temperature: 0.8, TopP: 0.95}, rule: ruleTopKChildren, n: 30000, lossy: true},
	}
}

// TestLosslessSampling: with speculation, the empirical distribution of the
// first and the third generated token matches the target's exact
// distribution (chi-square, p > 0.01, 100k samples) for chain, static and
// dynamic trees on a tiny-vocabulary random pair whose draft differs from
// the target; a deliberately wrong proposer (top-k children labelled as
// draws from q) is detected (p < 1e-4). The samples run through the engine
// (its verification, budget and batching). Slow: -short runs 10x fewer
// samples. The engine's rejection rule itself has negative controls in
// engine/verify_test.go.
func TestLosslessSampling(t *testing.T) {
	target, draft := tinyPair()
	// the first generated token comes from the prompt's forward (plain);
	// speculation decides the second to fourth: their exact marginals.
	prompt := []int32{0, 5, 9, 2, 7, 3}
	for i, c := range samplingCases() {
		t.Run(c.name, func(t *testing.T) {
			n := c.n
			if testing.Short() {
				n /= 10
			}
			// speculation decides the 2nd and the 4th token (the 1st comes from
			// the prompt's forward); the draft must differ from the target.
			p1, p3 := tokenDist(t, target, prompt, c.params, 2), tokenDist(t, target, prompt, c.params, 4)
			q1, t1 := tokenDist(t, draft, prompt, c.params, 1), tokenDist(t, target, prompt, c.params, 1)
			var tv float64
			for x := range t1 {
				tv += max(0, t1[x]-q1[x])
			}
			if tv < 0.2 {
				t.Fatalf("draft too close to the target (TV %.3f): the test would not exercise rejection", tv)
			}
			if c.cfg.VocabLimit > 0 {
				c.cfg.TokenFrequency = tinyFrequency(t)
			}
			d, err := NewDraft(target, draft, c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if c.cfg.VocabLimit > 0 && d.VocabLimit() != c.cfg.VocabLimit {
				t.Fatalf("restricted head of %d tokens, want %d", d.VocabLimit(), c.cfg.VocabLimit)
			}
			d.rule = c.rule
			if c.rule == ruleUnrestrictedQ {
				d.head.full = engine.NewMat(draft.Weights.LMHead.Float32(), draft.Config.VocabSize, draft.Config.HiddenSize)
			}
			c1, c3, tau := specSamples(t, d, target, prompt, c.params, n, uint64(100+i))
			s1, df1, pv1 := stattest.ChiSquare(c1, p1)
			s3, df3, pv3 := stattest.ChiSquare(c3, p3)
			t.Logf("%d samples, TV(p,q) %.3f, accepted/step %.2f: 2nd token chi2 %.1f df %d p %.4f; 4th token chi2 %.1f df %d p %.4f",
				n, tv, tau, s1, df1, pv1, s3, df3, pv3)
			if c.lossy {
				if min(pv1, pv3) > 1e-4 {
					t.Fatalf("wrong rule not detected: p-values %.4f, %.4f", pv1, pv3)
				}
				return
			}
			if pv1 <= 0.01 || pv3 <= 0.01 {
				t.Fatalf("speculative distribution differs from the target's: p-values %.4f (2nd token), %.4f (4th)\n2nd counts %v\n    probs  %.4v\n4th counts %v\n    probs  %.4v",
					pv1, pv3, c1, p1, c3, p3)
			}
			if tau < c.minTau {
				t.Fatalf("accepted %.2f draft tokens per step, want >= %.2f: speculation barely exercised", tau, c.minTau)
			}
		})
	}
}

// tinyFrequency writes token frequencies for the tiny pair's 12 tokens
// (an arbitrary ranking, not the models' own) and returns the path.
func tinyFrequency(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), TokenFrequencyFile)
	if err := os.WriteFile(path, []byte(`{"counts": [50, 3, 40, 7, 31, 2, 90, 11, 5, 60, 1, 20]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
