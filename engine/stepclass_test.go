package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBudgetPricesTreeSteps: the adaptive budget prices a step that
// verifies a tree by the tree curve (stepClasses), not by plain steps of
// the same size. A draft identical to the target (every node accepted)
// pays when a tree step costs what a plain step of its size costs, and is
// never granted (nor probed) when tree steps cost 20x: no tree of at
// most 6 nodes can return that. Prices by Options.StepClassCost, so the
// decision is deterministic. Output equals plain decoding either way.
func TestBudgetPricesTreeSteps(t *testing.T) {
	cfg := genConfig()
	opts := LoadOptions{KVTokens: 2048, BlockSize: 4, Threads: 2, DisablePrefixCache: true}
	target := NewRandomModel(cfg, 31, opts)
	same := NewRandomModel(cfg, 31, opts)
	prompt := []int32{2, 3, 5, 7, 11, 13}
	want := manualGreedy(t, target, prompt, 40)
	for _, tc := range []struct {
		name      string
		treeScale float64
		drafts    bool
	}{{"tree like plain", 1, true}, {"tree 20x", 20, false}} {
		price := func(T int, tree, heads bool) time.Duration {
			c := float64(time.Millisecond) * (1 + 0.05*float64(T-1))
			if tree {
				c *= tc.treeScale
			}
			return time.Duration(c)
		}
		e := New(target, Options{Proposers: []Proposer{newModelChain(same, false)}, MaxDraft: 6, StepClassCost: price})
		got, res, err := collect(e, context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 40})
		e.Close()
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: output %v, plain %v", tc.name, got, want)
		}
		t.Logf("%s: %d nodes proposed, %d accepted, %d speculative steps", tc.name, res.Spec.Proposed, res.Spec.Accepted, res.Spec.Steps)
		if tc.drafts && res.Spec.Accepted < 20 {
			t.Fatalf("%s: only %d nodes accepted from a draft equal to the target", tc.name, res.Spec.Accepted)
		}
		if !tc.drafts && res.Spec.Proposed != 0 {
			t.Fatalf("%s: %d nodes proposed although a tree step costs 20 plain steps", tc.name, res.Spec.Proposed)
		}
	}
}

// TestStepCostClasses: a class curve is priced relative to the plain
// one-token step, falls back to its parent class while it has no timings,
// and keeps its own prices once timed.
func TestStepCostClasses(t *testing.T) {
	e := New(NewRandomModel(genConfig(), 3, LoadOptions{KVTokens: 256, BlockSize: 4}), Options{})
	defer e.Close()
	for range denseAt {
		e.cost.observe(1, 1e-3)
		e.cost.observe(8, 2e-3)
	}
	tree, th := e.costOf(true, false), e.costOf(true, true)
	if got := tree.at(8); !nearRel(got, 2e-3) {
		t.Fatalf("untimed tree class at(8) = %g, want the plain curve's 2e-3", got)
	}
	for range denseAt {
		tree.observe(8, 5e-3)
		tree.observe(16, 6e-3)
	}
	if got := tree.at(8); !nearRel(got, 5e-3) {
		t.Fatalf("tree at(8) = %g, want 5e-3", got)
	}
	if got := e.cost.at(8); !nearRel(got, 2e-3) {
		t.Fatalf("plain at(8) = %g after tree timings, want 2e-3", got)
	}
	if got := th.at(16); !nearRel(got, 6e-3) {
		t.Fatalf("untimed tree+heads class at(16) = %g, want the tree curve's 6e-3", got)
	}
	// the plain base doubles (a loaded machine): every class scales with it
	for range costWindowLen {
		e.cost.observe(1, 2e-3)
	}
	if got := tree.at(8); !nearRel(got, 10e-3) {
		t.Fatalf("tree at(8) = %g after the base doubled, want 10e-3", got)
	}
	// a tree+heads timing of one size below its dense ones
	for range denseAt {
		th.observe(4, 12e-3) // ratio 6
	}
	if got := th.at(4); !nearRel(got, 12e-3) {
		t.Fatalf("tree+heads at(4) = %g, want 12e-3", got)
	}
	if got := th.at(2); !nearRel(got, 12e-3) {
		t.Fatalf("tree+heads at(2) = %g, want its smallest size's 12e-3", got)
	}
}

// TestLimitProbes: a due probe covers at most max(probeMin,
// n/probeShare) of a proposer's n requests, the least recently probed
// first, and leaves other proposers' probes alone.
func TestLimitProbes(t *testing.T) {
	var cands []*specCand
	mk := func(prop int, last int64, probe bool) *specCand {
		sp := &specState{lastProbe: []int64{last}}
		c := &specCand{r: &request{spec: sp}, probe: probe, propID: prop}
		cands = append(cands, c)
		return c
	}
	var p1 []*specCand
	for i := range 16 {
		p1 = append(p1, mk(0, int64(100-i), true)) // request i last probed at step 100-i
	}
	p2 := []*specCand{mk(1, 5, true), mk(1, 1, true), mk(1, 9, false)}
	limitProbes(cands, 2)
	kept := 0
	for i, c := range p1 {
		if c.probe {
			kept++
			if i < 12 {
				t.Fatalf("request %d (probed at step %d) kept, a less recently probed one dropped", i, 100-i)
			}
		}
	}
	if kept != 16/probeShare {
		t.Fatalf("%d of 16 probes kept, want %d", kept, 16/probeShare)
	}
	if !p2[0].probe || !p2[1].probe || p2[2].probe {
		t.Fatalf("the other proposer's probes changed: %v %v %v", p2[0].probe, p2[1].probe, p2[2].probe)
	}
	// a dormant proposer (its last probe did not pay) probes probeMin
	// requests, the least recently probed ones
	dormant := &propState{dormant: true}
	for i, c := range p1 {
		c.probe = true
		c.r.spec.glob = []*propState{dormant}
		c.r.spec.lastProbe[0] = int64(100 - i)
	}
	limitProbes(p1, 1)
	kept = 0
	for i, c := range p1 {
		if c.probe {
			kept++
			if i < 16-probeMin {
				t.Fatalf("dormant: request %d (probed at step %d) kept, a less recently probed one dropped", i, 100-i)
			}
		}
	}
	if kept != probeMin {
		t.Fatalf("dormant: %d of 16 probes kept, want %d", kept, probeMin)
	}
}

// hiddenNever drafts token tok (which the test's target never chooses)
// and only for requests that bring the target's hidden row, as Medusa
// heads need it.
type hiddenNever struct {
	tok               int32
	calls, withHidden atomic.Int32
	mu                sync.Mutex
	perReq            map[RequestID]int // proposals with a hidden row
}

func (h *hiddenNever) NeedsHidden() bool { return true }
func (h *hiddenNever) Release(RequestID) {}

func (h *hiddenNever) Propose(_ context.Context, reqs []ProposeRequest) ([]Proposal, error) {
	h.calls.Add(1)
	out := make([]Proposal, len(reqs))
	for i, r := range reqs {
		if len(r.Hidden) == 0 {
			continue
		}
		h.withHidden.Add(1)
		h.mu.Lock()
		h.perReq[r.ID]++
		h.mu.Unlock()
		for d := range min(r.Budget, r.MaxDepth) {
			out[i].Tokens = append(out[i].Tokens, h.tok)
			out[i].Parents = append(out[i].Parents, int32(d)-1)
		}
	}
	return out, nil
}

// hiddenCounting counts the hidden rows a backend is asked for.
type hiddenCounting struct {
	Backend
	rows atomic.Int64
}

func (b *hiddenCounting) Forward(reqs []*ForwardRequest) error {
	for _, r := range reqs {
		if r.Hidden != nil {
			b.rows.Add(1)
		}
	}
	return b.Backend.Forward(reqs)
}

// TestHiddenFetchedForProbes: a hidden-row proposer whose drafts are never
// accepted goes dormant; its requests then fetch the hidden row only for the
// steps before a probe (not every step), and it is still probed, across
// requests, with the row it needs. Output equals plain decoding.
func TestHiddenFetchedForProbes(t *testing.T) {
	cfg := genConfig()
	opts := LoadOptions{KVTokens: 4096, BlockSize: 4, Threads: 2, DisablePrefixCache: true}
	var hb *hiddenCounting
	w := RandomWeights(cfg, 31)
	o := opts
	o.NewBackend = func(cfg Config, w *Weights, slots int) (Backend, error) {
		b, err := NewCPUBackend(cfg, w, slots, 2)
		if err != nil {
			return nil, err
		}
		hb = &hiddenCounting{Backend: b}
		return hb, nil
	}
	target, err := NewModel(cfg, w, o)
	if err != nil {
		t.Fatal(err)
	}
	var prompts, wants [][]int32
	seen := map[int32]bool{}
	for i := range 4 {
		prompts = append(prompts, []int32{int32(2 + i), 3, 5, 7})
		wants = append(wants, manualGreedy(t, target, prompts[i], 100))
		for _, tok := range wants[i] {
			seen[tok] = true
		}
	}
	p := &hiddenNever{perReq: map[RequestID]int{}}
	for seen[p.tok] {
		p.tok++
	}
	price := func(T int, tree, heads bool) time.Duration {
		return time.Duration(float64(time.Millisecond) * (1 + 0.05*float64(T-1)))
	}
	e := New(target, Options{Proposers: []Proposer{p}, MaxDraft: 4, StepClassCost: price})
	defer e.Close()
	steps := 0
	for i := range prompts {
		got, res, err := collect(e, context.Background(), GenerateRequest{Prompt: prompts[i], MaxTokens: 100})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(wants[i]) {
			t.Fatalf("request %d: output differs from plain decoding", i)
		}
		if res.Spec.Accepted != 0 {
			t.Fatalf("request %d: %d draft tokens accepted", i, res.Spec.Accepted)
		}
		steps += res.CompletionTokens
	}
	t.Logf("%d decode steps: %d hidden rows fetched, %d proposals with a hidden row (per request %v), %d Propose calls",
		steps, hb.rows.Load(), p.withHidden.Load(), p.perReq, p.calls.Load())
	for i := range prompts {
		// 100 steps each: the probes due after 8, 16 and 32 idle steps at least
		if n := p.perReq[RequestID(i+1)]; n < 3 {
			t.Fatalf("request %d: %d proposals with a hidden row: the dormant proposer is not probed", i+1, n)
		}
	}
	if hb.rows.Load()*4 > int64(steps) {
		t.Fatalf("%d hidden rows fetched in %d steps: fetched while dormant", hb.rows.Load(), steps)
	}
}

// TestDormantHiddenProposerUsesMultiStep: a lone greedy request whose
// hidden-row proposer does not pay decodes through the multi-step path
// (Options.DecodeSteps) between probes, like a draft-model request, and is
// still probed with its hidden row; output equals plain decoding.
func TestDormantHiddenProposerUsesMultiStep(t *testing.T) {
	cfg := genConfig()
	m := NewRandomModel(cfg, 61, LoadOptions{KVTokens: 4096, BlockSize: 4, Threads: 2, DisablePrefixCache: true})
	prompt := []int32{5, 7, 9, 11}
	want := manualGreedy(t, m, prompt, 150)
	p := &hiddenNever{perReq: map[RequestID]int{}}
	for slices.Contains(want, p.tok) {
		p.tok++
	}
	price := func(T int, tree, heads bool) time.Duration {
		return time.Duration(float64(time.Millisecond) * (1 + 0.05*float64(T-1)))
	}
	e := New(m, Options{Proposers: []Proposer{p}, DecodeSteps: 8, StepClassCost: price})
	defer e.Close()
	got, chunks := generateChunks(t, e, prompt, 150)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatal("output differs from plain decoding")
	}
	multi := 0
	for _, n := range chunks {
		if n > 1 {
			multi += n
		}
	}
	t.Logf("chunks %v; %d proposals with a hidden row", chunks, p.withHidden.Load())
	if multi < 75 {
		t.Fatalf("%d of 150 tokens decoded in multi-step chunks: chunks %v", multi, chunks)
	}
	if p.withHidden.Load() < 3 {
		t.Fatalf("%d proposals with a hidden row: the dormant proposer is not probed", p.withHidden.Load())
	}
}

// oracleAfter drafts the target's own continuation (accepted) but only
// claims confidence once the request has generated `after` tokens; before,
// its Confidence is 0, so the budget grants it nothing.
type oracleAfter struct {
	want  []int32
	after int
	first atomic.Int32 // tokens generated when it first proposed
}

func (o *oracleAfter) Confidence(id RequestID, depth int) float64 {
	if o.first.Load() < 0 {
		return 0
	}
	return 1
}
func (o *oracleAfter) Release(RequestID) {}
func (o *oracleAfter) Propose(_ context.Context, reqs []ProposeRequest) ([]Proposal, error) {
	out := make([]Proposal, len(reqs))
	for i, r := range reqs {
		g := len(r.Generated)
		if o.first.Load() == 0 {
			o.first.Store(int32(g))
		}
		for d := 0; d < min(r.Budget, r.MaxDepth) && g+d < len(o.want); d++ {
			out[i].Tokens = append(out[i].Tokens, o.want[g+d])
			out[i].Parents = append(out[i].Parents, int32(d)-1)
		}
	}
	return out, nil
}

// TestConfidentSourceNotShortcut: the budget's dormant shortcut
// (stillDormant) never skips a Confident proposer, whose estimate moves
// with every token: a source that becomes certain after 40 tokens drafts
// in the step it does, not at the next probe.
func TestConfidentSourceNotShortcut(t *testing.T) {
	cfg := genConfig()
	m := NewRandomModel(cfg, 61, LoadOptions{KVTokens: 4096, BlockSize: 4, Threads: 2, DisablePrefixCache: true})
	prompt := []int32{5, 7, 9, 11}
	want := manualGreedy(t, m, prompt, 120)
	o := &oracleAfter{want: want, after: 40}
	o.first.Store(-1)
	price := func(T int, tree, heads bool) time.Duration {
		return time.Duration(float64(time.Millisecond) * (1 + 0.05*float64(T-1)))
	}
	e := New(m, Options{Proposers: []Proposer{o}, MaxDraft: 8, StepClassCost: price})
	defer e.Close()
	var got []int32
	_, err := e.Generate(context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 120}, func(c Chunk) error {
		got = append(got, c.Tokens...)
		if len(got) >= o.after && o.first.Load() < 0 {
			o.first.Store(0) // confident from now on
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatal("output differs from plain decoding")
	}
	t.Logf("first proposal with %d tokens generated (confident from %d)", o.first.Load(), o.after)
	if f := o.first.Load(); f <= 0 || f > int32(o.after)+3 {
		t.Fatalf("first proposal with %d tokens generated, confident from %d: the shortcut skipped it", f, o.after)
	}
}
