package policy

// recency is the shared body of LRU and FIFO: one list, newest at the front,
// evicted from the back. With touch set, an access moves the key to the
// front (LRU); without it, order is insertion order (FIFO).
type recency[K comparable] struct {
	c     Capacity
	touch bool
	items map[K]*node[K]
	l     list[K]
}

func (r *recency[K]) setup(c Capacity, touch bool) {
	c.mustValid()
	r.c, r.touch = c, touch
	r.items = make(map[K]*node[K])
	r.l.init()
}

// Add inserts k at the front, or updates a resident k (and, for LRU, moves
// it to the front). It then evicts from the back until the capacity holds.
func (r *recency[K]) Add(k K, size int64, cost float64) []Eviction[K] {
	size = clampSize(size)
	n, ok := r.items[k]
	if r.c.tooBig(size) {
		if ok {
			r.Remove(k)
		}
		return []Eviction[K]{{k, ReasonCapacity}}
	}
	if ok {
		r.l.resize(n, size)
		n.cost = cost
		if r.touch {
			r.l.moveToFront(n)
		}
	} else {
		n = &node[K]{key: k, size: size, cost: cost}
		r.items[k] = n
		r.l.pushFront(n)
	}
	var ev []Eviction[K]
	for r.c.over(r.l.len, r.l.bytes) {
		b := r.l.back()
		r.l.remove(b)
		delete(r.items, b.key)
		ev = append(ev, Eviction[K]{b.key, ReasonCapacity})
	}
	return ev
}

// Get reports whether k is resident; for LRU it moves k to the front.
func (r *recency[K]) Get(k K) bool {
	n, ok := r.items[k]
	if ok && r.touch {
		r.l.moveToFront(n)
	}
	return ok
}

// Contains reports whether k is resident.
func (r *recency[K]) Contains(k K) bool {
	_, ok := r.items[k]
	return ok
}

// Remove drops k.
func (r *recency[K]) Remove(k K) bool {
	n, ok := r.items[k]
	if ok {
		r.l.remove(n)
		delete(r.items, k)
	}
	return ok
}

// Len is the number of resident keys.
func (r *recency[K]) Len() int { return r.l.len }

// Bytes is the sum of resident sizes.
func (r *recency[K]) Bytes() int64 { return r.l.bytes }

// Keys returns the resident keys from most to least recently used (LRU) or
// inserted (FIFO), i.e. the last key is the next victim. For tests and
// debugging; O(n).
func (r *recency[K]) Keys() []K {
	return r.l.keys()
}

// LRU evicts the least recently used key. Add of a resident key counts as a
// use. O(1) per operation.
type LRU[K comparable] struct{ recency[K] }

// NewLRU returns an empty LRU bounded by c. It panics if c is invalid (see
// Capacity.Validate); New returns an error instead.
func NewLRU[K comparable](c Capacity) *LRU[K] {
	p := &LRU[K]{}
	p.setup(c, true)
	return p
}

// FIFO evicts the key inserted first; hits and updates do not reorder.
// O(1) per operation.
type FIFO[K comparable] struct{ recency[K] }

// NewFIFO returns an empty FIFO bounded by c. It panics if c is invalid.
func NewFIFO[K comparable](c Capacity) *FIFO[K] {
	p := &FIFO[K]{}
	p.setup(c, false)
	return p
}

var (
	_ Policy[string] = (*LRU[string])(nil)
	_ Policy[string] = (*FIFO[string])(nil)
)
