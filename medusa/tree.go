package medusa

import (
	"fmt"
	"slices"
)

// Tree is a sparse Medusa candidate tree in the reference's "choices"
// notation: node i is the path Paths[i] = [r1, ..., rd], meaning "the
// r1-th most likely token of head 0, then below it the r2-th of head 1,
// ...": depth d uses head d-1. Paths are in priority order (a proposal with
// a node budget takes the first ones) and every path's parent comes before
// it, so any prefix of the list is a tree.
type Tree struct {
	Paths  [][]int
	Parent []int // index of the parent path, -1 for depth 1
	TopK   []int // per depth: the largest rank used + 1
}

// NewTree validates paths (non-empty, ranks >= 0, depth <= heads, no
// duplicates, parents first) and indexes them.
func NewTree(paths [][]int, heads int) (*Tree, error) {
	t := &Tree{Paths: make([][]int, len(paths)), Parent: make([]int, len(paths))}
	index := map[string]int{}
	for i, p := range paths {
		if len(p) == 0 {
			return nil, fmt.Errorf("%w: path %d is empty", ErrFormat, i)
		}
		if len(p) > heads {
			return nil, fmt.Errorf("%w: path %d %v is deeper than the %d heads", ErrFormat, i, p, heads)
		}
		for _, r := range p {
			if r < 0 || r > 1<<16 {
				return nil, fmt.Errorf("%w: path %d %v: rank %d out of range", ErrFormat, i, p, r)
			}
		}
		k := fmt.Sprint(p)
		if _, dup := index[k]; dup {
			return nil, fmt.Errorf("%w: path %d %v appears twice", ErrFormat, i, p)
		}
		t.Parent[i] = -1
		if len(p) > 1 {
			pi, ok := index[fmt.Sprint(p[:len(p)-1])]
			if !ok {
				return nil, fmt.Errorf("%w: path %d %v comes before its parent %v (or the parent is missing)", ErrFormat, i, p, p[:len(p)-1])
			}
			t.Parent[i] = pi
		}
		index[k] = i
		t.Paths[i] = slices.Clone(p)
		for len(t.TopK) < len(p) {
			t.TopK = append(t.TopK, 0)
		}
		t.TopK[len(p)-1] = max(t.TopK[len(p)-1], p[len(p)-1]+1)
	}
	return t, nil
}

// Prefix returns the tree of the first n paths (all when n <= 0 or n >=
// len).
func (t *Tree) Prefix(n int) *Tree {
	if n <= 0 || n >= len(t.Paths) {
		return t
	}
	out, _ := NewTree(t.Paths[:n], t.Depth()) // a prefix of a valid tree is valid
	return out
}

// depthOf is the depth of the tree's first n paths (the heads a proposal
// with a budget of n nodes needs).
func (t *Tree) depthOf(n int) int {
	d := 0
	for _, p := range t.Paths[:min(max(n, 0), len(t.Paths))] {
		d = max(d, len(p))
	}
	return d
}

// Depth is the deepest path's length.
func (t *Tree) Depth() int { return len(t.TopK) }

// ChainTree is the tree of one candidate per head: [0], [0 0], ...
func ChainTree(depth int) [][]int {
	var out [][]int
	for d := 1; d <= depth; d++ {
		out = append(out, make([]int, d))
	}
	return out
}

// lay takes the tree's paths in priority order while the budget (nodes),
// maxDepth and the parent allow: a path is taken when fewer than budget are,
// it is at most maxDepth deep, its last rank has a candidate (hasRank(depth,
// rank); called only within maxDepth) and its parent path was taken. take
// gets each taken path's index and its parent's node (nodes are numbered in
// the order taken; -1: below the root). Medusa's layTree and Hydra's
// proposeHydra both select their nodes with it.
func (t *Tree) lay(budget, maxDepth int, hasRank func(depth, rank int) bool, take func(pi int, parent int32)) {
	node := make([]int32, len(t.Paths)) // path -> node, -1: not taken
	n := 0
	for pi, path := range t.Paths {
		node[pi] = -1
		if n >= budget || len(path) > maxDepth || !hasRank(len(path), path[len(path)-1]) {
			continue
		}
		par := int32(-1)
		if q := t.Parent[pi]; q >= 0 {
			if node[q] < 0 {
				continue
			}
			par = node[q]
		}
		node[pi] = int32(n)
		n++
		take(pi, par)
	}
}
