package medusa

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/speculative"
)

const (
	shippedTarget = "../models/specgate-target"
	shippedHeads  = "../models/specgate-target-medusa"
)

var (
	shipOnce  sync.Once
	shipModel *engine.Model
	shipHeads *Heads
	shipErr   error
)

// shipped loads the shipped target and its Medusa heads once per test binary.
func shipped(t testing.TB) (*engine.Model, *Heads) {
	t.Helper()
	shipOnce.Do(func() {
		shipModel, shipErr = engine.Load(shippedTarget, engine.LoadOptions{})
		if shipErr != nil {
			return
		}
		shipHeads, shipErr = Load(shippedHeads, shipModel, LoadOptions{})
	})
	if shipErr != nil {
		t.Fatal(shipErr)
	}
	return shipModel, shipHeads
}

func generate(e *engine.Engine, req engine.GenerateRequest) ([]int32, engine.Result, error) {
	var toks []int32
	res, err := e.Generate(context.Background(), req, func(c engine.Chunk) error {
		toks = append(toks, c.Tokens...)
		return nil
	})
	return toks, res, err
}

// TestLosslessGreedy: on the shipped target with the shipped heads,
// Medusa greedy output equals plain greedy output token for token, for the
// heads' default tree and a wide tree. Full: the 200 prompts x 128 new tokens
// of speculative/testdata/prompts.txt (speculative.TestLosslessGreedy's
// set); -short: 10 x 32. SPECGATE_GREEDY_SHARD=from:to runs a range.
func TestLosslessGreedy(t *testing.T) {
	target, heads := shipped(t)
	losslessGreedy(t, target, heads)
}

// losslessGreedy is TestLosslessGreedy's body for any heads of target
// (Medusa or Hydra).
func losslessGreedy(t *testing.T, target *engine.Model, heads *Heads) {
	n, maxTok := 200, 128
	if testing.Short() {
		n, maxTok = 10, 32
	}
	prompts := speculative.BenchPrompts()
	if len(prompts) < n {
		t.Fatalf("%d prompts, want >= %d", len(prompts), n)
	}
	from, to := 0, n
	if v := os.Getenv("SPECGATE_GREEDY_SHARD"); v != "" {
		if _, err := fmt.Sscanf(v, "%d:%d", &from, &to); err != nil || from < 0 || from > to || to > n {
			t.Fatalf("SPECGATE_GREEDY_SHARD=%q: want from:to with 0 <= from <= to <= %d", v, n)
		}
	}
	def, err := NewProposer(heads, nil)
	if err != nil {
		t.Fatal(err)
	}
	var widePaths [][]int
	for _, p := range [][]int{{0}, {1}, {2}, {0, 0}, {0, 1}, {1, 0}, {0, 0, 0}, {0, 0, 1}, {0, 0, 0, 0}, {0, 0, 0, 0, 0}} {
		if len(p) <= heads.NumHeads {
			widePaths = append(widePaths, p)
		}
	}
	wideTree, err := NewTree(widePaths, heads.NumHeads)
	if err != nil {
		t.Fatal(err)
	}
	wide, _ := NewProposer(heads, wideTree)
	// fixed: every step verifies the whole tree (FixedDraft); adaptive: the
	// engine's budget decides how many of the tree's nodes pay.
	modes := []struct {
		name string
		e    *engine.Engine
	}{
		{"fixed", engine.New(target, engine.Options{Proposers: []engine.Proposer{def}, FixedDraft: true, MaxDraft: len(def.Tree().Paths)})},
		{"wide", engine.New(target, engine.Options{Proposers: []engine.Proposer{wide}, FixedDraft: true, MaxDraft: len(wide.Tree().Paths)})},
		{"adaptive", engine.New(target, engine.Options{Proposers: []engine.Proposer{def}})},
	}
	for _, m := range modes {
		defer m.e.Close()
	}
	e := engine.New(target, engine.Options{})
	defer e.Close()
	start := time.Now()
	fw0 := make([]int64, len(modes)) // decode forwards = forwards - one prefill forward per prompt
	for m, mode := range modes {
		fw0[m] = mode.e.Stats().Forwards
	}
	stats := make([]engine.SpecStats, len(modes))
	gen := make([]int, len(modes))
	for i := from; i < to; i++ {
		prompt := target.Tokenizer.Encode(prompts[i], true)
		want, _, err := generate(e, engine.GenerateRequest{Prompt: prompt, MaxTokens: maxTok, NoSpeculation: true})
		if err != nil {
			t.Fatal(err)
		}
		for m, mode := range modes {
			got, res, err := generate(mode.e, engine.GenerateRequest{Prompt: prompt, MaxTokens: maxTok})
			if err != nil {
				t.Fatalf("prompt %d, %s: %v", i, mode.name, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("prompt %d %q, %s:\nmedusa %v\nplain  %v", i, prompts[i], mode.name, got, want)
			}
			if res.Spec == nil {
				t.Fatalf("%s: no speculation stats", mode.name)
			}
			s := &stats[m]
			s.Steps += res.Spec.Steps
			s.Proposed += res.Spec.Proposed
			s.Accepted += res.Spec.Accepted
			for d, a := range res.Spec.AcceptedAt {
				for len(s.AcceptedAt) <= d {
					s.AcceptedAt = append(s.AcceptedAt, 0)
				}
				s.AcceptedAt[d] += a
			}
			gen[m] += len(got) - 1
		}
		if (i+1)%20 == 0 {
			t.Logf("prompts [%d, %d) equal (%v)", from, i+1, time.Since(start).Round(time.Second))
		}
	}
	for m, mode := range modes {
		s := stats[m]
		fw := int(mode.e.Stats().Forwards-fw0[m]) - (to - from)
		t.Logf("%-8s decode forwards %d, speculative steps %d, proposed %d accepted %d (per depth %v): tau %.2f tokens per decode forward",
			mode.name, fw, s.Steps, s.Proposed, s.Accepted, s.AcceptedAt, float64(gen[m])/float64(max(fw, 1)))
		if s.Accepted == 0 && mode.name != "adaptive" {
			t.Errorf("%s: the heads never matched the target: speculation untested", mode.name)
		}
	}
	if leak := target.KV().UsedBlocks() - target.KV().CachedBlocks(); leak != 0 {
		t.Fatalf("KV leak: %d blocks outside the prefix cache", leak)
	}
}

// TestSampledSameSeed: under sampling the speculator draws every emitted
// token from the target's own distribution with the request's RNG, one
// uniform per token in order, exactly as plain decoding does; with the same
// seed the output is therefore identical to plain sampled decoding (a much
// stronger check than a distribution test; the verification logits are
// batch-invariant on the CPU backend).
func TestSampledSameSeed(t *testing.T) {
	target, heads := shipped(t)
	sampledSameSeed(t, target, heads)
}

// sampledSameSeed is TestSampledSameSeed's body for any heads of target.
func sampledSameSeed(t *testing.T, target *engine.Model, heads *Heads) {
	p, err := NewProposer(heads, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := engine.New(target, engine.Options{})
	defer e.Close()
	spec := engine.New(target, engine.Options{Proposers: []engine.Proposer{p}, FixedDraft: true, MaxDraft: len(p.Tree().Paths)})
	defer spec.Close()
	prompts := speculative.BenchPrompts()[:6]
	params := []engine.SamplingParams{
		{Temperature: 1},
		{Temperature: 0.7, TopP: 0.9},
		{Temperature: 1.2, TopK: 20, PresencePenalty: 0.5},
		{Temperature: 0, FrequencyPenalty: 0.8},
	}
	accepted := 0
	for i, text := range prompts {
		prompt := target.Tokenizer.Encode(text, true)
		for j, sp := range params {
			seed := uint64(100*i + j)
			sp.Seed = &seed
			want, _, err := generate(e, engine.GenerateRequest{Prompt: prompt, MaxTokens: 48, Sampling: sp, NoSpeculation: true})
			if err != nil {
				t.Fatal(err)
			}
			got, res, err := generate(spec, engine.GenerateRequest{Prompt: prompt, MaxTokens: 48, Sampling: sp})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("prompt %d params %+v:\nmedusa %v\nplain  %v", i, sp, got, want)
			}
			accepted += res.Spec.Accepted
		}
	}
	if accepted == 0 {
		t.Fatal("no head token was ever accepted: sampled speculation untested")
	}
	t.Logf("accepted %d head tokens over %d sampled requests", accepted, len(prompts)*len(params))
}

// TestTypicalOptIn: Medusa's typical acceptance is an explicit opt-in
// (GenerateRequest.Typical): sampled requests then accept more head tokens
// per proposed node and report Spec.Exact false; without it Exact is true;
// greedy requests with Typical stay exact and equal plain greedy.
func TestTypicalOptIn(t *testing.T) {
	target, heads := shipped(t)
	p, err := NewProposer(heads, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := engine.New(target, engine.Options{Proposers: []engine.Proposer{p}, FixedDraft: true, MaxDraft: len(p.Tree().Paths)})
	defer e.Close()
	plain := engine.New(target, engine.Options{})
	defer plain.Close()
	typ := &engine.TypicalAcceptance{Epsilon: 0.09, Delta: 0.3}
	var accL, propL, accT, propT int
	for i, text := range speculative.BenchPrompts()[:8] {
		prompt := target.Tokenizer.Encode(text, true)
		seed := uint64(i)
		sp := engine.SamplingParams{Temperature: 0.7, Seed: &seed}
		_, rl, err := generate(e, engine.GenerateRequest{Prompt: prompt, MaxTokens: 48, Sampling: sp})
		if err != nil {
			t.Fatal(err)
		}
		_, rt, err := generate(e, engine.GenerateRequest{Prompt: prompt, MaxTokens: 48, Sampling: sp, Typical: typ})
		if err != nil {
			t.Fatal(err)
		}
		if rl.Spec == nil || rt.Spec == nil {
			t.Fatal("no speculation stats")
		}
		if !rl.Spec.Exact {
			t.Fatalf("prompt %d: lossless sampled request reports Exact false", i)
		}
		if rt.Spec.Exact && rt.Spec.Accepted > 0 {
			t.Fatalf("prompt %d: typical acceptance accepted %d tokens and reports Exact true", i, rt.Spec.Accepted)
		}
		accL, propL = accL+rl.Spec.Accepted, propL+rl.Spec.Proposed
		accT, propT = accT+rt.Spec.Accepted, propT+rt.Spec.Proposed
		// greedy with Typical: exact, and plain's output
		want, _, _ := generate(plain, engine.GenerateRequest{Prompt: prompt, MaxTokens: 32})
		got, rg, err := generate(e, engine.GenerateRequest{Prompt: prompt, MaxTokens: 32, Typical: typ})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || (rg.Spec != nil && !rg.Spec.Exact) {
			t.Fatalf("prompt %d: greedy with Typical: exact=%v\ngot  %v\nwant %v", i, rg.Spec != nil && rg.Spec.Exact, got, want)
		}
	}
	rateL, rateT := float64(accL)/float64(max(propL, 1)), float64(accT)/float64(max(propT, 1))
	t.Logf("T=0.7, 8 prompts: lossless accepted %d of %d nodes (%.3f), typical %d of %d (%.3f)", accL, propL, rateL, accT, propT, rateT)
	if rateT <= rateL {
		t.Fatalf("typical acceptance (%.3f) does not accept more than lossless (%.3f)", rateT, rateL)
	}
}
