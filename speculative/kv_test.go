package speculative

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/specgate/specgate/engine"
)

// TestKVMatchesPlain: after speculative steps with rejected branches, the
// target's KV at every committed position equals (bitwise) the KV that
// plain token-by-token decoding of the same tokens builds, and the next
// forward's logits are equal too. Tiny random pair (sampling, static tree,
// KV blocks of 4) and the shipped pair (greedy, dynamic tree).
func TestKVMatchesPlain(t *testing.T) {
	type tc struct {
		name          string
		target, draft *engine.Model
		cfg           Config
		params        engine.SamplingParams
		prompt        []int32
		steps         int
	}
	tt, td := tinyPair()
	cases := []tc{
		{"tiny-sampling-tree", tt, td, Config{Method: MethodTree, K: 3, Branching: []int{3, 2}, Budget: 8},
			engine.SamplingParams{Temperature: 1}, []int32{0, 5, 9, 2, 7}, 25},
		{"tiny-greedy-chain", tt, td, Config{Method: MethodChain, K: 5},
			engine.SamplingParams{}, []int32{0, 1, 2}, 20},
	}
	if !testing.Short() {
		st, sd := shippedPair(t)
		cases = append(cases, tc{"shipped-greedy-dynamic", st, sd, Config{Method: MethodDynamic, K: 4, Width: 4, Budget: 12},
			engine.SamplingParams{}, st.Tokenizer.Encode("func (b *Buffer) Write(p []byte) (n int, err error) {", true), 12})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := NewDraft(c.target, c.draft, c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			seq := c.target.NewSequence()
			defer seq.Free()
			lg, err := seq.Forward(c.prompt, nil, []int32{int32(len(c.prompt) - 1)})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(9, 9))
			gen := []int32{engine.Sample(lg, c.params, nil, rng)}
			var stats engine.SpecStats
			s := &engine.SpecState{Ctx: context.Background(), Target: c.target, Seq: seq, Prompt: c.prompt, Params: c.params,
				Rand: rng, Active: 1, Stats: &stats}
			for range c.steps {
				s.Generated, s.Pending, s.MaxNew = gen, gen[len(gen)-1], 64
				toks, err := d.Step(s)
				if err != nil {
					t.Fatal(err)
				}
				gen = append(gen, toks...)
			}
			d.Release(s)
			if stats.Proposed == stats.Accepted || stats.Accepted == 0 {
				t.Fatalf("proposed %d, accepted %d: want both accepted and rejected branches", stats.Proposed, stats.Accepted)
			}
			if c.draft.KV().UsedBlocks() != 0 {
				t.Fatalf("draft holds %d KV blocks after Release", c.draft.KV().UsedBlocks())
			}
			// plain decoding of the same tokens, one forward per token.
			plain := c.target.NewSequence()
			defer plain.Free()
			if _, err := plain.Forward(c.prompt, nil, []int32{}); err != nil {
				t.Fatal(err)
			}
			for _, tok := range gen[:len(gen)-1] {
				if _, err := plain.Forward([]int32{tok}, nil, nil); err != nil {
					t.Fatal(err)
				}
			}
			if fmt.Sprint(seq.Tokens()) != fmt.Sprint(plain.Tokens()) {
				t.Fatalf("committed tokens differ:\nspec  %v\nplain %v", seq.Tokens(), plain.Tokens())
			}
			be, ok := c.target.Backend().(*engine.CPUBackend)
			if !ok {
				t.Fatalf("backend %T, want *engine.CPUBackend", c.target.Backend())
			}
			for pos := range seq.Len() {
				for l := range c.target.Config.NumLayers {
					k1, v1 := be.KV(l, seq.Slot(pos))
					k2, v2 := be.KV(l, plain.Slot(pos))
					if dk, dv := maxDiff(k1, k2), maxDiff(v1, v2); dk != 0 || dv != 0 {
						t.Fatalf("position %d layer %d: K differs by %g, V by %g", pos, l, dk, dv)
					}
				}
			}
			a, err := seq.Forward([]int32{gen[len(gen)-1]}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, err := plain.Forward([]int32{gen[len(gen)-1]}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if dl := maxDiff(a, b); dl != 0 {
				t.Fatalf("next-token logits differ by %g", dl)
			}
			t.Logf("%d tokens committed (%d steps, proposed %d, accepted %d): KV and next logits bitwise equal",
				seq.Len(), c.steps, stats.Proposed, stats.Accepted)
		})
	}
}

func maxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	m := 0.0
	for i := range a {
		m = max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}

// TestKVExhaustedFallsBack: when the tree does not fit the target's KV, or
// the draft's KV pool is full, Step decodes one plain token instead of failing.
func TestKVExhaustedFallsBack(t *testing.T) {
	small := engine.LoadOptions{KVTokens: 16, BlockSize: 4, Threads: 1, DisablePrefixCache: true}
	big := engine.LoadOptions{KVTokens: 256, BlockSize: 4, Threads: 1, DisablePrefixCache: true}
	prompt := []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	cases := []struct {
		name          string
		target, draft *engine.Model
	}{
		{"target full", engine.NewRandomModel(tinyConfig(), 5, small), engine.NewRandomModel(tinyConfig(), 77, big)},
		{"draft full", engine.NewRandomModel(tinyConfig(), 5, big), engine.NewRandomModel(tinyConfig(), 77, engine.LoadOptions{KVTokens: 8, BlockSize: 4, Threads: 1})},
	}
	for _, c := range cases {
		d, err := NewDraft(c.target, c.draft, Config{Method: MethodTree, K: 3, Branching: []int{3, 2}, Budget: 8})
		if err != nil {
			t.Fatal(err)
		}
		seq := c.target.NewSequence()
		if _, err := seq.Forward(prompt, nil, []int32{}); err != nil {
			t.Fatal(err)
		}
		var stats engine.SpecStats
		s := &engine.SpecState{Ctx: context.Background(), Target: c.target, Seq: seq, Prompt: prompt, Generated: []int32{3},
			Pending: 3, Params: engine.SamplingParams{}, Rand: rand.New(rand.NewPCG(1, 1)), MaxNew: 10, Active: 1, Stats: &stats}
		toks, err := d.Step(s)
		if err != nil || len(toks) != 1 || stats.Proposed != 0 || seq.Len() != len(prompt)+1 {
			t.Fatalf("%s: tokens %v, err %v, stats %+v, target KV %d tokens: want one plain token", c.name, toks, err, stats, seq.Len())
		}
		d.Release(s)
		seq.Free()
	}
}
