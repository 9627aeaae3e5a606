package policy

// bucket holds the keys of one access count, most recent at the front.
type bucket[K comparable] struct {
	freq       uint64
	items      list[K]
	prev, next *bucket[K]
}

// LFU evicts the least frequently used key; among keys of equal count, the
// least recently used one. Counts start at 1 on insertion and grow by 1 per
// Get hit or Add of a resident key; they never decay. Room is made before a
// new key is inserted, so a new key is never its own victim.
//
// O(1) per operation (Shah, Mitra and Matani's frequency-bucket list).
type LFU[K comparable] struct {
	c     Capacity
	items map[K]*node[K]
	head  bucket[K] // sentinel; head.next is the lowest count
	bytes int64
}

// NewLFU returns an empty LFU bounded by c. It panics if c is invalid.
func NewLFU[K comparable](c Capacity) *LFU[K] {
	c.mustValid()
	p := &LFU[K]{c: c, items: make(map[K]*node[K])}
	p.head.next, p.head.prev = &p.head, &p.head
	return p
}

// bucketAfter returns the bucket of count freq that follows b, creating it.
func (p *LFU[K]) bucketAfter(b *bucket[K], freq uint64) *bucket[K] {
	if nb := b.next; nb != &p.head && nb.freq == freq {
		return nb
	}
	nb := &bucket[K]{freq: freq, prev: b, next: b.next}
	nb.items.init()
	b.next.prev = nb
	b.next = nb
	return nb
}

func (p *LFU[K]) unlinkIfEmpty(b *bucket[K]) {
	if b.items.len == 0 {
		b.prev.next = b.next
		b.next.prev = b.prev
	}
}

func (p *LFU[K]) touch(n *node[K]) {
	b := n.bucket
	nb := p.bucketAfter(b, b.freq+1)
	b.items.remove(n)
	nb.items.pushFront(n)
	n.bucket = nb
	p.unlinkIfEmpty(b)
}

func (p *LFU[K]) detach(n *node[K]) {
	b := n.bucket
	b.items.remove(n)
	p.unlinkIfEmpty(b)
	n.bucket = nil
	delete(p.items, n.key)
	p.bytes -= n.size
}

// victim returns the least recent key of the lowest count, skipping keep.
func (p *LFU[K]) victim(keep *node[K]) *node[K] {
	for b := p.head.next; b != &p.head; b = b.next {
		for n := b.items.back(); n != nil && n != &b.items.root; n = n.prev {
			if n != keep {
				return n
			}
		}
	}
	return nil
}

// makeRoom evicts until n more keys and extra more bytes fit, never keep.
func (p *LFU[K]) makeRoom(n int, extra int64, keep *node[K], ev []Eviction[K]) []Eviction[K] {
	for p.c.over(len(p.items)+n, p.bytes+extra) {
		v := p.victim(keep)
		if v == nil {
			break
		}
		p.detach(v)
		ev = append(ev, Eviction[K]{v.key, ReasonCapacity})
	}
	return ev
}

// Add inserts k with count 1 after making room, or updates a resident k and
// increments its count.
func (p *LFU[K]) Add(k K, size int64, cost float64) []Eviction[K] {
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
		n.bucket.items.resize(n, size)
		n.cost = cost
		p.touch(n)
		return p.makeRoom(0, 0, n, nil)
	}
	ev := p.makeRoom(1, size, nil, nil)
	n = &node[K]{key: k, size: size, cost: cost}
	b := p.bucketAfter(&p.head, 1)
	b.items.pushFront(n)
	n.bucket = b
	p.items[k] = n
	p.bytes += size
	return ev
}

// Get reports whether k is resident and increments its count.
func (p *LFU[K]) Get(k K) bool {
	n, ok := p.items[k]
	if ok {
		p.touch(n)
	}
	return ok
}

// Contains reports whether k is resident.
func (p *LFU[K]) Contains(k K) bool {
	_, ok := p.items[k]
	return ok
}

// Remove drops k.
func (p *LFU[K]) Remove(k K) bool {
	n, ok := p.items[k]
	if ok {
		p.detach(n)
	}
	return ok
}

// Len is the number of resident keys.
func (p *LFU[K]) Len() int { return len(p.items) }

// Bytes is the sum of resident sizes.
func (p *LFU[K]) Bytes() int64 { return p.bytes }

// Freq returns the access count of a resident k (0 if absent).
func (p *LFU[K]) Freq(k K) uint64 {
	if n, ok := p.items[k]; ok {
		return n.bucket.freq
	}
	return 0
}

var _ Policy[string] = (*LFU[string])(nil)
