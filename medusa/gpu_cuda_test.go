//go:build cuda

package medusa

import (
	"fmt"
	"os"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/cuda"
	"github.com/specgate/specgate/speculative"
)

// TestLosslessGreedyOnGPU: the shipped target on the CUDA backend (hidden
// rows from engine/cuda's fillHidden) with the shipped heads: Medusa greedy
// output equals plain CUDA greedy output token for token on 20 prompts x 64
// tokens. Trees of 7 nodes keep every verification at <= 8 tokens, on the
// batch-invariant GEMV path. No GPU: skip (fail under SPECGATE_EXPECT_GPU).
func TestLosslessGreedyOnGPU(t *testing.T) {
	target, err := engine.Load(shippedTarget, engine.LoadOptions{KVTokens: 4096, DisablePrefixCache: true,
		NewBackend: cuda.Factory(cuda.Options{})})
	if err != nil {
		if os.Getenv("SPECGATE_EXPECT_GPU") == "" {
			t.Skipf("CUDA: %v", err)
		}
		t.Fatal(err)
	}
	defer target.Close()
	p, err := New(target, Spec{Heads: shippedHeads, Tree: "7"})
	if err != nil {
		t.Fatal(err)
	}
	if p.DeviceHeads(target.Backend()) == 0 {
		t.Fatalf("the heads do not run inside the CUDA forward: %v", p.DeviceError())
	}
	gen, steps, acc := gpuLossless(t, target, p, "medusa")
	t.Logf("20 prompts equal on the GPU; %d tokens, %d speculative steps, %d head tokens accepted (tau %.2f)", gen, steps, acc, float64(gen)/float64(max(steps, 1)))
	if acc == 0 {
		t.Fatal("no head token accepted on the GPU: hidden rows missing?")
	}
}

// gpuLossless generates 20 bench prompts x 64 tokens greedily on target
// with p (fixed 7-node drafts) and without, and fails on the first output
// that differs (what names p in the message); it returns the tokens
// generated, the speculative steps and the head tokens accepted.
func gpuLossless(t *testing.T, target *engine.Model, p engine.Proposer, what string) (gen, steps, acc int) {
	t.Helper()
	plain := engine.New(target, engine.Options{})
	defer plain.Close()
	spec := engine.New(target, engine.Options{Proposers: []engine.Proposer{p}, FixedDraft: true, MaxDraft: 7})
	defer spec.Close()
	for i, text := range speculative.BenchPrompts()[:20] {
		prompt := target.Tokenizer.Encode(text, true)
		want, _, err := generate(plain, engine.GenerateRequest{Prompt: prompt, MaxTokens: 64})
		if err != nil {
			t.Fatal(err)
		}
		got, res, err := generate(spec, engine.GenerateRequest{Prompt: prompt, MaxTokens: 64})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("prompt %d %q:\n%s %v\nplain  %v", i, text, what, got, want)
		}
		gen += len(got) - 1
		if res.Spec != nil {
			steps += res.Spec.Steps
			acc += res.Spec.Accepted
		}
	}
	return gen, steps, acc
}
