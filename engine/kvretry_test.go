package engine

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestForwardBatchLogitsLength: an item's Logits and Hidden hold exactly
// its rows after ForwardBatch, also when they come with a larger buffer
// (the engine retries a step's forward without its trees: the item keeps
// the buffers of the failed tree forward).
func TestForwardBatchLogitsLength(t *testing.T) {
	cfg := genConfig()
	m := NewRandomModel(cfg, 73, LoadOptions{KVTokens: 256, BlockSize: 4, Threads: 1, DisablePrefixCache: true})
	V, H := cfg.VocabSize, cfg.HiddenSize
	s := m.NewSequence()
	defer s.Free()
	it := []BatchItem{{Seq: s, Tokens: []int32{3, 4, 5}, LogitsRows: []int32{2}, Logits: make([]float32, 5*V), WantHidden: true, Hidden: make([]float32, 5*H)}}
	if err := m.ForwardBatch(it); err != nil {
		t.Fatal(err)
	}
	if len(it[0].Logits) != V || len(it[0].Hidden) != H {
		t.Fatalf("one logits row: len(Logits) %d, len(Hidden) %d; want %d, %d", len(it[0].Logits), len(it[0].Hidden), V, H)
	}
}

// TestSpecTreesRetriedUnderKVPressure: sampled speculative requests whose
// trees do not fit in a nearly full KV pool are decoded plainly for that
// step and finish without error, every token in the vocabulary.
func TestSpecTreesRetriedUnderKVPressure(t *testing.T) {
	cfg := genConfig()
	m := NewRandomModel(cfg, 71, LoadOptions{KVTokens: 360, BlockSize: 4, Threads: 1, DisablePrefixCache: true})
	draft := NewRandomModel(cfg, 72, LoadOptions{KVTokens: 8192, BlockSize: 4, Threads: 1, DisablePrefixCache: true})
	r := rand.New(rand.NewPCG(9, 9))
	for round := range 3 {
		mc := newModelChain(draft, true)
		e := New(m, Options{FixedDraft: true, MaxDraft: 4})
		var wg sync.WaitGroup
		for i := range 24 {
			p := randTokens(r, 5+r.IntN(20), cfg.VocabSize)
			maxTok := 10 + r.IntN(30)
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := GenerateRequest{Prompt: p, MaxTokens: maxTok, Proposers: []Proposer{mc}, Sampling: SamplingParams{Temperature: 0.7}}
				toks, _, err := collect(e, context.Background(), req)
				if err != nil || len(toks) != maxTok {
					t.Errorf("round %d request %d: %d of %d tokens, %v", round, i, len(toks), maxTok, err)
				}
				for _, tok := range toks {
					if tok < 0 || int(tok) >= cfg.VocabSize {
						t.Errorf("round %d request %d: token %d out of the vocabulary", round, i, tok)
					}
				}
			}()
		}
		wg.Wait()
		st := e.Stats()
		e.Close()
		t.Logf("round %d: preemptions %d, spec steps %d", round, st.Preemptions, st.SpecSteps)
	}
}
