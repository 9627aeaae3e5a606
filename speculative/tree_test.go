package speculative

import (
	"errors"
	"fmt"
	"testing"
)

// exampleTree:        root
//
//	     /   |   \
//	   0:10 1:11 2:12
//	   /  \        |
//	3:20  4:21   5:22
//	 |
//	6:30
func exampleTree() *Tree {
	t := &Tree{}
	t.Add(10, -1)
	t.Add(11, -1)
	t.Add(12, -1)
	t.Add(20, 0)
	t.Add(21, 0)
	t.Add(22, 2)
	t.Add(30, 3)
	return t
}

func TestTreeStructure(t *testing.T) {
	tr := exampleTree()
	if err := tr.Validate(100); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(tr.Depths), "[1 1 1 2 2 2 3]"; got != want {
		t.Errorf("depths %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(tr.Positions(7)), "[8 8 8 9 9 9 10]"; got != want {
		t.Errorf("positions %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(tr.Path(6), tr.PathTokens(6)), "[0 3 6] [10 20 30]"; got != want {
		t.Errorf("path %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(tr.Children(-1), tr.Children(0), tr.Children(1)), "[0 1 2] [3 4] []"; got != want {
		t.Errorf("children %s, want %s", got, want)
	}
	if tr.MaxDepth() != 3 || tr.IsChain() {
		t.Errorf("MaxDepth %d IsChain %v", tr.MaxDepth(), tr.IsChain())
	}
	// the mask, written out by hand: row i lists the nodes i attends to.
	want := [][]int{{0}, {1}, {2}, {0, 3}, {0, 4}, {2, 5}, {0, 3, 6}}
	m := tr.Mask()
	n := tr.Len()
	for i := range n {
		var got []int
		for j := range n {
			if m[i*n+j] {
				got = append(got, j)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want[i]) {
			t.Errorf("mask row %d attends %v, want %v", i, got, want[i])
		}
	}
}

func TestChain(t *testing.T) {
	c := Chain([]int32{5, 6, 7, 8})
	if err := c.Validate(10); err != nil {
		t.Fatal(err)
	}
	if !c.IsChain() || fmt.Sprint(c.Parents) != "[-1 0 1 2]" || fmt.Sprint(c.Positions(0)) != "[1 2 3 4]" {
		t.Fatalf("chain %+v", c)
	}
	m := c.Mask()
	for i := range 4 {
		for j := range 4 {
			if m[i*4+j] != (j <= i) {
				t.Fatalf("chain mask [%d][%d] = %v, want lower-triangular", i, j, m[i*4+j])
			}
		}
	}
}

func TestTreeValidate(t *testing.T) {
	cases := []struct {
		name string
		tree Tree
	}{
		{"lengths", Tree{Tokens: []int32{1, 2}, Parents: []int32{-1}, Depths: []int32{1, 2}}},
		{"token range", Tree{Tokens: []int32{100}, Parents: []int32{-1}, Depths: []int32{1}}},
		{"negative token", Tree{Tokens: []int32{-1}, Parents: []int32{-1}, Depths: []int32{1}}},
		{"forward parent", Tree{Tokens: []int32{1, 2}, Parents: []int32{1, -1}, Depths: []int32{2, 1}}},
		{"self parent", Tree{Tokens: []int32{1}, Parents: []int32{0}, Depths: []int32{1}}},
		{"parent below -1", Tree{Tokens: []int32{1}, Parents: []int32{-2}, Depths: []int32{1}}},
		{"depth", Tree{Tokens: []int32{1, 2}, Parents: []int32{-1, 0}, Depths: []int32{1, 1}}},
		{"duplicate sibling", Tree{Tokens: []int32{1, 1}, Parents: []int32{-1, -1}, Depths: []int32{1, 1}}},
	}
	for _, c := range cases {
		if err := c.tree.Validate(10); !errors.Is(err, ErrBadTree) {
			t.Errorf("%s: err %v, want ErrBadTree", c.name, err)
		}
	}
	ok := Tree{Tokens: []int32{1, 1}, Parents: []int32{-1, 0}, Depths: []int32{1, 2}}
	if err := ok.Validate(10); err != nil {
		t.Errorf("same token at different depths: %v", err)
	}
}

func TestTopNAndDraws(t *testing.T) {
	q := []float64{0.1, 0.3, 0, 0.3, 0.2, 0.1}
	if got := fmt.Sprint(topN(q, 3)); got != "[1 3 4]" {
		t.Errorf("topN 3 = %s, want [1 3 4] (ties: lower id first)", got)
	}
	if got := fmt.Sprint(topN(q, 10)); got != "[1 3 4 0 5]" {
		t.Errorf("topN 10 = %s, want the 5 nonzero tokens", got)
	}
	// draws without replacement: distinct, never a zero-probability token,
	// support exhausted stops early.
	us := []float64{0.99, 0.0, 0.5, 0.5, 0.5, 0.5}
	i := 0
	u := func() float64 { i++; return us[i-1] }
	got := drawWithoutReplacement(q, 10, u)
	seen := map[int32]bool{}
	for _, x := range got {
		if q[x] == 0 || seen[x] {
			t.Fatalf("draws %v: zero-probability or repeated token", got)
		}
		seen[x] = true
	}
	if len(got) != 5 || got[0] != 5 || got[1] != 0 {
		t.Fatalf("draws %v: want 5 draws starting 5 (u=.99), 0 (u=0)", got)
	}
}
