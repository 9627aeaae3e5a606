package speculative

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
)

var (
	pairOnce              sync.Once
	pairTarget, pairDraft *engine.Model
	pairErr               error
)

// shippedPair loads models/specgate-{target,draft} once per test binary.
func shippedPair(t testing.TB) (*engine.Model, *engine.Model) {
	t.Helper()
	pairOnce.Do(func() {
		pairTarget, pairErr = engine.Load("../models/specgate-target", engine.LoadOptions{KVTokens: 8192})
		if pairErr == nil {
			pairDraft, pairErr = engine.Load("../models/specgate-draft", engine.LoadOptions{KVTokens: 8192})
		}
	})
	if pairErr != nil {
		t.Fatal(pairErr)
	}
	return pairTarget, pairDraft
}

// testPrompts returns testdata/prompts.txt's prompts (see BenchPrompts).
func testPrompts(t testing.TB) []string {
	t.Helper()
	p := BenchPrompts()
	if len(p) == 0 {
		t.Fatal("testdata/prompts.txt: no prompts")
	}
	return p
}

// generate runs one request through e and returns its tokens.
func generate(e *engine.Engine, req engine.GenerateRequest) ([]int32, engine.Result, error) {
	var toks []int32
	res, err := e.Generate(context.Background(), req, func(c engine.Chunk) error {
		toks = append(toks, c.Tokens...)
		return nil
	})
	return toks, res, err
}

// greedyModes are the speculators the lossless greedy test checks.
func greedyModes() map[string]Config {
	return map[string]Config{
		"chain":    {Method: MethodChain, K: 4},
		"tree":     {Method: MethodTree, K: 4, Branching: []int{3, 2, 1}, Budget: 10},
		"dynamic":  {Method: MethodDynamic, K: 5, Width: 3, Budget: 10},
		"adaptive": {Method: MethodDynamic, K: 5, Width: 3, Budget: 10, Adaptive: true},
		// the draft's LM head restricted to the 2048 most frequent tokens (FR-Spec)
		"chain-v2048":   {Method: MethodChain, K: 2, VocabLimit: 2048, TokenFrequency: shippedFrequency},
		"dynamic-v2048": {Method: MethodDynamic, K: 5, Width: 3, Budget: 10, VocabLimit: 2048, TokenFrequency: shippedFrequency},
	}
}

// shippedFrequency ranks the target's tokens by their frequency in its own
// greedy continuations (shipped with the Medusa heads).
const shippedFrequency = "../models/specgate-target-medusa/token_frequency.json"

// TestLosslessGreedy: on the shipped pair, speculative greedy output equals
// plain greedy output token for token, for every mode. Full: 200 prompts x
// 128 new tokens (slow on CPU); -short: 10 x 32.
func TestLosslessGreedy(t *testing.T) {
	target, draft := shippedPair(t)
	n, maxTok := 200, 128
	names := []string{"chain", "tree", "dynamic", "chain-v2048", "dynamic-v2048"}
	if testing.Short() {
		n, maxTok = 10, 32
		names = append(names, "adaptive")
	}
	prompts := testPrompts(t)
	if len(prompts) < n {
		t.Fatalf("testdata/prompts.txt: %d prompts, want >= %d", len(prompts), n)
	}
	// SPECGATE_GREEDY_SHARD=from:to runs prompts [from, to) only (to resume or
	// shard the slow full run over processes).
	from, to := 0, n
	if v := os.Getenv("SPECGATE_GREEDY_SHARD"); v != "" {
		if _, err := fmt.Sscanf(v, "%d:%d", &from, &to); err != nil || from < 0 || from > to || to > n {
			t.Fatalf("SPECGATE_GREEDY_SHARD=%q: want from:to with 0 <= from <= to <= %d", v, n)
		}
	}
	engines := map[string]*engine.Engine{}
	for name, cfg := range greedyModes() {
		d, err := NewDraft(target, draft, cfg)
		if err != nil {
			t.Fatal(err)
		}
		engines[name] = engine.New(target, d.EngineOptions(engine.Options{}))
		defer engines[name].Close()
	}
	e := engine.New(target, engine.Options{})
	defer e.Close()
	start := time.Now()
	totals := map[string]*engine.SpecStats{}
	gen := map[string]int{}
	for i := from; i < to; i++ {
		text := prompts[i]
		prompt := target.Tokenizer.Encode(text, true)
		want, _, err := generate(e, engine.GenerateRequest{Prompt: prompt, MaxTokens: maxTok, NoSpeculation: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			got, res, err := generate(engines[name], engine.GenerateRequest{Prompt: prompt, MaxTokens: maxTok})
			if err != nil {
				t.Fatalf("prompt %d %q, %s: %v", i, text, name, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("prompt %d %q, %s:\nspeculative %v\nplain       %v", i, text, name, got, want)
			}
			if res.Spec == nil {
				t.Fatalf("%s: no speculation stats", name)
			}
			if totals[name] == nil {
				totals[name] = &engine.SpecStats{}
			}
			totals[name].Steps += res.Spec.Steps
			totals[name].Proposed += res.Spec.Proposed
			totals[name].Accepted += res.Spec.Accepted
			gen[name] += len(got) - 1 // the first token comes from prefill
		}
		if (i+1)%10 == 0 {
			t.Logf("prompts [%d, %d) of %d equal in all modes (%v)", from, i+1, n, time.Since(start).Round(time.Second))
		}
	}
	for _, name := range names {
		s := totals[name]
		t.Logf("%-8s steps %d proposed %d accepted %d: tau %.2f tokens/step, acceptance %.2f",
			name, s.Steps, s.Proposed, s.Accepted, float64(gen[name])/float64(max(s.Steps, 1)), float64(s.Accepted)/float64(max(s.Proposed, 1)))
		if s.Accepted == 0 && name != "adaptive" {
			t.Errorf("%s: the shipped draft never matched the target: speculation untested", name)
		}
	}
	if leak := target.KV().UsedBlocks() - target.KV().CachedBlocks(); leak != 0 || draft.KV().UsedBlocks() != 0 {
		t.Fatalf("KV leak: target %d blocks outside the prefix cache, draft %d blocks in use", leak, draft.KV().UsedBlocks())
	}
}

// TestLosslessGreedyPenalties: greedy decoding with presence/frequency
// penalties (the draft ranks and the target chooses after penalties over
// the generated tokens plus the path) equals plain decoding; tiny random
// pair, every mode.
func TestLosslessGreedyPenalties(t *testing.T) {
	target, draft := tinyPair()
	e := engine.New(target, engine.Options{})
	defer e.Close()
	sp := engine.SamplingParams{PresencePenalty: 0.4, FrequencyPenalty: 0.7}
	modes := greedyModes()
	freq := tinyFrequency(t)
	modes["chain-vocab6"] = Config{Method: MethodChain, K: 3, VocabLimit: 6, TokenFrequency: freq}
	modes["tree-vocab6"] = Config{Method: MethodTree, K: 3, Branching: []int{3, 2, 1}, Budget: 9, VocabLimit: 6, TokenFrequency: freq}
	for name, cfg := range modes {
		d, err := NewDraft(target, draft, cfg)
		if err != nil {
			t.Fatal(err)
		}
		se := engine.New(target, d.EngineOptions(engine.Options{}))
		defer se.Close()
		for i := range 6 {
			prompt := []int32{0, int32(1 + i), int32(11 - i), 4}
			want, _, err := generate(e, engine.GenerateRequest{Prompt: prompt, MaxTokens: 40, Sampling: sp, NoSpeculation: true})
			if err != nil {
				t.Fatal(err)
			}
			got, res, err := generate(se, engine.GenerateRequest{Prompt: prompt, MaxTokens: 40, Sampling: sp})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s prompt %v:\nspeculative %v\nplain       %v", name, prompt, got, want)
			}
			if name != "adaptive" && res.Spec.Proposed == 0 {
				t.Fatalf("%s: nothing proposed", name)
			}
		}
	}
}
