package speculative

import (
	"cmp"
	"slices"
)

// corpus holds token documents and a bigram index over them, for suffix
// matching: where does the end of the current context occur in the
// documents, and how long is the match? It is the bounded stand-in for a
// suffix tree that SuffixDecoding-style drafting needs: the occurrences of
// a context's last two tokens are looked up in the index and each is
// extended backwards token by token, which finds every occurrence of the
// longest matching suffix (up to maxMatch tokens) among the indexed ones.
//
// Each bigram keeps its maxRefs most recent occurrences (older ones drop
// out of the index, so a lookup costs O(maxRefs*maxMatch) whatever the
// corpus size). Not safe for concurrent use.
type corpus struct {
	docs    map[uint32][]int32
	index   map[uint64][]tref
	maxRefs int
	tokens  int // tokens stored in all docs
}

// tref is one occurrence of a bigram: doc[off-1], doc[off].
type tref struct {
	doc uint32
	off int32
}

func newCorpus(maxRefs int) *corpus {
	return &corpus{docs: map[uint32][]int32{}, index: map[uint64][]tref{}, maxRefs: maxRefs}
}

func bigram(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// extend appends toks to document id (creating it) and indexes the new
// bigrams. The corpus keeps its own copy.
func (c *corpus) extend(id uint32, toks []int32) {
	doc := c.docs[id]
	start := len(doc)
	doc = append(doc, toks...)
	c.docs[id] = doc
	c.tokens += len(toks)
	for i := max(1, start); i < len(doc); i++ {
		k := bigram(doc[i-1], doc[i])
		l := c.index[k]
		if len(l) >= c.maxRefs {
			l = append(l[:0:0], l[len(l)-c.maxRefs+1:]...)
		}
		c.index[k] = append(l, tref{id, int32(i)})
	}
}

// remove drops document id and its index entries.
func (c *corpus) remove(id uint32) {
	doc, ok := c.docs[id]
	if !ok {
		return
	}
	for i := 1; i < len(doc); i++ {
		k := bigram(doc[i-1], doc[i])
		l := c.index[k]
		if len(l) == 0 {
			continue
		}
		out := l[:0]
		for _, r := range l {
			if r.doc != id {
				out = append(out, r)
			}
		}
		if len(out) == 0 {
			delete(c.index, k)
		} else {
			c.index[k] = out
		}
	}
	c.tokens -= len(doc)
	delete(c.docs, id)
}

// match is one occurrence of the context's suffix in a document: doc[off]
// is aligned with the context's last token and the match covers length
// tokens ending there. The continuation is doc[off+1:].
type match struct {
	doc    uint32
	off    int
	length int
	src    int // which corpus (caller's label)
}

// matches appends the occurrences of ctx's last bigram, each extended
// backwards up to maxMatch tokens. Occurrences without continuation (at the
// end of their document) are skipped.
func (c *corpus) matches(ctx []int32, maxMatch, src int, out []match) []match {
	n := len(ctx)
	if n < 2 {
		return out
	}
	for _, r := range c.index[bigram(ctx[n-2], ctx[n-1])] {
		doc := c.docs[r.doc]
		off := int(r.off)
		if off+1 >= len(doc) {
			continue
		}
		l := 2
		for l < maxMatch && off-l >= 0 && n-1-l >= 0 && doc[off-l] == ctx[n-1-l] {
			l++
		}
		out = append(out, match{doc: r.doc, off: off, length: l, src: src})
	}
	return out
}

// trie merges continuations into a frequency-scored token tree (the
// subtree of a suffix tree below the matched pattern, as SuffixDecoding
// scores it): a node's probability is its count over its parent's count,
// its score the product of probabilities on its path.
type trie struct {
	tokens  []int32
	parents []int32
	depth   []int32
	count   []float64
	src     []int // source label of the first continuation that made the node
	// children as linked lists (most nodes have one or two children; a
	// map keyed by (parent, token) spent 60% of a Propose call hashing):
	// kid[i] is node i's first child, next[i] its next sibling, -1 none;
	// rootKid the first node at depth 1.
	kid, next []int32
	rootKid   int32
	root      float64 // total weight of continuations
	// best's scratch
	score []float64
	idx   []int
	at    []int32
}

func newTrie() *trie { return &trie{rootKid: -1} }

// reset empties t, keeping its storage (a proposer reuses one trie per
// call under its lock).
func (t *trie) reset() {
	t.tokens, t.parents, t.depth, t.count, t.src = t.tokens[:0], t.parents[:0], t.depth[:0], t.count[:0], t.src[:0]
	t.kid, t.next, t.rootKid, t.root = t.kid[:0], t.next[:0], -1, 0
}

// add merges one continuation of weight w, up to maxDepth tokens.
func (t *trie) add(cont []int32, w float64, maxDepth, src int) {
	t.root += w
	p := int32(-1)
	for d, tok := range cont {
		if d >= maxDepth {
			break
		}
		first := &t.rootKid
		if p >= 0 {
			first = &t.kid[p]
		}
		i := *first
		last := int32(-1)
		for i >= 0 && t.tokens[i] != tok {
			last, i = i, t.next[i]
		}
		if i < 0 {
			i = int32(len(t.tokens))
			t.tokens = append(t.tokens, tok)
			t.parents = append(t.parents, p)
			t.depth = append(t.depth, int32(d+1))
			t.count = append(t.count, 0)
			t.src = append(t.src, src)
			t.kid = append(t.kid, -1)
			t.next = append(t.next, -1)
			if last < 0 {
				if p >= 0 { // first may point into t.kid before the appends
					t.kid[p] = i
				} else {
					t.rootKid = i
				}
			} else {
				t.next[last] = i
			}
		}
		t.count[i] += w
		p = i
	}
}

// best returns up to budget nodes with score >= minScore, highest score
// first (ties: shallower first, then older), each after its parent, with
// parents remapped to the returned order and each node's score.
func (t *trie) best(budget int, minScore float64) (toks, parents []int32, srcs []int, scores []float64) {
	n := len(t.tokens)
	if n == 0 || budget <= 0 || t.root <= 0 {
		return nil, nil, nil, nil
	}
	t.score = slices.Grow(t.score[:0], n)[:n]
	score := t.score
	for i := range n { // parents precede children in t
		pc := t.root
		ps := 1.0
		if p := t.parents[i]; p >= 0 {
			pc, ps = t.count[p], score[p]
		}
		score[i] = ps * t.count[i] / pc
	}
	idx := t.idx[:0]
	for i := range n {
		if score[i] >= minScore {
			idx = append(idx, i)
		}
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		if c := cmp.Compare(score[b], score[a]); c != 0 {
			return c
		}
		return cmp.Compare(t.depth[a], t.depth[b])
	})
	t.idx = idx
	t.at = slices.Grow(t.at[:0], n)[:n]
	at := t.at
	for i := range at {
		at[i] = -2
	}
	for _, i := range idx {
		if len(toks) == budget {
			break
		}
		p := t.parents[i]
		np := int32(-1)
		if p >= 0 {
			if at[p] < 0 { // parent not taken (cannot happen with scores non-increasing; be safe)
				continue
			}
			np = at[p]
		}
		at[i] = int32(len(toks))
		toks = append(toks, t.tokens[i])
		parents = append(parents, np)
		srcs = append(srcs, t.src[i])
		scores = append(scores, score[i])
	}
	return toks, parents, srcs, scores
}
