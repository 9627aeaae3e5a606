package speculative

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/stattest"
)

// perturb returns a copy of toks with every period-th token replaced, one
// token inserted and one dropped every 3*period (a prediction that is
// mostly right).
func perturb(toks []int32, period int, vocab int) []int32 {
	var out []int32
	for i, t := range toks {
		switch {
		case i > 0 && i%(3*period) == 0:
			out = append(out, int32((int(t)+7)%vocab), t) // insertion
		case i > 0 && i%(3*period) == period:
			// deletion
		case i > 0 && i%period == 0:
			out = append(out, int32((int(t)+1)%vocab)) // substitution
		default:
			out = append(out, t)
		}
	}
	return out
}

// TestLosslessGreedyDrafts: with each model-free draft source (prompt
// lookup, the tenant's earlier answers, a client prediction, a cache near
// miss) and all of them together, greedy output through the engine equals
// plain greedy output token for token on testdata/prompts.txt. Full: 200
// prompts x 128 tokens; -short: 10 x 32. SPECGATE_GREEDY_SHARD=from:to as
// in TestLosslessGreedy.
func TestLosslessGreedyDrafts(t *testing.T) {
	target, _ := shippedPair(t)
	n, maxTok := 200, 128
	if testing.Short() {
		n, maxTok = 10, 32
	}
	prompts := testPrompts(t)
	from, to := 0, n
	if v := os.Getenv("SPECGATE_GREEDY_SHARD"); v != "" {
		if _, err := fmt.Sscanf(v, "%d:%d", &from, &to); err != nil || from < 0 || from > to || to > n {
			t.Fatalf("SPECGATE_GREEDY_SHARD=%q: want from:to with 0 <= from <= to <= %d", v, n)
		}
	}
	e := engine.New(target, engine.Options{FixedDraft: true, MaxDraft: 8})
	defer e.Close()
	V := target.Config.VocabSize
	plain := func(i int) []int32 {
		toks, _, err := generate(e, engine.GenerateRequest{Prompt: target.Tokenizer.Encode(prompts[i], true), MaxTokens: maxTok, NoSpeculation: true})
		if err != nil {
			t.Fatal(err)
		}
		return toks
	}
	promptOnly, err := NewSuffix(SuffixConfig{NoAnswers: true})
	if err != nil {
		t.Fatal(err)
	}
	answers, _ := NewSuffix(SuffixConfig{NoPrompt: true})
	both, _ := NewSuffix(SuffixConfig{})
	known := NewKnown(KnownConfig{})
	modes := []string{"prompt", "suffix", "prediction", "near_miss", "all"}
	totals := map[string]*engine.SpecStats{}
	gen := map[string]int{}
	start := time.Now()
	next := plain(from)
	for i := from; i < to; i++ {
		want := next
		other := plain((i + 1) % len(prompts)) // the next prompt's answer: a near miss that is mostly wrong
		next = other
		prompt := target.Tokenizer.Encode(prompts[i], true)
		// tenant "t": earlier answers are a perturbed copy of this answer and the previous prompts' answers.
		tenant := fmt.Sprintf("t%d", i%4)
		answers.Learn(tenant, perturb(want, 12, V))
		both.Learn(tenant, perturb(want, 12, V))
		pred := engine.KnownDraft{Source: SourcePrediction, Tokens: perturb(want, 16, V)}
		near := engine.KnownDraft{Source: SourceNearMiss, Tokens: other}
		for _, mode := range modes {
			req := engine.GenerateRequest{Prompt: prompt, MaxTokens: maxTok}
			switch mode {
			case "prompt":
				WithProposers(&req, []engine.Proposer{promptOnly}, tenant, nil)
			case "suffix":
				WithProposers(&req, []engine.Proposer{answers}, tenant, nil)
			case "prediction":
				WithProposers(&req, []engine.Proposer{known}, tenant, []engine.KnownDraft{pred})
			case "near_miss":
				WithProposers(&req, []engine.Proposer{known}, tenant, []engine.KnownDraft{near})
			case "all":
				WithProposers(&req, []engine.Proposer{known, both}, tenant, []engine.KnownDraft{pred, near})
			}
			got, res, err := generate(e, req)
			if err != nil {
				t.Fatalf("prompt %d, %s: %v", i, mode, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("prompt %d %q, %s:\nspeculative %v\nplain       %v", i, prompts[i], mode, got, want)
			}
			if totals[mode] == nil {
				totals[mode] = &engine.SpecStats{BySource: map[string]engine.SourceStats{}}
			}
			tt := totals[mode]
			tt.Steps += res.Spec.Steps
			tt.Proposed += res.Spec.Proposed
			tt.Accepted += res.Spec.Accepted
			for k, v := range res.Spec.BySource {
				s := tt.BySource[k]
				s.Proposed += v.Proposed
				s.Accepted += v.Accepted
				tt.BySource[k] = s
			}
			gen[mode] += len(got) - 1
		}
		if (i+1)%20 == 0 {
			t.Logf("prompts [%d, %d) equal in all modes (%v)", from, i+1, time.Since(start).Round(time.Second))
		}
	}
	for _, mode := range modes {
		s := totals[mode]
		// every decode step emits one target token plus its accepted draft tokens
		t.Logf("%-10s speculative steps %d proposed %d accepted %d: tau %.2f tokens/step; by source %v",
			mode, s.Steps, s.Proposed, s.Accepted, float64(gen[mode])/float64(max(gen[mode]-s.Accepted, 1)), s.BySource)
		src := mode
		if mode == "all" {
			src = SourcePrediction
		}
		if mode != "near_miss" && s.BySource[src].Accepted == 0 {
			t.Errorf("%s: source %q never accepted: speculation untested", mode, src)
		}
	}
	if leak := target.KV().UsedBlocks() - target.KV().CachedBlocks(); leak != 0 {
		t.Fatalf("KV leak: %d blocks outside the prefix cache", leak)
	}
	// a finished request's proposers are released by the scheduler after
	// its Generate returned; they all are once the engine is closed
	e.Close()
	for _, p := range []*Suffix{promptOnly, answers, both} {
		if len(p.reqs) != 0 {
			t.Fatalf("suffix proposer kept %d released requests", len(p.reqs))
		}
	}
	if len(known.reqs) != 0 {
		t.Fatalf("known proposer kept %d released requests", len(known.reqs))
	}
}

// draftSamples runs n independent generations of 3 tokens after prompt
// through the engine, each drafting with mk's setup, and counts the first
// (from prefill) and the third generated token (decided by verification);
// it returns the accepted draft tokens per speculative step.
func draftSamples(t *testing.T, e *engine.Engine, mk func(*engine.GenerateRequest), prompt []int32, sp engine.SamplingParams, n int, seed uint64) (c1, c3 []int, tau float64) {
	t.Helper()
	V := tinyConfig().VocabSize
	c1, c3 = make([]int, V), make([]int, V)
	var acc, steps int
	for i := range n {
		sd := splitmix(seed<<32 | uint64(i)) // consecutive PCG seeds are correlated
		sp := sp
		sp.Seed = &sd
		req := engine.GenerateRequest{Prompt: prompt, MaxTokens: 8, Sampling: sp}
		mk(&req)
		got, res, err := generate(e, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) < 3 {
			t.Fatalf("generated %v, want >= 3 tokens", got)
		}
		if res.Spec != nil {
			acc += res.Spec.Accepted
			steps += res.Spec.Steps
		}
		c1[got[0]]++
		c3[got[2]]++
	}
	return c1, c3, float64(acc) / float64(max(steps, 1))
}

type draftCase struct {
	name  string
	mk    func(*engine.GenerateRequest)
	lossy bool
	n     int
}

// TestLosslessSamplingDrafts: with deterministic drafts (a fixed
// prediction made of the target's likeliest tokens; the tenant's earlier
// samples through the suffix proposer, plus prompt lookup), the first and
// the third sampled token of generations through the engine follow the
// target's exact distribution (chi-square, p > 0.01, 100k samples; -short
// 10k). The engine's rule for deterministic drafts has its negative
// controls in engine/verify_test.go.
func TestLosslessSamplingDrafts(t *testing.T) {
	target, _ := tinyPair()
	prompt := []int32{0, 5, 9, 2, 7, 3, 4, 1, 3}
	params := engine.SamplingParams{Temperature: 0.6}
	e := engine.New(target, engine.Options{FixedDraft: true, MaxDraft: 8})
	defer e.Close()
	greedy, _, err := generate(e, engine.GenerateRequest{Prompt: prompt, MaxTokens: 6, NoSpeculation: true})
	if err != nil {
		t.Fatal(err)
	}
	known := NewKnown(KnownConfig{})
	suffix, _ := NewSuffix(SuffixConfig{MinScore: 0.05})
	pred := []engine.KnownDraft{{Source: SourcePrediction, Tokens: greedy}}
	cases := []draftCase{
		{"prediction", func(r *engine.GenerateRequest) { WithProposers(r, []engine.Proposer{known}, "a", pred) }, false, 100000},
		{"suffix+prompt", func(r *engine.GenerateRequest) { WithProposers(r, []engine.Proposer{suffix}, "a", nil) }, false, 100000},
	}
	// exact: the first token after prompt (p1) and the third (p3), by enumeration.
	p0 := tokenDist(t, target, prompt, params, 1)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := c.n
			if testing.Short() {
				n /= 10
			}
			c1, c3, tau := draftSamples(t, e, c.mk, prompt, params, n, uint64(300+i))
			p3 := tokenDist(t, target, prompt, params, 3)
			s1, df1, pv1 := stattest.ChiSquare(c1, p0)
			s3, df3, pv3 := stattest.ChiSquare(c3, p3)
			t.Logf("%d samples, accepted/step %.2f: first token chi2 %.1f df %d p %.4f; third token chi2 %.1f df %d p %.4f",
				n, tau, s1, df1, pv1, s3, df3, pv3)
			if c.lossy {
				if min(pv1, pv3) > 1e-4 {
					t.Fatalf("wrong rule not detected: p-values %.4f, %.4f", pv1, pv3)
				}
				return
			}
			if pv1 <= 0.01 || pv3 <= 0.01 {
				t.Fatalf("distribution differs from the target's: p %.4f, %.4f\nfirst %v\n      %.4v\nthird %v\n      %.4v", pv1, pv3, c1, p0, c3, p3)
			}
			if tau < 0.2 {
				t.Fatalf("accepted %.2f draft tokens per step: speculation barely exercised", tau)
			}
		})
	}
	e.Close() // the scheduler has released every request's proposers
	if len(known.reqs) != 0 || len(suffix.reqs) != 0 {
		t.Fatalf("proposers kept released requests: %d, %d", len(known.reqs), len(suffix.reqs))
	}
}

// splitmix is SplitMix64's finalizer: well-spread seeds from a counter.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// TestSeededSamplingDraftsEqualPlain: the model-free drafts are verified by
// drawing the target's own token at each node exactly as plain decoding
// draws it (one uniform from the request's RNG per token, same
// transforms), so a seeded sampled request gives plain decoding's output
// token for token; every source, 500 seeds each, tiny model and the
// shipped target.
func TestSeededSamplingDraftsEqualPlain(t *testing.T) {
	tiny, _ := tinyPair()
	shipped, _ := shippedPair(t)
	nShipped := 60
	if testing.Short() {
		nShipped = 15
	}
	for _, m := range []struct {
		name   string
		model  *engine.Model
		prompt []int32
		n      int
	}{{"tiny", tiny, []int32{0, 5, 9, 2, 7, 3, 4, 1, 3}, 500}, {"shipped", shipped, shipped.Tokenizer.Encode(testPrompts(t)[3], true), nShipped}} {
		e := engine.New(m.model, engine.Options{})
		greedy, _, err := generate(e, engine.GenerateRequest{Prompt: m.prompt, MaxTokens: 24, NoSpeculation: true})
		if err != nil {
			t.Fatal(err)
		}
		known := NewKnown(KnownConfig{})
		suffix, _ := NewSuffix(SuffixConfig{MinScore: 0.05})
		pred := []engine.KnownDraft{{Source: SourcePrediction, Tokens: greedy}, {Source: SourceNearMiss, Tokens: greedy[3:]}}
		accepted := 0
		for i := range m.n {
			sd := splitmix(uint64(i))
			sp := engine.SamplingParams{Temperature: 0.7, TopP: 0.95, PresencePenalty: 0.3, Seed: &sd}
			want, _, err := generate(e, engine.GenerateRequest{Prompt: m.prompt, MaxTokens: 24, Sampling: sp, NoSpeculation: true})
			if err != nil {
				t.Fatal(err)
			}
			req := engine.GenerateRequest{Prompt: m.prompt, MaxTokens: 24, Sampling: sp}
			WithProposers(&req, []engine.Proposer{known, suffix}, "a", pred)
			got, res, err := generate(e, req)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s seed %d:\nspeculative %v\nplain       %v", m.name, i, got, want)
			}
			accepted += res.Spec.Accepted
		}
		e.Close()
		t.Logf("%s: %d seeds equal to plain, %d draft tokens accepted", m.name, m.n, accepted)
		if accepted == 0 {
			t.Fatalf("%s: no draft token accepted: nothing tested", m.name)
		}
	}
}
