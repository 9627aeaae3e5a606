package speculative

import (
	"context"
	"fmt"
	"sync"

	"github.com/specgate/specgate/engine"
)

// Draft is the draft-model proposer (engine.Proposer): a small model of the
// target's vocabulary proposes a chain, a static tree or a dynamic
// (EAGLE-2-style) tree below each request's pending token. One Draft serves
// all requests of an engine; it keeps one draft Sequence per request (freed
// by Release) and drafts all requests of a step together: one draft forward
// catches every request up with its accepted tokens, then one draft
// forward per depth level for the whole batch.
type Draft struct {
	target, draft *engine.Model
	cfg           Config

	mu   sync.Mutex
	seqs map[engine.RequestID]*engine.Sequence

	// rule selects a deliberately wrong way of drafting for sampled
	// requests (negative controls in the tests). Zero = correct.
	rule rule

	// head is the restricted LM head (Config.VocabLimit), nil = the draft
	// model's own logits over the whole vocabulary.
	head *draftHead
}

// VocabLimit is the number of tokens the draft proposes from: the
// restricted head's size, or the vocabulary size.
func (d *Draft) VocabLimit() int {
	if d.head != nil {
		return len(d.head.ids)
	}
	return d.draft.Config.VocabSize
}

var _ engine.Proposer = (*Draft)(nil)

// rule is a drafting variant for negative controls.
type rule int

const (
	ruleLossless rule = iota
	// ruleTopKChildren (wrong): children are the draft's top tokens
	// (deterministic) but labelled as draws from q.
	ruleTopKChildren
	// ruleUnrestrictedQ (wrong): with a restricted head, children are
	// drawn from the restricted distribution but labelled with the draft's
	// distribution over the whole vocabulary.
	ruleUnrestrictedQ
)

// Config returns the proposer's configuration with defaults filled in.
func (d *Draft) Config() Config { return d.cfg }

// Release frees the request's draft KV.
func (d *Draft) Release(id engine.RequestID) {
	d.mu.Lock()
	s := d.seqs[id]
	delete(d.seqs, id)
	d.mu.Unlock()
	if s != nil {
		s.Free()
	}
}

// draftReq is one request's drafting state within a Propose call.
type draftReq struct {
	idx      int // index in the Propose call
	r        *engine.ProposeRequest
	seq      *engine.Sequence
	p        *proposal
	greedy   bool
	depth    int // levels to draft
	budget   int // nodes
	frontier []int
	cums     []float64 // cumulative draft probability, indexed like p.q
	fresh    []int     // nodes added at the current level
}

// Propose implements engine.Proposer.
func (d *Draft) Propose(ctx context.Context, reqs []engine.ProposeRequest) ([]engine.Proposal, error) {
	out := make([]engine.Proposal, len(reqs))
	maxPos := d.draft.Config.MaxPositions
	var all, work []*draftReq
	var items []engine.BatchItem
	for i := range reqs {
		r := &reqs[i]
		out[i].Source = "draft"
		want := make([]int32, 0, len(r.Prompt)+len(r.Generated))
		want = append(append(want, r.Prompt...), r.Generated...)
		depth := min(d.cfg.K, r.MaxDepth, maxPos-1-len(want))
		budget := min(d.cfg.Budget, r.Budget)
		if depth <= 0 || budget <= 0 {
			continue
		}
		d.mu.Lock()
		seq := d.seqs[r.ID]
		if seq == nil {
			seq = d.draft.NewSequence()
			d.seqs[r.ID] = seq
		}
		d.mu.Unlock()
		have := seq.Tokens()
		lcp := 0
		for lcp < len(have) && lcp < len(want)-1 && have[lcp] == want[lcp] {
			lcp++
		}
		seq.Truncate(lcp)
		rest := want[lcp:]
		dr := &draftReq{idx: i, r: r, seq: seq, greedy: r.Params.Temperature <= 0, depth: depth, budget: budget}
		dr.p = &proposal{tree: &Tree{}, greedy: dr.greedy}
		work = append(work, dr)
		items = append(items, engine.BatchItem{Seq: seq, Tokens: rest, LogitsRows: []int32{int32(len(rest) - 1)}, HiddenOnly: d.head != nil})
	}
	if len(work) == 0 {
		return out, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	work, items = d.forward(work, items)
	all = append(all, work...)
	W, rowsOf := d.logits(items)
	full := d.fullRow()
	for j, dr := range work {
		q, pick := d.nodeDist(dr.r, rowsOf[j], full, nil, dr.greedy)
		dr.p.q, dr.p.picks = [][]float64{q}, []int32{pick}
		if d.rule == ruleUnrestrictedQ {
			dr.p.label = [][]float64{d.dist(dr.r, d.head.fullLogits(items[j].Hidden), nil, dr.greedy)}
		}
		dr.cums = []float64{1}
		dr.frontier = []int{-1}
	}
	for lvl := 1; len(work) > 0; lvl++ {
		var next []*draftReq
		items = items[:0]
		for _, dr := range work {
			p := dr.p
			counts := d.allocate(p, dr.cums, dr.frontier, lvl, dr.budget-p.tree.Len())
			dr.fresh = dr.fresh[:0]
			for i, f := range dr.frontier {
				if counts[i] == 0 {
					continue
				}
				q := p.q[f+1]
				var toks []int32
				switch {
				case q == nil: // greedy chain: the argmax only
					toks = []int32{p.picks[f+1]}
				case dr.greedy || d.rule == ruleTopKChildren:
					toks = topN(q, counts[i])
				default:
					toks = drawWithoutReplacement(q, counts[i], dr.r.Rand.Float64)
				}
				for _, tok := range toks {
					n := p.tree.Add(tok, int32(f))
					c := dr.cums[f+1]
					if q != nil {
						c *= q[tok]
					}
					dr.cums = append(dr.cums, c)
					p.q, p.picks = append(p.q, nil), append(p.picks, -1)
					if p.label != nil {
						p.label = append(p.label, nil)
					}
					dr.fresh = append(dr.fresh, n)
				}
			}
			if len(dr.fresh) == 0 || lvl >= dr.depth || p.tree.Len() >= dr.budget {
				continue
			}
			next = append(next, dr)
			items = append(items, d.levelItem(dr))
		}
		if len(next) == 0 {
			break
		}
		next, items = d.forward(next, items)
		W, rowsOf = d.logits(items)
		for j, dr := range next {
			rows := rowsOf[j]
			for k, n := range dr.fresh {
				dr.p.q[n+1], dr.p.picks[n+1] = d.nodeDist(dr.r, rows[k*W:(k+1)*W], full, dr.p.tree.PathTokens(n), dr.greedy)
				if dr.p.label != nil {
					H := d.draft.Config.HiddenSize
					dr.p.label[n+1] = d.dist(dr.r, d.head.fullLogits(items[j].Hidden[k*H:(k+1)*H]), dr.p.tree.PathTokens(n), dr.greedy)
				}
			}
			dr.frontier = append(dr.frontier[:0], dr.fresh...)
		}
		work = next
	}
	for _, dr := range all {
		if dr.seq.TreeLen() > 0 {
			if err := dr.seq.KeepTree(nil); err != nil {
				return nil, fmt.Errorf("speculative: drop draft tree: %w", err)
			}
		}
		out[dr.idx] = dr.p.export(dr.greedy && d.rule != ruleTopKChildren)
		out[dr.idx].Source = "draft"
	}
	return out, nil
}

// levelItem is the draft forward of a request's newest level: chains
// commit the one new token (cheap; the next catch-up trims it when
// rejected); trees append the level to the draft's pending tree (parents
// index the tree so far, -1 = the pending token), so depth d costs d
// levels of draft compute, not d².
func (d *Draft) levelItem(dr *draftReq) engine.BatchItem {
	t := dr.p.tree
	if d.cfg.Method == MethodChain {
		return engine.BatchItem{Seq: dr.seq, Tokens: []int32{t.Tokens[dr.fresh[0]]}, HiddenOnly: d.head != nil}
	}
	from := dr.seq.TreeLen()
	return engine.BatchItem{Seq: dr.seq, Tokens: t.Tokens[from:], Parents: t.Parents[from:], HiddenOnly: d.head != nil}
}

// logits returns the row width W (the vocabulary, or the restricted
// head's size) and each item's logits rows ([rows][W]) after a draft
// forward: the draft's own logits, or, with a restricted head, one matmul
// over the hidden rows of all items.
func (d *Draft) logits(items []engine.BatchItem) (int, [][]float32) {
	out := make([][]float32, len(items))
	if d.head == nil {
		for j := range items {
			out[j] = items[j].Logits
		}
		return d.draft.Config.VocabSize, out
	}
	H, W := d.draft.Config.HiddenSize, len(d.head.ids)
	var x []float32
	for j := range items {
		x = append(x, items[j].Hidden...)
	}
	all := d.head.project(x, len(x)/H)
	off := 0
	for j := range items {
		n := len(items[j].Hidden) / H * W
		out[j] = all[off : off+n]
		off += n
	}
	return W, out
}

// fullRow is a scratch vocabulary-sized row for expanding restricted
// logits (nil without a restricted head).
func (d *Draft) fullRow() []float32 {
	if d.head == nil {
		return nil
	}
	return make([]float32, d.draft.Config.VocabSize)
}

// nodeDist is dist of a logits row of the draft forward (with a
// restricted head the row holds the head's logits and is expanded to the
// vocabulary, -Inf outside the set: probability 0), or, for greedy chains
// without penalties, which only need the argmax, (nil, the argmax).
func (d *Draft) nodeDist(r *engine.ProposeRequest, row, full []float32, path []int32, greedy bool) ([]float64, int32) {
	if greedy && noPenalties(r.Params) && d.cfg.Method == MethodChain {
		if d.head != nil {
			return nil, d.head.argmax(row)
		}
		return nil, engine.Argmax(row)
	}
	if d.head != nil {
		row = d.head.expand(row, full)
	}
	return d.dist(r, row, path, greedy), -1
}

// forward runs one batched draft forward; when it fails, the items run one
// by one and the requests whose forward fails stop drafting (a draft KV
// that is full costs the draft, never the request). It returns the
// requests and items that succeeded.
func (d *Draft) forward(work []*draftReq, items []engine.BatchItem) ([]*draftReq, []engine.BatchItem) {
	if err := d.draft.ForwardBatch(items); err == nil {
		return work, items
	}
	var okW []*draftReq
	var okI []engine.BatchItem
	for j := range items {
		if err := d.draft.ForwardBatch(items[j : j+1]); err != nil {
			if work[j].p.tree.Len() == 0 {
				work[j].seq.Truncate(0)
			}
			continue
		}
		okW = append(okW, work[j])
		okI = append(okI, items[j])
	}
	return okW, okI
}

// export converts a proposal to the engine's form. With greedy, Q is
// omitted; otherwise every node carries its parent's draft distribution
// (one shared slice per parent).
func (p *proposal) export(greedy bool) engine.Proposal {
	t := p.tree
	out := engine.Proposal{Tokens: t.Tokens, Parents: t.Parents}
	if greedy || t.Len() == 0 {
		return out
	}
	out.Q = make([][]float32, t.Len())
	shared := map[int32][]float32{}
	for i, par := range t.Parents {
		q, ok := shared[par]
		if !ok {
			src := p.q[par+1]
			if p.label != nil { // a negative control's wrong label
				src = p.label[par+1]
			}
			q = make([]float32, len(src))
			for j, x := range src {
				q[j] = float32(x)
			}
			shared[par] = q
		}
		out.Q[i] = q
	}
	return out
}
