package engine

import (
	"errors"
	"fmt"
	"testing"
)

// TestTreeAppendLevels: growing a pending tree over several Forward calls
// (one depth level per call, or several levels in one call, with logits
// rows picked out of order) gives logits bit-identical to forwarding the
// whole tree at once; KeepTree then indexes the accumulated tree, and the
// KV it leaves equals plain chain decoding's, bit for bit.
func TestTreeAppendLevels(t *testing.T) {
	cfg := testConfigs()["gqa"]
	m := NewRandomModel(cfg, 5, LoadOptions{KVTokens: 512, BlockSize: 4, Threads: 2})
	V := cfg.VocabSize
	prefix := []int32{5, 9, 13, 2, 40, 7, 3}
	// level 0: 0:a 1:b; level 1: 2:c(0) 3:d(0) 4:e(1); level 2: 5:f(2) 6:g(3) 7:h(4) 8:i(4); level 3: 9:j(8) 10:k(6)
	tree := []int32{11, 12, 21, 22, 23, 31, 32, 33, 34, 41, 42}
	par := []int32{-1, -1, 0, 0, 1, 2, 3, 4, 4, 8, 6}
	whole := m.NewSequence()
	if _, err := whole.Forward(prefix, nil, []int32{}); err != nil {
		t.Fatal(err)
	}
	want, err := whole.Forward(tree, par, nil)
	if err != nil {
		t.Fatal(err)
	}
	whole.Free()

	for _, tc := range []struct {
		name string
		cuts []int     // the calls forward tree[cuts[c]:cuts[c+1]]
		rows [][]int32 // per call: LogitsRows (nil = all)
	}{
		{"levels", []int{0, 2, 5, 9, 11}, nil},
		{"mixed", []int{0, 1, 5, 11}, [][]int32{nil, {3, 0, 2}, {5, 1}}},
		{"one-by-one", []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := m.NewSequence()
			defer s.Free()
			if _, err := s.Forward(prefix, nil, []int32{}); err != nil {
				t.Fatal(err)
			}
			for c := 0; c+1 < len(tc.cuts); c++ {
				lo, hi := tc.cuts[c], tc.cuts[c+1]
				var rows []int32
				if tc.rows != nil {
					rows = tc.rows[c]
				}
				lg, err := s.Forward(tree[lo:hi], par[lo:hi], rows)
				if err != nil {
					t.Fatalf("call %d: %v", c, err)
				}
				if rows == nil {
					for j := range hi - lo {
						rows = append(rows, int32(j))
					}
				}
				if len(lg) != len(rows)*V {
					t.Fatalf("call %d: %d logits, want %d rows", c, len(lg), len(rows))
				}
				for k, j := range rows {
					node := lo + int(j)
					for v := range V {
						if lg[k*V+v] != want[node*V+v] {
							t.Fatalf("call %d node %d vocab %d: %v, whole-tree forward %v", c, node, v, lg[k*V+v], want[node*V+v])
						}
					}
				}
				if s.TreeLen() != hi {
					t.Fatalf("TreeLen %d, want %d", s.TreeLen(), hi)
				}
			}
			// keep b -> e -> i -> j (indices into the accumulated tree), then decode on.
			keep := []int{1, 4, 8, 9}
			if err := s.KeepTree(keep); err != nil {
				t.Fatal(err)
			}
			chain := append(append([]int32(nil), prefix...), 12, 23, 34, 41)
			if fmt.Sprint(s.Tokens()) != fmt.Sprint(chain) || s.TreeLen() != 0 {
				t.Fatalf("tokens %v (tree %d), want %v", s.Tokens(), s.TreeLen(), chain)
			}
			next, err := s.Forward([]int32{17}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			plain := m.NewSequence()
			defer plain.Free()
			if _, err := plain.Forward(prefix, nil, []int32{}); err != nil {
				t.Fatal(err)
			}
			var plainNext []float32
			for _, tok := range append(chain[len(prefix):], 17) {
				if plainNext, err = plain.Forward([]int32{tok}, nil, nil); err != nil {
					t.Fatal(err)
				}
			}
			for v := range V {
				if next[v] != plainNext[v] {
					t.Fatalf("after KeepTree, vocab %d: %v, plain decoding %v", v, next[v], plainNext[v])
				}
			}
			cpu := m.Backend().(*CPUBackend)
			for l := range cfg.NumLayers {
				for p := range plain.Len() {
					k1, v1 := cpu.KV(l, s.Slot(p))
					k2, v2 := cpu.KV(l, plain.Slot(p))
					for j := range k1 {
						if k1[j] != k2[j] || v1[j] != v2[j] {
							t.Fatalf("layer %d pos %d: KV differs from plain decoding", l, p)
						}
					}
				}
			}
		})
	}
	if u := m.KV().UsedBlocks() - m.KV().CachedBlocks(); u != 0 {
		t.Fatalf("%d blocks still used", u)
	}
}

// TestTreeAppendErrors: a bad parent in an appended level and a chain while
// a tree is pending fail and leave the sequence unchanged.
func TestTreeAppendErrors(t *testing.T) {
	cfg := testConfigs()["gqa"]
	m := NewRandomModel(cfg, 6, LoadOptions{KVTokens: 256, BlockSize: 4, Threads: 2})
	s := m.NewSequence()
	defer s.Free()
	if _, err := s.Forward([]int32{1, 2, 3}, nil, []int32{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Forward([]int32{4, 5}, []int32{-1, 0}, []int32{}); err != nil {
		t.Fatal(err)
	}
	used := m.KV().UsedBlocks()
	for _, tc := range []struct {
		toks, par, rows []int32
	}{
		{[]int32{6}, []int32{2}, nil},        // parent beyond the pending tree
		{[]int32{6, 7}, []int32{1, 3}, nil},  // parent is not an earlier token
		{[]int32{6}, []int32{-2}, nil},       // parent below -1
		{[]int32{6}, []int32{1}, []int32{1}}, // logits row out of range
		{[]int32{6}, []int32{1, 0}, nil},     // parents length
	} {
		if _, err := s.Forward(tc.toks, tc.par, tc.rows); err == nil {
			t.Fatalf("Forward(%v, %v, %v) succeeded", tc.toks, tc.par, tc.rows)
		}
	}
	if _, err := s.Forward([]int32{6}, nil, nil); !errors.Is(err, ErrTreePending) {
		t.Fatalf("chain with pending tree: %v, want ErrTreePending", err)
	}
	if s.TreeLen() != 2 || s.Len() != 3 || m.KV().UsedBlocks() != used {
		t.Fatalf("sequence changed by failed calls: tree %d len %d used %d (was %d)", s.TreeLen(), s.Len(), m.KV().UsedBlocks(), used)
	}
	// the tree still grows and resolves after the failures.
	if _, err := s.Forward([]int32{6}, []int32{1}, []int32{}); err != nil {
		t.Fatal(err)
	}
	if err := s.KeepTree([]int{0, 1, 2}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(s.Tokens()) != "[1 2 3 4 5 6]" {
		t.Fatalf("tokens %v", s.Tokens())
	}
}
