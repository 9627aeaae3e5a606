//go:build cuda

package medusa

import (
	"math"
	"os"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/cuda"
	"github.com/specgate/specgate/speculative"
)

func loadCUDATarget(t *testing.T) *engine.Model {
	t.Helper()
	target, err := engine.Load(shippedTarget, engine.LoadOptions{KVTokens: 4096, DisablePrefixCache: true,
		NewBackend: cuda.Factory(cuda.Options{})})
	if err != nil {
		if os.Getenv("SPECGATE_EXPECT_GPU") == "" {
			t.Skipf("CUDA: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { target.Close() })
	return target
}

// TestDeviceHeadsMatchHost: the heads run inside the CUDA forward give, for
// every logits row and head, the same top-k as the host heads (Heads.Logits,
// TopK) on the same final hidden rows (fetched in the same forward), up to
// near-ties: rank by rank the host logits of the device's and the host's
// token differ by at most 0.03, and at least 90% of the lists are equal.
// Rows: 4 prompts' prefills with logits on every row (R > 8: the cuBLAS
// projection, several heads_resblock row blocks) and one decode step each
// (R = 1: the GEMV projection); the full vocabulary and the FR-Spec limit.
func TestDeviceHeadsMatchHost(t *testing.T) {
	target := loadCUDATarget(t)
	for _, vocab := range []int{0, 512} { // 512: fewer rows than the shipped heads' 1,024 (a cut projection)
		p, err := New(target, Spec{Heads: shippedHeads, Tree: "64", VocabLimit: vocab})
		if err != nil {
			t.Fatal(err)
		}
		id := p.DeviceHeads(target.Backend())
		if id == 0 {
			t.Fatalf("vocab %d: heads not on the device: %v", vocab, p.DeviceError())
		}
		h, k := p.heads, p.dev.k
		nh, H := h.NumHeads, h.Hidden
		rowOf := map[int32]int{}
		for r := range h.Rows() {
			rowOf[h.TokenOf(r)] = r
		}
		lists, equal := 0, 0
		check := func(it *engine.BatchItem, rows int) {
			if len(it.HeadTop) != rows*nh*k || len(it.Hidden) != rows*H {
				t.Fatalf("vocab %d: HeadTop %d / Hidden %d values for %d rows", vocab, len(it.HeadTop), len(it.Hidden), rows)
			}
			for r := range rows {
				l := h.Logits(it.Hidden[r*H:(r+1)*H], 1, nh, nil)
				for hh := range nh {
					lh := l[hh*h.Rows() : (hh+1)*h.Rows()]
					host := TopK(lh, k, nil)
					dev := it.HeadTop[(r*nh+hh)*k : (r*nh+hh+1)*k]
					lists++
					same := true
					for j := range k {
						dr, ok := rowOf[dev[j]]
						if !ok {
							t.Fatalf("vocab %d row %d head %d: device token %d is no candidate", vocab, r, hh, dev[j])
						}
						if dev[j] != h.TokenOf(int(host[j])) {
							same = false
						}
						if d := math.Abs(float64(lh[dr] - lh[host[j]])); d > 0.03 {
							t.Errorf("vocab %d row %d head %d rank %d: device token %d (host logit %.4f), host token %d (%.4f)",
								vocab, r, hh, j, dev[j], lh[dr], h.TokenOf(int(host[j])), lh[host[j]])
						}
					}
					if same {
						equal++
					}
				}
			}
		}
		for _, text := range speculative.BenchPrompts()[:4] {
			prompt := target.Tokenizer.Encode(text, true)
			s := target.NewSequence()
			it := []engine.BatchItem{{Seq: s, Tokens: prompt, WantHidden: true, Heads: id}}
			if err := target.ForwardBatch(it); err != nil {
				t.Fatal(err)
			}
			check(&it[0], len(prompt))
			last := it[0].Logits[(len(prompt)-1)*target.Config.VocabSize:]
			next := engine.Argmax(last)
			it = []engine.BatchItem{{Seq: s, Tokens: []int32{next}, WantHidden: true, Heads: id}}
			if err := target.ForwardBatch(it); err != nil {
				t.Fatal(err)
			}
			check(&it[0], 1)
			s.Free()
		}
		t.Logf("vocab limit %d: %d heads x top-%d lists, %d equal to the host's (%.1f%%)", vocab, lists, k, equal, 100*float64(equal)/float64(lists))
		if equal*10 < lists*9 {
			t.Errorf("vocab limit %d: only %d of %d top-k lists equal the host's", vocab, equal, lists)
		}
	}
}

// TestArgmaxRowsOnGPU: a tree item with ArgmaxOnly gets, per row, the
// argmax of the logits the same forward gives without it.
func TestArgmaxRowsOnGPU(t *testing.T) {
	target := loadCUDATarget(t)
	prompt := target.Tokenizer.Encode(speculative.BenchPrompts()[0], true)
	V := target.Config.VocabSize
	tree := []int32{11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22}
	par := []int32{-1, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8}
	var got [2][]int32
	for run, argOnly := range []bool{false, true} {
		s := target.NewSequence()
		if _, err := s.Forward(prompt, nil, []int32{}); err != nil {
			t.Fatal(err)
		}
		it := []engine.BatchItem{{Seq: s, Tokens: tree, Parents: par, ArgmaxOnly: argOnly}}
		if err := target.ForwardBatch(it); err != nil {
			t.Fatal(err)
		}
		if argOnly {
			got[run] = it[0].Argmax
		} else {
			for r := range tree {
				got[run] = append(got[run], engine.Argmax(it[0].Logits[r*V:(r+1)*V]))
			}
		}
		s.Free()
	}
	if len(got[1]) != len(tree) {
		t.Fatalf("argmax rows: %d, want %d", len(got[1]), len(tree))
	}
	for r := range tree {
		if got[0][r] != got[1][r] {
			t.Errorf("row %d: device argmax %d, host argmax of the logits %d", r, got[1][r], got[0][r])
		}
	}
}

// TestLosslessGreedyOnGPULargeTree: as TestLosslessGreedyOnGPU with the
// 64-node tree (verification forwards of 65 tokens, the cuBLAS path, which
// is not bit-identical to plain decoding's GEMV): Medusa greedy output,
// heads and tree argmax on the device, equals plain CUDA greedy output.
func TestLosslessGreedyOnGPULargeTree(t *testing.T) {
	target := loadCUDATarget(t)
	p, err := New(target, Spec{Heads: shippedHeads, Tree: "64", VocabLimit: 2048})
	if err != nil {
		t.Fatal(err)
	}
	if p.DeviceHeads(target.Backend()) == 0 {
		t.Fatalf("heads not on the device: %v", p.DeviceError())
	}
	plain := engine.New(target, engine.Options{})
	defer plain.Close()
	spec := engine.New(target, engine.Options{Proposers: []engine.Proposer{p}, FixedDraft: true, MaxDraft: 64})
	defer spec.Close()
	gen, steps, acc := 0, 0, 0
	for i, text := range speculative.BenchPrompts()[:20] {
		prompt := target.Tokenizer.Encode(text, true)
		sp := engine.SamplingParams{SkipLogprobs: true}
		want, _, err := generate(plain, engine.GenerateRequest{Prompt: prompt, MaxTokens: 64, Sampling: sp})
		if err != nil {
			t.Fatal(err)
		}
		got, res, err := generate(spec, engine.GenerateRequest{Prompt: prompt, MaxTokens: 64, Sampling: sp})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("prompt %d: %d tokens, plain %d", i, len(got), len(want))
		}
		for j := range got {
			if got[j] != want[j] {
				t.Fatalf("prompt %d %q: first difference at token %d: medusa %d, plain %d", i, text, j, got[j], want[j])
			}
		}
		gen += len(got) - 1
		if res.Spec != nil {
			steps += res.Spec.Steps
			acc += res.Spec.Accepted
		}
	}
	t.Logf("20 prompts equal; %d tokens, %d speculative steps, %d head tokens accepted (tau %.2f)", gen, steps, acc, float64(gen)/float64(max(steps, 1)))
}
