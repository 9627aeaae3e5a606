package medusa

import (
	"slices"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/speculative"
)

// TestCPUHeadsRegisteredOnce: a long-running process builds many Medusa
// proposers on one CPU backend (a proposer per engine, `bench spec`'s modes
// and repetitions); each New loads the heads and registers them with the
// backend (attachCPU), and the backend keeps every registration for its
// lifetime. The same heads directory, vocabulary and candidates per head
// must reuse one registration (as the CUDA backend's LoadHeads does by
// key and top-k), so the backend holds one per distinct set of heads, not
// one per proposer. Registration ids are dense (1, 2, ...): the id a new
// key gets is the backend's count of registrations.
func TestCPUHeadsRegisteredOnce(t *testing.T) {
	target, err := engine.Load(shippedTarget, engine.LoadOptions{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	b := target.Backend()
	var last *Proposer
	idOf := func(tree string, vocab int) int {
		t.Helper()
		p, err := New(target, Spec{Heads: shippedHeads, Tree: tree, VocabLimit: vocab})
		if err != nil {
			t.Fatal(err)
		}
		id := p.DeviceHeads(b)
		if id == 0 {
			t.Fatalf("tree %s vocab %d: heads not registered with the 2-thread CPU backend: %v", tree, vocab, p.DeviceError())
		}
		last = p
		return id
	}
	first := idOf("1", 2048)
	for i := 1; i < 16; i++ {
		if id := idOf("1", 2048); id != first {
			t.Fatalf("proposer %d over the same heads: registration id %d, the first proposer's %d (the backend now holds %d registrations)", i, id, first, id)
		}
	}
	// a proposer that did not register the heads it runs on: its own
	// output equals plain decoding's and it accepts head tokens
	shared := last
	plain := engine.New(target, engine.Options{})
	defer plain.Close()
	sh := engine.New(target, engine.Options{Proposers: []engine.Proposer{shared}, FixedDraft: true})
	defer sh.Close()
	acc := 0
	for i, text := range speculative.BenchPrompts()[:2] {
		req := engine.GenerateRequest{Prompt: target.Tokenizer.Encode(text, true), MaxTokens: 24, Sampling: engine.SamplingParams{SkipLogprobs: true}}
		want, _, err := generate(plain, req)
		if err != nil {
			t.Fatal(err)
		}
		got, res, err := generate(sh, req)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("prompt %d: output over the shared registration %v, plain %v", i, got, want)
		}
		if res.Spec != nil {
			acc += res.Spec.Accepted
		}
	}
	if acc == 0 {
		t.Fatal("no head token accepted over the shared registration")
	}
	// three candidates of head 0: other heads output, a registration of
	// its own, once
	k3 := idOf("[[0],[1],[2]]", 2048)
	if k3 == first {
		t.Fatalf("tree [[0],[1],[2]] shares registration %d with tree 1 (1 candidate per row, not 3)", k3)
	}
	if id := idOf("[[0],[1]]", 2048); id == first || id == k3 {
		t.Fatalf("tree [[0],[1]] (2 candidates) shares registration %d (tree 1: %d, 3 candidates: %d)", id, first, k3)
	}
	// another vocabulary: other projection rows (the shipped heads'
	// projections hold 1024 rows, so any limit >= 1024 is the same heads)
	v := idOf("1", 512)
	if v == first {
		t.Fatalf("vocab 512 shares registration %d with vocab 2048", v)
	}
	if id := idOf("1", 512); id != v {
		t.Fatalf("vocab 512 again: registration %d, first %d", id, v)
	}
	if id := idOf("1", 1024); id != first {
		t.Fatalf("vocab 1024 (the heads' own 1024 rows, as with 2048): registration %d, vocab 2048's %d", id, first)
	}
	if id := idOf("[[0],[1],[2]]", 2048); id != k3 {
		t.Fatalf("tree [[0],[1],[2]] again: registration %d, first %d", id, k3)
	}
	if v != 4 {
		t.Fatalf("the 4th distinct heads got registration %d: the backend holds more registrations than distinct heads", v)
	}
}
