package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

type mergeVal struct{ rank, id int32 }

// bpeModel is a BPE model as in HF tokenizers' models/bpe.
type bpeModel struct {
	vocab        map[string]int32
	vocabR       []string // index: id; "" where unused
	merges       map[uint64]mergeVal
	unk          int32
	hasUnk       bool
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	contPrefix   string
	eowSuffix    string
	byteTok      [256]int32 // <0xNN> ids, -1 when absent
	// metaSplit: no token contains "▁" right after another character and "▁" is a token,
	// so no merge can cross the position before a "▁" that follows a non-"▁" character;
	// words are split there (exactly) so long SentencePiece inputs hit the word cache.
	metaSplit bool

	mu    sync.RWMutex
	cache map[string][]int32
}

// Word cache bounds (as HF: words longer than cacheMaxWord bytes are not cached).
const (
	cacheCap     = 1 << 16
	cacheMaxWord = 256
)

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

func parseBPE(r json.RawMessage) (*bpeModel, error) {
	var v struct {
		Type         string           `json:"type"`
		Dropout      *float64         `json:"dropout"`
		UnkToken     *string          `json:"unk_token"`
		ContPrefix   *string          `json:"continuing_subword_prefix"`
		EOWSuffix    *string          `json:"end_of_word_suffix"`
		FuseUnk      bool             `json:"fuse_unk"`
		ByteFallback bool             `json:"byte_fallback"`
		IgnoreMerges bool             `json:"ignore_merges"`
		Vocab        map[string]int64 `json:"vocab"`
		Merges       json.RawMessage  `json:"merges"`
	}
	if err := json.Unmarshal(r, &v); err != nil {
		return nil, errf(ErrFormat, "model", "%v", err)
	}
	if v.Type != "" && v.Type != "BPE" {
		return nil, errf(ErrUnsupported, "model.type", "model %q (only BPE is implemented)", v.Type)
	}
	if v.Dropout != nil && *v.Dropout != 0 {
		return nil, errf(ErrUnsupported, "model.dropout", "%v (BPE dropout is not supported)", *v.Dropout)
	}
	if v.Vocab == nil {
		return nil, errf(ErrFormat, "model.vocab", "missing")
	}
	if len(v.Vocab) > MaxVocab {
		return nil, errf(ErrTooLarge, "model.vocab", "%d entries exceed limit %d", len(v.Vocab), MaxVocab)
	}
	m := &bpeModel{
		vocab:        make(map[string]int32, len(v.Vocab)),
		fuseUnk:      v.FuseUnk,
		byteFallback: v.ByteFallback,
		ignoreMerges: v.IgnoreMerges,
		cache:        make(map[string][]int32),
	}
	if v.ContPrefix != nil {
		m.contPrefix = *v.ContPrefix
	}
	if v.EOWSuffix != nil {
		m.eowSuffix = *v.EOWSuffix
	}
	maxID := int64(-1)
	for tok, id := range v.Vocab {
		if id < 0 || id >= MaxVocab {
			return nil, errf(ErrFormat, "model.vocab", "token %q has id %d out of range [0,%d)", tok, id, MaxVocab)
		}
		if id > maxID {
			maxID = id
		}
		m.vocab[tok] = int32(id)
	}
	if lim := int64(2*len(m.vocab) + 1024); maxID >= lim {
		return nil, errf(ErrFormat, "model.vocab", "largest id %d leaves the id space too sparse for %d entries", maxID, len(m.vocab))
	}
	m.vocabR = make([]string, maxID+1)
	owner := make([]bool, maxID+1)
	for tok, id := range m.vocab {
		if owner[id] {
			a, b := m.vocabR[id], tok
			if b < a {
				a, b = b, a
			}
			return nil, errf(ErrFormat, "model.vocab", "id %d used by both %q and %q", id, a, b)
		}
		owner[id] = true
		m.vocabR[id] = tok
	}
	if v.UnkToken != nil {
		id, ok := m.vocab[*v.UnkToken]
		if !ok {
			return nil, errf(ErrFormat, "model.unk_token", "%q is not in model.vocab", *v.UnkToken)
		}
		m.unk, m.hasUnk = id, true
	}
	for b := 0; b < 256; b++ {
		m.byteTok[b] = -1
		if id, ok := m.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteTok[b] = id
		}
	}
	if _, ok := m.vocab["▁"]; ok && m.contPrefix == "" && m.eowSuffix == "" && !m.ignoreMerges {
		m.metaSplit = true
		for tok := range m.vocab {
			if strings.Contains(strings.TrimLeft(tok, "▁"), "▁") {
				m.metaSplit = false
				break
			}
		}
	}
	pairs, err := parseMerges(v.Merges)
	if err != nil {
		return nil, err
	}
	m.merges = make(map[uint64]mergeVal, len(pairs))
	for i, p := range pairs {
		field := fmt.Sprintf("model.merges[%d]", i)
		a, ok := m.vocab[p[0]]
		if !ok {
			return nil, errf(ErrFormat, field, "left part %q is not in model.vocab", p[0])
		}
		b, ok := m.vocab[p[1]]
		if !ok {
			return nil, errf(ErrFormat, field, "right part %q is not in model.vocab", p[1])
		}
		right := p[1]
		if m.contPrefix != "" {
			right = strings.TrimPrefix(right, m.contPrefix)
		}
		id, ok := m.vocab[p[0]+right]
		if !ok {
			return nil, errf(ErrFormat, field, "merged token %q is not in model.vocab", p[0]+right)
		}
		k := pairKey(a, b)
		if prev, dup := m.merges[k]; dup {
			return nil, errf(ErrFormat, field, "duplicate of model.merges[%d] (%q %q)", prev.rank, p[0], p[1])
		}
		m.merges[k] = mergeVal{rank: int32(i), id: id}
	}
	return m, nil
}

// parseMerges accepts both ["a b", ...] (legacy) and [["a","b"], ...].
func parseMerges(r json.RawMessage) ([][2]string, error) {
	if isNull(r) {
		return nil, nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(r, &raw); err != nil {
		return nil, errf(ErrFormat, "model.merges", "want a list: %v", err)
	}
	if len(raw) > MaxVocab {
		return nil, errf(ErrTooLarge, "model.merges", "%d entries exceed limit %d", len(raw), MaxVocab)
	}
	out := make([][2]string, 0, len(raw))
	for i, x := range raw {
		field := fmt.Sprintf("model.merges[%d]", i)
		var s string
		if err := json.Unmarshal(x, &s); err == nil {
			if strings.HasPrefix(s, "#version") {
				continue
			}
			parts := strings.Split(s, " ")
			if len(parts) != 2 {
				return nil, errf(ErrFormat, field, "%q is not two space-separated tokens", s)
			}
			out = append(out, [2]string{parts[0], parts[1]})
			continue
		}
		var pair []string
		if err := json.Unmarshal(x, &pair); err != nil || len(pair) != 2 {
			return nil, errf(ErrFormat, field, "want \"a b\" or [a, b]")
		}
		out = append(out, [2]string{pair[0], pair[1]})
	}
	return out, nil
}

// tokenize appends the ids of one pre-tokenized word to dst.
func (m *bpeModel) tokenize(dst []int32, w string) []int32 {
	if w == "" {
		return dst
	}
	if m.metaSplit && len(w) >= cacheMaxWord/4 && !m.ignoreMerges {
		// Split before each "▁" that follows a non-"▁" character (see metaSplit).
		start := 0
		for i := 1; i < len(w); {
			k := strings.Index(w[i:], "▁")
			if k < 0 {
				break
			}
			j := i + k
			if !strings.HasSuffix(w[:j], "▁") {
				dst = m.tokenizeWord(dst, w[start:j])
				start = j
			}
			i = j + len("▁")
		}
		return m.tokenizeWord(dst, w[start:])
	}
	return m.tokenizeWord(dst, w)
}

// tokenizeWord is tokenize without the metaSplit step.
func (m *bpeModel) tokenizeWord(dst []int32, w string) []int32 {
	if w == "" {
		return dst
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[w]; ok {
			return append(dst, id)
		}
	}
	cacheable := len(w) < cacheMaxWord
	if cacheable {
		m.mu.RLock()
		ids, ok := m.cache[w]
		m.mu.RUnlock()
		if ok {
			return append(dst, ids...)
		}
	}
	start := len(dst)
	dst = m.mergeWord(dst, w)
	if cacheable {
		ids := append([]int32(nil), dst[start:]...)
		m.mu.Lock()
		if len(m.cache) < cacheCap {
			m.cache[w] = ids
		}
		m.mu.Unlock()
	}
	return dst
}

// tokenizeBytes is tokenize for a word held in a scratch buffer (not retained): lookups do
// not allocate; a string is made only on a cache miss.
func (m *bpeModel) tokenizeBytes(dst []int32, w []byte) []int32 {
	if len(w) == 0 {
		return dst
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[string(w)]; ok {
			return append(dst, id)
		}
	}
	if len(w) < cacheMaxWord {
		m.mu.RLock()
		ids, ok := m.cache[string(w)]
		m.mu.RUnlock()
		if ok {
			return append(dst, ids...)
		}
	}
	return m.tokenize(dst, string(w))
}

// symbol is one node of the doubly linked list of a word being merged.
type symbol struct {
	id         int32
	prev, next int32
	dead       bool
}

type mergeItem struct {
	rank, pos, id int32
}

func itemLess(a, b mergeItem) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.pos < b.pos
}

// mergeHeap is a binary min-heap of merge candidates (rank, then position).
type mergeHeap []mergeItem

func (h *mergeHeap) push(x mergeItem) {
	*h = append(*h, x)
	a := *h
	i := len(a) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !itemLess(a[i], a[p]) {
			break
		}
		a[i], a[p] = a[p], a[i]
		i = p
	}
}

func (h *mergeHeap) pop() mergeItem {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	i := 0
	for {
		l, r, s := 2*i+1, 2*i+2, i
		if l < n && itemLess(a[l], a[s]) {
			s = l
		}
		if r < n && itemLess(a[r], a[s]) {
			s = r
		}
		if s == i {
			break
		}
		a[i], a[s] = a[s], a[i]
		i = s
	}
	*h = a
	return top
}

// mergeWord is HF's BPE::merge_word followed by Word::merge_all: O(n log n) in the word length.
func (m *bpeModel) mergeWord(dst []int32, w string) []int32 {
	syms := make([]symbol, 0, len(w))
	add := func(id int32) {
		n := int32(len(syms))
		syms = append(syms, symbol{id: id, prev: n - 1, next: n + 1})
	}
	unk, hasPending := int32(0), false
	var buf []byte
	for i := 0; i < len(w); {
		_, size := utf8.DecodeRuneInString(w[i:])
		s := w[i : i+size]
		first, last := i == 0, i+size == len(w)
		if (!first && m.contPrefix != "") || (last && m.eowSuffix != "") {
			buf = buf[:0]
			if !first {
				buf = append(buf, m.contPrefix...)
			}
			buf = append(buf, s...)
			if last {
				buf = append(buf, m.eowSuffix...)
			}
			s = string(buf)
		}
		i += size
		if id, ok := m.vocab[s]; ok {
			if hasPending {
				add(unk)
				hasPending = false
			}
			add(id)
			continue
		}
		if m.byteFallback {
			all := true
			for k := 0; k < len(s); k++ {
				if m.byteTok[s[k]] < 0 {
					all = false
					break
				}
			}
			if all {
				// HF adds byte tokens without flushing a pending unk first.
				for k := 0; k < len(s); k++ {
					add(m.byteTok[s[k]])
				}
				continue
			}
		}
		if m.hasUnk {
			if hasPending && !m.fuseUnk {
				add(unk)
			}
			unk, hasPending = m.unk, true
		}
	}
	if hasPending {
		add(unk)
	}
	if len(syms) == 0 {
		return dst
	}
	syms[len(syms)-1].next = -1
	if len(syms) > 1 && len(m.merges) > 0 {
		h := make(mergeHeap, 0, len(syms))
		for i := 0; i+1 < len(syms); i++ {
			if mv, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
				h.push(mergeItem{mv.rank, int32(i), mv.id})
			}
		}
		for len(h) > 0 {
			top := h.pop()
			cur := &syms[top.pos]
			if cur.dead || cur.next < 0 {
				continue
			}
			nx := cur.next
			right := syms[nx]
			if mv, ok := m.merges[pairKey(cur.id, right.id)]; !ok || mv.id != top.id {
				continue
			}
			cur.id = top.id
			cur.next = right.next
			syms[nx].dead = true
			if right.next >= 0 {
				syms[right.next].prev = top.pos
			}
			if cur.prev >= 0 {
				if mv, ok := m.merges[pairKey(syms[cur.prev].id, cur.id)]; ok {
					h.push(mergeItem{mv.rank, cur.prev, mv.id})
				}
			}
			if cur.next >= 0 {
				if mv, ok := m.merges[pairKey(cur.id, syms[cur.next].id)]; ok {
					h.push(mergeItem{mv.rank, top.pos, mv.id})
				}
			}
		}
	}
	for i := range syms {
		if !syms[i].dead {
			dst = append(dst, syms[i].id)
		}
	}
	return dst
}
