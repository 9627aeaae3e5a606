package engine

import (
	"errors"
	"testing"
)

// copyRecorder is a fake backend that records CopySlots calls.
type copyRecorder struct{ src, dst []int32 }

func (c *copyRecorder) Forward([]*ForwardRequest) error { return nil }
func (c *copyRecorder) CopySlots(src, dst []int32) error {
	c.src = append(c.src, src...)
	c.dst = append(c.dst, dst...)
	return nil
}
func (c *copyRecorder) Close() error { return nil }

func TestBlockManagerAllocFreeFork(t *testing.T) {
	rec := &copyRecorder{}
	m := NewBlockManager(6, 4, rec, false)
	var a BlockTable
	if err := m.Reserve(&a, 6); err != nil {
		t.Fatal(err)
	}
	a.N = 6
	if len(a.Blocks) != 2 || m.UsedBlocks() != 2 || m.FreeBlocks() != 4 {
		t.Fatalf("after reserving 6 slots: blocks %v used %d", a.Blocks, m.UsedBlocks())
	}
	if got := m.Slot(&a, 5); got != a.Blocks[1]*4+1 {
		t.Fatalf("slot of position 5 = %d", got)
	}
	f := m.Fork(&a)
	if m.Refs(a.Blocks[0]) != 2 || m.Refs(a.Blocks[1]) != 2 || m.UsedBlocks() != 2 {
		t.Fatal("fork did not share blocks")
	}
	// writing position 6 of the fork copies its partial block (2 valid slots).
	if err := m.Reserve(f, 7); err != nil {
		t.Fatal(err)
	}
	if f.Blocks[0] != a.Blocks[0] || f.Blocks[1] == a.Blocks[1] {
		t.Fatalf("CoW: fork blocks %v, original %v", f.Blocks, a.Blocks)
	}
	wantSrc := []int32{a.Blocks[1] * 4, a.Blocks[1]*4 + 1}
	wantDst := []int32{f.Blocks[1] * 4, f.Blocks[1]*4 + 1}
	if !eq32(rec.src, wantSrc) || !eq32(rec.dst, wantDst) {
		t.Fatalf("CoW copies %v -> %v, want %v -> %v", rec.src, rec.dst, wantSrc, wantDst)
	}
	if m.Refs(a.Blocks[1]) != 1 || m.UsedBlocks() != 3 {
		t.Fatalf("after CoW refs %d used %d", m.Refs(a.Blocks[1]), m.UsedBlocks())
	}
	// exhaustion: 3 free blocks, ask for 4 more in one go -> nothing allocated.
	var b BlockTable
	if err := m.Reserve(&b, 16); !errors.Is(err, ErrKVExhausted) {
		t.Fatalf("err %v, want ErrKVExhausted", err)
	}
	if m.UsedBlocks() != 3 || len(b.Blocks) != 0 {
		t.Fatal("failed Reserve leaked blocks")
	}
	m.Truncate(&a, 3)
	if len(a.Blocks) != 1 || m.UsedBlocks() != 2 {
		t.Fatalf("truncate to 3: blocks %v used %d", a.Blocks, m.UsedBlocks())
	}
	m.Free(&a)
	m.Free(f)
	if m.UsedBlocks() != 0 || m.FreeBlocks() != 6 {
		t.Fatalf("after Free used %d", m.UsedBlocks())
	}
}

func TestBlockManagerKeepTree(t *testing.T) {
	rec := &copyRecorder{}
	m := NewBlockManager(8, 4, rec, false)
	var a BlockTable
	// 3 committed positions, then a tree of 7 nodes at positions 3..9.
	if err := m.Reserve(&a, 10); err != nil {
		t.Fatal(err)
	}
	a.N = 10
	// index 0 stays; 2 -> 1 (pos 5 -> 4); 5 -> 2 (pos 8 -> 5).
	wantSrc := []int32{m.Slot(&a, 5), m.Slot(&a, 8)}
	wantDst := []int32{m.Slot(&a, 4), m.Slot(&a, 5)}
	if err := m.KeepTree(&a, 3, []int{0, 2, 5}); err != nil {
		t.Fatal(err)
	}
	if !eq32(rec.src, wantSrc) || !eq32(rec.dst, wantDst) {
		t.Fatalf("copies %v -> %v, want %v -> %v", rec.src, rec.dst, wantSrc, wantDst)
	}
	if a.N != 6 || len(a.Blocks) != 2 || m.UsedBlocks() != 2 {
		t.Fatalf("after KeepTree N %d blocks %v used %d", a.N, a.Blocks, m.UsedBlocks())
	}
	if err := m.KeepTree(&a, 3, []int{1, 0}); err == nil {
		t.Fatal("non-increasing keep accepted")
	}
}

func TestPrefixCacheEviction(t *testing.T) {
	m := NewBlockManager(4, 2, nil, true)
	toks := []int32{1, 2, 3, 4, 5, 6, 7}
	var a BlockTable
	m.Reserve(&a, 6)
	a.N = 6
	var parent blockHash
	for i := range 3 {
		h := hashBlock("", parent, toks[2*i:2*i+2])
		m.register(h, a.Blocks[i], i)
		parent = h
	}
	m.Free(&a)
	if m.CachedBlocks() != 3 || m.UsedBlocks() != 3 {
		t.Fatalf("cached %d used %d", m.CachedBlocks(), m.UsedBlocks())
	}
	blocks, _ := m.matchPrefix("", toks, 3)
	if len(blocks) != 3 {
		t.Fatalf("matched %d blocks, want 3", len(blocks))
	}
	if b2, _ := m.matchPrefix("tenant-b", toks, 3); len(b2) != 0 {
		t.Fatal("another salt matched")
	}
	if b3, _ := m.matchPrefix("", []int32{1, 2, 9, 9}, 2); len(b3) != 1 {
		t.Fatalf("diverging prompt matched %d blocks, want 1", len(b3))
	} else {
		m.Free(&BlockTable{Blocks: b3, N: 2})
	}
	held := BlockTable{Blocks: blocks, N: 6}
	// all 4 blocks needed: 1 free, cached ones are held -> exhausted.
	var b BlockTable
	if err := m.Reserve(&b, 4); !errors.Is(err, ErrKVExhausted) {
		t.Fatalf("err %v, want ErrKVExhausted while cached blocks are in use", err)
	}
	m.Free(&held)
	// now evictable: the deepest block goes first.
	if err := m.Reserve(&b, 4); err != nil {
		t.Fatal(err)
	}
	if m.CachedBlocks() != 2 {
		t.Fatalf("cached %d after one eviction, want 2", m.CachedBlocks())
	}
	if got, _ := m.matchPrefix("", toks, 3); len(got) != 2 {
		t.Fatalf("after evicting the leaf, matched %d, want 2", len(got))
	}
}

func eq32(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
