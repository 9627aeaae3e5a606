//go:build cuda

package cuda_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/cuda"
	"github.com/specgate/specgate/speculative"
)

// loadGPU loads a shipped model with the CUDA backend (prefix cache off, so
// every prompt is prefilled the same way in the plain and the speculative
// run). No GPU: skip, or fail under SPECGATE_EXPECT_GPU.
func loadGPU(t *testing.T, dir string) *engine.Model {
	t.Helper()
	return loadGPUOpt(t, dir, cuda.Options{})
}

// loadGPUOpt is loadGPU with backend options.
func loadGPUOpt(t *testing.T, dir string, o cuda.Options) *engine.Model {
	t.Helper()
	m, err := engine.Load(dir, engine.LoadOptions{KVTokens: 4096, DisablePrefixCache: true,
		NewBackend: cuda.Factory(o)})
	if err != nil {
		if os.Getenv("SPECGATE_EXPECT_GPU") == "" {
			t.Skipf("%s on CUDA: %v", dir, err)
		}
		t.Fatalf("%s on CUDA: %v", dir, err)
	}
	t.Cleanup(func() { m.Close() })
	if _, ok := m.Backend().(*cuda.Backend); !ok {
		t.Fatalf("%s: backend %T, want *cuda.Backend", dir, m.Backend())
	}
	return m
}

func genTokens(e *engine.Engine, req engine.GenerateRequest) ([]int32, engine.Result, error) {
	var toks []int32
	res, err := e.Generate(context.Background(), req, func(c engine.Chunk) error {
		toks = append(toks, c.Tokens...)
		return nil
	})
	return toks, res, err
}

// TestSpeculativeGreedyOnGPU: target and draft both on the CUDA backend;
// speculative greedy output (chain and tree proposals, verification batches
// of <= 8 tokens so they stay on the batch-invariant GEMV path) equals plain
// CUDA greedy decoding token for token on the shipped pair. 20 prompts x 48
// new tokens (-short: 5 x 24).
func TestSpeculativeGreedyOnGPU(t *testing.T) {
	target := loadGPU(t, "../../models/specgate-target")
	draft := loadGPU(t, "../../models/specgate-draft")
	if target.Tokenizer == nil {
		t.Fatal("models/specgate-target: no tokenizer")
	}
	n, maxTok := 20, 48
	if testing.Short() {
		n, maxTok = 5, 24
	}
	prompts := speculative.BenchPrompts()
	if len(prompts) < n {
		t.Fatalf("speculative.BenchPrompts: %d prompts, want >= %d", len(prompts), n)
	}
	modes := []struct {
		name string
		cfg  speculative.Config
	}{
		{"chain", speculative.Config{Method: speculative.MethodChain, K: 4}},
		{"tree", speculative.Config{Method: speculative.MethodTree, K: 3, Branching: []int{3, 2, 1}, Budget: 7}},
	}
	specs := make([]*engine.Engine, len(modes))
	for i, md := range modes {
		d, err := speculative.NewDraft(target, draft, md.cfg)
		if err != nil {
			t.Fatalf("%s: %v", md.name, err)
		}
		specs[i] = engine.New(target, d.EngineOptions(engine.Options{}))
		defer specs[i].Close()
	}
	e := engine.New(target, engine.Options{})
	defer e.Close()
	steps, accepted, gen := make([]int, len(modes)), make([]int, len(modes)), make([]int, len(modes))
	plain := 0
	for i := 0; i < n; i++ {
		prompt := target.Tokenizer.Encode(prompts[i], true)
		want, _, err := genTokens(e, engine.GenerateRequest{Prompt: prompt, MaxTokens: maxTok, NoSpeculation: true})
		if err != nil {
			t.Fatalf("prompt %d plain: %v", i, err)
		}
		plain += len(want) // a prompt may end at once (EOS first); its speculative run must agree
		for mi, md := range modes {
			got, res, err := genTokens(specs[mi], engine.GenerateRequest{Prompt: prompt, MaxTokens: maxTok})
			if err != nil {
				t.Fatalf("prompt %d %s: %v", i, md.name, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("prompt %d %q, %s on GPU:\nspeculative %v\nplain       %v", i, prompts[i], md.name, got, want)
			}
			if res.Spec == nil {
				t.Fatalf("prompt %d %s: no speculation stats", i, md.name)
			}
			steps[mi] += res.Spec.Steps
			accepted[mi] += res.Spec.Accepted
			gen[mi] += max(len(got)-1, 0)
		}
	}
	if plain < n*maxTok/4 {
		t.Fatalf("plain decoding gave %d tokens over %d prompts: too few to test speculation", plain, n)
	}
	for mi, md := range modes {
		t.Logf("%-5s %d prompts x %d tokens equal; steps %d, accepted %d, %.2f tokens/step",
			md.name, n, maxTok, steps[mi], accepted[mi], float64(gen[mi])/float64(max(steps[mi], 1)))
		if accepted[mi] == 0 {
			t.Errorf("%s: the draft never matched: speculation untested", md.name)
		}
	}
	if leak := target.KV().UsedBlocks(); leak != 0 || draft.KV().UsedBlocks() != 0 {
		t.Fatalf("KV leak: target %d blocks, draft %d blocks in use", leak, draft.KV().UsedBlocks())
	}
}
