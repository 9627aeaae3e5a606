package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// chainSpec is a minimal greedy draft-model speculator used to exercise the
// Speculator contract (the real one lives in package speculative).
type chainSpec struct {
	draft    *Model
	k        int
	released int
}

func (c *chainSpec) Step(s *SpecState) ([]int32, error) {
	d, _ := s.Data.(*Sequence)
	if d == nil {
		d = c.draft.NewSequence()
		s.Data = d
	}
	committed := s.Seq.Tokens()
	if d.Len() > len(committed) {
		d.Truncate(len(committed))
	}
	if d.Len() < len(committed) {
		if _, err := d.Forward(committed[d.Len():], nil, []int32{}); err != nil {
			return nil, err
		}
	}
	k := min(c.k, s.MaxNew-1)
	if k <= 0 {
		return s.PlainStep()
	}
	var prop []int32
	last := s.Pending
	for range k {
		lg, err := d.Forward([]int32{last}, nil, nil)
		if err != nil {
			return nil, err
		}
		last = Argmax(s.Probs(lg, prop))
		prop = append(prop, last)
	}
	parents := make([]int32, k)
	for i := range parents {
		parents[i] = int32(i) - 1
	}
	lg, err := s.ForwardTree(prop, parents)
	if err != nil {
		return nil, err
	}
	V := s.Target.Config.VocabSize
	i := 0
	for i < k && SampleProbs(s.Probs(lg[i*V:(i+1)*V], prop[:i]), s.Rand.Float64()) == prop[i] {
		i++
	}
	bonus := SampleProbs(s.Probs(lg[i*V:(i+1)*V], prop[:i]), s.Rand.Float64())
	path := make([]int, i)
	for j := range path {
		path[j] = j
	}
	if err := s.KeepTree(path); err != nil {
		return nil, err
	}
	s.Stats.Proposed += k
	s.Stats.Accepted += i
	return append(prop[:i:i], bonus), nil
}

func (c *chainSpec) Release(s *SpecState) {
	if d, ok := s.Data.(*Sequence); ok {
		d.Free()
		c.released++
	}
}

// TestSpeculatorHook: greedy speculation through the hook reproduces plain
// greedy decoding exactly, with a matching draft (everything accepted) and
// an unrelated one (mostly rejected); KV returns to baseline.
func TestSpeculatorHook(t *testing.T) {
	cfg := genConfig()
	target := NewRandomModel(cfg, 31, LoadOptions{KVTokens: 2048, BlockSize: 4, Threads: 2, DisablePrefixCache: true})
	same := NewRandomModel(cfg, 31, LoadOptions{KVTokens: 2048, BlockSize: 4, Threads: 2, DisablePrefixCache: true})
	other := NewRandomModel(cfg, 99, LoadOptions{KVTokens: 2048, BlockSize: 4, Threads: 2, DisablePrefixCache: true})
	prompt := []int32{2, 3, 5, 7, 11, 13}
	want := manualGreedy(t, target, prompt, 30)
	for name, d := range map[string]*Model{"same": same, "other": other} {
		spec := &chainSpec{draft: d, k: 4}
		e := New(target, Options{Speculator: spec})
		got, res, err := collect(e, context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 30})
		e.Close()
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: speculative %v\nplain       %v", name, got, want)
		}
		if res.Spec == nil || res.Spec.Steps == 0 || res.CompletionTokens != 30 {
			t.Fatalf("%s: result %+v spec %+v", name, res, res.Spec)
		}
		if name == "same" && res.Spec.Accepted != res.Spec.Proposed {
			t.Fatalf("identical draft: accepted %d of %d", res.Spec.Accepted, res.Spec.Proposed)
		}
		if spec.released != 1 || target.KV().UsedBlocks() != 0 || d.KV().UsedBlocks() != 0 {
			t.Fatalf("%s: released %d, target used %d, draft used %d", name, spec.released, target.KV().UsedBlocks(), d.KV().UsedBlocks())
		}
	}
}

// batchChainSpec verifies all requests' chains in one target forward.
type batchChainSpec struct {
	chainSpec
	maxBatch int
}

func (c *batchChainSpec) StepBatch(states []*SpecState) ([][]int32, []error) {
	c.maxBatch = max(c.maxBatch, len(states))
	out := make([][]int32, len(states))
	errs := make([]error, len(states))
	props := make([][]int32, len(states))
	var items []BatchItem
	var idx []int
	for i, s := range states {
		d, _ := s.Data.(*Sequence)
		if d == nil {
			d = c.draft.NewSequence()
			s.Data = d
		}
		committed := s.Seq.Tokens()
		d.Truncate(len(committed))
		if d.Len() < len(committed) {
			if _, err := d.Forward(committed[d.Len():], nil, []int32{}); err != nil {
				errs[i] = err
				continue
			}
		}
		k := min(c.k, s.MaxNew-1)
		last := s.Pending
		for range k {
			lg, err := d.Forward([]int32{last}, nil, nil)
			if err != nil {
				errs[i] = err
				break
			}
			last = Argmax(lg)
			props[i] = append(props[i], last)
		}
		par := make([]int32, len(props[i]))
		for j := range par {
			par[j] = int32(j) - 1
		}
		it, err := s.TreeBatchItem(props[i], par)
		if err != nil {
			errs[i] = err
			continue
		}
		items = append(items, it)
		idx = append(idx, i)
	}
	if err := states[0].Target.ForwardBatch(items); err != nil {
		for _, i := range idx {
			errs[i] = err
		}
		return out, errs
	}
	V := states[0].Target.Config.VocabSize
	for n, i := range idx {
		s, lg, prop := states[i], items[n].Logits, props[i]
		a := 0
		for a < len(prop) && Argmax(lg[a*V:(a+1)*V]) == prop[a] {
			a++
		}
		path := make([]int, a)
		for j := range path {
			path[j] = j
		}
		if errs[i] = s.KeepTree(path); errs[i] != nil {
			continue
		}
		s.Stats.Proposed += len(prop)
		s.Stats.Accepted += a
		out[i] = append(prop[:a:a], Argmax(lg[a*V:(a+1)*V]))
	}
	return out, errs
}

func TestBatchSpeculator(t *testing.T) {
	cfg := genConfig()
	target := NewRandomModel(cfg, 31, LoadOptions{KVTokens: 4096, BlockSize: 4, Threads: 2, DisablePrefixCache: true})
	draft := NewRandomModel(cfg, 31, LoadOptions{KVTokens: 4096, BlockSize: 4, Threads: 2, DisablePrefixCache: true})
	spec := &batchChainSpec{chainSpec: chainSpec{draft: draft, k: 3}}
	e := New(target, Options{Speculator: spec, AckWait: 20 * time.Millisecond})
	defer e.Close()
	prompts := [][]int32{{2, 3, 5}, {7, 11, 13, 17}, {19, 23}}
	got := make([][]int32, len(prompts))
	var wg sync.WaitGroup
	// a barrier on the first chunk lines the requests up for the same step.
	var barrier sync.WaitGroup
	barrier.Add(len(prompts))
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			_, err := e.Generate(context.Background(), GenerateRequest{Prompt: p, MaxTokens: 25}, func(c Chunk) error {
				got[i] = append(got[i], c.Tokens...)
				if first {
					first = false
					barrier.Done()
					barrier.Wait()
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for i, p := range prompts {
		if want := manualGreedy(t, target, p, 25); fmt.Sprint(got[i]) != fmt.Sprint(want) {
			t.Fatalf("request %d: %v, want %v", i, got[i], want)
		}
	}
	if spec.maxBatch < 2 {
		t.Fatalf("StepBatch never saw more than %d requests", spec.maxBatch)
	}
	if target.KV().UsedBlocks() != 0 || draft.KV().UsedBlocks() != 0 {
		t.Fatalf("KV not returned: target %d draft %d", target.KV().UsedBlocks(), draft.KV().UsedBlocks())
	}
}
