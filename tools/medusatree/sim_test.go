package main

import (
	"math"
	"testing"

	"github.com/specgate/specgate/medusa"
)

const (
	nr = medusa.NoRank
	nl = medusa.NoLabel
)

// Two sequences of 5 and 3 generated tokens, 2 heads, MaxRank 3; replayed
// by hand below.
var handStats = &medusa.Stats{Heads: 2, MaxRank: 3, Ranks: [][]uint8{
	{0, 0}, {1, nr}, {0, 1}, {0, nl}, {nl, nl}, // sequence A
	{2, 0}, {0, nl}, {nl, nl}, // sequence B
}}

func TestSimulateByHand(t *testing.T) {
	for _, tc := range []struct {
		name  string
		paths [][]int
		want  float64
	}{
		// no tree: one token per forward; A has 4 decode tokens, B 2
		{"empty", nil, 1},
		// [0]: A: pos 0 accepts 1 -> pos 2 accepts 1 -> pos 4 (end): 2 steps for 4 tokens;
		// B: pos 0 (rank 2) accepts 0 -> pos 1 accepts 1 -> pos 3 (end): 2 steps for 2 tokens
		{"[0]", [][]int{{0}}, 6.0 / 4},
		// [0],[0,0]: A: pos 0 accepts 2 -> pos 3 accepts 1 (head 1 has no label) -> pos 5: 2 steps;
		// B: pos 0 accepts 0, pos 1 accepts 1: 2 steps
		{"chain", [][]int{{0}, {0, 0}}, 6.0 / 4},
		// [0],[2],[2,0]: A as "[0]" (2 steps); B: pos 0 accepts [2,0] = 2 -> pos 3: 1 step
		{"wide", [][]int{{0}, {2}, {2, 0}}, 6.0 / 3},
	} {
		got := simulate(handStats, newTrie(tc.paths, handStats.MaxRank))
		if math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: simulated tau %.4f, want %.4f", tc.name, got, tc.want)
		}
	}
}

func TestSimGreedyTreeByHand(t *testing.T) {
	paths, taus := simGreedyTree(handStats, 3, 2)
	// first node: [0] gives 6/4; [1] 6/5 (A: steps at 0, 1, 3; B: 0, 1); [2] 6/5 (A: 4 steps; B: 1)
	if len(paths) == 0 || len(paths[0]) != 1 || paths[0][0] != 0 || math.Abs(taus[0]-1.5) > 1e-12 {
		t.Fatalf("first node %v tau %v, want [0] 1.5", paths, taus)
	}
	for i := 1; i < len(taus); i++ {
		if taus[i] < taus[i-1]-1e-12 {
			t.Errorf("tau fell from %.4f to %.4f at node %d", taus[i-1], taus[i], i+1)
		}
	}
	// parents first
	seen := map[string]bool{"[]": true}
	for _, p := range paths {
		if !seen[fmtPath(p[:len(p)-1])] {
			t.Errorf("path %v before its parent", p)
		}
		seen[fmtPath(p)] = true
	}
}

func fmtPath(p []int) string {
	s := "["
	for i, r := range p {
		if i > 0 {
			s += " "
		}
		s += string(rune('0' + r))
	}
	return s + "]"
}

func TestCeilingHelpers(t *testing.T) {
	if n := len(allPaths(5, 2)); n != 2+4+8+16+32 {
		t.Fatalf("allPaths(5, 2): %d paths", n)
	}
	all := newTrie(allPaths(2, 3), 3)
	// every top-3 path of 2 heads: A: pos 0 accepts 2 -> pos 3 accepts 1 -> end (2 steps);
	// B: pos 0 accepts 2 -> end (1 step): 6 tokens in 3 steps
	if got := simulate(handStats, all); math.Abs(got-2) > 1e-12 {
		t.Fatalf("simulate(all top-3) = %v, want 2", got)
	}
	// expected: accepted per labelled position A 2,1,2,1 B 2,1 = 9 over 6 positions
	if got := expectedTau(handStats, all); math.Abs(got-(1+9.0/6)) > 1e-12 {
		t.Fatalf("expectedTau = %v, want %v", got, 1+9.0/6)
	}
	// head 0 always right with the tree [0]: A: 0 -> 2 -> 4: 2 steps; B: 0 -> 2: 1 step... B has
	// 2 decode tokens: pos 0 accepts 1 -> pos 2 (end): 1 step
	if got := simulate(withHead0Oracle(handStats), newTrie([][]int{{0}}, 3)); math.Abs(got-6.0/3) > 1e-12 {
		t.Fatalf("oracle head 0, tree [0]: %v, want 2", got)
	}
}
