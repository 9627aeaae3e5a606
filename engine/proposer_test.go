package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// modelChain is a minimal greedy draft-model proposer for engine tests
// (the real one lives in package speculative): a chain of the draft
// model's argmax tokens, one draft sequence per request, drafted one
// request at a time. tree adds a second child (the draft's runner-up) at
// depth 1, so that trees with several children are verified too.
type modelChain struct {
	draft    *Model
	tree     bool
	mu       sync.Mutex
	seqs     map[RequestID]*Sequence
	released atomic.Int32
	calls    atomic.Int32
	maxReqs  atomic.Int32
}

func newModelChain(d *Model, tree bool) *modelChain {
	return &modelChain{draft: d, tree: tree, seqs: map[RequestID]*Sequence{}}
}

func (c *modelChain) Propose(ctx context.Context, reqs []ProposeRequest) ([]Proposal, error) {
	c.calls.Add(1)
	if n := int32(len(reqs)); n > c.maxReqs.Load() {
		c.maxReqs.Store(n)
	}
	out := make([]Proposal, len(reqs))
	for i, r := range reqs {
		c.mu.Lock()
		d := c.seqs[r.ID]
		if d == nil {
			d = c.draft.NewSequence()
			c.seqs[r.ID] = d
		}
		c.mu.Unlock()
		want := append(append([]int32(nil), r.Prompt...), r.Generated...)
		have := d.Tokens()
		lcp := 0
		for lcp < len(have) && lcp < len(want)-1 && have[lcp] == want[lcp] {
			lcp++
		}
		d.Truncate(lcp)
		lg, err := d.Forward(want[lcp:], nil, []int32{int32(len(want) - lcp - 1)})
		if err != nil {
			return nil, err
		}
		p := Proposal{Source: "test-draft"}
		for len(p.Tokens) < r.Budget && len(p.Tokens) < r.MaxDepth {
			t := Argmax(lg)
			p.Tokens = append(p.Tokens, t)
			p.Parents = append(p.Parents, int32(len(p.Tokens))-2)
			if lg, err = d.Forward([]int32{t}, nil, nil); err != nil {
				return nil, err
			}
		}
		if c.tree && len(p.Tokens) >= 1 && len(p.Tokens) < r.Budget {
			// a second child of the pending token: the draft's token after
			// the pending token + 1 (deliberately often wrong).
			p.Tokens = append(p.Tokens, (p.Tokens[0]+1)%int32(c.draft.Config.VocabSize))
			p.Parents = append(p.Parents, -1)
		}
		out[i] = p
	}
	return out, nil
}

func (c *modelChain) Release(id RequestID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.seqs[id]; d != nil {
		d.Free()
		delete(c.seqs, id)
	}
	c.released.Add(1)
}

// countingBackend counts Forward calls and remembers whether a call held
// both a tree (a request with parents) and a plain one-token decode.
type countingBackend struct {
	Backend
	calls, mixed, trees, maxTrees atomic.Int64
}

func (b *countingBackend) Forward(reqs []*ForwardRequest) error {
	b.calls.Add(1)
	tree, plain := 0, false
	for _, r := range reqs {
		if r.Parents != nil {
			tree++
		} else if len(r.Tokens) == 1 {
			plain = true
		}
	}
	b.trees.Add(int64(tree))
	if int64(tree) > b.maxTrees.Load() {
		b.maxTrees.Store(int64(tree))
	}
	if tree > 0 && plain {
		b.mixed.Add(1)
	}
	return b.Backend.Forward(reqs)
}

func countingModel(t *testing.T, cfg Config, seed uint64, kv int) (*Model, *countingBackend) {
	t.Helper()
	var cb *countingBackend
	w := RandomWeights(cfg, seed)
	m, err := NewModel(cfg, w, LoadOptions{KVTokens: kv, BlockSize: 4, Threads: 2, DisablePrefixCache: true,
		NewBackend: func(cfg Config, w *Weights, slots int) (Backend, error) {
			b, err := NewCPUBackend(cfg, w, slots, 2)
			if err != nil {
				return nil, err
			}
			cb = &countingBackend{Backend: b}
			return cb, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return m, cb
}

// TestProposerGreedyLossless: greedy speculation through proposers
// reproduces plain greedy decoding exactly, with a draft identical to the
// target (everything accepted), an unrelated one (mostly rejected) and a
// tree with a wrong sibling; KV and proposer state return to baseline.
func TestProposerGreedyLossless(t *testing.T) {
	cfg := genConfig()
	opts := LoadOptions{KVTokens: 2048, BlockSize: 4, Threads: 2, DisablePrefixCache: true}
	target := NewRandomModel(cfg, 31, opts)
	same := NewRandomModel(cfg, 31, opts)
	other := NewRandomModel(cfg, 99, opts)
	prompt := []int32{2, 3, 5, 7, 11, 13}
	want := manualGreedy(t, target, prompt, 30)
	for _, tc := range []struct {
		name string
		d    *Model
		tree bool
	}{{"same", same, false}, {"other", other, false}, {"same-tree", same, true}, {"other-tree", other, true}} {
		p := newModelChain(tc.d, tc.tree)
		e := New(target, Options{Proposers: []Proposer{p}, SpecBudget: 8, MaxDraft: 6, FixedDraft: true})
		got, res, err := collect(e, context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 30})
		st := e.Stats()
		e.Close()
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: speculative %v\nplain       %v", tc.name, got, want)
		}
		if res.Spec == nil || res.CompletionTokens != 30 || !res.Spec.Exact {
			t.Fatalf("%s: result %+v spec %+v", tc.name, res, res.Spec)
		}
		if tc.d == same && (res.Spec.Accepted == 0 || res.Spec.Steps == 0) {
			t.Fatalf("%s: identical draft accepted %d of %d in %d steps", tc.name, res.Spec.Accepted, res.Spec.Proposed, res.Spec.Steps)
		}
		if tc.d == same && !tc.tree && res.Spec.Accepted != res.Spec.Proposed {
			t.Fatalf("%s: identical chain accepted %d of %d", tc.name, res.Spec.Accepted, res.Spec.Proposed)
		}
		if src := res.Spec.BySource["test-draft"]; src.Proposed != res.Spec.Proposed || src.Accepted != res.Spec.Accepted {
			t.Fatalf("%s: by source %+v, totals %d/%d", tc.name, res.Spec.BySource, res.Spec.Accepted, res.Spec.Proposed)
		}
		if st.SpecAccepted != int64(res.Spec.Accepted) || st.SpecProposed != int64(res.Spec.Proposed) {
			t.Fatalf("%s: engine stats %d/%d, request %d/%d", tc.name, st.SpecAccepted, st.SpecProposed, res.Spec.Accepted, res.Spec.Proposed)
		}
		if p.released.Load() != 1 || target.KV().UsedBlocks() != 0 || tc.d.KV().UsedBlocks() != 0 {
			t.Fatalf("%s: released %d, target used %d, draft used %d", tc.name, p.released.Load(), target.KV().UsedBlocks(), tc.d.KV().UsedBlocks())
		}
	}
}

// TestOneForwardPerStep: with N concurrent speculative requests and plain
// requests beside them, every scheduler step makes one backend forward
// (counted at the backend), each proposer is called once per step for all
// its requests, and trees share forwards with plain decodes.
func TestOneForwardPerStep(t *testing.T) {
	cfg := genConfig()
	for _, n := range []int{1, 4, 16} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			target, cb := countingModel(t, cfg, 31, 8192)
			draft := NewRandomModel(cfg, 31, LoadOptions{KVTokens: 8192, BlockSize: 4, Threads: 2, DisablePrefixCache: true})
			p := newModelChain(draft, false)
			e := New(target, Options{Proposers: []Proposer{p}, SpecBudget: 64, MaxDraft: 4, FixedDraft: true})
			defer e.Close()
			// warm-up: the engine times a few forwards before its first budget.
			if _, _, err := collect(e, context.Background(), GenerateRequest{Prompt: []int32{1, 2}, MaxTokens: 3}); err != nil {
				t.Fatal(err)
			}
			calls0, steps0, spec0 := cb.calls.Load(), e.Stats().Steps, e.Stats().SpecSteps
			p.calls.Store(0)
			total := n + 2 // two plain requests beside the speculative ones
			reqs := make([]GenerateRequest, total)
			for i := range reqs {
				reqs[i] = GenerateRequest{Prompt: []int32{int32(3 + i), int32(5 + 2*i), 7}, MaxTokens: 24, NoSpeculation: i >= n}
			}
			outs, errs := generateTogether(context.Background(), e, reqs)
			calls, steps, specSteps := cb.calls.Load()-calls0, e.Stats().Steps-steps0, e.Stats().SpecSteps-spec0
			for i := range total {
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
				prompt := []int32{int32(3 + i), int32(5 + 2*i), 7}
				if want := manualGreedy(t, target, prompt, 24); fmt.Sprint(outs[i]) != fmt.Sprint(want) {
					t.Fatalf("request %d: %v, want %v", i, outs[i], want)
				}
			}
			if calls > steps {
				t.Fatalf("%d backend forwards in %d scheduler steps", calls, steps)
			}
			if int64(p.calls.Load()) > steps {
				t.Fatalf("%d Propose calls in %d steps", p.calls.Load(), steps)
			}
			if n > 1 && int(p.maxReqs.Load()) < 2 {
				t.Fatalf("Propose never saw more than %d requests", p.maxReqs.Load())
			}
			if specSteps == 0 || cb.mixed.Load() == 0 {
				t.Fatalf("no verified tree (%d) or no forward mixing trees and plain decodes (%d)", specSteps, cb.mixed.Load())
			}
			if cb.maxTrees.Load() != int64(n) {
				t.Fatalf("at most %d trees in one forward for %d speculative requests", cb.maxTrees.Load(), n)
			}
			t.Logf("n=%d: %d forwards, %d steps, %d verified trees (at most %d in one forward), %d Propose calls (max %d requests)",
				n, calls, steps, specSteps, cb.maxTrees.Load(), p.calls.Load(), p.maxReqs.Load())
		})
	}
}

// TestSpecLogprobs: a speculative request reports the same logprobs and
// top alternatives as plain decoding.
func TestSpecLogprobs(t *testing.T) {
	cfg := genConfig()
	opts := LoadOptions{KVTokens: 2048, BlockSize: 4, Threads: 2, DisablePrefixCache: true}
	target := NewRandomModel(cfg, 41, opts)
	same := NewRandomModel(cfg, 41, opts)
	prompt := []int32{2, 3, 5, 7, 11}
	const n, top = 23, 4
	type tokLP struct {
		tok int32
		lp  float32
		top []TokenLogprob
	}
	run := func(e *Engine) []tokLP {
		var out []tokLP
		_, err := e.Generate(context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: n, Sampling: SamplingParams{Logprobs: top}},
			func(c Chunk) error {
				if len(c.Logprobs) != len(c.Tokens) || len(c.Top) != len(c.Tokens) {
					return fmt.Errorf("chunk with %d tokens, %d logprobs, %d top lists", len(c.Tokens), len(c.Logprobs), len(c.Top))
				}
				for i, tok := range c.Tokens {
					out = append(out, tokLP{tok, c.Logprobs[i].Logprob, c.Top[i]})
				}
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	pe := New(target, Options{})
	want := run(pe)
	pe.Close()
	e := New(target, Options{Proposers: []Proposer{newModelChain(same, true)}, FixedDraft: true})
	got := run(e)
	e.Close()
	if len(got) != n || len(want) != n {
		t.Fatalf("%d and %d tokens", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.tok != w.tok || math.Abs(float64(g.lp-w.lp)) > 1e-5 {
			t.Fatalf("token %d: %d (%v), plain %d (%v)", i, g.tok, g.lp, w.tok, w.lp)
		}
		for j := range g.top {
			if g.top[j].Token != w.top[j].Token || math.Abs(float64(g.top[j].Logprob-w.top[j].Logprob)) > 1e-5 {
				t.Fatalf("token %d alternative %d: %+v, plain %+v", i, j, g.top[j], w.top[j])
			}
		}
	}
}

// TestPreemptionNoLivelock: more long requests than the KV pool holds at
// once all complete, with the plain greedy output, through preemption.
func TestPreemptionNoLivelock(t *testing.T) {
	cfg := genConfig()
	// 7 requests x (4 + 100) tokens need ~182 blocks of 4; the pool has 64.
	m := NewRandomModel(cfg, 51, LoadOptions{KVTokens: 256, BlockSize: 4, Threads: 2, DisablePrefixCache: true})
	e := New(m, Options{})
	defer e.Close()
	const n, maxTok = 7, 100
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// all requests hold KV at once (a barrier at the first token), so their
	// growth overflows the pool whatever the machine's scheduling.
	reqs := make([]GenerateRequest, n)
	for i := range reqs {
		reqs[i] = GenerateRequest{Prompt: []int32{int32(1 + i), 4, 9, 16}, MaxTokens: maxTok}
	}
	outs, errs := generateTogether(ctx, e, reqs)
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if want := manualGreedy(t, m, []int32{int32(1 + i), 4, 9, 16}, maxTok); fmt.Sprint(outs[i]) != fmt.Sprint(want) {
			t.Fatalf("request %d differs from plain decoding after preemption", i)
		}
	}
	if st := e.Stats(); st.Preemptions == 0 {
		t.Fatalf("no preemption happened (pool too large for the test): %+v", st)
	}
	if u := m.KV().UsedBlocks(); u != 0 {
		t.Fatalf("%d blocks still used", u)
	}
	// a prompt larger than the whole pool fails at once with ErrKVExhausted.
	big := make([]int32, 300)
	for i := range big {
		big[i] = int32(1 + i%50)
	}
	if _, _, err := collect(e, ctx, GenerateRequest{Prompt: big, MaxTokens: 1}); err == nil || !errors.Is(err, ErrKVExhausted) {
		t.Fatalf("prompt larger than the pool: %v, want ErrKVExhausted", err)
	}
}

// neverPays drafts a token that the target never chooses, so the adaptive
// budget stops granting it drafts.
type neverPays struct{ calls atomic.Int32 }

func (p *neverPays) Propose(_ context.Context, reqs []ProposeRequest) ([]Proposal, error) {
	p.calls.Add(1)
	out := make([]Proposal, len(reqs))
	for i, r := range reqs {
		for d := range min(r.Budget, r.MaxDepth) {
			out[i].Tokens = append(out[i].Tokens, 0)
			out[i].Parents = append(out[i].Parents, int32(d)-1)
		}
		out[i].Source = "never"
	}
	return out, nil
}
func (p *neverPays) Release(RequestID) {}

// TestDormantSpeculationUsesMultiStep: a lone greedy request whose drafts
// the adaptive budget has stopped granting decodes through the backend's
// multi-step path (Options.DecodeSteps) until a probe is due, with plain
// decoding's output.
func TestDormantSpeculationUsesMultiStep(t *testing.T) {
	cfg := genConfig()
	m := NewRandomModel(cfg, 61, LoadOptions{KVTokens: 4096, BlockSize: 4, Threads: 2, DisablePrefixCache: true})
	prompt := []int32{5, 7, 9, 11}
	want := manualGreedy(t, m, prompt, 120)
	if slices.Contains(want, 0) {
		t.Skip("the target chooses token 0: the never-paying draft would be accepted")
	}
	p := &neverPays{}
	e := New(m, Options{Proposers: []Proposer{p}, DecodeSteps: 8})
	defer e.Close()
	got, chunks := generateChunks(t, e, prompt, 120)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("output differs from plain decoding")
	}
	multi := 0
	for _, n := range chunks {
		if n > 1 {
			multi++
		}
	}
	if multi == 0 {
		t.Fatalf("no multi-step chunk once drafting stopped paying: chunks %v, %d Propose calls", chunks, p.calls.Load())
	}
	t.Logf("chunks %v; %d Propose calls", chunks, p.calls.Load())
}

// generateTogether runs reqs concurrently on e and holds every request at
// its first token until all have one (so that they share the engine's
// steps from then on, whatever the machine's scheduling). It returns each
// request's tokens and error.
func generateTogether(ctx context.Context, e *Engine, reqs []GenerateRequest) ([][]int32, []error) {
	outs := make([][]int32, len(reqs))
	errs := make([]error, len(reqs))
	var wg, barrier sync.WaitGroup
	barrier.Add(len(reqs))
	for i, req := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			_, errs[i] = e.Generate(ctx, req, func(c Chunk) error {
				outs[i] = append(outs[i], c.Tokens...)
				if first {
					first = false
					barrier.Done()
					barrier.Wait()
				}
				return nil
			})
			if first { // failed before its first token: release the others
				barrier.Done()
			}
		}()
	}
	wg.Wait()
	return outs, errs
}

// generateChunks runs one greedy request (no logprobs) of maxTokens and
// returns its tokens and the size of each chunk the engine streamed.
func generateChunks(t *testing.T, e *Engine, prompt []int32, maxTokens int) (got []int32, chunks []int) {
	t.Helper()
	_, err := e.Generate(context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: maxTokens, Sampling: SamplingParams{SkipLogprobs: true}},
		func(c Chunk) error {
			got = append(got, c.Tokens...)
			chunks = append(chunks, len(c.Tokens))
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return got, chunks
}
