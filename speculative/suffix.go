package speculative

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/policy"
)

// ErrSuffixConfig reports a bad SuffixConfig field.
var ErrSuffixConfig = errors.New("speculative: bad suffix config")

// Draft sources of the model-free proposers (engine.Proposal.Sources).
const (
	SourcePrompt = "prompt" // the request's own prompt and output so far (prompt lookup)
	SourceSuffix = "suffix" // the tenant's earlier answers
)

// SuffixConfig configures a Suffix proposer. Zero fields take defaults.
type SuffixConfig struct {
	// MaxBytes bounds the memory of all tenants' stored answers together
	// (tokens plus index, accounted at SuffixBytesPerToken a token);
	// default 64 MiB. Answers leave by Policy.
	MaxBytes int64
	// Policy is the eviction policy's name for policy.New (default "lru").
	Policy string
	// MaxAnswerTokens keeps at most the first this many tokens of an
	// answer (default 4096).
	MaxAnswerTokens int
	// MaxMatch is the longest context suffix compared (default 32).
	MaxMatch int
	// MaxDepth is the deepest draft token (default 64; Alpha times the
	// match length, at most MaxMatch, bounds it further).
	MaxDepth int
	// Alpha bounds the draft depth by Alpha times the matched length, as
	// SuffixDecoding's max_spec_factor (default 2).
	Alpha float64
	// MinScore drops draft nodes whose estimated probability (product of
	// continuation frequencies on the path) is lower (default 0.2).
	MinScore float64
	// MaxRefs is how many recent occurrences of a token pair are indexed,
	// per tenant and per request (default 64).
	MaxRefs int
	// NoPrompt turns off drafting from the request's own prompt and output
	// (prompt lookup); NoAnswers from the tenant's earlier answers.
	NoPrompt, NoAnswers bool
}

// SuffixBytesPerToken is the memory accounted for one stored answer token:
// the token, its index entry and the index map's share.
const SuffixBytesPerToken = 32

func (c SuffixConfig) withDefaults() (SuffixConfig, error) {
	if c.MaxBytes == 0 {
		c.MaxBytes = 64 << 20
	}
	if c.Policy == "" {
		c.Policy = "lru"
	}
	if c.MaxAnswerTokens == 0 {
		c.MaxAnswerTokens = 4096
	}
	if c.MaxMatch == 0 {
		c.MaxMatch = 32
	}
	if c.MaxDepth == 0 {
		c.MaxDepth = 64
	}
	if c.Alpha == 0 {
		c.Alpha = 2
	}
	if c.MinScore == 0 {
		c.MinScore = 0.2
	}
	if c.MaxRefs == 0 {
		c.MaxRefs = 64
	}
	switch {
	case c.MaxBytes < 0:
		return c, fmt.Errorf("%w: max_bytes %d < 0", ErrSuffixConfig, c.MaxBytes)
	case c.MaxAnswerTokens < 0 || c.MaxMatch < 2 || c.MaxDepth < 1 || c.MaxRefs < 1:
		return c, fmt.Errorf("%w: max_answer_tokens %d, max_match %d (>= 2), max_depth %d, max_refs %d",
			ErrSuffixConfig, c.MaxAnswerTokens, c.MaxMatch, c.MaxDepth, c.MaxRefs)
	case !(c.Alpha > 0) || !(c.MinScore > 0 && c.MinScore <= 1):
		return c, fmt.Errorf("%w: alpha %v (> 0), min_score %v (in (0, 1])", ErrSuffixConfig, c.Alpha, c.MinScore)
	}
	return c, nil
}

// Suffix drafts from text the gateway has already seen, without a model:
// SuffixDecoding-style frequency-scored continuation trees over the
// tenant's earlier answers and over the request's own prompt and output
// (prompt lookup). Each step it finds the longest suffix of the context
// (prompt + generated) that occurs in that text, merges the continuations
// of its occurrences into a tree, and proposes the nodes whose estimated
// probability (continuation frequency along the path) is at least
// MinScore, at most Alpha times the match length deep; the depth cap
// further follows what the target accepted (depthControl).
//
// Tenants never share text: every lookup reads only the corpus of
// ProposeRequest.Tenant. Answers are learned through Finished
// (engine.FinishObserver) or Learn, and bounded together by MaxBytes with
// eviction by the configured policy. Safe for concurrent use.
type Suffix struct {
	cfg SuffixConfig

	mu      sync.Mutex
	tenants map[string]*corpus
	pol     policy.Policy[answerKey]
	nextID  uint32
	reqs    map[engine.RequestID]*suffixReq
	evicted int
	// rec: per tenant, the record of its requests' drafts (the prior of
	// Confidence).
	rec  tenantRecords
	trie *trie   // reused by every Propose call (under mu)
	ms   []match // likewise
	// Propose's scratch (under mu): the new context tokens, the context
	buf, ctx []int32
}

type answerKey struct {
	tenant string
	id     uint32
}

type suffixReq struct {
	tenant  string
	own     *corpus // doc 0: prompt + generated
	indexed int
	seen    int // len(Generated) at the previous call
	ctl     depthControl
	matched bool // the previous call found a match (and proposed)
}

// NewSuffix returns a Suffix proposer.
func NewSuffix(cfg SuffixConfig) (*Suffix, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	pol, err := policy.New[answerKey](cfg.Policy, policy.Capacity{MaxBytes: cfg.MaxBytes})
	if err != nil {
		return nil, fmt.Errorf("%w: policy: %w", ErrSuffixConfig, err)
	}
	return &Suffix{cfg: cfg, tenants: map[string]*corpus{}, pol: pol, reqs: map[engine.RequestID]*suffixReq{}}, nil
}

// Learn adds text (an answer) to the tenant's corpus. The tokens are copied.
func (s *Suffix) Learn(tenant string, toks []int32) {
	if s.cfg.NoAnswers || len(toks) < 2 {
		return
	}
	if len(toks) > s.cfg.MaxAnswerTokens {
		toks = toks[:s.cfg.MaxAnswerTokens]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.tenants[tenant]
	if c == nil {
		c = newCorpus(s.cfg.MaxRefs)
		s.tenants[tenant] = c
	}
	s.nextID++
	id := s.nextID
	c.extend(id, toks)
	for _, ev := range s.pol.Add(answerKey{tenant, id}, int64(len(toks))*SuffixBytesPerToken, 1) {
		s.drop(ev.Key)
	}
}

func (s *Suffix) drop(k answerKey) {
	c := s.tenants[k.tenant]
	if c == nil {
		return
	}
	c.remove(k.id)
	s.evicted++
	if len(c.docs) == 0 {
		delete(s.tenants, k.tenant)
	}
}

// Finished implements engine.FinishObserver: the request's output joins
// its tenant's corpus.
func (s *Suffix) Finished(_ engine.RequestID, tenant string, _, output []int32) {
	s.Learn(tenant, output)
}

// Release implements engine.Proposer.
func (s *Suffix) Release(id engine.RequestID) {
	s.mu.Lock()
	delete(s.reqs, id)
	s.mu.Unlock()
}

// Confidence implements engine.Confident: the request's record of
// confirmed draft tokens against rejections, its prior the tenant's
// record over its requests (itself starting at 0.6). While the request's
// context does not match (the previous call proposed nothing), the
// tenant's record alone, when it has one: prompt lookup over repetitive
// output is right ~49 tokens in 50 (bench workload's code-edit trace),
// and a call that finds no match costs a Propose call, after which the
// engine decodes the request plainly (multi-step on the GPU). Without it,
// prompt lookup's requests were priced at the engine's prior and on the
// H100 the budget stopped granting it for whole runs. No opinion (-1)
// before the request's first call (tenant unknown), while paused, and
// for a tenant without a record whose request has not matched.
func (s *Suffix) Confidence(id engine.RequestID, _ int) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.reqs[id]
	if st == nil || st.ctl.pause > 0 {
		return -1
	}
	prior, known := s.rec.rate(st.tenant, 0.6)
	if !st.matched || st.ctl.confirmed+st.ctl.rejects == 0 {
		if known {
			return prior
		}
		return -1
	}
	return st.ctl.rate(prior, 5)
}

// SuffixStats describes a Suffix's stored text.
type SuffixStats struct {
	Tenants, Answers, Tokens int
	Bytes                    int64 // accounted bytes (<= MaxBytes)
	Evicted                  int   // answers evicted so far
}

// Stats returns the current totals.
func (s *Suffix) Stats() SuffixStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := SuffixStats{Tenants: len(s.tenants), Bytes: s.pol.Bytes(), Evicted: s.evicted}
	for _, c := range s.tenants {
		st.Answers += len(c.docs)
		st.Tokens += c.tokens
	}
	return st
}

// Propose implements engine.Proposer.
func (s *Suffix) Propose(_ context.Context, reqs []engine.ProposeRequest) ([]engine.Proposal, error) {
	out := make([]engine.Proposal, len(reqs))
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := s.ms[:0]
	defer func() { s.ms = ms[:0] }()
	for i := range reqs {
		r := &reqs[i]
		st := s.reqs[r.ID]
		if st == nil {
			st = &suffixReq{tenant: r.Tenant, own: newCorpus(s.cfg.MaxRefs), ctl: newDepthControl(8, 2, s.cfg.MaxDepth)}
			s.reqs[r.ID] = st
		}
		if len(r.Generated) >= st.seen {
			conf, rej := st.ctl.confirmed, st.ctl.rejects
			st.ctl.observe(r.Generated[st.seen:])
			s.rec.add(st.tenant, st.ctl.confirmed-conf, st.ctl.rejects-rej)
		}
		st.seen = len(r.Generated)
		st.matched = false
		// the context: prompt + generated (pending last).
		full := len(r.Prompt) + len(r.Generated)
		if !s.cfg.NoPrompt && st.indexed < full {
			s.buf = appendTail(s.buf[:0], r.Prompt, r.Generated, st.indexed) // extend copies it
			st.own.extend(0, s.buf)
			st.indexed = full
		}
		s.ctx = appendTail(s.ctx[:0], r.Prompt, r.Generated, max(0, full-s.cfg.MaxMatch-1))
		ctx := s.ctx
		if st.ctl.paused() || r.Budget <= 0 || r.MaxDepth <= 0 {
			continue
		}
		ms = ms[:0]
		if !s.cfg.NoPrompt {
			ms = st.own.matches(ctx, s.cfg.MaxMatch, 0, ms)
		}
		c := s.tenants[r.Tenant]
		if c != nil && !s.cfg.NoAnswers {
			ms = c.matches(ctx, s.cfg.MaxMatch, 1, ms)
		}
		if len(ms) == 0 {
			continue
		}
		lmax := 0
		for _, m := range ms {
			lmax = max(lmax, m.length)
		}
		depth := min(r.MaxDepth, s.cfg.MaxDepth, st.ctl.cap, int(math.Ceil(s.cfg.Alpha*float64(lmax))))
		if s.trie == nil {
			s.trie = newTrie()
		}
		t := s.trie
		t.reset()
		for _, m := range ms {
			if m.length < lmax {
				continue
			}
			doc := st.own.docs[m.doc]
			if m.src == 1 {
				doc = c.docs[m.doc]
			}
			t.add(doc[m.off+1:], 1, depth, m.src)
		}
		toks, parents, srcs, _ := t.best(r.Budget, s.cfg.MinScore)
		if len(toks) == 0 {
			continue
		}
		p := engine.Proposal{Tokens: toks, Parents: parents, Source: SourceSuffix, Sources: make([]string, len(toks))}
		for j, sv := range srcs {
			p.Sources[j] = SourceSuffix
			if sv == 0 {
				p.Sources[j] = SourcePrompt
			}
		}
		st.ctl.proposed(mainChain(toks, parents))
		st.matched = true
		out[i] = p
	}
	return out, nil
}

// appendTail appends (a ++ b)[from:] to out.
func appendTail(out, a, b []int32, from int) []int32 {
	if from < len(a) {
		out = append(out, a[from:]...)
		from = 0
	} else {
		from -= len(a)
	}
	return append(out, b[from:]...)
}

// mainChain follows the first child at each level (the best-scored one in
// trie.best's order) from the root.
func mainChain(toks, parents []int32) []int32 {
	var out []int32
	at := int32(-1)
	for i, p := range parents {
		if p == at {
			out = append(out, toks[i])
			at = int32(i)
		}
	}
	return out
}
