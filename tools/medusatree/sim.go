package main

import (
	"github.com/specgate/specgate/medusa"
)

// trie is a candidate tree indexed for the acceptance walk: child[n][r] is
// the node below node n (0 = the root) for rank r, 0 when absent.
type trie struct {
	child [][]int32
}

func newTrie(paths [][]int, maxRank int) *trie {
	t := &trie{child: [][]int32{make([]int32, maxRank)}}
	for _, p := range paths {
		t.add(p)
	}
	return t
}

// add inserts path (its parent must be present) and returns its node.
func (t *trie) add(p []int) int32 {
	n := int32(0)
	for _, r := range p {
		c := t.child[n][r]
		if c == 0 {
			c = int32(len(t.child))
			t.child = append(t.child, make([]int32, len(t.child[0])))
			t.child[n][r] = c
		}
		n = c
	}
	return n
}

// remove deletes the leaf path p (added last by add).
func (t *trie) remove(p []int) {
	n := int32(0)
	for _, r := range p[:len(p)-1] {
		n = t.child[n][r]
	}
	t.child[n][p[len(p)-1]] = 0
	t.child = t.child[:len(t.child)-1]
}

// accepted is the number of tree tokens greedy verification accepts at a
// position whose heads ranked the target's continuation as rk.
func (t *trie) accepted(rk []uint8) int {
	n, a := int32(0), 0
	for _, r := range rk {
		if int(r) >= len(t.child[0]) { // NoRank, NoLabel
			break
		}
		c := t.child[n][r]
		if c == 0 {
			break
		}
		n, a = c, a+1
	}
	return a
}

// simulate replays greedy speculative decoding with tree t over the
// statistics' sequences and returns tokens per decode forward: a step at
// position j (generated token j pending) accepts t.accepted(Ranks[j])
// tokens and adds the target's own token, so the next step starts that
// many positions plus one further on. This is what the engine measures
// when its tree-verification forward gives the same hidden rows as plain
// decoding (to rounding), without running it; unlike the expected τ (1 +
// the tree's path values, averaged over every position) it visits only the
// positions where steps start, which follow failures more often than not.
// A sequence ends at the position whose head-0 label is missing.
func simulate(st *medusa.Stats, t *trie) float64 {
	tokens, steps := 0, 0
	start := 0
	for i, rk := range st.Ranks {
		if rk[0] != medusa.NoLabel {
			continue
		}
		// sequence at positions [start, i]: i-start+1 generated tokens, the
		// first from the prefill
		n := i - start + 1
		tokens += n - 1
		for j := 0; j < n-1; {
			j += t.accepted(st.Ranks[start+j]) + 1
			steps++
		}
		start = i + 1
	}
	return float64(tokens) / float64(max(steps, 1))
}

// simGreedyTree grows a tree of up to nodes paths (depth <= maxDepth),
// each time adding the candidate (a child of the root or of a chosen path,
// rank < MaxRank) that raises the simulated τ on st the most: the Medusa
// authors' search by accepted length per node, scored on the positions
// where decoding steps actually start. Parents come first, so every
// prefix is a tree. Returns the paths and the simulated τ after each.
func simGreedyTree(st *medusa.Stats, nodes, maxDepth int) ([][]int, []float64) {
	maxDepth = min(maxDepth, st.Heads)
	t := newTrie(nil, st.MaxRank)
	var paths [][]int
	var taus []float64
	cands := [][]int{}
	addChildren := func(parent []int) {
		if len(parent) >= maxDepth {
			return
		}
		for r := range st.MaxRank {
			cands = append(cands, append(append([]int(nil), parent...), r))
		}
	}
	addChildren(nil)
	for len(paths) < nodes && len(cands) > 0 {
		best, bestTau := -1, -1.0
		for ci, c := range cands {
			t.add(c)
			if tau := simulate(st, t); tau > bestTau {
				best, bestTau = ci, tau
			}
			t.remove(c)
		}
		c := cands[best]
		cands = append(cands[:best], cands[best+1:]...)
		t.add(c)
		paths = append(paths, c)
		taus = append(taus, bestTau)
		addChildren(c)
	}
	return paths, taus
}

// allPaths is every path of depth 1..depth whose ranks are all < r, parents
// first: the tree of every top-r candidate of every head (r + r² + … + r^depth
// nodes).
func allPaths(depth, r int) [][]int {
	var out [][]int
	level := [][]int{nil}
	for range depth {
		var next [][]int
		for _, p := range level {
			for x := range r {
				next = append(next, append(append([]int(nil), p...), x))
			}
		}
		out = append(out, next...)
		level = next
	}
	return out
}

// expectedTau is 1 + the mean number of tree tokens accepted over every
// position that has a head-0 label (the per-position statistic, not the
// replay of decoding that simulate is).
func expectedTau(st *medusa.Stats, t *trie) float64 {
	sum, n := 0, 0
	for _, rk := range st.Ranks {
		if rk[0] == medusa.NoLabel {
			continue
		}
		sum += t.accepted(rk)
		n++
	}
	return 1 + float64(sum)/float64(max(n, 1))
}

// withHead0Oracle returns st with head 0 always right (rank 0 wherever it
// has a label): what a perfect first head would give the same tree.
func withHead0Oracle(st *medusa.Stats) *medusa.Stats {
	o := &medusa.Stats{Heads: st.Heads, MaxRank: st.MaxRank}
	for _, rk := range st.Ranks {
		c := append([]uint8(nil), rk...)
		if c[0] != medusa.NoLabel {
			c[0] = 0
		}
		o.Ranks = append(o.Ranks, c)
	}
	return o
}
