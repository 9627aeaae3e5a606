package engine

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
)

// treeSpec is a greedy tree speculator for tests: the draft's two best
// tokens after Pending, each extended by two greedy draft tokens (a 6-node
// tree grown one level per draft Forward), verified in one ForwardTree.
type treeSpec struct{ draft *Model }

func (c *treeSpec) Step(s *SpecState) ([]int32, error) {
	d, _ := s.Data.(*Sequence)
	if d == nil {
		d = c.draft.NewSequence()
		s.Data = d
	}
	committed := s.Seq.Tokens()
	d.Truncate(len(committed))
	if d.Len() < len(committed) {
		if _, err := d.Forward(committed[d.Len():], nil, []int32{}); err != nil {
			return nil, err
		}
	}
	if s.MaxNew-1 < 3 {
		return s.PlainStep()
	}
	lg, err := d.Forward([]int32{s.Pending}, nil, nil)
	if err != nil {
		return nil, err
	}
	top := TopLogprobs(LogSoftmax(lg), 2)
	toks := []int32{top[0].Token, top[1].Token}
	par := []int32{-1, -1}
	for lvl := range 2 {
		lo := 2 * lvl
		lg, err := d.Forward(toks[lo:lo+2], par[lo:lo+2], nil)
		if err != nil {
			return nil, err
		}
		V := c.draft.Config.VocabSize
		toks = append(toks, Argmax(lg[:V]), Argmax(lg[V:]))
		par = append(par, int32(lo), int32(lo+1))
	}
	if err := d.KeepTree(nil); err != nil {
		return nil, err
	}
	lg, err = s.ForwardTree(toks, par)
	if err != nil {
		return nil, err
	}
	V := s.Target.Config.VocabSize
	var path []int
	node := -1
	for {
		want := Argmax(lg[(node+1)*V : (node+2)*V])
		next := -1
		for i, p := range par {
			if int(p) == node && toks[i] == want {
				next = i
			}
		}
		if next < 0 {
			break
		}
		path = append(path, next)
		node = next
	}
	if err := s.KeepTree(path); err != nil {
		return nil, err
	}
	s.Stats.Proposed += len(toks)
	s.Stats.Accepted += len(path)
	out := make([]int32, 0, len(path)+1)
	for _, n := range path {
		out = append(out, toks[n])
	}
	return append(out, Argmax(lg[(node+1)*V:(node+2)*V])), nil
}

func (c *treeSpec) Release(s *SpecState) {
	if d, ok := s.Data.(*Sequence); ok {
		d.Free()
	}
}

// TestSpecLogprobs: with speculation (chain through ForwardTree, chain
// through TreeBatchItem, a branching tree; matching and unrelated drafts),
// every token of every chunk carries its logprob and top alternatives, and
// they equal plain greedy decoding's to 1e-5.
func TestSpecLogprobs(t *testing.T) {
	cfg := genConfig()
	opts := LoadOptions{KVTokens: 2048, BlockSize: 4, Threads: 2, DisablePrefixCache: true}
	target := NewRandomModel(cfg, 41, opts)
	same := NewRandomModel(cfg, 41, opts)
	other := NewRandomModel(cfg, 77, opts)
	prompt := []int32{2, 3, 5, 7, 11}
	const n, top = 23, 4
	type tokLP struct {
		tok  int32
		lp   float32
		top  []TokenLogprob
		seen bool
	}
	run := func(t *testing.T, e *Engine) ([]tokLP, Result) {
		t.Helper()
		var out []tokLP
		res, err := e.Generate(context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: n, Sampling: SamplingParams{Logprobs: top}},
			func(c Chunk) error {
				if len(c.Logprobs) != len(c.Tokens) || len(c.Top) != len(c.Tokens) {
					return fmt.Errorf("chunk with %d tokens, %d logprobs, %d top lists", len(c.Tokens), len(c.Logprobs), len(c.Top))
				}
				for i, tok := range c.Tokens {
					if c.Logprobs[i].Token != tok {
						return fmt.Errorf("logprob for token %d names %d", tok, c.Logprobs[i].Token)
					}
					out = append(out, tokLP{tok, c.Logprobs[i].Logprob, c.Top[i], true})
				}
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		return out, res
	}
	plainEng := New(target, Options{})
	want, _ := run(t, plainEng)
	plainEng.Close()
	if len(want) != n {
		t.Fatalf("plain: %d tokens", len(want))
	}
	for _, tc := range []struct {
		name string
		spec Speculator
	}{
		{"chain-same", &chainSpec{draft: same, k: 4}},
		{"chain-other", &chainSpec{draft: other, k: 4}},
		{"batch-same", &batchChainSpec{chainSpec: chainSpec{draft: same, k: 3}}},
		{"batch-other", &batchChainSpec{chainSpec: chainSpec{draft: other, k: 3}}},
		{"tree-same", &treeSpec{draft: same}},
		{"tree-other", &treeSpec{draft: other}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := New(target, Options{Speculator: tc.spec})
			got, res := run(t, e)
			e.Close()
			if res.Spec == nil || res.Spec.Steps == 0 || strings.HasSuffix(tc.name, "same") && res.Spec.Accepted == 0 {
				t.Fatalf("speculation did not run or accepted nothing: %+v", res.Spec)
			}
			if len(got) != n {
				t.Fatalf("%d tokens, want %d", len(got), n)
			}
			for i := range want {
				g, w := got[i], want[i]
				if g.tok != w.tok {
					t.Fatalf("token %d: %d, plain %d", i, g.tok, w.tok)
				}
				if d := math.Abs(float64(g.lp - w.lp)); d > 1e-5 {
					t.Fatalf("token %d: logprob %v, plain %v", i, g.lp, w.lp)
				}
				if len(g.top) != top {
					t.Fatalf("token %d: %d alternatives", i, len(g.top))
				}
				for j := range g.top {
					if g.top[j].Token != w.top[j].Token || math.Abs(float64(g.top[j].Logprob-w.top[j].Logprob)) > 1e-5 {
						t.Fatalf("token %d alternative %d: %+v, plain %+v", i, j, g.top[j], w.top[j])
					}
				}
			}
			if target.KV().UsedBlocks() != 0 {
				t.Fatalf("target KV not returned: %d blocks", target.KV().UsedBlocks())
			}
		})
	}
}
