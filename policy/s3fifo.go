package policy

// Queues of S3-FIFO.
const (
	qSmall uint8 = iota + 1
	qMain
	qGhost
)

// S3FIFO is the S3-FIFO policy of Yang et al., "FIFO queues are all you need
// for cache eviction" (SOSP 2023): a small FIFO S holding 10% of the
// capacity, a main FIFO M holding the rest, and a ghost FIFO G of keys
// recently evicted from S (no data, as many keys as M may hold).
//
//   - A new key enters M if it is in G, else S. Room is made before it enters.
//   - A hit increments a 2-bit counter (capped at 3); nothing moves.
//   - Eviction takes from S while S holds at least its 10% share (or M is
//     empty), else from M.
//   - From S: the oldest key moves to M with its counter cleared if it was
//     accessed since insertion, else it is evicted and remembered in G; this
//     repeats until one key is evicted or S is empty.
//   - From M: the oldest key is reinserted at the head with its counter
//     decremented if the counter is non-zero, else evicted.
//
// Add of a resident key counts as a hit; it may then evict that key itself.
// With only MaxBytes set, G holds as many keys as M currently does.
// Amortised O(1) per operation.
type S3FIFO[K comparable] struct {
	c     Capacity
	small seg // S's share
	main  seg // M's share (G's key count when bounded in entries)
	items map[K]*node[K]
	s, m  list[K]
	ghost map[K]*node[K]
	g     list[K]
	bytes int64
}

// NewS3FIFO returns an empty S3-FIFO bounded by c. It panics if c is invalid.
func NewS3FIFO[K comparable](c Capacity) *S3FIFO[K] {
	c.mustValid()
	p := &S3FIFO[K]{c: c, items: make(map[K]*node[K]), ghost: make(map[K]*node[K])}
	p.small, p.main = split(c, 0.1)
	p.s.init()
	p.m.init()
	p.g.init()
	return p
}

func (p *S3FIFO[K]) ghostCap() int {
	if p.main.maxEnt >= 0 {
		return max(p.main.maxEnt, 1)
	}
	return max(p.m.len, p.s.len, 1)
}

// remember puts t, just evicted from S, at the head of G, reusing its node.
// A resident key is never a ghost (a ghost that is added again leaves G), so
// t.key is not in G yet.
func (p *S3FIFO[K]) remember(t *node[K]) {
	t.size, t.cost, t.freq, t.queue = 0, 0, 0, qGhost
	p.ghost[t.key] = t
	p.g.pushFront(t)
	for gc := p.ghostCap(); p.g.len > gc; {
		b := p.g.back()
		p.g.remove(b)
		delete(p.ghost, b.key)
	}
}

func (p *S3FIFO[K]) drop(n *node[K]) {
	if n.queue == qSmall {
		p.s.remove(n)
	} else {
		p.m.remove(n)
	}
	delete(p.items, n.key)
	p.bytes -= n.size
}

// evictS evicts at most one key from S; it may move keys to M on the way.
func (p *S3FIFO[K]) evictS() (K, bool) {
	for p.s.len > 0 {
		t := p.s.back()
		p.s.remove(t)
		if t.freq >= 1 {
			t.freq = 0
			t.queue = qMain
			p.m.pushFront(t)
			continue
		}
		delete(p.items, t.key)
		p.bytes -= t.size
		p.remember(t)
		return t.key, true
	}
	var zero K
	return zero, false
}

// evictM evicts one key from M (if M is not empty).
func (p *S3FIFO[K]) evictM() (K, bool) {
	for p.m.len > 0 {
		t := p.m.back()
		if t.freq > 0 {
			t.freq--
			p.m.moveToFront(t)
			continue
		}
		p.m.remove(t)
		delete(p.items, t.key)
		p.bytes -= t.size
		return t.key, true
	}
	var zero K
	return zero, false
}

func (p *S3FIFO[K]) makeRoom(n int, extra int64, ev []Eviction[K]) []Eviction[K] {
	for p.c.over(len(p.items)+n, p.bytes+extra) {
		var k K
		var ok bool
		if p.s.len > 0 && (p.small.full(p.s.len, p.s.bytes) || p.m.len == 0) {
			k, ok = p.evictS()
			if !ok {
				k, ok = p.evictM()
			}
		} else {
			k, ok = p.evictM()
		}
		if !ok {
			break
		}
		ev = append(ev, Eviction[K]{k, ReasonCapacity})
	}
	return ev
}

// Add inserts k (into M if it is a ghost, else into S) after making room, or
// updates a resident k and counts a hit.
func (p *S3FIFO[K]) Add(k K, size int64, cost float64) []Eviction[K] {
	size = clampSize(size)
	n, ok := p.items[k]
	if p.c.tooBig(size) {
		if ok {
			p.drop(n)
		}
		return []Eviction[K]{{k, ReasonCapacity}}
	}
	if ok {
		p.bytes += size - n.size
		if n.queue == qSmall {
			p.s.resize(n, size)
		} else {
			p.m.resize(n, size)
		}
		n.cost = cost
		n.freq = min(n.freq+1, 3)
		return p.makeRoom(0, 0, nil)
	}
	ev := p.makeRoom(1, size, nil)
	if g, ok := p.ghost[k]; ok {
		p.g.remove(g)
		delete(p.ghost, k)
		n = g // reuse the ghost's node
		n.size, n.cost, n.freq, n.queue = size, cost, 0, qMain
		p.m.pushFront(n)
	} else {
		n = &node[K]{key: k, size: size, cost: cost}
		n.queue = qSmall
		p.s.pushFront(n)
	}
	p.items[k] = n
	p.bytes += size
	return ev
}

// Get reports whether k is resident and increments its 2-bit counter.
func (p *S3FIFO[K]) Get(k K) bool {
	n, ok := p.items[k]
	if ok {
		n.freq = min(n.freq+1, 3)
	}
	return ok
}

// Contains reports whether k is resident (ghosts are not resident).
func (p *S3FIFO[K]) Contains(k K) bool {
	_, ok := p.items[k]
	return ok
}

// Remove drops k; it does not enter the ghost queue.
func (p *S3FIFO[K]) Remove(k K) bool {
	n, ok := p.items[k]
	if ok {
		p.drop(n)
	}
	return ok
}

// Len is the number of resident keys.
func (p *S3FIFO[K]) Len() int { return len(p.items) }

// Bytes is the sum of resident sizes.
func (p *S3FIFO[K]) Bytes() int64 { return p.bytes }

// Queues returns the keys of S, M and G, each newest first. For tests and
// debugging; O(n).
func (p *S3FIFO[K]) Queues() (small, main, ghost []K) {
	return p.s.keys(), p.m.keys(), p.g.keys()
}

var _ Policy[string] = (*S3FIFO[string])(nil)
