package engine

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// labelledOracle drafts the target's own greedy continuation (every node
// accepted) as a chain, plus one wrong child of the pending token (always
// rejected), and labels its nodes with several sources in one tree
// (Proposal.Sources): chain nodes at odd depths "odd", even depths "even",
// the wrong sibling "wrong". It logs every tree it proposed with the
// request's generated length then, which is the index in the output of the
// tree's first node.
type labelledOracle struct {
	want  []int32
	vocab int32
	mu    sync.Mutex
	log   []oracleTree
	cond  *sync.Cond
}

type oracleTree struct {
	g       int      // len(Generated): chain node d (0-based) is output token g+d
	chain   int      // chain nodes (all accepted by a greedy target)
	sources []string // per node
}

func newLabelledOracle(want []int32, vocab int) *labelledOracle {
	o := &labelledOracle{want: want, vocab: int32(vocab)}
	o.cond = sync.NewCond(&o.mu)
	return o
}

func (o *labelledOracle) Release(RequestID) {}

func (o *labelledOracle) Propose(_ context.Context, reqs []ProposeRequest) ([]Proposal, error) {
	out := make([]Proposal, len(reqs))
	for i, r := range reqs {
		g := len(r.Generated)
		p := Proposal{}
		n := min(r.Budget-1, r.MaxDepth, len(o.want)-g)
		for d := range max(n, 0) {
			p.Tokens = append(p.Tokens, o.want[g+d])
			p.Parents = append(p.Parents, int32(d)-1)
			src := "odd" // depth d+1
			if (d+1)%2 == 0 {
				src = "even"
			}
			p.Sources = append(p.Sources, src)
		}
		if g < len(o.want) {
			p.Tokens = append(p.Tokens, (o.want[g]+1)%o.vocab)
			p.Parents = append(p.Parents, -1)
			p.Sources = append(p.Sources, "wrong")
		}
		out[i] = p
		o.mu.Lock()
		o.log = append(o.log, oracleTree{g: g, chain: max(n, 0), sources: p.Sources})
		o.cond.Broadcast()
		o.mu.Unlock()
	}
	return out, nil
}

// waitProposed blocks until a tree was proposed at generated length >= g
// (false after the timeout).
func (o *labelledOracle) waitProposed(g int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	go func() { time.Sleep(timeout); o.mu.Lock(); o.cond.Broadcast(); o.mu.Unlock() }()
	o.mu.Lock()
	defer o.mu.Unlock()
	for {
		for _, t := range o.log {
			if t.g >= g {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		o.cond.Wait()
	}
}

// expected derives the request's speculative stats from the trees the
// oracle proposed and the number of tokens the caller took (took): a tree
// counts when the caller took at least one token of its step's output
// (output token g on), and its chain node d is an accepted draft token the
// caller took when g+d < took. Nodes of trees whose output the caller
// never read (a step run while the caller was still reading the one it
// stopped in) count nowhere.
func (o *labelledOracle) expected(took int) (SpecStats, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	st := SpecStats{BySource: map[string]SourceStats{}}
	dropped := 0
	for _, t := range o.log {
		if t.g >= took {
			dropped++
			continue
		}
		st.Steps++
		st.Proposed += len(t.sources)
		for i, src := range t.sources {
			s := st.BySource[src]
			s.Proposed++
			if i < t.chain && t.g+i < took {
				s.Accepted++
				st.Accepted++
				for len(st.AcceptedAt) <= i {
					st.AcceptedAt = append(st.AcceptedAt, 0)
				}
				st.AcceptedAt[i]++
			}
			st.BySource[src] = s
		}
	}
	return st, dropped
}

func specStatsString(s SpecStats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "steps %d proposed %d accepted %d at-depth %v", s.Steps, s.Proposed, s.Accepted, s.AcceptedAt)
	for _, src := range slices.Sorted(maps.Keys(s.BySource)) {
		fmt.Fprintf(&b, " %s %d/%d", src, s.BySource[src].Accepted, s.BySource[src].Proposed)
	}
	return b.String()
}

// TestSpecStatsCountWhatTheCallerTook: a request's speculative stats
// (Result.Spec: usage.speculative, the gateway's per-source counters and
// time saved) and the engine's (Stats.SpecProposed/SpecAccepted/
// AcceptedAt: /metrics) count the accepted draft tokens the caller took,
// not the ones verified past where it stopped: an end token inside an
// accepted path, a stop string inside one, and a step the scheduler ran
// ahead while the caller was reading the output it stopped in (maxAhead).
// The reference is derived from the trees the test's proposer proposed
// and the tokens the caller received (labelledOracle.expected).
func TestSpecStatsCountWhatTheCallerTook(t *testing.T) {
	tok, chars := charTokenizer(t)
	cfg := genConfig()
	opts := LoadOptions{KVTokens: 4096, BlockSize: 4, Threads: 2, DisablePrefixCache: true}
	target := NewRandomModel(cfg, 53, opts)
	target.Tokenizer = tok
	prompt := []int32{3, 1, 4, 1, 5, 9, 2, 6}
	const maxDraft = 6 // chain of 5 + the wrong sibling: outputs of 6 tokens (5 accepted + bonus)
	want := manualGreedy(t, target, prompt, 120)
	text := ""
	for _, id := range want {
		if int(id) >= len(chars) {
			t.Skipf("token %d outside the character tokenizer", id)
		}
		text += chars[id]
	}
	// output token k is the chain's node k-g of the step with tree at g:
	// steps start at g = 1, 7, 13, ... (token 0 comes from prefill).
	midPath := func(k int) bool { return k > 6 && (k-1)%6 >= 1 && (k-1)%6 <= 3 }
	check := func(t *testing.T, e *Engine, o *labelledOracle, res Result, received int, wantDropped bool) {
		t.Helper()
		st := e.Stats()
		if received != res.CompletionTokens {
			t.Fatalf("caller received %d tokens, CompletionTokens %d", received, res.CompletionTokens)
		}
		want, dropped := o.expected(res.CompletionTokens)
		if wantDropped && dropped == 0 {
			t.Fatalf("no step ran ahead of the caller: the case is not exercised")
		}
		if res.Spec == nil {
			t.Fatalf("no speculative stats")
		}
		got := *res.Spec
		got.Exact = false
		if specStatsString(got) != specStatsString(want) {
			t.Errorf("request stats (%d tokens taken, %d trees past them):\n got %s\nwant %s", res.CompletionTokens, dropped, specStatsString(got), specStatsString(want))
		}
		var eng SpecStats
		eng.Steps, eng.Proposed, eng.Accepted = got.Steps, int(st.SpecProposed), int(st.SpecAccepted)
		for d := 0; d < len(st.AcceptedAt) && st.AcceptedAt[d] > 0; d++ {
			eng.AcceptedAt = append(eng.AcceptedAt, int(st.AcceptedAt[d]))
		}
		w := want
		w.BySource = nil
		if specStatsString(eng) != specStatsString(w) {
			t.Errorf("engine stats:\n got %s\nwant %s", specStatsString(eng), specStatsString(w))
		}
	}

	t.Run("end-token-in-path", func(t *testing.T) {
		k := -1
		for i := range want {
			if midPath(i) && !slices.Contains(want[:i], want[i]) {
				k = i
				break
			}
		}
		if k < 0 {
			t.Skip("no token whose first occurrence is mid-path")
		}
		o := newLabelledOracle(want, cfg.VocabSize)
		e := New(target, Options{Proposers: []Proposer{o}, SpecBudget: maxDraft, MaxDraft: maxDraft, FixedDraft: true})
		defer e.Close()
		got, res, err := collect(e, context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 100, StopTokenIDs: []int32{want[k]}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Finish != FinishStop || res.CompletionTokens != k+1 || fmt.Sprint(got) != fmt.Sprint(want[:k]) {
			t.Fatalf("end token at %d: got %v (%d tokens, %s), want %v", k, got, res.CompletionTokens, res.Finish, want[:k])
		}
		check(t, e, o, res, k+1, false)
	})

	t.Run("stop-string-in-path-slow-caller", func(t *testing.T) {
		k := -1 // the stop string is text[k-1:k+1]: its first occurrence ends at token k
		for i := 1; i < len(want); i++ {
			if midPath(i) && !strings.Contains(text[:i], text[i-1:i+1]) {
				k = i
				break
			}
		}
		if k < 0 {
			t.Skip("no two-character string first completed mid-path")
		}
		o := newLabelledOracle(want, cfg.VocabSize)
		e := New(target, Options{Proposers: []Proposer{o}, SpecBudget: maxDraft, MaxDraft: maxDraft, FixedDraft: true})
		defer e.Close()
		var b strings.Builder
		received := 0
		res, err := e.Generate(context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 100, Stop: []string{text[k-1 : k+1]}},
			func(c Chunk) error {
				received += len(c.Tokens)
				b.WriteString(c.Text)
				// a slow caller: the scheduler runs the next step while it
				// is still emitting this output (maxAhead)
				if !o.waitProposed(received, 10*time.Second) {
					return fmt.Errorf("no step ran while the caller emitted %d tokens", received)
				}
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		// the stop string's last token is counted (CompletionTokens) but not emitted as text
		if res.Finish != FinishStop || b.String() != text[:k-1] {
			t.Fatalf("stop %q at token %d: got %q (%s), want %q", text[k-1:k+1], k, b.String(), res.Finish, text[:k-1])
		}
		check(t, e, o, res, k+1, true)
	})
}

// treeNodeBackend counts the draft-tree nodes the target's backend
// forwarded (a tree request's tokens but its root, the pending token).
type treeNodeBackend struct {
	Backend
	nodes atomic.Int64
}

func (b *treeNodeBackend) Forward(reqs []*ForwardRequest) error {
	for _, r := range reqs {
		if r.Parents != nil {
			b.nodes.Add(int64(len(r.Tokens) - 1))
		}
	}
	return b.Backend.Forward(reqs)
}

// nodeCounter counts the nodes a proposer's trees hold.
type nodeCounter struct {
	Proposer
	nodes atomic.Int64
}

func (c *nodeCounter) Propose(ctx context.Context, reqs []ProposeRequest) ([]Proposal, error) {
	out, err := c.Proposer.Propose(ctx, reqs)
	for _, p := range out {
		c.nodes.Add(int64(p.Len()))
	}
	return out, err
}

// TestSpecBudgetCountsVerifiedTrees: Stats.SpecBudgetUsed
// (specgate_spec_budget_tokens_total, "granted and verified") counts the
// draft nodes of the trees the target verified, not those of trees a full
// KV pool dropped from their step (the forward retried without them). The
// reference is the tree nodes the target's backend forwarded.
func TestSpecBudgetCountsVerifiedTrees(t *testing.T) {
	cfg := genConfig()
	var tb *treeNodeBackend
	w := RandomWeights(cfg, 71)
	m, err := NewModel(cfg, w, LoadOptions{KVTokens: 360, BlockSize: 4, Threads: 1, DisablePrefixCache: true,
		NewBackend: func(cfg Config, w *Weights, slots int) (Backend, error) {
			b, err := NewCPUBackend(cfg, w, slots, 1)
			if err != nil {
				return nil, err
			}
			tb = &treeNodeBackend{Backend: b}
			return tb, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	draft := NewRandomModel(cfg, 72, LoadOptions{KVTokens: 8192, BlockSize: 4, Threads: 1, DisablePrefixCache: true})
	r := rand.New(rand.NewPCG(9, 9))
	mc := &nodeCounter{Proposer: newModelChain(draft, true)}
	// StepCost: the budget's prices are fixed, so no calibration forward
	// (which forwards trees of its own) reaches the backend
	e := New(m, Options{FixedDraft: true, MaxDraft: 4, StepCost: func(n int) time.Duration { return time.Millisecond }})
	var wg sync.WaitGroup
	for i := range 24 {
		p := randTokens(r, 5+r.IntN(20), cfg.VocabSize)
		maxTok := 10 + r.IntN(30)
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := GenerateRequest{Prompt: p, MaxTokens: maxTok, Proposers: []Proposer{mc}, Sampling: SamplingParams{Temperature: 0.7}}
			if toks, _, err := collect(e, context.Background(), req); err != nil || len(toks) != maxTok {
				t.Errorf("request %d: %d of %d tokens, %v", i, len(toks), maxTok, err)
			}
		}()
	}
	wg.Wait()
	st := e.Stats()
	e.Close()
	verified := tb.nodes.Load()
	t.Logf("proposed %d nodes, backend verified %d, budget used %d, preemptions %d", mc.nodes.Load(), verified, st.SpecBudgetUsed, st.Preemptions)
	if mc.nodes.Load() == verified {
		t.Fatalf("every proposed tree was verified (%d nodes): no tree was dropped under KV pressure, the case is not exercised", verified)
	}
	if st.SpecBudgetUsed != verified {
		t.Fatalf("SpecBudgetUsed %d, tree nodes the target verified %d", st.SpecBudgetUsed, verified)
	}
}
