package speculative

import (
	"context"
	"sync"

	"github.com/specgate/specgate/engine"
)

// Draft sources of the known-draft proposer (engine.KnownDraft.Source as
// the gateway sets it).
const (
	SourcePrediction = "prediction" // the client's OpenAI `prediction`
	SourceNearMiss   = "near_miss"  // a semantic-cache near miss's answer
)

// KnownConfig configures a Known proposer. Zero fields take defaults.
type KnownConfig struct {
	MaxDepth int // deepest draft token (default 64)
	MaxMatch int // longest suffix compared when resynchronising (default 32)
	// Window is how far past the expected position a lone pending token
	// may realign the draft when no two-token match exists (default 16).
	Window int
}

func (c KnownConfig) withDefaults() KnownConfig {
	if c.MaxDepth <= 0 {
		// on a GPU an exact verification forward of 64 tokens costs ~5.7x
		// one token's (docs/cuda.md round 6), so a draft that keeps
		// matching (an unchanged file) pays at this depth; the engine's
		// budget grants what pays.
		c.MaxDepth = 64
	}
	if c.MaxMatch < 2 {
		c.MaxMatch = 32
	}
	if c.Window <= 0 {
		c.Window = 16
	}
	return c
}

// Known drafts from text the caller holds for the request
// (engine.ProposeRequest.Known: an OpenAI prediction, a cache near miss's
// answer). Each draft is followed by a cursor: while the target generates
// what the draft says, the cursor advances and the next draft tokens are
// proposed as a chain; after a rejection the cursor is resynchronised by
// matching the end of what the target generated against the draft (the
// longest matching suffix, nearest the expected position; or the pending
// token alone within Window tokens of it), so an edit in the middle of a
// predicted file costs only the edit. Several drafts share the budget as a
// tree (identical prefixes merged). Depth follows acceptance
// (depthControl). Safe for concurrent use.
type Known struct {
	cfg  KnownConfig
	mu   sync.Mutex
	reqs map[engine.RequestID]*knownReq
	// src is, per tenant and draft source over all the tenant's
	// requests, the confirmed draft tokens and rejections (decayed): the
	// prior of a request's own record. A client's prediction of an
	// unchanged file is right ~19 tokens in 20, a near miss's answer
	// (another question's) far less often; one prior for both overpaid
	// near misses and underpaid predictions. Keyed by tenant too, so that
	// one tenant's bad predictions do not lower every tenant's prior; at
	// most maxSrcRecords records, the least recently used evicted.
	src  records[srcKey]
	trie *trie // reused by every Propose call (under mu)
}

// srcKey names a record: a tenant's draft source.
type srcKey struct{ tenant, src string }

// srcRecord is a tenant's draft source's record over its requests.
type srcRecord struct {
	confirmed, rejects float64
	used               uint64 // records.tick when last recorded into
}

// maxSrcRecords bounds Known.src: tenants are client-chosen names.
const maxSrcRecords = 1024

// srcPriorWeight is the weight, in tokens, of knownPrior in a source's
// record; srcDecayAt halves a record that grew past it.
const (
	srcPriorWeight = 20
	srcDecayAt     = 4096
)

// prior is the tenant's source's continuation rate (confirmed /
// (confirmed + rejects)) over its requests, with knownPrior at weight
// srcPriorWeight.
func (k *Known) prior(tenant, src string) float64 {
	p, _ := k.src.rate(srcKey{tenant, src}, knownPrior)
	return p
}

// record adds a cursor's new confirmations and rejections to its source's record.
func (k *Known) record(tenant, src string, confirmed, rejects int) {
	k.src.add(srcKey{tenant, src}, confirmed, rejects)
}

type knownReq struct {
	drafts []*knownCursor
	seen   int
}

type knownCursor struct {
	tenant string // the request's (its source record's key with src)
	src    string
	toks   []int32
	idx    *corpus
	at     int // index in toks aligned with the pending token; -1: before the first; -2: lost
	// guessed: at was set by assuming a substitution, not by a match; a
	// second miss then loses the cursor.
	guessed bool
	ctl     depthControl
}

const knownPrior = 0.9

// NewKnown returns a Known proposer.
func NewKnown(cfg KnownConfig) *Known {
	return &Known{cfg: cfg.withDefaults(), reqs: map[engine.RequestID]*knownReq{}}
}

// Release implements engine.Proposer.
func (k *Known) Release(id engine.RequestID) {
	k.mu.Lock()
	delete(k.reqs, id)
	k.mu.Unlock()
}

// newReq sets a request's cursors up, one per non-empty draft.
func (k *Known) newReq(tenant string, known []engine.KnownDraft) *knownReq {
	st := &knownReq{}
	for _, d := range known {
		if len(d.Tokens) == 0 {
			continue
		}
		// a prediction starts at full depth: how much of it to verify is
		// the engine's budget's call, from Confidence (on the H100 the
		// doubling ramp 8, 16, 32, 64 cost an exact 160-token prediction
		// 2-3 verification steps of ~0.2 ms host time each); other drafts
		// ramp up from 8.
		start := 8
		if d.Source == SourcePrediction {
			start = k.cfg.MaxDepth
		}
		c := &knownCursor{tenant: tenant, src: d.Source, toks: append([]int32(nil), d.Tokens...), idx: newCorpus(1 << 30), at: -1,
			ctl: newDepthControl(start, 2, k.cfg.MaxDepth)}
		c.idx.extend(0, c.toks)
		st.drafts = append(st.drafts, c)
	}
	return st
}

// Start implements engine.Starter: the request's cursors exist before its
// first Propose call, so that Confidence answers for its first decode
// step with its drafts' sources (a prediction's depth-aware estimate)
// instead of the default prior at every depth: that priced the first step
// of an exact 160-token prediction at ~10 nodes.
func (k *Known) Start(id engine.RequestID, tenant string, known []engine.KnownDraft) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.reqs[id] == nil {
		k.reqs[id] = k.newReq(tenant, known)
	}
}

// Propose implements engine.Proposer.
func (k *Known) Propose(_ context.Context, reqs []engine.ProposeRequest) ([]engine.Proposal, error) {
	out := make([]engine.Proposal, len(reqs))
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range reqs {
		r := &reqs[i]
		st := k.reqs[r.ID]
		if st == nil {
			st = k.newReq(r.Tenant, r.Known)
			k.reqs[r.ID] = st
		}
		if len(st.drafts) == 0 || len(r.Generated) == 0 {
			continue
		}
		gained := r.Generated[st.seen:]
		st.seen = len(r.Generated)
		if k.trie == nil {
			k.trie = newTrie()
		}
		t := k.trie
		t.reset()
		for j, c := range st.drafts {
			conf, rej := c.ctl.confirmed, c.ctl.rejects
			c.ctl.observe(gained)
			k.record(c.tenant, c.src, c.ctl.confirmed-conf, c.ctl.rejects-rej)
			k.follow(c, r.Generated, gained)
			if c.at < -1 || c.ctl.paused() {
				continue
			}
			depth := min(r.MaxDepth, k.cfg.MaxDepth, c.ctl.cap, r.Budget)
			chain := c.toks[c.at+1 : min(len(c.toks), c.at+1+depth)]
			if len(chain) == 0 {
				continue
			}
			c.ctl.proposed(chain)
			// earlier drafts first: weight breaks ties toward them.
			t.add(chain, float64(len(st.drafts)-j), depth, j)
		}
		if len(t.tokens) == 0 {
			continue
		}
		toks, parents, srcs := t.all(r.Budget)
		p := engine.Proposal{Tokens: toks, Parents: parents, Source: st.drafts[srcs[0]].src, Sources: make([]string, len(toks))}
		for j, sv := range srcs {
			p.Sources[j] = st.drafts[sv].src
		}
		out[i] = p
	}
	return out, nil
}

// Confidence implements engine.Confident: for a request whose draft cursor
// is aligned (not paused, not a guess), the cursor's record of confirmed
// tokens against rejections (prior: its tenant's source's record over its requests,
// itself starting at 0.9); 0 past the end of every aligned
// draft; no opinion (-1) otherwise. Before its first Propose call a request
// gets 0.9 (the gateway attaches Known only to requests with known drafts,
// and a draft is aligned with the output's start): without it the engine's
// own prior may never grant the first call that aligns the cursor.
func (k *Known) Confidence(id engine.RequestID, depth int) float64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.reqs[id]
	if st == nil {
		return knownPrior
	}
	best, aligned := 0.0, false
	for _, c := range st.drafts {
		if c.at < -1 || c.guessed || c.ctl.pause > 0 {
			continue
		}
		aligned = true
		if depth <= len(c.toks)-1-c.at {
			if c.src == SourcePrediction {
				// a chain that held d-1 tokens holds on more likely than
				// the per-token rate says (depthControl.rateAt); a near
				// miss's answer drifts away token by token (the budget
				// granted deeper near-miss trees with it and the CPU's
				// paraphrase trace lost 1.3-1.5x -> 1.2-1.3x)
				best = max(best, c.ctl.rateAt(k.prior(c.tenant, c.src), 5, depth))
			} else {
				best = max(best, c.ctl.rate(k.prior(c.tenant, c.src), 5))
			}
		}
	}
	if !aligned {
		return -1
	}
	return best
}

// follow moves c's cursor over the tokens gained since the previous call
// (the last of gen is the pending token).
func (k *Known) follow(c *knownCursor, gen, gained []int32) {
	if len(gained) == 0 {
		return
	}
	if c.at >= -1 {
		at := c.at
		ok := true
		for _, tok := range gained {
			if at+1 < len(c.toks) && c.toks[at+1] == tok {
				at++
			} else {
				ok = false
				break
			}
		}
		if ok {
			c.at, c.guessed = at, false
			return
		}
	}
	// resynchronise: where would we be had the gained tokens replaced as
	// many draft tokens?
	expected := max(c.at, -1) + len(gained)
	best, bestL, bestD := -2, 0, 0
	for _, m := range c.idx.matches(gen, k.cfg.MaxMatch, 0, nil) {
		d := m.off - expected
		if d < 0 {
			d = -2 * d // backwards jumps cost more
		}
		if m.length > bestL || (m.length == bestL && d < bestD) {
			best, bestL, bestD = m.off, m.length, d
		}
	}
	if best < -1 {
		pend := gen[len(gen)-1]
		lo := max(0, expected-2)
		for j := lo; j < min(len(c.toks)-1, expected+k.cfg.Window); j++ {
			if c.toks[j] == pend {
				best = j
				break
			}
		}
	}
	guessed := false
	if best < -1 && c.at >= 0 && !c.guessed && expected < len(c.toks)-1 {
		// no match: assume the target substituted what it gained for as
		// many draft tokens (an edited number, a renamed identifier) and
		// go on after them; depthControl pauses a draft that keeps missing.
		best, guessed = expected, true
	}
	c.at, c.guessed = best, guessed
}

// all returns the trie's nodes, most weighted first, at most budget, each
// after its parent.
func (t *trie) all(budget int) (toks, parents []int32, srcs []int) {
	toks, parents, srcs, _ = t.best(budget, 0)
	return
}
