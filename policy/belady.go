package policy

// Belady returns the hits of the clairvoyant optimal policy on t with room
// for capacity entries (request sizes are ignored: Belady's MIN is optimal
// for unit sizes only). On a miss it admits the key unless the key's next
// use is farther away than that of every resident key (or never comes);
// when full it evicts the resident key whose next use is farthest. This
// bypassing MIN is an upper bound on the hit count of every policy that
// holds at most capacity keys, admission filters included.
//
// It precomputes each request's next-use index in one backward pass and
// keeps resident keys in a max-heap on next use: O(n log capacity) time,
// O(n) memory.
func Belady(t *Trace, capacity int) Result {
	n := len(t.Keys)
	res := Result{Policy: "belady", Trace: t.Name, Capacity: capacity, Requests: int64(n)}
	if capacity <= 0 || n == 0 {
		return res
	}
	// Dense ids.
	ids := make([]int32, n)
	dense := make(map[uint64]int32, n/4)
	for i, k := range t.Keys {
		id, ok := dense[k]
		if !ok {
			id = int32(len(dense))
			dense[k] = id
		}
		ids[i] = id
	}
	distinct := len(dense)
	dense = nil
	// next[i]: index of the next request for ids[i], or n for never.
	next := make([]int32, n)
	last := make([]int32, distinct)
	for i := range last {
		last[i] = int32(n)
	}
	for i := n - 1; i >= 0; i-- {
		next[i] = last[ids[i]]
		last[ids[i]] = int32(i)
	}
	h := beladyHeap{pos: last} // reuse: pos[id] = heap index or -1
	for i := range h.pos {
		h.pos[i] = -1
	}
	h.nu = make([]int32, distinct)
	for i := 0; i < n; i++ {
		id, nu := ids[i], next[i]
		if h.pos[id] >= 0 {
			res.Hits++
			h.nu[id] = nu
			h.fix(int(h.pos[id]))
			continue
		}
		if nu == int32(n) {
			continue // never used again: do not admit
		}
		if len(h.ids) >= capacity {
			top := h.ids[0]
			if h.nu[top] <= nu {
				continue // the newcomer is the farthest: bypass
			}
			h.pop()
		}
		h.nu[id] = nu
		h.push(id)
	}
	return res
}

// beladyHeap is a max-heap of ids on nu[id], with positions for fix.
type beladyHeap struct {
	ids []int32
	pos []int32
	nu  []int32
}

func (h *beladyHeap) less(i, j int) bool { return h.nu[h.ids[i]] > h.nu[h.ids[j]] }

func (h *beladyHeap) swap(i, j int) {
	h.ids[i], h.ids[j] = h.ids[j], h.ids[i]
	h.pos[h.ids[i]] = int32(i)
	h.pos[h.ids[j]] = int32(j)
}

func (h *beladyHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *beladyHeap) down(i int) bool {
	start := i
	for {
		l := 2*i + 1
		if l >= len(h.ids) {
			break
		}
		c := l
		if r := l + 1; r < len(h.ids) && h.less(r, l) {
			c = r
		}
		if !h.less(c, i) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > start
}

func (h *beladyHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h *beladyHeap) push(id int32) {
	h.ids = append(h.ids, id)
	h.pos[id] = int32(len(h.ids) - 1)
	h.up(len(h.ids) - 1)
}

func (h *beladyHeap) pop() {
	last := len(h.ids) - 1
	h.swap(0, last)
	h.pos[h.ids[last]] = -1
	h.ids = h.ids[:last]
	if last > 0 {
		h.down(0)
	}
}
