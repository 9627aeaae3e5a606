package speculative

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/specgate/specgate/engine"
)

func toks(xs ...int32) []int32 { return xs }

func TestCorpusMatches(t *testing.T) {
	c := newCorpus(8)
	c.extend(1, toks(1, 2, 3, 4, 5, 2, 3, 9))
	c.extend(2, toks(7, 2, 3, 4, 6))
	ms := c.matches(toks(0, 1, 2, 3), 10, 0, nil)
	// (2,3) occurs at doc1 off 2 (preceded by 1: length 3), doc1 off 6 (preceded by 5: 2), doc2 off 2 (preceded by 7: 2).
	got := fmt.Sprint(ms)
	want := fmt.Sprint([]match{{1, 2, 3, 0}, {1, 6, 2, 0}, {2, 2, 2, 0}})
	if got != want {
		t.Fatalf("matches = %s, want %s", got, want)
	}
	// maxMatch caps the backward extension.
	if ms := c.matches(toks(1, 2, 3), 2, 0, nil); ms[0].length != 2 {
		t.Fatalf("maxMatch 2: length %d", ms[0].length)
	}
	// an occurrence at the end of its document has no continuation.
	if ms := c.matches(toks(4, 6), 10, 0, nil); len(ms) != 0 {
		t.Fatalf("end-of-doc occurrence returned: %v", ms)
	}
	c.remove(1)
	if ms := c.matches(toks(1, 2, 3), 10, 0, nil); len(ms) != 1 || ms[0].doc != 2 {
		t.Fatalf("after remove: %v", ms)
	}
	if c.tokens != 5 || len(c.docs) != 1 {
		t.Fatalf("after remove: %d tokens, %d docs", c.tokens, len(c.docs))
	}
	c.remove(2)
	if len(c.index) != 0 || c.tokens != 0 {
		t.Fatalf("empty corpus keeps %d index keys, %d tokens", len(c.index), c.tokens)
	}
}

func TestCorpusMaxRefs(t *testing.T) {
	c := newCorpus(3)
	for i := range 10 {
		c.extend(uint32(i), toks(5, 6, int32(100+i)))
	}
	ms := c.matches(toks(5, 6), 10, 0, nil)
	if len(ms) != 3 || ms[0].doc != 7 || ms[2].doc != 9 {
		t.Fatalf("want the 3 most recent occurrences (docs 7..9), got %v", ms)
	}
}

func TestTrieBest(t *testing.T) {
	tr := newTrie()
	tr.add(toks(1, 2, 3), 1, 10, 0)
	tr.add(toks(1, 2, 4), 1, 10, 1)
	tr.add(toks(1, 2, 3), 1, 10, 0)
	tr.add(toks(7), 1, 10, 1)
	// scores: 1: 3/4; 2: 3/4; 3: 3/4*2/3 = .5; 4: .25; 7: .25
	tk, par, src, sc := tr.best(10, 0.3)
	if fmt.Sprint(tk, par, src) != "[1 2 3] [-1 0 1] [0 0 0]" {
		t.Fatalf("best(10, 0.3) = %v %v %v %v", tk, par, src, sc)
	}
	// ties (4 and 7 at .25): the shallower first.
	tk, par, _, _ = tr.best(4, 0.01)
	if fmt.Sprint(tk, par) != "[1 2 3 7] [-1 0 1 -1]" {
		t.Fatalf("best(4, 0.01) = %v %v", tk, par)
	}
	// depth cap at add.
	tr = newTrie()
	tr.add(toks(1, 2, 3, 4), 1, 2, 0)
	if tk, _, _, _ := tr.best(10, 0.1); len(tk) != 2 {
		t.Fatalf("maxDepth 2: %v", tk)
	}
}

// propose1 runs one Propose call for a single request.
func propose1(t *testing.T, p engine.Proposer, r engine.ProposeRequest) engine.Proposal {
	t.Helper()
	if r.Budget == 0 {
		r.Budget = 32
	}
	if r.MaxDepth == 0 {
		r.MaxDepth = 64
	}
	out, err := p.Propose(context.Background(), []engine.ProposeRequest{r})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 {
		t.Fatalf("%d proposals for 1 request", len(out))
	}
	pr := out[0]
	if len(pr.Parents) != len(pr.Tokens) || len(pr.Sources) != len(pr.Tokens) {
		t.Fatalf("malformed proposal %+v", pr)
	}
	for i, par := range pr.Parents {
		if par < -1 || int(par) >= i {
			t.Fatalf("node %d parent %d", i, par)
		}
	}
	return pr
}

func TestSuffixPromptLookup(t *testing.T) {
	s, err := NewSuffix(SuffixConfig{Alpha: 4})
	if err != nil {
		t.Fatal(err)
	}
	prompt := toks(10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20)
	// generated so far ends with 12, 13: the prompt continues 14, 15, ...
	p := propose1(t, s, engine.ProposeRequest{ID: 1, Tenant: "a", Prompt: prompt, Generated: toks(11, 12, 13)})
	// (the context is prompt + generated as one text: after 20 it goes on with 11, 12, 13)
	if len(p.Tokens) < 7 || !slices.Equal(p.Tokens[:7], toks(14, 15, 16, 17, 18, 19, 20)) || p.Sources[0] != SourcePrompt {
		t.Fatalf("prompt lookup: %v from %v", p.Tokens, p.Sources)
	}
	// the depth follows the match length: Alpha*3 = 12 > 7 available; with Alpha 1 only 3.
	s1, _ := NewSuffix(SuffixConfig{Alpha: 1})
	p = propose1(t, s1, engine.ProposeRequest{ID: 1, Prompt: prompt, Generated: toks(11, 12, 13)})
	if !slices.Equal(p.Tokens, toks(14, 15, 16)) {
		t.Fatalf("alpha 1, match 3: %v", p.Tokens)
	}
	// MaxDepth and Budget bound it.
	p = propose1(t, s, engine.ProposeRequest{ID: 2, Prompt: prompt, Generated: toks(11, 12, 13), MaxDepth: 2})
	if len(p.Tokens) != 2 {
		t.Fatalf("MaxDepth 2: %v", p.Tokens)
	}
	// no match: nothing.
	p = propose1(t, s, engine.ProposeRequest{ID: 3, Prompt: prompt, Generated: toks(40, 41)})
	if len(p.Tokens) != 0 {
		t.Fatalf("no match proposed %v", p.Tokens)
	}
	s.Release(1)
	s.Release(2)
	s.Release(3)
	if len(s.reqs) != 0 {
		t.Fatalf("released requests kept: %d", len(s.reqs))
	}
}

func TestSuffixTenantAnswers(t *testing.T) {
	s, err := NewSuffix(SuffixConfig{})
	if err != nil {
		t.Fatal(err)
	}
	answer := toks(50, 51, 52, 53, 54, 55, 56, 57)
	s.Finished(1, "alice", toks(1, 2), answer)
	s.Finished(2, "alice", toks(1, 2), toks(50, 51, 52, 60, 61))
	s.Finished(3, "alice", toks(1, 2), toks(50, 51, 52, 53, 54, 70))
	// a new request of alice's that has generated 50, 51: the continuation
	// tree has 52 (3/3), then 53 (2/3) or 60 (1/3), ...
	p := propose1(t, s, engine.ProposeRequest{ID: 9, Tenant: "alice", Prompt: toks(1, 2, 3), Generated: toks(50, 51)})
	if len(p.Tokens) == 0 || p.Tokens[0] != 52 || p.Sources[0] != SourceSuffix {
		t.Fatalf("alice: %v %v", p.Tokens, p.Sources)
	}
	if !slices.Contains(p.Tokens, 53) || !slices.Contains(p.Tokens, 60) {
		t.Fatalf("alice: want both branches 53 and 60 (score 2/3 and 1/3 >= 0.2): %v", p.Tokens)
	}
	if slices.Contains(p.Tokens, 56) {
		t.Fatalf("alice: node 56 is at depth 5 > alpha*match = 4: %v", p.Tokens)
	}
	// TestSuffixTenantIsolation covers other tenants.
}

// TestSuffixTenantIsolation: a tenant never receives drafts built from
// another tenant's text, however well it would match.
func TestSuffixTenantIsolation(t *testing.T) {
	s, err := NewSuffix(SuffixConfig{})
	if err != nil {
		t.Fatal(err)
	}
	secret := toks(80, 81, 82, 83, 84, 85, 86, 87, 88, 89)
	s.Finished(1, "alice", toks(1), secret)
	for id, tenant := range []string{"bob", "", "alice "} {
		for cut := 2; cut < len(secret); cut++ {
			p := propose1(t, s, engine.ProposeRequest{ID: engine.RequestID(100 + id*100 + cut), Tenant: tenant,
				Prompt: toks(1, 2), Generated: secret[:cut]})
			for _, tok := range p.Tokens {
				if tok >= 80 && tok <= 89 {
					t.Fatalf("tenant %q received alice's token %d: %v", tenant, tok, p.Tokens)
				}
			}
		}
	}
	p := propose1(t, s, engine.ProposeRequest{ID: 1000, Tenant: "alice", Prompt: toks(1, 2), Generated: secret[:3]})
	if len(p.Tokens) == 0 || p.Tokens[0] != 83 {
		t.Fatalf("alice does not get her own answer: %v", p.Tokens)
	}
	// bob's own answer with the same opening drafts bob's continuation only.
	s.Finished(2, "bob", toks(1), toks(80, 81, 82, 99, 98, 97))
	p = propose1(t, s, engine.ProposeRequest{ID: 1001, Tenant: "bob", Prompt: toks(1, 2), Generated: toks(80, 81, 82)})
	if !slices.Equal(p.Tokens, toks(99, 98, 97)) {
		t.Fatalf("bob: %v, want his own continuation [99 98 97]", p.Tokens)
	}
}

// TestSuffixMemoryBound: stored answers stay within MaxBytes, the policy
// evicts (LRU: the oldest answers), and evicted text is no longer drafted.
func TestSuffixMemoryBound(t *testing.T) {
	const perAnswer = 100
	s, err := NewSuffix(SuffixConfig{MaxBytes: 10 * perAnswer * SuffixBytesPerToken, Policy: "lru"})
	if err != nil {
		t.Fatal(err)
	}
	answer := func(i int) []int32 {
		a := make([]int32, perAnswer)
		for j := range a {
			a[j] = int32(1000*i + j)
		}
		return a
	}
	for i := range 25 {
		s.Finished(engine.RequestID(i), fmt.Sprintf("t%d", i%3), nil, answer(i))
		if st := s.Stats(); st.Bytes > 10*perAnswer*SuffixBytesPerToken {
			t.Fatalf("after %d answers: %d bytes > bound", i+1, st.Bytes)
		}
	}
	st := s.Stats()
	if st.Answers != 10 || st.Evicted != 15 || st.Tokens != 10*perAnswer {
		t.Fatalf("stats %+v: want 10 answers, 15 evicted", st)
	}
	for i, want := range map[int]bool{0: false, 14: false, 15: true, 24: true} {
		a := answer(i)
		p := propose1(t, s, engine.ProposeRequest{ID: engine.RequestID(500 + i), Tenant: fmt.Sprintf("t%d", i%3), Generated: a[:5]})
		if got := len(p.Tokens) > 0; got != want {
			t.Errorf("answer %d: drafted %v, want %v", i, got, want)
		}
	}
	if _, err := NewSuffix(SuffixConfig{Policy: "nope"}); err == nil {
		t.Fatal("unknown policy accepted")
	}
	if _, err := NewSuffix(SuffixConfig{MaxMatch: 1}); err == nil {
		t.Fatal("max_match 1 accepted")
	}
}

// TestSuffixAdaptsToAcceptance: a continuation that the target keeps
// rejecting is paused for growing stretches; one that is confirmed grows.
func TestSuffixAdaptsToAcceptance(t *testing.T) {
	s, _ := NewSuffix(SuffixConfig{NoPrompt: true})
	s.Finished(1, "a", nil, toks(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20))
	// target always generates 1, 2, then something else: drafts of 3... are rejected at once.
	gen := toks(1, 2)
	proposals := 0
	for step := range 40 {
		p := propose1(t, s, engine.ProposeRequest{ID: 7, Tenant: "a", Generated: gen})
		if len(p.Tokens) > 0 {
			proposals++
		}
		gen = append(gen, int32(200+step), 1, 2) // a bonus token, and again 1, 2 as pending context
	}
	if proposals > 8 {
		t.Fatalf("rejected every time but proposed in %d of 40 steps", proposals)
	}
	// confirmed drafts: the depth cap doubles.
	s2, _ := NewSuffix(SuffixConfig{NoPrompt: true, Alpha: 100, MaxDepth: 64})
	long := make([]int32, 200)
	for i := range long {
		long[i] = int32(300 + i)
	}
	s2.Finished(1, "a", nil, long)
	gen = append([]int32(nil), long[:2]...)
	var depths []int
	for range 4 {
		p := propose1(t, s2, engine.ProposeRequest{ID: 8, Tenant: "a", Generated: gen})
		depths = append(depths, len(p.Tokens))
		gen = long[:len(gen)+len(p.Tokens)+1] // all accepted plus the bonus
	}
	if depths[0] >= depths[3] || depths[3] < 32 {
		t.Fatalf("depths %v: want growth to >= 32", depths)
	}
}

func TestKnownFollowsAndResyncs(t *testing.T) {
	k := NewKnown(KnownConfig{})
	draft := make([]int32, 60)
	for i := range draft {
		draft[i] = int32(100 + i)
	}
	known := []engine.KnownDraft{{Source: SourcePrediction, Tokens: draft}}
	// first token equals the draft's first: propose from draft[1:].
	p := propose1(t, k, engine.ProposeRequest{ID: 1, Generated: toks(100), Known: known})
	if len(p.Tokens) == 0 || p.Tokens[0] != 101 || p.Sources[0] != SourcePrediction || p.Source != SourcePrediction {
		t.Fatalf("first step: %v %v", p.Tokens, p.Sources)
	}
	// a known draft starts at its full depth: the engine's budget (Budget
	// 32 here) decides how much of it to verify, from Confidence.
	d0 := len(p.Tokens)
	if d0 != 32 {
		t.Fatalf("first step: %d tokens, want the budget's 32", d0)
	}
	// all accepted + bonus 101+d0: next proposal continues after it, to the draft's end.
	gen := append([]int32(nil), draft[:d0+2]...)
	p = propose1(t, k, engine.ProposeRequest{ID: 1, Generated: gen, Known: known})
	if p.Tokens[0] != draft[d0+2] || len(p.Tokens) != len(draft)-(d0+2) {
		t.Fatalf("second step: %v (first depth %d)", p.Tokens, d0)
	}
	// an edit: the target replaced draft[20..22] by 7, 8, 9 and continues
	// with draft[23], draft[24] (a request whose first chain was 8 deep).
	k = NewKnown(KnownConfig{})
	propose1(t, k, engine.ProposeRequest{ID: 1, Generated: toks(100), Known: known, Budget: 8})
	gen = append(append(append([]int32(nil), draft[:20]...), 7, 8, 9), draft[23], draft[24])
	p = propose1(t, k, engine.ProposeRequest{ID: 1, Generated: gen, Known: known})
	if len(p.Tokens) == 0 || p.Tokens[0] != draft[25] {
		t.Fatalf("after an edit: %v, want resync at %d", p.Tokens, draft[25])
	}
	// an insertion ending in a lone draft token: 5, 6 then draft[26]: single-token realignment.
	gen = append(append(gen, draft[25], 5, 6), draft[26])
	p = propose1(t, k, engine.ProposeRequest{ID: 1, Generated: gen, Known: known})
	if len(p.Tokens) == 0 || p.Tokens[0] != draft[27] {
		t.Fatalf("after an insertion: %v, want %d", p.Tokens, draft[27])
	}
	// a substitution right after a confirmed run (the bonus token differs
	// from the draft's): the cursor skips the substituted token at once.
	k3 := NewKnown(KnownConfig{})
	propose1(t, k3, engine.ProposeRequest{ID: 5, Generated: draft[:10], Known: known})
	gen = append(append([]int32(nil), draft[:10]...), 7)
	p = propose1(t, k3, engine.ProposeRequest{ID: 5, Generated: gen, Known: known})
	if len(p.Tokens) == 0 || p.Tokens[0] != draft[11] {
		t.Fatalf("after a substitution: %v, want %d", p.Tokens, draft[11])
	}
	// unrelated output: nothing.
	p = propose1(t, k, engine.ProposeRequest{ID: 2, Generated: toks(5, 6, 7), Known: known})
	if len(p.Tokens) != 0 {
		t.Fatalf("unrelated: %v", p.Tokens)
	}
	// two drafts share a prefix: one tree, the common prefix once.
	k2 := NewKnown(KnownConfig{})
	two := []engine.KnownDraft{{Source: SourcePrediction, Tokens: toks(1, 2, 3, 4, 5)}, {Source: SourceNearMiss, Tokens: toks(1, 2, 3, 9, 9)}}
	p = propose1(t, k2, engine.ProposeRequest{ID: 3, Generated: toks(1), Known: two})
	if fmt.Sprint(p.Tokens, p.Parents, p.Sources) != "[2 3 4 5 9 9] [-1 0 1 2 1 4] [prediction prediction prediction prediction near_miss near_miss]" {
		t.Fatalf("two drafts: %v %v %v", p.Tokens, p.Parents, p.Sources)
	}
	k.Release(1)
	k.Release(2)
	if len(k.reqs) != 0 {
		t.Fatal("Release kept state")
	}
}

// TestConfidence: the proposers' own acceptance estimates (engine.Confident).
func TestConfidence(t *testing.T) {
	k := NewKnown(KnownConfig{})
	draft := []int32{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}
	known := []engine.KnownDraft{{Source: SourcePrediction, Tokens: draft}}
	if v := k.Confidence(1, 1); v != knownPrior {
		t.Fatalf("before the first call: %v, want the prior %v", v, knownPrior)
	}
	p := propose1(t, k, engine.ProposeRequest{ID: 1, Generated: draft[:1], Known: known, Budget: 3})
	gen := append([]int32(nil), draft[:len(p.Tokens)+2]...) // all confirmed plus the bonus
	propose1(t, k, engine.ProposeRequest{ID: 1, Generated: gen, Known: known, Budget: 3})
	if v := k.Confidence(1, 1); v < 0.9 {
		t.Fatalf("aligned, all confirmed: %v, want >= 0.9", v)
	}
	if v := k.Confidence(1, 9); v != 0 {
		t.Fatalf("past the draft's end: %v, want 0", v)
	}
	// unrelated output from the start: never aligned, no opinion.
	propose1(t, k, engine.ProposeRequest{ID: 2, Generated: []int32{90, 91}, Known: known})
	if v := k.Confidence(2, 1); v != -1 {
		t.Fatalf("lost cursor: %v, want -1", v)
	}
	s, _ := NewSuffix(SuffixConfig{NoAnswers: true})
	prompt := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	propose1(t, s, engine.ProposeRequest{ID: 3, Prompt: prompt, Generated: []int32{2, 3}})
	if v := s.Confidence(3, 1); v != -1 {
		t.Fatalf("suffix without a record: %v", v)
	}
	propose1(t, s, engine.ProposeRequest{ID: 3, Prompt: prompt, Generated: []int32{2, 3, 4, 5, 6}})
	if v := s.Confidence(3, 1); !(v > 0.6) {
		t.Fatalf("suffix matching with confirmed tokens: %v, want > 0.6", v)
	}
	// no match now: the tenant's record (its requests' confirmed tokens
	// against rejections, prior 0.6 at weight 20), for this request and a
	// new one of the tenant once it has called; no opinion for a tenant
	// without a record and before a request's first call.
	propose1(t, s, engine.ProposeRequest{ID: 3, Prompt: prompt, Generated: []int32{2, 3, 4, 5, 6, 50, 51}})
	rec := s.Confidence(3, 1)
	if !(rec > 0.6 && rec < 1) {
		t.Fatalf("suffix without a match now: %v, want the tenant's record (> 0.6: 3 confirmed, no rejection)", rec)
	}
	if v := s.Confidence(4, 1); v != -1 {
		t.Fatalf("before the first call: %v, want -1", v)
	}
	propose1(t, s, engine.ProposeRequest{ID: 4, Prompt: []int32{70, 71, 72}, Generated: []int32{73}})
	if v := s.Confidence(4, 1); v != rec {
		t.Fatalf("same tenant, no match: %v, want the tenant's record %v", v, rec)
	}
	propose1(t, s, engine.ProposeRequest{ID: 5, Tenant: "other", Prompt: []int32{70, 71, 72}, Generated: []int32{73}})
	if v := s.Confidence(5, 1); v != -1 {
		t.Fatalf("another tenant without a record: %v, want -1", v)
	}
}
