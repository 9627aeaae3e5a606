package policy

// node is one resident key. One node type serves every list-based policy;
// each uses the fields it needs.
type node[K comparable] struct {
	key        K
	size       int64
	cost       float64
	prev, next *node[K]
	freq       uint32     // LFU and GDSF access count; S3-FIFO 2-bit counter
	queue      uint8      // which queue of S3-FIFO or W-TinyLFU holds the node
	bucket     *bucket[K] // LFU frequency bucket
	prio       float64    // GDSF priority
	seq        uint64     // GDSF tie-break: lower = touched earlier
	index      int        // GDSF heap position
}

// list is a circular doubly linked list with a sentinel. Front is the most
// recently inserted (MRU) end, back the oldest. It also sums sizes. A list
// must be initialised with init and must not be copied afterwards.
type list[K comparable] struct {
	root  node[K]
	len   int
	bytes int64
}

func (l *list[K]) init() {
	l.root.next = &l.root
	l.root.prev = &l.root
}

func (l *list[K]) front() *node[K] {
	if l.len == 0 {
		return nil
	}
	return l.root.next
}

func (l *list[K]) back() *node[K] {
	if l.len == 0 {
		return nil
	}
	return l.root.prev
}

func (l *list[K]) pushFront(n *node[K]) {
	n.prev = &l.root
	n.next = l.root.next
	l.root.next.prev = n
	l.root.next = n
	l.len++
	l.bytes += n.size
}

func (l *list[K]) remove(n *node[K]) {
	n.prev.next = n.next
	n.next.prev = n.prev
	n.prev, n.next = nil, nil
	l.len--
	l.bytes -= n.size
}

func (l *list[K]) moveToFront(n *node[K]) {
	if l.root.next == n {
		return
	}
	n.prev.next = n.next
	n.next.prev = n.prev
	n.prev = &l.root
	n.next = l.root.next
	l.root.next.prev = n
	l.root.next = n
}

// resize changes the size of n, which must be in l.
func (l *list[K]) resize(n *node[K], size int64) {
	l.bytes += size - n.size
	n.size = size
}

// keys returns the keys front (newest) to back (oldest).
func (l *list[K]) keys() []K {
	out := make([]K, 0, l.len)
	for n := l.root.next; n != &l.root; n = n.next {
		out = append(out, n.key)
	}
	return out
}
