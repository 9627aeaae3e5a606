package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sync"
)

// DefaultBlockSize is the number of token slots per KV block.
const DefaultBlockSize = 16

// BlockManager hands out fixed-size KV blocks of one backend's KV memory.
// Block b owns slots [b*BlockSize, (b+1)*BlockSize). Blocks are refcounted:
// forks and the prefix cache share blocks; a write into a shared block first
// copies it (copy-on-write through Backend.CopySlots).
//
// The prefix cache (when enabled) keeps full blocks keyed by
// hash(salt, parent hash, block tokens); it holds one reference on each cached
// block and evicts least-recently-used blocks that nobody else holds when the
// free list runs out.
//
// All methods are safe for concurrent use.
type BlockManager struct {
	mu        sync.Mutex
	blockSize int
	refs      []int32
	free      []int32
	backend   Backend

	cacheOn bool
	byHash  map[blockHash]*cacheEntry
	byBlock map[int32]*cacheEntry
	// inCache[b]: b is in byBlock; evictable counts the cached blocks that
	// only the cache holds (refs 1), kept by incref/decref/register/uncache
	// so that AvailableBlocks is O(1): it runs every scheduler step, and
	// walking byBlock (~250 blocks with the default pool) cost ~9 µs there.
	inCache   []bool
	evictable int
	tick      uint64
	hits      uint64 // blocks served from the prefix cache
	lookups   uint64 // blocks looked up
}

type blockHash [16]byte

type cacheEntry struct {
	hash    blockHash
	block   int32
	depth   int // index of the block in its sequence (0 = first)
	lastUse uint64
}

// NewBlockManager manages numBlocks blocks of blockSize slots on backend b
// (b may be nil in tests that never copy). prefixCache enables the prefix cache.
func NewBlockManager(numBlocks, blockSize int, b Backend, prefixCache bool) *BlockManager {
	if blockSize <= 0 {
		blockSize = DefaultBlockSize
	}
	m := &BlockManager{blockSize: blockSize, refs: make([]int32, numBlocks), backend: b, cacheOn: prefixCache,
		byHash: map[blockHash]*cacheEntry{}, byBlock: map[int32]*cacheEntry{}, inCache: make([]bool, numBlocks)}
	m.free = make([]int32, numBlocks)
	for i := range m.free {
		m.free[i] = int32(numBlocks - 1 - i) // pop from the end: block 0 first
	}
	return m
}

// BlockSize is the number of slots per block.
func (m *BlockManager) BlockSize() int { return m.blockSize }

// NumBlocks is the total number of blocks.
func (m *BlockManager) NumBlocks() int { return len(m.refs) }

// FreeBlocks is the number of blocks on the free list (not counting cached
// blocks that could be evicted).
func (m *BlockManager) FreeBlocks() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.free)
}

// AvailableBlocks is the number of blocks an allocation can get now: the
// free list plus cached blocks that only the prefix cache holds (evictable).
func (m *BlockManager) AvailableBlocks() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.free) + m.evictable
}

// BlocksFor is the number of blocks that hold n tokens.
func (m *BlockManager) BlocksFor(n int) int { return (n + m.blockSize - 1) / m.blockSize }

// UsedBlocks is NumBlocks - FreeBlocks: blocks held by sequences or the prefix cache.
func (m *BlockManager) UsedBlocks() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.refs) - len(m.free)
}

// CachedBlocks is the number of blocks held by the prefix cache.
func (m *BlockManager) CachedBlocks() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.byBlock)
}

// PrefixCacheStats returns blocks looked up and blocks found in the prefix cache.
func (m *BlockManager) PrefixCacheStats() (lookups, hits uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lookups, m.hits
}

// DropPrefixCache releases every cached block that no sequence holds.
func (m *BlockManager) DropPrefixCache() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for b, e := range m.byBlock {
		m.uncache(e)
		m.decref(b)
	}
}

// Refs returns the reference count of block b (for tests).
func (m *BlockManager) Refs(b int32) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return int(m.refs[b])
}

func (m *BlockManager) decref(b int32) {
	m.refs[b]--
	if m.refs[b] < 0 {
		panic(fmt.Sprintf("engine: block %d refcount below zero", b))
	}
	if m.refs[b] == 0 {
		m.free = append(m.free, b)
	}
	if m.inCache[b] && m.refs[b] == 1 {
		m.evictable++
	}
}

// incref adds a reference to block b. m.mu held.
func (m *BlockManager) incref(b int32) {
	if m.inCache[b] && m.refs[b] == 1 {
		m.evictable--
	}
	m.refs[b]++
}

// uncache removes e from the prefix cache (its reference stays for the
// caller to drop). m.mu held.
func (m *BlockManager) uncache(e *cacheEntry) {
	if m.refs[e.block] == 1 {
		m.evictable--
	}
	m.inCache[e.block] = false
	delete(m.byBlock, e.block)
	delete(m.byHash, e.hash)
}

// alloc takes one block, evicting from the prefix cache when needed. m.mu held.
func (m *BlockManager) alloc() (int32, error) {
	if len(m.free) == 0 && !m.evictOne() {
		return -1, fmt.Errorf("%d blocks of %d slots all in use: %w", len(m.refs), m.blockSize, ErrKVExhausted)
	}
	b := m.free[len(m.free)-1]
	m.free = m.free[:len(m.free)-1]
	m.refs[b] = 1
	return b, nil
}

// evictOne frees the least recently used cached block that only the cache
// holds; among equally recent ones the deepest goes first (leaves before
// their parents). m.mu held.
func (m *BlockManager) evictOne() bool {
	var best *cacheEntry
	for b, e := range m.byBlock {
		if m.refs[b] != 1 {
			continue
		}
		if best == nil || e.lastUse < best.lastUse || (e.lastUse == best.lastUse && e.depth > best.depth) ||
			(e.lastUse == best.lastUse && e.depth == best.depth && e.block < best.block) {
			best = e
		}
	}
	if best == nil {
		return false
	}
	m.uncache(best)
	m.decref(best.block)
	return true
}

// BlockTable is one sequence's list of blocks; position p lives in slot
// Blocks[p/BlockSize]*BlockSize + p%BlockSize. N is the number of positions
// whose KV is valid. A BlockTable is owned by one goroutine at a time.
type BlockTable struct {
	Blocks []int32
	N      int
}

// Slot returns the KV slot of position p (p < len(Blocks)*BlockSize).
func (m *BlockManager) Slot(t *BlockTable, p int) int32 {
	return t.Blocks[p/m.blockSize]*int32(m.blockSize) + int32(p%m.blockSize)
}

// Slots appends the slots of positions [from, to) to dst.
func (m *BlockManager) Slots(dst []int32, t *BlockTable, from, to int) []int32 {
	for p := from; p < to; p++ {
		dst = append(dst, m.Slot(t, p))
	}
	return dst
}

// Reserve makes positions [t.N, n) writable: it allocates blocks up to n and
// copies the block holding position t.N when it is shared (copy-on-write).
// It does not change t.N. On error nothing is allocated.
func (m *BlockManager) Reserve(t *BlockTable, n int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	bs := m.blockSize
	need := (n + bs - 1) / bs
	if n <= t.N {
		return nil
	}
	// copy-on-write of shared blocks we are about to write into.
	var cow []int
	for i := t.N / bs; i < len(t.Blocks) && i < need; i++ {
		if m.refs[t.Blocks[i]] > 1 {
			cow = append(cow, i)
		}
	}
	extra := max(need-len(t.Blocks), 0)
	total := extra + len(cow)
	if total == 0 {
		return nil
	}
	// make sure all allocations succeed before changing anything.
	got := make([]int32, 0, total)
	for range total {
		b, err := m.alloc()
		if err != nil {
			for _, g := range got {
				m.decref(g)
			}
			return err
		}
		got = append(got, b)
	}
	var src, dst []int32
	for j, i := range cow {
		old, nb := t.Blocks[i], got[extra+j]
		valid := 0
		if i == t.N/bs {
			valid = t.N % bs
		}
		for o := range valid {
			src = append(src, old*int32(bs)+int32(o))
			dst = append(dst, nb*int32(bs)+int32(o))
		}
	}
	if len(src) > 0 && m.backend != nil {
		if err := m.backend.CopySlots(src, dst); err != nil {
			for _, g := range got {
				m.decref(g)
			}
			return err
		}
	}
	for j, i := range cow {
		m.decref(t.Blocks[i])
		t.Blocks[i] = got[extra+j]
	}
	got = got[:extra]
	t.Blocks = append(t.Blocks, got...)
	return nil
}

// Fork returns a new table sharing all of t's blocks (refcounts + 1). The
// first write into a shared partial block copies it (see Reserve).
func (m *BlockManager) Fork(t *BlockTable) *BlockTable {
	m.mu.Lock()
	defer m.mu.Unlock()
	nt := &BlockTable{Blocks: append([]int32(nil), t.Blocks...), N: t.N}
	for _, b := range nt.Blocks {
		m.incref(b)
	}
	return nt
}

// Truncate shortens t to n positions and releases the blocks no longer needed.
func (m *BlockManager) Truncate(t *BlockTable, n int) {
	if n < 0 {
		n = 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if n < t.N {
		t.N = n
	}
	keep := (n + m.blockSize - 1) / m.blockSize
	for i := keep; i < len(t.Blocks); i++ {
		m.decref(t.Blocks[i])
	}
	if keep < len(t.Blocks) {
		t.Blocks = t.Blocks[:keep]
	}
}

// Free releases all of t's blocks.
func (m *BlockManager) Free(t *BlockTable) {
	m.Truncate(t, 0)
	t.Blocks = nil
}

// KeepTree compacts after tree verification: the KV of the new tokens at
// positions base+keep[j] moves to position base+j (j = 0..len(keep)-1) and
// t.N becomes base+len(keep); everything beyond is released. keep must be
// strictly increasing with keep[j] >= j, and positions [base, base+max(keep)]
// must be writable (they were written by the tree forward).
func (m *BlockManager) KeepTree(t *BlockTable, base int, keep []int) error {
	var src, dst []int32
	for j, k := range keep {
		if k < j || (j > 0 && k <= keep[j-1]) {
			return fmt.Errorf("engine: KeepTree: keep %v not strictly increasing", keep)
		}
		if (base+k)/m.blockSize >= len(t.Blocks) {
			return fmt.Errorf("engine: KeepTree: index %d beyond the reserved blocks", k)
		}
		if k != j {
			src = append(src, m.Slot(t, base+k))
			dst = append(dst, m.Slot(t, base+j))
		}
	}
	if len(src) > 0 && m.backend != nil {
		if err := m.backend.CopySlots(src, dst); err != nil {
			return err
		}
	}
	t.N = base + len(keep)
	m.Truncate(t, t.N)
	return nil
}

// hashBlock is the prefix-cache key of one full block.
func hashBlock(salt string, parent blockHash, tokens []int32) blockHash {
	h := sha256.New()
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(salt)))
	h.Write(n[:])
	h.Write([]byte(salt))
	h.Write(parent[:])
	buf := make([]byte, 4*len(tokens))
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(buf[4*i:], uint32(t))
	}
	h.Write(buf)
	var out blockHash
	copy(out[:], h.Sum(nil))
	return out
}

// matchPrefix looks up the full blocks of tokens (at most maxBlocks) in the
// prefix cache and returns the matched blocks (each with a new reference for
// the caller) and their hashes. Returns nothing when the cache is off.
func (m *BlockManager) matchPrefix(salt string, tokens []int32, maxBlocks int) ([]int32, []blockHash) {
	if !m.cacheOn {
		return nil, nil
	}
	bs := m.blockSize
	var parent blockHash
	var blocks []int32
	var hashes []blockHash
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tick++
	for i := 0; i < maxBlocks && (i+1)*bs <= len(tokens); i++ {
		h := hashBlock(salt, parent, tokens[i*bs:(i+1)*bs])
		m.lookups++
		e, ok := m.byHash[h]
		if !ok {
			break
		}
		m.hits++
		e.lastUse = m.tick
		m.incref(e.block)
		blocks = append(blocks, e.block)
		hashes = append(hashes, h)
		parent = h
	}
	return blocks, hashes
}

// register offers a full block to the prefix cache under hash h. The cache
// takes its own reference. A hash already present keeps its old block.
func (m *BlockManager) register(h blockHash, block int32, depth int) {
	if !m.cacheOn {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.byHash[h]; ok {
		return
	}
	if _, ok := m.byBlock[block]; ok {
		return
	}
	m.tick++
	e := &cacheEntry{hash: h, block: block, depth: depth, lastUse: m.tick}
	m.byHash[h] = e
	m.byBlock[block] = e
	m.inCache[block] = true
	if m.refs[block] == 1 {
		m.evictable++
	}
	m.incref(block)
}
