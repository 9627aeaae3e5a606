// Package speculative holds the engine's draft sources (engine.Proposer):
// a draft-model proposer (chain, static tree, dynamic EAGLE-2-style tree;
// NewDraft), model-free proposers over text the gateway holds (Suffix,
// Known), token trees, and the speculative benchmark. Verification and the
// adaptive draft budget live in the engine.
package speculative

import (
	"errors"
	"fmt"
)

// ErrBadTree is wrapped by Tree.Validate errors.
var ErrBadTree = errors.New("speculative: invalid token tree")

// Tree is a proposed token tree hanging below the pending token (the root,
// which is not stored). Node i has token Tokens[i], parent Parents[i] (an
// index < i, or -1 for a child of the root) and depth Depths[i] (1 for a
// child of the root). Nodes are stored in creation order, so parents always
// precede children and siblings appear in the order they were proposed
// (for sampled trees: draw order, which stochastic verification relies on).
//
// Positions and attention follow: with the root at absolute position base,
// node i sits at base+Depths[i] and attends to the committed context, the
// root and its own ancestors (and itself): see Mask and Positions. A chain
// is the tree where Parents[i] = i-1.
type Tree struct {
	Tokens  []int32
	Parents []int32
	Depths  []int32
}

// Chain returns the tree of a linear proposal tokens[0], tokens[1], ...
// The tree copies tokens.
func Chain(tokens []int32) *Tree {
	t := &Tree{}
	for i, tok := range tokens {
		t.Add(tok, int32(i)-1)
	}
	return t
}

// Len is the number of nodes (the root excluded).
func (t *Tree) Len() int { return len(t.Tokens) }

// Add appends a node with token tok below parent (-1 = root) and returns its
// index. It panics when parent is not an existing node: callers build trees
// from their own indices (Validate checks trees from elsewhere).
func (t *Tree) Add(tok, parent int32) int {
	if parent < -1 || int(parent) >= len(t.Tokens) {
		panic(fmt.Sprintf("speculative: Tree.Add: parent %d not in [-1, %d)", parent, len(t.Tokens)))
	}
	d := int32(1)
	if parent >= 0 {
		d = t.Depths[parent] + 1
	}
	t.Tokens = append(t.Tokens, tok)
	t.Parents = append(t.Parents, parent)
	t.Depths = append(t.Depths, d)
	return len(t.Tokens) - 1
}

// MaxDepth is the depth of the deepest node (0 for an empty tree).
func (t *Tree) MaxDepth() int {
	m := int32(0)
	for _, d := range t.Depths {
		m = max(m, d)
	}
	return int(m)
}

// IsChain reports whether every node's parent is the node before it.
func (t *Tree) IsChain() bool {
	for i, p := range t.Parents {
		if int(p) != i-1 {
			return false
		}
	}
	return true
}

// Children returns the children of node i (-1 = root) in proposal order.
// The slice is new.
func (t *Tree) Children(i int) []int {
	var out []int
	for j, p := range t.Parents {
		if int(p) == i {
			out = append(out, j)
		}
	}
	return out
}

// Path returns the node indices from the root's child down to node i
// (root first; empty for i = -1).
func (t *Tree) Path(i int) []int {
	if i < 0 {
		return nil
	}
	out := make([]int, t.Depths[i])
	for j := len(out) - 1; j >= 0; j-- {
		out[j] = i
		i = int(t.Parents[i])
	}
	return out
}

// PathTokens returns the tokens along Path(i).
func (t *Tree) PathTokens(i int) []int32 {
	p := t.Path(i)
	out := make([]int32, len(p))
	for j, n := range p {
		out[j] = t.Tokens[n]
	}
	return out
}

// Positions returns the absolute position of every node when the root sits
// at base: base + Depths[i]. The slice is new.
func (t *Tree) Positions(base int) []int32 {
	out := make([]int32, len(t.Tokens))
	for i, d := range t.Depths {
		out[i] = int32(base) + d
	}
	return out
}

// Mask returns the tree attention mask over the nodes, row-major [n][n]:
// Mask[i*n+j] is true when node i may attend to node j, i.e. j is i or an
// ancestor of i. Every node also attends to the root and the committed
// context (not represented). For a chain the mask is lower-triangular.
func (t *Tree) Mask() []bool {
	n := len(t.Tokens)
	m := make([]bool, n*n)
	for i := range n {
		for j := i; j >= 0; j = int(t.Parents[j]) {
			m[i*n+j] = true
		}
	}
	return m
}

// Validate checks the tree's invariants: equal slice lengths, tokens in
// [0, vocab), parents in [-1, i), depths consistent with parents, and no two
// siblings with the same token (a duplicate branch would waste a slot and
// make acceptance ambiguous). Errors wrap ErrBadTree.
func (t *Tree) Validate(vocab int) error {
	n := len(t.Tokens)
	if len(t.Parents) != n || len(t.Depths) != n {
		return fmt.Errorf("%w: %d tokens, %d parents, %d depths", ErrBadTree, n, len(t.Parents), len(t.Depths))
	}
	type edge struct {
		parent int32
		tok    int32
	}
	seen := make(map[edge]int, n)
	for i := range n {
		tok, p := t.Tokens[i], t.Parents[i]
		if tok < 0 || int(tok) >= vocab {
			return fmt.Errorf("%w: node %d: token %d not in [0, %d)", ErrBadTree, i, tok, vocab)
		}
		if p < -1 || int(p) >= i {
			return fmt.Errorf("%w: node %d: parent %d not in [-1, %d)", ErrBadTree, i, p, i)
		}
		want := int32(1)
		if p >= 0 {
			want = t.Depths[p] + 1
		}
		if t.Depths[i] != want {
			return fmt.Errorf("%w: node %d: depth %d, want %d", ErrBadTree, i, t.Depths[i], want)
		}
		if j, dup := seen[edge{p, tok}]; dup {
			return fmt.Errorf("%w: nodes %d and %d: same token %d below parent %d", ErrBadTree, j, i, tok, p)
		}
		seen[edge{p, tok}] = i
	}
	return nil
}
