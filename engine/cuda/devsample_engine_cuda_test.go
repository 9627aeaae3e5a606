//go:build cuda

package cuda_test

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/cuda"
)

// The engine on the GPU with sampling on the device against the same engine
// with the CPU sampler: greedy outputs identical (plain and with
// penalties); seeded sampling reproducible on the device; 48 concurrent
// sampled requests (batched steps) all finish.
func TestEngineDeviceSampling(t *testing.T) {
	dir := "../../models/specgate-target"
	load := func(opt cuda.Options) (*engine.Model, *engine.Engine) {
		m, err := engine.Load(dir, engine.LoadOptions{KVTokens: 8192, DisablePrefixCache: true, NewBackend: cuda.Factory(opt)})
		if err != nil {
			if os.Getenv("SPECGATE_EXPECT_GPU") == "" {
				t.Skipf("%s on CUDA: %v", dir, err)
			}
			t.Fatal(err)
		}
		e := engine.New(m, engine.Options{MaxBatch: 16})
		t.Cleanup(func() { e.Close(); m.Close() })
		return m, e
	}
	m, dev := load(cuda.Options{})
	_, host := load(cuda.Options{NoDeviceSampling: true})
	if !m.Backend().(engine.DeviceSampler).SamplesOnDevice() {
		t.Fatal("device sampling off by default")
	}
	prompts := []string{"func main() {", "The ocean is", "Define ephemeral.", "package main\n\nimport", "Once upon a time",
		"SELECT * FROM", "def fib(n):", "The capital of France", "1, 2, 3,", "<html>", "Dear Sir,", "for i := 0;"}
	// one request at a time: every step has the same shape in both engines
	// (numerics of a batch depend on its size); concurrent below.
	run := func(e *engine.Engine, sp engine.SamplingParams) []string {
		out := make([]string, len(prompts))
		for i, p := range prompts {
			func() {
				sp := sp
				if sp.Seed != nil {
					s := *sp.Seed + uint64(i)
					sp.Seed = &s
				}
				toks, _, err := genTokens(e, engine.GenerateRequest{Prompt: m.Tokenizer.Encode(p, true), MaxTokens: 40, Sampling: sp})
				if err != nil {
					out[i] = "error: " + err.Error()
					return
				}
				out[i] = fmt.Sprint(toks)
			}()
		}
		return out
	}
	g1, g2 := run(dev, engine.SamplingParams{}), run(host, engine.SamplingParams{})
	pen := engine.SamplingParams{PresencePenalty: 0.8, FrequencyPenalty: 0.5}
	p1, p2 := run(dev, pen), run(host, pen)
	for i := range prompts {
		if g1[i] != g2[i] {
			t.Errorf("prompt %q greedy: device %s, CPU %s", prompts[i], g1[i], g2[i])
		}
		if p1[i] != p2[i] {
			t.Errorf("prompt %q greedy with penalties: device %s, CPU %s", prompts[i], p1[i], p2[i])
		}
	}
	seed := uint64(42)
	sp := engine.SamplingParams{Temperature: 0.9, TopP: 0.95, TopK: 50, Seed: &seed}
	s1, s2, s3 := run(dev, sp), run(dev, sp), run(host, sp)
	same := 0
	for i := range prompts {
		if s1[i] != s2[i] {
			t.Errorf("prompt %q seeded sampling on the device not reproducible:\n%s\n%s", prompts[i], s1[i], s2[i])
		}
		if s1[i] == s3[i] {
			same++
		}
	}
	// concurrent sampled requests on the device: batched steps, all finish.
	var wg sync.WaitGroup
	errs := make(chan error, 4*len(prompts))
	for k := 0; k < 4; k++ {
		for _, p := range prompts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				toks, res, err := genTokens(dev, engine.GenerateRequest{Prompt: m.Tokenizer.Encode(p, true), MaxTokens: 40,
					Sampling: engine.SamplingParams{Temperature: 0.8, MinP: 0.02, PresencePenalty: 0.3}})
				// an end-of-text token may come first: 0 tokens with finish "stop"
				if err == nil && len(toks) == 0 && res.Finish != engine.FinishStop {
					err = fmt.Errorf("prompt %q: no tokens, finish %q", p, res.Finish)
				}
				if err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("greedy (plain and penalised) identical for %d concurrent prompts; seeded sampling reproducible; %d of %d seeded outputs identical to the CPU sampler's (same uniforms)", len(prompts), same, len(prompts))
}
