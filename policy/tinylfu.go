package policy

import "hash/maphash"

// Segments of W-TinyLFU.
const (
	qWindow uint8 = iota + 1
	qProbation
	qProtected
)

// WTinyLFU is Window-TinyLFU (Einziger, Friedman and Manes, "TinyLFU: a
// highly efficient cache admission policy", 2017; the policy of Caffeine):
//
//   - a window LRU holding 1% of the capacity, where every new key enters;
//   - a main segmented LRU holding the rest: probation (20% of main) and
//     protected (80% of main); a hit in probation promotes to protected, and
//     protected overflow is demoted to the head of probation;
//   - a TinyLFU admission filter: when the window overflows, its LRU key (the
//     candidate) enters probation only if the main segment has room or the
//     candidate's estimated frequency is strictly higher than that of the
//     main victim (probation's LRU key, or protected's when probation is
//     empty); otherwise the candidate is evicted (reported by Add).
//
// Frequencies come from a count-min sketch with a doorkeeper and periodic
// aging (see sketch). Every Get (hit or miss) and every Add records one
// access, except an Add of k right after a Get of k that missed: that pair
// is one request. So both "Get, then Add on a miss" and "Add on a miss
// without Get" count each request once. (Callers must record misses one way
// or the other: a key whose accesses are never recorded has frequency 0 and
// is refused whenever the main victim has been seen at all.)
//
// Amortised O(1) per operation, plus one pass over the sketch every
// 10×width accesses.
type WTinyLFU[K comparable] struct {
	c                 Capacity
	win, main, prot   seg
	hash              func(K) uint64
	items             map[K]*node[K]
	window, probation list[K]
	protected         list[K]
	bytes             int64
	sk                *sketch
	growable          bool
	lastMiss          uint64 // hash of the key of the last Get, if it missed
	missed            bool   // lastMiss is valid
}

// NewWTinyLFU returns an empty W-TinyLFU bounded by c. hash maps a key to 64
// well-mixed bits; nil selects hash/maphash with a random seed (so hit
// ratios vary slightly between processes through sketch collisions). The
// sketch is sized for MaxEntries, or, with only MaxBytes set, starts at 1024
// columns and doubles (forgetting its counts) whenever the resident key
// count outgrows it; widths are powers of two from 64 to 2^24. The sketch
// and doorkeeper take 6 bytes per column (768 KiB for MaxEntries 100 000).
// It panics if c is invalid.
func NewWTinyLFU[K comparable](c Capacity, hash func(K) uint64) *WTinyLFU[K] {
	c.mustValid()
	if hash == nil {
		seed := maphash.MakeSeed()
		hash = func(k K) uint64 { return maphash.Comparable(seed, k) }
	}
	p := &WTinyLFU[K]{c: c, hash: hash, items: make(map[K]*node[K])}
	p.win, p.main = split(c, 0.01)
	_, p.prot = splitSeg(p.main, 0.2)
	width := c.MaxEntries
	if width == 0 {
		width, p.growable = 1024, true
	}
	p.sk = newSketch(width)
	p.window.init()
	p.probation.init()
	p.protected.init()
	return p
}

func (p *WTinyLFU[K]) listOf(n *node[K]) *list[K] {
	switch n.queue {
	case qWindow:
		return &p.window
	case qProbation:
		return &p.probation
	}
	return &p.protected
}

func (p *WTinyLFU[K]) drop(n *node[K]) {
	p.listOf(n).remove(n)
	delete(p.items, n.key)
	p.bytes -= n.size
}

func (p *WTinyLFU[K]) mainLen() int     { return p.probation.len + p.protected.len }
func (p *WTinyLFU[K]) mainBytes() int64 { return p.probation.bytes + p.protected.bytes }

// mainVictim is probation's LRU key, or protected's when probation is empty.
func (p *WTinyLFU[K]) mainVictim() *node[K] {
	if v := p.probation.back(); v != nil {
		return v
	}
	return p.protected.back()
}

// admit decides between candidate c (already out of the window) and the
// main victims.
func (p *WTinyLFU[K]) admit(c *node[K], ev []Eviction[K]) []Eviction[K] {
	if p.main.over(1, c.size) {
		delete(p.items, c.key)
		p.bytes -= c.size
		return append(ev, Eviction[K]{c.key, ReasonCapacity})
	}
	cf := p.sk.estimate(p.hash(c.key))
	for p.main.over(p.mainLen()+1, p.mainBytes()+c.size) {
		v := p.mainVictim()
		if cf > p.sk.estimate(p.hash(v.key)) {
			p.drop(v)
			ev = append(ev, Eviction[K]{v.key, ReasonCapacity})
			continue
		}
		delete(p.items, c.key)
		p.bytes -= c.size
		return append(ev, Eviction[K]{c.key, ReasonCapacity})
	}
	c.queue = qProbation
	p.probation.pushFront(c)
	return ev
}

// rebalance restores every segment bound after an insertion or a resize.
func (p *WTinyLFU[K]) rebalance(ev []Eviction[K]) []Eviction[K] {
	for p.window.len > 0 && p.win.over(p.window.len, p.window.bytes) {
		c := p.window.back()
		p.window.remove(c)
		ev = p.admit(c, ev)
	}
	for p.protected.len > 0 && p.prot.over(p.protected.len, p.protected.bytes) {
		d := p.protected.back()
		p.protected.remove(d)
		d.queue = qProbation
		p.probation.pushFront(d)
	}
	for p.mainLen() > 0 && p.main.over(p.mainLen(), p.mainBytes()) {
		v := p.mainVictim()
		p.drop(v)
		ev = append(ev, Eviction[K]{v.key, ReasonCapacity})
	}
	return ev
}

func (p *WTinyLFU[K]) hit(n *node[K]) {
	switch n.queue {
	case qWindow:
		p.window.moveToFront(n)
	case qProbation:
		p.probation.remove(n)
		n.queue = qProtected
		p.protected.pushFront(n)
		for p.protected.back() != n && p.prot.over(p.protected.len, p.protected.bytes) {
			d := p.protected.back()
			p.protected.remove(d)
			d.queue = qProbation
			p.probation.pushFront(d)
		}
	case qProtected:
		p.protected.moveToFront(n)
	}
}

// Add inserts k at the head of the window, or updates a resident k and
// counts an access. Window overflow then goes through admission.
func (p *WTinyLFU[K]) Add(k K, size int64, cost float64) []Eviction[K] {
	size = clampSize(size)
	n, ok := p.items[k]
	if p.c.tooBig(size) {
		if ok {
			p.drop(n)
		}
		return []Eviction[K]{{k, ReasonCapacity}}
	}
	h := p.hash(k)
	if !p.missed || p.lastMiss != h {
		p.sk.increment(h)
	}
	p.missed = false
	if ok {
		p.bytes += size - n.size
		p.listOf(n).resize(n, size)
		n.cost = cost
		p.hit(n)
		return p.rebalance(nil)
	}
	n = &node[K]{key: k, size: size, cost: cost, queue: qWindow}
	p.items[k] = n
	p.bytes += size
	p.window.pushFront(n)
	if p.growable && len(p.items) > p.sk.width() && p.sk.width() < maxSketchWidth {
		p.sk = newSketch(2 * p.sk.width())
	}
	return p.rebalance(nil)
}

// Get records the access in the sketch and reports whether k is resident.
func (p *WTinyLFU[K]) Get(k K) bool {
	h := p.hash(k)
	p.sk.increment(h)
	n, ok := p.items[k]
	if ok {
		p.hit(n)
	}
	p.lastMiss, p.missed = h, !ok
	return ok
}

// Contains reports whether k is resident; it records nothing.
func (p *WTinyLFU[K]) Contains(k K) bool {
	_, ok := p.items[k]
	return ok
}

// Remove drops k; its sketch counts stay.
func (p *WTinyLFU[K]) Remove(k K) bool {
	n, ok := p.items[k]
	if ok {
		p.drop(n)
	}
	return ok
}

// Len is the number of resident keys.
func (p *WTinyLFU[K]) Len() int { return len(p.items) }

// Bytes is the sum of resident sizes.
func (p *WTinyLFU[K]) Bytes() int64 { return p.bytes }

// Segments returns the keys of the window, probation and protected segments,
// each most recent first. For tests and debugging; O(n).
func (p *WTinyLFU[K]) Segments() (window, probation, protected []K) {
	return p.window.keys(), p.probation.keys(), p.protected.keys()
}

var _ Policy[string] = (*WTinyLFU[string])(nil)
