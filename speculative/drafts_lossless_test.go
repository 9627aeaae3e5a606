package speculative

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
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
	e := engine.New(target, engine.Options{})
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
			var sp *Proposers
			switch mode {
			case "prompt":
				sp = NewProposers([]engine.Proposer{promptOnly}, tenant, nil, 0)
			case "suffix":
				sp = NewProposers([]engine.Proposer{answers}, tenant, nil, 0)
			case "prediction":
				sp = NewProposers([]engine.Proposer{known}, tenant, []engine.KnownDraft{pred}, 0)
			case "near_miss":
				sp = NewProposers([]engine.Proposer{known}, tenant, []engine.KnownDraft{near}, 0)
			case "all":
				sp = NewProposers([]engine.Proposer{known, both}, tenant, []engine.KnownDraft{pred, near}, 0)
			}
			got, res, err := generate(e, engine.GenerateRequest{Prompt: prompt, MaxTokens: maxTok, Speculator: sp, Tenant: tenant})
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
		t.Logf("%-10s steps %d proposed %d accepted %d: tau %.2f tokens/step; by source %v",
			mode, s.Steps, s.Proposed, s.Accepted, float64(gen[mode])/float64(max(s.Steps, 1)), s.BySource)
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
	for _, p := range []*Suffix{promptOnly, answers, both} {
		if len(p.reqs) != 0 {
			t.Fatalf("suffix proposer kept %d released requests", len(p.reqs))
		}
	}
	if len(known.reqs) != 0 {
		t.Fatalf("known proposer kept %d released requests", len(known.reqs))
	}
}

// draftSamples runs n independent 3-token speculative generations after
// prompt + g0 through a fresh Proposers each (as the engine drives a
// Speculator) and counts the first and third tokens; it returns the mean
// accepted draft tokens per step.
func draftSamples(t *testing.T, mk func() *Proposers, target *engine.Model, prompt []int32, g0 int32, sp engine.SamplingParams, n int, seed uint64) (c1, c3 []int, tau float64) {
	t.Helper()
	V := target.Config.VocabSize
	c1, c3 = make([]int, V), make([]int, V)
	seq := target.NewSequence()
	defer seq.Free()
	if _, err := seq.Forward(prompt, nil, []int32{}); err != nil {
		t.Fatal(err)
	}
	var stats engine.SpecStats
	rng := rand.New(rand.NewPCG(seed, seed+1))
	steps := 0
	for range n {
		seq.Truncate(len(prompt))
		p := mk()
		s := &engine.SpecState{Ctx: context.Background(), Target: target, Seq: seq, Prompt: prompt, Params: sp,
			Rand: rng, Active: 1, Stats: &stats}
		gen := []int32{g0}
		for len(gen) < 4 {
			s.Generated, s.Pending, s.MaxNew = gen, gen[len(gen)-1], 8
			toks, err := p.Step(s)
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
		s.Generated = gen
		p.Release(s)
		c1[gen[1]]++
		c3[gen[3]]++
	}
	return c1, c3, float64(stats.Accepted) / float64(steps)
}

type draftCase struct {
	name  string
	mk    func() *Proposers
	lossy bool
	n     int
}

// TestLosslessSamplingDrafts: with deterministic drafts (a fixed
// prediction made of the target's likeliest tokens; the tenant's earlier
// samples through the suffix proposer; prompt lookup), the first and the
// third sampled token follow the target's exact distribution (chi-square,
// p > 0.01, 100k samples; -short 10k); a wrong rule that accepts a likely
// draft token without a draw is detected (p < 1e-4).
func TestLosslessSamplingDrafts(t *testing.T) {
	target, _ := tinyPair()
	prompt := []int32{0, 5, 9, 2, 7, 3, 4, 1}
	const g0 = 3 // prompt lookup: 3 is followed by 4, 1 in the prompt
	params := engine.SamplingParams{Temperature: 0.9}
	// the prediction: greedy continuation (likely, not certain, under sampling).
	e := engine.New(target, engine.Options{})
	greedy, _, err := generate(e, engine.GenerateRequest{Prompt: append(append([]int32(nil), prompt...), g0), MaxTokens: 6, NoSpeculation: true})
	e.Close()
	if err != nil {
		t.Fatal(err)
	}
	var cases []draftCase
	known := NewKnown(KnownConfig{})
	suffix, _ := NewSuffix(SuffixConfig{MinScore: 0.05})
	pred := []engine.KnownDraft{{Source: SourcePrediction, Tokens: append([]int32{g0}, greedy...)}}
	cases = append(cases,
		draftCase{"prediction", func() *Proposers { return NewProposers([]engine.Proposer{known}, "a", pred, 0) }, false, 100000},
		draftCase{"suffix+prompt", func() *Proposers { return NewProposers([]engine.Proposer{suffix}, "a", nil, 0) }, false, 100000},
		draftCase{"wrong-accept-likely", func() *Proposers {
			p := NewProposers([]engine.Proposer{known}, "a", pred, 0)
			p.lossyMinP = 0.1
			return p
		}, true, 30000},
	)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := c.n
			if testing.Short() {
				n /= 10
			}
			p1, p3 := exactDists(t, target, prompt, g0, params)
			c1, c3, tau := draftSamples(t, c.mk, target, prompt, g0, params, n, uint64(300+i))
			s1, df1, pv1 := chiSquare(c1, p1)
			s3, df3, pv3 := chiSquare(c3, p3)
			t.Logf("%d samples, accepted/step %.2f: first token chi2 %.1f df %d p %.4f; third token chi2 %.1f df %d p %.4f",
				n, tau, s1, df1, pv1, s3, df3, pv3)
			if c.lossy {
				if min(pv1, pv3) > 1e-4 {
					t.Fatalf("wrong rule not detected: p-values %.4f, %.4f", pv1, pv3)
				}
				return
			}
			if pv1 <= 0.01 || pv3 <= 0.01 {
				t.Fatalf("distribution differs from the target's: p %.4f, %.4f\nfirst %v\n      %.4v\nthird %v\n      %.4v", pv1, pv3, c1, p1, c3, p3)
			}
			if tau < 0.2 {
				t.Fatalf("accepted %.2f draft tokens per step: speculation barely exercised", tau)
			}
		})
	}
}
