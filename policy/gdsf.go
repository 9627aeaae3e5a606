package policy

// GDSF is GreedyDual-Size-Frequency (Cherkasova, 1998), a cost-aware policy:
// each resident key has priority
//
//	H = L + freq × cost / size
//
// where freq counts its accesses (1 on insertion), cost is its regeneration
// cost and size its bytes (non-positive costs and sizes count as 1 in the
// ratio; Bytes still sums the real sizes). The key of lowest H is evicted
// and the inflation value L becomes that H, so keys that are not accessed
// again age out. Ties go to the key touched least recently. Room is made
// before a new key is inserted, so a new key is never its own victim.
//
// O(log n) per operation.
type GDSF[K comparable] struct {
	c     Capacity
	items map[K]*node[K]
	h     gdsfHeap[K]
	l     float64
	seq   uint64
	bytes int64
}

// NewGDSF returns an empty GDSF bounded by c. It panics if c is invalid.
func NewGDSF[K comparable](c Capacity) *GDSF[K] {
	c.mustValid()
	return &GDSF[K]{c: c, items: make(map[K]*node[K])}
}

// gdsfHeap is a min-heap on (prio, seq) with positions in node.index.
// Typed rather than container/heap to avoid interface calls on the hot path.
type gdsfHeap[K comparable] []*node[K]

func (h gdsfHeap[K]) Less(i, j int) bool {
	if h[i].prio != h[j].prio {
		return h[i].prio < h[j].prio
	}
	return h[i].seq < h[j].seq
}

func (h gdsfHeap[K]) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h gdsfHeap[K]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.Less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h gdsfHeap[K]) down(i int) bool {
	start := i
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		c := l
		if r := l + 1; r < len(h) && h.Less(r, l) {
			c = r
		}
		if !h.Less(c, i) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > start
}

func (h gdsfHeap[K]) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h *gdsfHeap[K]) push(n *node[K]) {
	n.index = len(*h)
	*h = append(*h, n)
	h.up(n.index)
}

func (h *gdsfHeap[K]) remove(i int) {
	old := *h
	last := len(old) - 1
	n := old[i]
	if i != last {
		old.swap(i, last)
	}
	old[last] = nil
	*h = old[:last]
	if i != last {
		h.fix(i)
	}
	n.index = -1
}

func (p *GDSF[K]) reprioritise(n *node[K]) {
	size, cost := float64(max(n.size, 1)), n.cost
	if cost <= 0 {
		cost = 1
	}
	n.prio = p.l + float64(n.freq)*cost/size
	p.seq++
	n.seq = p.seq
}

// victim is the lowest-priority key other than keep (a root child when the
// root is keep).
func (p *GDSF[K]) victim(keep *node[K]) *node[K] {
	if len(p.h) == 0 {
		return nil
	}
	if p.h[0] != keep {
		return p.h[0]
	}
	switch len(p.h) {
	case 1:
		return nil
	case 2:
		return p.h[1]
	}
	if p.h.Less(1, 2) {
		return p.h[1]
	}
	return p.h[2]
}

func (p *GDSF[K]) detach(n *node[K]) {
	p.h.remove(n.index)
	delete(p.items, n.key)
	p.bytes -= n.size
}

func (p *GDSF[K]) makeRoom(n int, extra int64, keep *node[K], ev []Eviction[K]) []Eviction[K] {
	for p.c.over(len(p.items)+n, p.bytes+extra) {
		v := p.victim(keep)
		if v == nil {
			break
		}
		p.l = v.prio
		p.detach(v)
		ev = append(ev, Eviction[K]{v.key, ReasonCapacity})
	}
	return ev
}

// Add inserts k with freq 1 after making room, or updates a resident k's
// size and cost and counts an access.
func (p *GDSF[K]) Add(k K, size int64, cost float64) []Eviction[K] {
	size = clampSize(size)
	n, ok := p.items[k]
	if p.c.tooBig(size) {
		if ok {
			p.detach(n)
		}
		return []Eviction[K]{{k, ReasonCapacity}}
	}
	if ok {
		p.bytes += size - n.size
		n.size, n.cost = size, cost
		n.freq++
		p.reprioritise(n)
		p.h.fix(n.index)
		return p.makeRoom(0, 0, n, nil)
	}
	ev := p.makeRoom(1, size, nil, nil)
	n = &node[K]{key: k, size: size, cost: cost, freq: 1}
	p.reprioritise(n)
	p.h.push(n)
	p.items[k] = n
	p.bytes += size
	return ev
}

// Get reports whether k is resident, and if so increments its freq and
// recomputes its priority with the current L.
func (p *GDSF[K]) Get(k K) bool {
	n, ok := p.items[k]
	if ok {
		n.freq++
		p.reprioritise(n)
		p.h.fix(n.index)
	}
	return ok
}

// Contains reports whether k is resident.
func (p *GDSF[K]) Contains(k K) bool {
	_, ok := p.items[k]
	return ok
}

// Remove drops k; L is unchanged.
func (p *GDSF[K]) Remove(k K) bool {
	n, ok := p.items[k]
	if ok {
		p.detach(n)
	}
	return ok
}

// Len is the number of resident keys.
func (p *GDSF[K]) Len() int { return len(p.items) }

// Bytes is the sum of resident sizes.
func (p *GDSF[K]) Bytes() int64 { return p.bytes }

// Inflation returns the current L.
func (p *GDSF[K]) Inflation() float64 { return p.l }

var _ Policy[string] = (*GDSF[string])(nil)
