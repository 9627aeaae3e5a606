package engine

import (
	"errors"
	"fmt"
)

// ErrTreePending is returned by Sequence.Forward while a tree forward awaits KeepTree.
var ErrTreePending = errors.New("engine: sequence has an unresolved token tree (call KeepTree)")

// Sequence is one token sequence's KV state in a Model: a block table plus
// the committed tokens whose KV it holds (positions 0..Len()-1). It is used
// by one goroutine at a time; different sequences of one model may be used
// from different goroutines (forwards are serialized by the model).
//
// Life cycle: NewSequence → Forward (chain: tokens are committed at once;
// tree: they stay pending until KeepTree) → ... → Free. A draft model keeps
// its own Sequence of its own Model in step with the target's.
type Sequence struct {
	m      *Model
	t      BlockTable
	tokens []int32

	// pending tree, accumulated over the Forwards with parents since the
	// last KeepTree (nil when none): tokens, parents (tree indices, -1 = the
	// last committed token) and positions.
	tree        []int32
	treeParents []int32
	treePos     []int32

	// prefix cache: hashes[b] is the key of committed full block b.
	cacheOn bool
	salt    string
	hashes  []blockHash
	freed   bool
}

// NewSequence starts an empty sequence that does not use the prefix cache.
func (m *Model) NewSequence() *Sequence { return &Sequence{m: m} }

// NewCachedSequence starts a sequence that reuses prompt's full blocks from
// the prefix cache (keyed with salt) and offers its own full blocks to the
// cache as they are committed. At most len(prompt)-1 tokens are matched, so
// the caller always has a token left to forward for logits. It returns the
// number of prompt tokens already in the KV (a multiple of the block size);
// Tokens() is then prompt[:cached].
func (m *Model) NewCachedSequence(prompt []int32, salt string) (*Sequence, int) {
	s := &Sequence{m: m, cacheOn: m.kv.cacheOn, salt: salt}
	if !s.cacheOn || len(prompt) < 2 {
		return s, 0
	}
	bs := m.kv.BlockSize()
	blocks, hashes := m.kv.matchPrefix(salt, prompt, (len(prompt)-1)/bs)
	s.t.Blocks = blocks
	s.t.N = len(blocks) * bs
	s.hashes = hashes
	s.tokens = append([]int32(nil), prompt[:s.t.N]...)
	return s, s.t.N
}

// Model returns the sequence's model.
func (s *Sequence) Model() *Model { return s.m }

// Len is the number of committed tokens (their KV is valid at positions [0, Len)).
func (s *Sequence) Len() int { return len(s.tokens) }

// Tokens returns the committed tokens. The slice is owned by the sequence:
// read-only, valid until the next call that changes the sequence.
func (s *Sequence) Tokens() []int32 { return s.tokens }

// Table returns the block table (read-only; for backends and tests).
func (s *Sequence) Table() *BlockTable { return &s.t }

// Slot returns the KV slot of position p (p < Len(), or inside a pending tree).
func (s *Sequence) Slot(p int) int32 { return s.m.kv.Slot(&s.t, p) }

// BatchItem is one sequence's part of Model.ForwardBatch. Tokens, Parents
// and LogitsRows mean what they mean in ForwardRequest. Logits receives
// rows*VocabSize float32 (allocated when nil or too small). With
// WantHidden, Hidden receives the final hidden state of the same rows,
// rows*HiddenSize (allocated when nil or too small).
type BatchItem struct {
	Seq        *Sequence
	Tokens     []int32
	Parents    []int32
	LogitsRows []int32
	Logits     []float32
	WantHidden bool
	Hidden     []float32
	// HiddenOnly: only Hidden is filled (WantHidden implied), Logits is
	// left alone and the LM head skipped; the backend must be a
	// HiddenOnlyForwarder (Model.SupportsHiddenOnly).
	HiddenOnly bool
	// Sample: the backend samples the item's one logits row on the device
	// (DeviceSampler; devsample.go) instead of filling Logits.
	Sample *RowSample
	// Heads > 0: the backend's draft heads run on the item's logits rows
	// and HeadTop receives their top-k; ArgmaxOnly: Argmax receives each
	// row's argmax instead of Logits (devheads.go).
	Heads      int
	HeadTop    []int32
	ArgmaxOnly bool
	Argmax     []int32
}

// Forward appends tokens to the sequence and returns their logits
// (row-major [rows][VocabSize], rows = LogitsRows or all tokens; owned by
// the caller). With parents == nil the tokens form a chain and are committed.
// With parents they form a token tree that stays pending until KeepTree:
// parents[i] is the index of token i's parent in the pending tree (the
// tokens of earlier tree forwards since the last KeepTree, then this call's
// tokens 0..i-1), or -1 for the last committed token; parents[i] <
// TreeLen()+i. Token i gets position Len()+depth(i) and attends to the
// committed tokens, its ancestors and itself. So a tree can be grown one
// level per call (a draft proposer forwards only each new depth level), and
// the logits equal those of forwarding the whole tree at once. LogitsRows
// index this call's tokens. Errors: ErrContextLength, ErrKVExhausted,
// ErrTreePending (a chain while a tree is pending); on error the sequence is
// unchanged.
func (s *Sequence) Forward(tokens, parents, logitsRows []int32) ([]float32, error) {
	it := []BatchItem{{Seq: s, Tokens: tokens, Parents: parents, LogitsRows: logitsRows}}
	if err := s.m.ForwardBatch(it); err != nil {
		return nil, err
	}
	return it[0].Logits, nil
}

// DecodeGreedy appends k greedy decode steps in one backend call when the
// backend is a GreedyStepper: token (the pending token, not yet in the KV)
// and the first k-1 results are fed, and the k results are returned (the
// last one pending). A backend without GreedyStepper gives an error
// wrapping ErrBackendMissing. Fewer than k steps run when
// max_position_embeddings would be passed.
func (s *Sequence) DecodeGreedy(token int32, k int) ([]int32, error) {
	m := s.m
	st, ok := m.backend.(GreedyStepper)
	if !ok {
		return nil, fmt.Errorf("engine: DecodeGreedy: %T is not a GreedyStepper: %w", m.backend, ErrBackendMissing)
	}
	if s.freed {
		return nil, errFreed
	}
	if s.tree != nil {
		return nil, ErrTreePending
	}
	m.fwd.Lock()
	defer m.fwd.Unlock()
	base := s.t.N
	k = min(k, m.Config.MaxPositions-base)
	if k < 1 {
		return nil, fmt.Errorf("engine: position %d >= max_position_embeddings %d: %w", base, m.Config.MaxPositions, ErrContextLength)
	}
	if err := m.kv.Reserve(&s.t, base+k); err != nil {
		m.kv.Truncate(&s.t, base)
		return nil, err
	}
	cached := m.kv.Slots(make([]int32, 0, base), &s.t, 0, base)
	slots := m.kv.Slots(make([]int32, 0, k), &s.t, base, base+k)
	out := make([]int32, k)
	if err := st.DecodeGreedy(token, int32(base), cached, slots, out); err != nil {
		m.kv.Truncate(&s.t, base)
		return nil, err
	}
	s.t.N += k
	s.tokens = append(s.tokens, token)
	s.tokens = append(s.tokens, out[:k-1]...)
	s.offerBlocks()
	return out, nil
}

// TreeLen is the number of tokens of the pending tree (0 when none). Their
// KV occupies positions [Len(), Len()+TreeLen()) of the block table, in tree
// index order.
func (s *Sequence) TreeLen() int { return len(s.tree) }

// itemPlan is how one BatchItem maps onto backend requests: one request,
// or, when the item appends to a pending tree, one request per attachment
// point in the pending tree (see treeRequests), whose logits rows are
// scattered back into the item's order.
type itemPlan struct {
	reqs []*ForwardRequest
	// scatter[r] lists, per logits row of reqs[r], the row of the item's
	// Logits it belongs to (nil when reqs[r] writes the item's Logits directly).
	scatter [][]int
	pos     []int32 // positions of the new tokens
}

// ForwardBatch runs one batched backend forward over several sequences of
// this model (each at most once), as Sequence.Forward does for one.
func (m *Model) ForwardBatch(items []BatchItem) error {
	V, H := m.Config.VocabSize, m.Config.HiddenSize
	plans := make([]itemPlan, len(items))
	prepared := 0
	rollback := func() {
		for _, it := range items[:prepared] {
			m.kv.Truncate(&it.Seq.t, it.Seq.t.N)
		}
	}
	m.fwd.Lock()
	defer m.fwd.Unlock()
	for i := range items {
		it := &items[i]
		s := it.Seq
		if it.HiddenOnly {
			if !m.SupportsHiddenOnly() {
				rollback()
				return fmt.Errorf("engine: ForwardBatch: item %d: hidden-only forward on a backend that computes every LM head", i)
			}
			it.WantHidden = true
		}
		if s.m != m {
			rollback()
			return fmt.Errorf("engine: ForwardBatch: item %d: sequence of another model", i)
		}
		if s.freed {
			rollback()
			return errFreed
		}
		if s.tree != nil && it.Parents == nil {
			rollback()
			return ErrTreePending
		}
		n := len(it.Tokens)
		if n == 0 {
			rollback()
			return fmt.Errorf("engine: ForwardBatch: item %d: no tokens", i)
		}
		if it.Parents != nil && len(it.Parents) != n {
			rollback()
			return fmt.Errorf("engine: ForwardBatch: item %d: %d tokens, %d parents", i, n, len(it.Parents))
		}
		committed := len(s.tokens)
		prior := len(s.tree) // pending tree tokens before this call
		base := s.t.N        // committed + prior
		pos := make([]int32, n)
		for j := range n {
			if it.Parents == nil {
				pos[j] = int32(base + j)
				continue
			}
			p := int(it.Parents[j])
			switch {
			case p < -1 || p >= prior+j:
				rollback()
				return fmt.Errorf("engine: ForwardBatch: item %d: parent %d = %d not in [-1, %d)", i, j, p, prior+j)
			case p < 0:
				pos[j] = int32(committed)
			case p < prior:
				pos[j] = s.treePos[p] + 1
			default:
				pos[j] = pos[p-prior] + 1
			}
		}
		maxPos := int(pos[n-1])
		for _, p := range pos {
			maxPos = max(maxPos, int(p))
		}
		if maxPos >= m.Config.MaxPositions {
			rollback()
			return fmt.Errorf("engine: position %d >= max_position_embeddings %d: %w", maxPos, m.Config.MaxPositions, ErrContextLength)
		}
		if err := m.kv.Reserve(&s.t, base+n); err != nil {
			rollback()
			return err
		}
		prepared++
		rows := n
		if it.LogitsRows != nil {
			rows = len(it.LogitsRows)
			for j, r := range it.LogitsRows {
				if r < 0 || int(r) >= n {
					rollback()
					return fmt.Errorf("engine: ForwardBatch: item %d: logits row %d = %d out of range [0, %d)", i, j, r, n)
				}
			}
		}
		// no logits buffer where none is read: hidden-only rows, argmax
		// rows, and a row the backend samples on the device (a 32 KB
		// buffer per decode row per step was allocated and zeroed for
		// nothing: 1 MB a step at 32 concurrent requests)
		noLogits := it.HiddenOnly || it.ArgmaxOnly || (it.Sample != nil && prior == 0)
		// exactly rows: a caller's larger buffer (the engine's retry of a
		// step without its trees keeps the tree forward's) is cut to them
		if len(it.Logits) < rows*V && !noLogits {
			it.Logits = make([]float32, rows*V)
		}
		var logits []float32
		if !noLogits {
			it.Logits = it.Logits[:rows*V]
			logits = it.Logits
		}
		var hidden []float32
		if it.WantHidden {
			if len(it.Hidden) < rows*H {
				it.Hidden = make([]float32, rows*H)
			}
			it.Hidden = it.Hidden[:rows*H]
			hidden = it.Hidden
		}
		slots := m.kv.Slots(make([]int32, 0, n), &s.t, base, base+n)
		plans[i].pos = pos
		if prior > 0 && (it.Heads > 0 || it.ArgmaxOnly) {
			rollback()
			return fmt.Errorf("engine: ForwardBatch: item %d: device heads or argmax on a pending tree", i)
		}
		if prior == 0 {
			plans[i].reqs = []*ForwardRequest{{
				CachedSlots: m.kv.Slots(make([]int32, 0, base), &s.t, 0, base),
				Tokens:      it.Tokens,
				Positions:   pos,
				Slots:       slots,
				Parents:     it.Parents,
				LogitsRows:  it.LogitsRows,
				Logits:      logits,
				Hidden:      hidden,
				HiddenOnly:  it.HiddenOnly,
				Sample:      it.Sample,
				Heads:       it.Heads,
				HeadTop:     m.headTopBuf(it, rows),
				Argmax:      argmaxBuf(it, rows),
			}}
			plans[i].scatter = [][]int{nil}
			continue
		}
		plans[i].reqs, plans[i].scatter = m.treeRequests(s, it, pos, slots)
	}
	var reqs []*ForwardRequest
	for _, p := range plans {
		reqs = append(reqs, p.reqs...)
	}
	if err := m.backend.Forward(reqs); err != nil {
		rollback()
		return err
	}
	for i := range items {
		it := &items[i]
		s := it.Seq
		for r, sc := range plans[i].scatter {
			for k, row := range sc {
				if !it.HiddenOnly {
					copy(it.Logits[row*V:(row+1)*V], plans[i].reqs[r].Logits[k*V:(k+1)*V])
				}
				if it.WantHidden {
					copy(it.Hidden[row*H:(row+1)*H], plans[i].reqs[r].Hidden[k*H:(k+1)*H])
				}
			}
		}
		s.t.N += len(it.Tokens)
		if it.Parents == nil {
			s.tokens = append(s.tokens, it.Tokens...)
			s.offerBlocks()
			continue
		}
		if s.tree == nil {
			s.tree, s.treeParents, s.treePos = make([]int32, 0, len(it.Tokens)), make([]int32, 0, len(it.Tokens)), make([]int32, 0, len(it.Tokens))
		}
		s.tree = append(s.tree, it.Tokens...)
		s.treeParents = append(s.treeParents, it.Parents...)
		s.treePos = append(s.treePos, plans[i].pos...)
	}
	return nil
}

// treeRequests splits an item that appends to s's pending tree into backend
// requests with the ForwardRequest contract (cached prefix, then a tree over
// the new tokens). New tokens are grouped by their attachment point: the
// nearest ancestor in the pending tree (or the last committed token). The
// group's cached prefix is the committed tokens followed by the root path of
// the attachment point, in position order, so every token attends to
// exactly the keys, in the same order, that a single forward of the whole
// tree gives it (bit-identical logits, the backend being batch-invariant).
// pos and slots are the new tokens' positions and KV slots.
func (m *Model) treeRequests(s *Sequence, it *BatchItem, pos, slots []int32) ([]*ForwardRequest, [][]int) {
	V := m.Config.VocabSize
	prior, committed := len(s.tree), len(s.tokens)
	n := len(it.Tokens)
	attach := make([]int, n)  // attachment point (pending tree index, -1 = last committed)
	local := make([]int32, n) // index of the token inside its group
	group := make([]int, n)
	byAttach := map[int]int{}
	var reqs []*ForwardRequest
	for j := range n {
		p := int(it.Parents[j])
		var par int32 = -1
		if p < prior {
			attach[j] = p
		} else {
			attach[j] = attach[p-prior]
			par = local[p-prior]
		}
		g, ok := byAttach[attach[j]]
		if !ok {
			g = len(reqs)
			byAttach[attach[j]] = g
			var path []int32 // slots of the attachment point's root path, root first
			for a := attach[j]; a >= 0; a = int(s.treeParents[a]) {
				path = append(path, m.kv.Slot(&s.t, committed+a))
			}
			cached := m.kv.Slots(make([]int32, 0, committed+len(path)), &s.t, 0, committed)
			for k := len(path) - 1; k >= 0; k-- {
				cached = append(cached, path[k])
			}
			reqs = append(reqs, &ForwardRequest{CachedSlots: cached, LogitsRows: []int32{}})
		}
		r := reqs[g]
		group[j] = g
		local[j] = int32(len(r.Tokens))
		r.Tokens = append(r.Tokens, it.Tokens[j])
		r.Positions = append(r.Positions, pos[j])
		r.Slots = append(r.Slots, slots[j])
		r.Parents = append(r.Parents, par)
	}
	scatter := make([][]int, len(reqs))
	addRow := func(j, row int) {
		g := group[j]
		reqs[g].LogitsRows = append(reqs[g].LogitsRows, local[j])
		scatter[g] = append(scatter[g], row)
	}
	if it.LogitsRows == nil {
		for j := range n {
			addRow(j, j)
		}
	} else {
		for row, j := range it.LogitsRows {
			addRow(int(j), row)
		}
	}
	for g, r := range reqs {
		r.HiddenOnly = it.HiddenOnly
		if !it.HiddenOnly {
			r.Logits = make([]float32, len(scatter[g])*V)
		}
		if it.WantHidden {
			r.Hidden = make([]float32, len(scatter[g])*m.Config.HiddenSize)
		}
	}
	return reqs, scatter
}

// KeepTree resolves the pending tree: keep lists the indices (into the
// whole pending tree, i.e. the tokens of all tree Forwards since the last
// KeepTree, in order) of the accepted path, root first;
// keep[0]'s parent must be -1 and keep[j]'s parent keep[j-1]. Their KV moves
// to positions Len(), Len()+1, ... and they are committed; the other tree
// tokens are dropped and their blocks released. An empty keep drops the tree.
func (s *Sequence) KeepTree(keep []int) error {
	if s.tree == nil {
		return fmt.Errorf("engine: KeepTree: no pending tree")
	}
	for j, k := range keep {
		if k < 0 || k >= len(s.tree) {
			return fmt.Errorf("engine: KeepTree: index %d out of range [0, %d)", k, len(s.tree))
		}
		want := int32(-1)
		if j > 0 {
			want = int32(keep[j-1])
		}
		if s.treeParents[k] != want {
			return fmt.Errorf("engine: KeepTree: keep %v is not a root path (parent of %d is %d, want %d)", keep, k, s.treeParents[k], want)
		}
	}
	base := len(s.tokens)
	s.m.fwd.Lock()
	err := s.m.kv.KeepTree(&s.t, base, keep)
	s.m.fwd.Unlock()
	if err != nil {
		return err
	}
	for _, k := range keep {
		s.tokens = append(s.tokens, s.tree[k])
	}
	s.tree, s.treeParents, s.treePos = nil, nil, nil
	s.offerBlocks()
	return nil
}

// Truncate drops committed tokens beyond n (and any pending tree).
func (s *Sequence) Truncate(n int) {
	if n < 0 {
		n = 0
	}
	n = min(n, len(s.tokens))
	s.tree, s.treeParents, s.treePos = nil, nil, nil
	s.t.N = len(s.tokens)
	s.m.kv.Truncate(&s.t, n)
	s.tokens = s.tokens[:n]
	if nb := n / s.m.kv.BlockSize(); nb < len(s.hashes) {
		s.hashes = s.hashes[:nb]
	}
}

// Fork returns a new sequence sharing this one's KV blocks (copy-on-write)
// and committed tokens. A pending tree is not shared.
func (s *Sequence) Fork() *Sequence {
	t := BlockTable{Blocks: s.t.Blocks, N: len(s.tokens)}
	f := &Sequence{m: s.m, cacheOn: s.cacheOn, salt: s.salt}
	nt := s.m.kv.Fork(&t)
	s.m.kv.Truncate(nt, nt.N)
	f.t = *nt
	f.tokens = append([]int32(nil), s.tokens...)
	f.hashes = append([]blockHash(nil), s.hashes...)
	return f
}

// Free releases the sequence's KV blocks (blocks in the prefix cache stay
// there). Safe to call twice.
func (s *Sequence) Free() {
	if s.freed {
		return
	}
	s.freed = true
	s.m.kv.Free(&s.t)
	s.tokens, s.tree, s.treeParents, s.treePos, s.hashes = nil, nil, nil, nil, nil
}

// offerBlocks registers newly completed full blocks with the prefix cache.
func (s *Sequence) offerBlocks() {
	if !s.cacheOn {
		return
	}
	bs := s.m.kv.BlockSize()
	for b := len(s.hashes); (b+1)*bs <= len(s.tokens); b++ {
		var parent blockHash
		if b > 0 {
			parent = s.hashes[b-1]
		}
		h := hashBlock(s.salt, parent, s.tokens[b*bs:(b+1)*bs])
		s.m.kv.register(h, s.t.Blocks[b], b)
		s.hashes = append(s.hashes, h)
	}
}
