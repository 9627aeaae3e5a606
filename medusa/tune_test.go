package medusa

import (
	"math"
	"reflect"
	"testing"
)

// Hand-made statistics: 10 positions, 2 heads, MaxRank 3. Counted by hand:
// head-0 rank 0 at 6 positions, rank 1 at 3, miss at 1; below rank 0, head-1
// rank 0 at 4 of them and rank 2 at 1; below rank 1, head-1 rank 0 at 2.
func handStats() *Stats {
	return &Stats{Heads: 2, MaxRank: 3, Ranks: [][]uint8{
		{0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 2}, {0, NoRank},
		{1, 0}, {1, 0}, {1, NoLabel},
		{NoRank, 0},
	}}
}

func TestPathValue(t *testing.T) {
	s := handStats()
	for _, c := range []struct {
		path []int
		want float64
	}{
		{[]int{0}, 0.6}, {[]int{1}, 0.3}, {[]int{2}, 0}, {[]int{0, 0}, 0.4}, {[]int{0, 2}, 0.1},
		{[]int{1, 0}, 0.2}, {[]int{0, 1}, 0}, {[]int{0, 0, 0}, 0}, {nil, 1},
	} {
		if got := s.PathValue(c.path); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("PathValue(%v) = %v, want %v", c.path, got, c.want)
		}
	}
}

func TestGreedyTree(t *testing.T) {
	s := handStats()
	tree := s.GreedyTree(10, 5)
	// by value: [0] .6, [0 0] .4, [1] .3, [1 0] .2, [0 2] .1; zero-valued paths never join
	want := [][]int{{0}, {0, 0}, {1}, {1, 0}, {0, 2}}
	var got [][]int
	tau := 1.0
	for _, n := range tree {
		got = append(got, n.Path)
		tau += n.Value
		if n.Value != s.PathValue(n.Path) {
			t.Errorf("node %v: value %v, PathValue %v", n.Path, n.Value, s.PathValue(n.Path))
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("tree %v, want %v", got, want)
	}
	if math.Abs(tau-2.6) > 1e-12 {
		t.Errorf("expected tau %v, want 2.6", tau)
	}
	if small := s.GreedyTree(2, 5); len(small) != 2 || !reflect.DeepEqual(small[1].Path, []int{0, 0}) {
		t.Errorf("2-node tree %v: want the first two nodes of the full tree", small)
	}
	if shallow := s.GreedyTree(10, 1); len(shallow) != 2 {
		t.Errorf("depth-1 tree %v: want [0] and [1] only", shallow)
	}
	if _, err := NewTree(got, s.Heads); err != nil {
		t.Errorf("the tuned tree is not a valid tree: %v", err)
	}
}
