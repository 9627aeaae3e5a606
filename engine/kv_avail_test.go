package engine

import (
	"math/rand/v2"
	"testing"
)

// availableByWalk is AvailableBlocks as a walk over the prefix cache (the
// definition: free blocks plus cached blocks only the cache holds).
func availableByWalk(m *BlockManager) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.free)
	for b := range m.byBlock {
		if m.refs[b] == 1 {
			n++
		}
	}
	return n
}

// TestAvailableBlocksCounter: the O(1) count of evictable cached blocks
// equals the walk after every operation of a random mix of cached
// sequences (prefix hits, commits that register blocks), forks with
// copy-on-write, truncation, trees kept and dropped, frees, evictions under
// a full pool and dropping the cache.
func TestAvailableBlocksCounter(t *testing.T) {
	cfg := genConfig()
	m := NewRandomModel(cfg, 3, LoadOptions{KVTokens: 24 * 4, BlockSize: 4, Threads: 1})
	kv := m.KV()
	r := rand.New(rand.NewPCG(1, 2))
	// a few shared prefixes so that sequences hit each other's blocks
	prefixes := make([][]int32, 3)
	for i := range prefixes {
		prefixes[i] = randTokens(r, 12, cfg.VocabSize)
	}
	var live []*Sequence
	check := func(op string, i int) {
		t.Helper()
		if got, want := kv.AvailableBlocks(), availableByWalk(kv); got != want {
			t.Fatalf("op %d (%s): AvailableBlocks %d, walk %d", i, op, got, want)
		}
	}
	evictions := 0
	for i := range 3000 {
		switch k := r.IntN(10); {
		case k < 3 && len(live) < 6: // a new cached sequence with a known prefix
			p := append(append([]int32(nil), prefixes[r.IntN(len(prefixes))]...), randTokens(r, 1+r.IntN(6), cfg.VocabSize)...)
			s, cached := m.NewCachedSequence(p, "")
			if _, err := s.Forward(p[cached:], nil, []int32{}); err != nil {
				s.Free()
				evictions++
				check("refused prompt", i)
				continue
			}
			live = append(live, s)
			check("cached sequence", i)
		case k < 5 && len(live) > 0: // decode a few tokens (commits register blocks)
			s := live[r.IntN(len(live))]
			if s.TreeLen() > 0 {
				continue
			}
			if _, err := s.Forward(randTokens(r, 1+r.IntN(5), cfg.VocabSize), nil, []int32{}); err != nil {
				evictions++
			}
			check("decode", i)
		case k < 6 && len(live) > 0 && len(live) < 6: // fork (copy-on-write on the next write)
			f := live[r.IntN(len(live))]
			if f.TreeLen() > 0 {
				continue
			}
			live = append(live, f.Fork())
			check("fork", i)
		case k < 7 && len(live) > 0: // a tree, then keep a path or drop it
			s := live[r.IntN(len(live))]
			if s.TreeLen() > 0 {
				continue
			}
			if _, err := s.Forward(randTokens(r, 3, cfg.VocabSize), []int32{-1, 0, 0}, []int32{}); err != nil {
				continue
			}
			keep := []int{}
			if r.IntN(2) == 0 {
				keep = []int{0, 2}
			}
			if err := s.KeepTree(keep); err != nil {
				t.Fatal(err)
			}
			check("tree", i)
		case k < 8 && len(live) > 0: // truncate
			s := live[r.IntN(len(live))]
			if s.TreeLen() > 0 {
				continue
			}
			s.Truncate(r.IntN(s.Len() + 1))
			check("truncate", i)
		case k < 9 && len(live) > 0: // free
			j := r.IntN(len(live))
			live[j].Free()
			live = append(live[:j], live[j+1:]...)
			check("free", i)
		case k == 9 && r.IntN(20) == 0:
			kv.DropPrefixCache()
			check("drop cache", i)
		}
	}
	for _, s := range live {
		s.Free()
	}
	check("end", -1)
	if kv.CachedBlocks() == 0 || evictions == 0 {
		t.Logf("cached %d blocks at the end, %d refused forwards", kv.CachedBlocks(), evictions)
	}
	if got := kv.AvailableBlocks(); got != kv.NumBlocks() {
		t.Fatalf("everything freed: %d of %d blocks available", got, kv.NumBlocks())
	}
}
