package medusa

import (
	"slices"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/speculative"
)

// TestCPUHeadsInForward: on a 2-thread CPU backend medusa.New registers a
// one-level tree's heads with the backend (attachCPU), which runs them
// inside the target's forward beside the LM head; greedy output equals
// plain decoding's, and every request proposes and accepts exactly what
// the host path (the same heads run by Propose on the accepted row) does:
// same trees, step for step. Deeper trees stay on the host path.
// 6 prompts x 48 tokens (-short: 3 x 32).
func TestCPUHeadsInForward(t *testing.T) {
	target, err := engine.Load(shippedTarget, engine.LoadOptions{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	prompts, maxTok := speculative.BenchPrompts()[:6], 48
	if testing.Short() {
		prompts, maxTok = prompts[:3], 32
	}
	sp := engine.SamplingParams{SkipLogprobs: true}
	plain := engine.New(target, engine.Options{})
	defer plain.Close()
	for _, tree := range []string{"1", "[[0],[1],[2]]"} {
		p, err := New(target, Spec{Heads: shippedHeads, Tree: tree, VocabLimit: 2048})
		if err != nil {
			t.Fatal(err)
		}
		if p.DeviceHeads(target.Backend()) == 0 {
			t.Fatalf("tree %s: heads not registered with the 2-thread CPU backend: %v", tree, p.DeviceError())
		}
		hl, err := Load(shippedHeads, target, LoadOptions{VocabLimit: 2048})
		if err != nil {
			t.Fatal(err)
		}
		host, err := NewProposer(hl, p.Tree())
		if err != nil {
			t.Fatal(err)
		}
		in := engine.New(target, engine.Options{Proposers: []engine.Proposer{p}, FixedDraft: true})
		ho := engine.New(target, engine.Options{Proposers: []engine.Proposer{host}, FixedDraft: true})
		acc := 0
		for i, text := range prompts {
			req := engine.GenerateRequest{Prompt: target.Tokenizer.Encode(text, true), MaxTokens: maxTok, Sampling: sp}
			want, _, err := generate(plain, req)
			if err != nil {
				t.Fatal(err)
			}
			got, rin, err := generate(in, req)
			if err != nil {
				t.Fatal(err)
			}
			_, rho, err := generate(ho, req)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("tree %s prompt %d: in-forward heads output %v, plain %v", tree, i, got, want)
			}
			if rin.Spec == nil || rho.Spec == nil {
				t.Fatalf("tree %s prompt %d: no speculation stats", tree, i)
			}
			if rin.Spec.Proposed != rho.Spec.Proposed || rin.Spec.Accepted != rho.Spec.Accepted || rin.Spec.Steps != rho.Spec.Steps {
				t.Fatalf("tree %s prompt %d: in-forward heads proposed/accepted/steps %d/%d/%d, host heads %d/%d/%d", tree, i,
					rin.Spec.Proposed, rin.Spec.Accepted, rin.Spec.Steps, rho.Spec.Proposed, rho.Spec.Accepted, rho.Spec.Steps)
			}
			acc += rin.Spec.Accepted
		}
		in.Close()
		ho.Close()
		if acc == 0 {
			t.Fatalf("tree %s: no head token accepted", tree)
		}
		t.Logf("tree %s: equal to plain, same proposals as the host path; %d head tokens accepted", tree, acc)
	}
	// a 2-deep tree, and a 1-thread backend, keep the heads on the host
	deep, err := New(target, Spec{Heads: shippedHeads, Tree: "2", VocabLimit: 2048})
	if err != nil {
		t.Fatal(err)
	}
	if deep.Tree().Depth() < 2 || deep.DeviceHeads(target.Backend()) != 0 {
		t.Fatalf("tree 2 (depth %d): registered with the backend", deep.Tree().Depth())
	}
	one, err := engine.Load(shippedTarget, engine.LoadOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	p1, err := New(one, Spec{Heads: shippedHeads, Tree: "1", VocabLimit: 2048})
	if err != nil {
		t.Fatal(err)
	}
	if p1.DeviceHeads(one.Backend()) != 0 {
		t.Fatal("1-thread backend: heads registered with it")
	}
}
