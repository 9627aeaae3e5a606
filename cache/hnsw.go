package cache

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"unsafe"

	"github.com/specgate/specgate/vecmath"
)

// HNSWConfig holds the parameters of the in-process HNSW index.
type HNSWConfig struct {
	Dim            int // vector length (required)
	M              int // links per node above layer 0; layer 0 keeps 2*M. 0 = 16
	EfConstruction int // candidate list size while inserting. 0 = 128
	// EfSearch is the candidate list size while searching, on every layer
	// (at least k). 0 = by the namespace graph's size (efSearchBySize).
	EfSearch int
	Seed     uint64 // level-generation seed; the same inserts give the same graph
	// CompactRatio: when tombstones exceed this fraction of a namespace's
	// nodes, the namespace graph is rebuilt from its live nodes. 0 = 0.3.
	CompactRatio float64
	// NoQuantize traverses with the float32 vectors even at 128+
	// dimensions (by default those graphs traverse int8 copies and re-score
	// the results exactly; see graph.qv).
	NoQuantize bool
}

// HNSW is an in-process hierarchical navigable small world index (Malkov &
// Yashunin) over L2-normalized vectors, scored by dot product (cosine). Each
// namespace has its own graph, so a search can never return another
// namespace's ids. Remove marks a tombstone (still traversed, never returned);
// when tombstones pass CompactRatio the graph is rebuilt from live nodes.
// Safe for concurrent use: searches of one namespace run in parallel, writes
// lock that namespace only. Vectors passed in are copied.
type HNSW struct {
	cfg    HNSWConfig
	mu     sync.RWMutex
	graphs map[string]*graph
	closed bool
}

// NewHNSW returns an empty index.
func NewHNSW(cfg HNSWConfig) (*HNSW, error) {
	if cfg.Dim <= 0 || cfg.Dim > 1<<16 {
		return nil, fmt.Errorf("%w: hnsw dim %d not in [1, 65536]", ErrConfig, cfg.Dim)
	}
	if cfg.M == 0 {
		cfg.M = 16
	}
	if cfg.EfConstruction == 0 {
		cfg.EfConstruction = 128
	}
	if cfg.CompactRatio == 0 {
		cfg.CompactRatio = 0.3
	}
	if cfg.M < 2 || cfg.M > 256 || cfg.EfConstruction < 1 || cfg.EfSearch < 0 || cfg.CompactRatio < 0 || cfg.CompactRatio >= 1 {
		return nil, fmt.Errorf("%w: hnsw m=%d ef_construction=%d ef_search=%d compact_ratio=%v", ErrConfig, cfg.M, cfg.EfConstruction, cfg.EfSearch, cfg.CompactRatio)
	}
	return &HNSW{cfg: cfg, graphs: map[string]*graph{}}, nil
}

// Config returns the effective parameters.
func (h *HNSW) Config() HNSWConfig { return h.cfg }

func (h *HNSW) graphFor(namespace string, create bool) (*graph, error) {
	h.mu.RLock()
	g, closed := h.graphs[namespace], h.closed
	h.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if g != nil || !create {
		return g, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	if g = h.graphs[namespace]; g == nil {
		g = newGraph(h.cfg, h.cfg.Seed^fnv64(0, namespace))
		h.graphs[namespace] = g
	}
	return g, nil
}

// Add inserts or replaces the vector of id in namespace. Re-adding an
// identical vector is a no-op.
func (h *HNSW) Add(_ context.Context, namespace, id string, v []float32) error {
	if len(v) != h.cfg.Dim {
		return fmt.Errorf("hnsw: add %s: %w: got %d, want %d", id, ErrDim, len(v), h.cfg.Dim)
	}
	g, err := h.graphFor(namespace, true)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.add(id, append([]float32(nil), v...))
	return nil
}

// Remove deletes id from namespace; an absent id is not an error.
func (h *HNSW) Remove(_ context.Context, namespace, id string) error {
	g, err := h.graphFor(namespace, false)
	if err != nil || g == nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.remove(id)
	return nil
}

// Search returns up to k live matches of namespace, best first, with
// EfSearchFor(namespace).
func (h *HNSW) Search(ctx context.Context, namespace string, v []float32, k int) ([]Match, error) {
	return h.SearchEf(ctx, namespace, v, k, 0)
}

// EfSearchFor is the candidate-list size Search uses for namespace now.
func (h *HNSW) EfSearchFor(namespace string) int {
	if h.cfg.EfSearch > 0 {
		return h.cfg.EfSearch
	}
	n := 0
	if g, _ := h.graphFor(namespace, false); g != nil {
		g.mu.RLock()
		n = len(g.nodes)
		g.mu.RUnlock()
	}
	return efSearchBySize(n)
}

// efSearchBySize is the default efSearch for a graph of n nodes (tombstones
// included), chosen by recall@1 on bench cache-http's questions (lexical
// embeddings, int8 traversal, M 16; BenchmarkHNSWLexical, tables in
// docs/cache.md) at the measured size at or above n, with a margin over
// the 0.99: at 10 000 nodes efSearch 8 gave 0.999 and 12 gave
// 1.000 (→ 12); at 100 000, efSearch 16 gave recall@1 0.9962-0.9992 on
// six graphs (seeds 1-6, 4 000 paraphrase queries each; 20 gave
// 0.9968-0.9995, 24 0.9975-0.9998) at about three quarters of efSearch
// 24's search cost (→ 16; it was 24). Larger graphs were not measured and
// keep the old default, 64.
func efSearchBySize(n int) int {
	switch {
	case n <= 10_000:
		return 12
	case n <= 100_000:
		return 16
	default:
		return 64
	}
}

// SearchEf is Search with an explicit candidate-list size (at least k);
// ef <= 0 takes the default, EfSearchFor(namespace).
func (h *HNSW) SearchEf(_ context.Context, namespace string, v []float32, k, ef int) ([]Match, error) {
	if len(v) != h.cfg.Dim {
		return nil, fmt.Errorf("hnsw: search: %w: got %d, want %d", ErrDim, len(v), h.cfg.Dim)
	}
	g, err := h.graphFor(namespace, false)
	if err != nil || g == nil || k <= 0 {
		return nil, err
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	if ef <= 0 {
		ef = h.cfg.EfSearch
	}
	if ef <= 0 {
		ef = efSearchBySize(len(g.nodes))
	}
	return g.search(v, k, max(ef, k)), nil
}

// Len returns the number of live vectors in namespace ("" = all namespaces).
func (h *HNSW) Len(namespace string) int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	n := 0
	for ns, g := range h.graphs {
		if namespace == "" || ns == namespace {
			g.mu.RLock()
			n += len(g.byID)
			g.mu.RUnlock()
		}
	}
	return n
}

// Close drops all graphs; later calls fail with ErrClosed.
func (h *HNSW) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	h.graphs = nil
	return nil
}

var _ VectorIndex = (*HNSW)(nil)

// node is one vector in a graph. len(links) is the node's level + 1; its
// entries are nil once the node is in a graph (the links live in the
// graph's l0 and up arenas; Load and add pass them in through links). Vectors with few non-zeros (the lexical
// embedder's hashed n-grams fill about a fifth of the buckets) also keep a
// sparse copy, so similarity with a dense query costs O(non-zeros) instead
// of O(dim).
type node struct {
	id    string
	vec   []float32
	nzIdx []uint16 // indices of non-zero components, nil when dense
	nzVal []float32
	links [][]int32
}

func newNode(id string, v []float32) *node {
	n := &node{id: id, vec: v}
	nnz := 0
	for _, x := range v {
		if x != 0 {
			nnz++
		}
	}
	if nnz <= len(v)/3 && len(v) <= 1<<16 {
		n.nzIdx = make([]uint16, 0, nnz)
		n.nzVal = make([]float32, 0, nnz)
		for i, x := range v {
			if x != 0 {
				n.nzIdx = append(n.nzIdx, uint16(i))
				n.nzVal = append(n.nzVal, x)
			}
		}
	}
	return n
}

// sim is the dot product of a dense vector q with node n.
func sim(q []float32, n *node) float32 {
	if n.nzIdx == nil {
		return Dot(q, n.vec)
	}
	var s0, s1 float32
	idx, val := n.nzIdx, n.nzVal
	i := 0
	for ; i+2 <= len(idx); i += 2 {
		s0 += q[idx[i]] * val[i]
		s1 += q[idx[i+1]] * val[i+1]
	}
	if i < len(idx) {
		s0 += q[idx[i]] * val[i]
	}
	return s0 + s1
}

type graph struct {
	mu        sync.RWMutex
	cfg       HNSWConfig
	rng       *rand.Rand
	seed      uint64
	ml        float64
	nodes     []*node
	byID      map[string]int32
	entry     int32 // -1 when empty
	top       int   // level of entry
	tombs     int
	visitPool sync.Pool
	scratch   sync.Pool // *searchScratch

	// What a search touches per node, in flat arrays indexed by node (no
	// pointer chasing through nodes[i]): layer-0 links in l0, node i's at
	// l0[i*l0s] (the count) and l0[i*l0s+1 : i*l0s+1+count]; tombstones in
	// dead. l0s is 2M+1, more when a loaded snapshot has longer lists.
	l0   []int32
	l0s  int
	dead []bool
	// Links on layers ≥ 1, the same way: node i's layer l list at
	// up[upOff[i]+(l-1)*ups] (count, then up to ups-1 links); upOff[i] is
	// -1 for nodes on layer 0 only. ups is M+1, more for a loaded snapshot
	// with longer lists. (The upper layers are searched with the full beam,
	// so they are on the hot path too.)
	up    []int32
	upOff []int32
	ups   int

	// Quantized copies for traversal (dim ≥ quantMinDim): node i's vector
	// as int8 in qv[i*qdim:(i+1)*qdim] (zero-padded to a multiple of 32)
	// with scale qs[i]; one contiguous arena, scored with dotI8. Results
	// are re-scored with the float32 vectors before they are returned.
	qdim int
	qv   []int8
	qs   []float32

	// The layers ≥ 1 again, for searches only, in a space of their own:
	// the nodes on layer ≥ 1 numbered by slot (uslot[i] is node i's, -1
	// for layer-0-only nodes; unode maps back), each slot's lists on
	// layers 1.. at ulink[uoff[s]+(l-1)*ups] (count, then links as
	// slots) and, in quantized graphs, its int8 copy at uqv[s*qdim:] with
	// scale uqs[s]. A search scores ~330 upper-layer nodes (the full beam
	// on every layer); in node space each expansion waited for upOff, then
	// up, and each neighbour for its visited mark in a per-node array and
	// its vector in a page of its own in the 51 MB arena (100 000 nodes);
	// here the marks are a few KiB, the offsets 4 bytes a slot, and the
	// whole upper graph ~3.7 MB. Maintained by appendNode and setLinks.
	uslot []int32
	unode []int32
	uoff  []int32
	ulink []int32
	uqv   []int8
	uqs   []float32
}

func newGraph(cfg HNSWConfig, seed uint64) *graph {
	g := &graph{
		cfg: cfg, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		ml: 1 / math.Log(float64(cfg.M)), byID: map[string]int32{}, entry: -1,
		l0s: 2*cfg.M + 1, ups: cfg.M + 1,
	}
	if cfg.Dim >= quantMinDim && !cfg.NoQuantize {
		g.qdim = (cfg.Dim + 31) &^ 31
	}
	return g
}

// quantMinDim is the smallest dimension traversed with int8 copies; below
// it the float32 dot product is cheap enough and int8 rounding relatively
// larger.
const quantMinDim = 128

// rescoreFactor: how many int8-ranked candidates per requested result are
// re-scored exactly.
const rescoreFactor = 4

// links returns node i's neighbours on layer l. Layer 0's slice aliases the
// arena (capacity l0s-1): change it through setLinks only.
func (g *graph) links(i int32, l int) []int32 {
	if l == 0 {
		o := int(i) * g.l0s
		return g.l0[o+1 : o+1+int(g.l0[o]) : o+g.l0s]
	}
	o := int(g.upOff[i]) + (l-1)*g.ups
	return g.up[o+1 : o+1+int(g.up[o]) : o+g.ups]
}

// setLinks replaces node i's neighbours on layer l (at most l0s-1 on layer
// 0, ups-1 above).
func (g *graph) setLinks(i int32, l int, ls []int32) {
	if l == 0 {
		o := int(i) * g.l0s
		g.l0[o] = int32(copy(g.l0[o+1:o+g.l0s], ls))
		return
	}
	o := int(g.upOff[i]) + (l-1)*g.ups
	g.up[o] = int32(copy(g.up[o+1:o+g.ups], ls))
	// The slot-space mirror. Every target is on layer l too, so it has a
	// slot (add links only nodes its layer search found; Load checks it).
	u := int(g.uoff[g.uslot[i]]) + (l-1)*g.ups
	g.ulink[u] = g.up[o]
	for k, j := range g.up[o+1 : o+1+int(g.up[o])] {
		g.ulink[u+1+k] = g.uslot[j]
	}
}

// ulinks returns slot s's neighbours (as slots) on layer l ≥ 1.
func (g *graph) ulinks(s int32, l int) []int32 {
	o := int(g.uoff[s]) + (l-1)*g.ups
	return g.ulink[o+1 : o+1+int(g.ulink[o]) : o+g.ups]
}

// uscore is score for slot s.
func (g *graph) uscore(qr *query, s int32) float32 {
	if g.qdim == 0 {
		return sim(qr.v, g.nodes[g.unode[s]])
	}
	o := int(s) * g.qdim
	return qr.s * g.uqs[s] * float32(dotI8(qr.q, g.uqv[o:o+g.qdim:o+g.qdim]))
}

// appendNode adds n (with its level's link slots) and its per-node arrays.
func (g *graph) appendNode(n *node) int32 {
	idx := int32(len(g.nodes))
	g.nodes = append(g.nodes, n)
	g.l0 = append(g.l0, make([]int32, g.l0s)...)
	g.dead = append(g.dead, false)
	if level := len(n.links) - 1; level > 0 {
		g.upOff = append(g.upOff, int32(len(g.up)))
		g.up = append(g.up, make([]int32, level*g.ups)...)
	} else {
		g.upOff = append(g.upOff, -1)
	}
	g.appendQuant(n.vec)
	if level := len(n.links) - 1; level > 0 {
		s := int32(len(g.unode))
		g.uslot = append(g.uslot, s)
		g.unode = append(g.unode, idx)
		g.uoff = append(g.uoff, int32(len(g.ulink)))
		g.ulink = append(g.ulink, make([]int32, level*g.ups)...)
		if g.qdim > 0 {
			o := int(idx) * g.qdim
			g.uqv = append(g.uqv, g.qv[o:o+g.qdim]...)
			g.uqs = append(g.uqs, g.qs[idx])
		}
	} else {
		g.uslot = append(g.uslot, -1)
	}
	return idx
}

// appendQuant stores the quantized copy of the next node's vector.
func (g *graph) appendQuant(v []float32) {
	if g.qdim == 0 {
		return
	}
	n := len(g.qv)
	g.qv = append(g.qv, make([]int8, g.qdim)...)
	g.qs = append(g.qs, quantize(v, g.qv[n:n+g.qdim]))
}

// query is a vector prepared for scoring against the graph's nodes.
type query struct {
	v  []float32
	q  []int8 // quantized v (nil without quantization)
	s  float32
	rq rowsQuery // q prepared for dotI8Rows
}

type rowsQuery = vecmath.RowsQuery

func (g *graph) prep(v []float32) *query {
	qr := &query{v: v}
	g.prepInto(qr, nil)
	return qr
}

// prepInto fills qr (qr.v set) for scoring, with its int8 buffers taken
// from sc when sc is not nil (a search's scratch) and made otherwise.
func (g *graph) prepInto(qr *query, sc *searchScratch) {
	if g.qdim == 0 {
		return
	}
	if sc == nil {
		qr.q = make([]int8, g.qdim)
		qr.s = quantize(qr.v, qr.q)
		qr.rq = prepRows(qr.q)
		return
	}
	if cap(sc.q) < g.qdim {
		sc.q, sc.u = make([]int8, g.qdim), make([]uint8, g.qdim)
	}
	qr.q = sc.q[:g.qdim]
	qr.s = quantize(qr.v, qr.q)
	qr.rq = prepRowsInto(qr.q, sc.u[:g.qdim])
}

// searchScratch holds a search's buffers between searches (graph.scratch):
// the query's int8 copies and the layer results, so that a search
// allocates only what it returns.
type searchScratch struct {
	q      []int8
	u      []uint8
	e0, e1 []cand // searchUpper's layer results, alternately
	l0     []cand // layer 0's results
}

// score is the traversal similarity of the query with node j: the int8
// approximation when the graph is quantized (within about 1e-3 of the
// cosine for unit vectors), else the exact dot product.
func (g *graph) score(qr *query, j int32) float32 {
	if g.qdim == 0 {
		return sim(qr.v, g.nodes[j])
	}
	o := int(j) * g.qdim
	return qr.s * g.qs[j] * float32(dotI8(qr.q, g.qv[o:o+g.qdim:o+g.qdim]))
}

// scoreNodes is score between two stored nodes.
func (g *graph) scoreNodes(a, b int32) float32 {
	if g.qdim == 0 {
		return sim(g.nodes[a].vec, g.nodes[b])
	}
	oa, ob := int(a)*g.qdim, int(b)*g.qdim
	return g.qs[a] * g.qs[b] * float32(dotI8(g.qv[oa:oa+g.qdim:oa+g.qdim], g.qv[ob:ob+g.qdim:ob+g.qdim]))
}

// marks is a generation-stamped visited set over indices below a bound:
// one byte each (100 KB at 100 000 nodes, mostly cache-resident), cleared
// every 255 passes.
type marks struct {
	m   []uint8
	gen uint8
}

// next starts an empty set for indices below n.
func (k *marks) next(n int) {
	if len(k.m) < n {
		k.m = make([]uint8, n+n/4+16)
		k.gen = 0
	}
	k.gen++
	if k.gen == 0 {
		clear(k.m)
		k.gen = 1
	}
}

// visit marks i, reporting whether it was not marked yet.
func (k *marks) visit(i int32) bool {
	if k.m[i] == k.gen {
		return false
	}
	k.m[i] = k.gen
	return true
}

// visited is a search's scratch: the visited sets of node space and of the
// upper layers' slot space (searchUpper).
type visited struct {
	nodes, upper marks
	// The search heaps' backing arrays, kept with the visited set so a
	// search does not grow two new slices per layer.
	cbuf, rbuf []cand
}

func (g *graph) pooledVisited() *visited {
	vs, _ := g.visitPool.Get().(*visited)
	if vs == nil {
		vs = &visited{}
	}
	return vs
}

func (g *graph) getVisited() *visited {
	vs := g.pooledVisited()
	vs.nodes.next(len(g.nodes))
	return vs
}

// getUpper is getVisited for a search of the upper layers (slot space).
func (g *graph) getUpper() *visited {
	vs := g.pooledVisited()
	vs.upper.next(len(g.unode))
	return vs
}

func (vs *visited) uvisit(s int32) bool { return vs.upper.visit(s) }

func (vs *visited) visit(i int32) bool { return vs.nodes.visit(i) }

func (g *graph) randomLevel() int {
	u := g.rng.Float64()
	if u <= 0 {
		u = math.SmallestNonzeroFloat64
	}
	return min(int(-math.Log(u)*g.ml), 16)
}

func (g *graph) maxLinks(level int) int {
	if level == 0 {
		return 2 * g.cfg.M
	}
	return g.cfg.M
}

// cand is a search candidate; s is the similarity (higher is closer).
type cand struct {
	i int32
	s float32
}

// candHeap is a binary min-heap of candidates by s (the least similar on
// top). The search's max-heap stores -s in it (maxCand), so neither heap
// branches on its kind in the comparisons.
type candHeap struct {
	c []cand
}

func (h *candHeap) push(x cand) {
	h.c = append(h.c, x)
	c := h.c
	i := len(c) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !(x.s < c[p].s) {
			break
		}
		c[i] = c[p]
		i = p
	}
	c[i] = x
}

func (h *candHeap) pop() cand {
	top := h.c[0]
	n := len(h.c) - 1
	x := h.c[n]
	h.c = h.c[:n]
	if n > 0 {
		h.down(x)
	}
	return top
}

// replaceTop drops the top and adds x (one sift instead of push and pop).
func (h *candHeap) replaceTop(x cand) { h.down(x) }

// down puts x at the root and sifts it down.
func (h *candHeap) down(x cand) {
	c := h.c
	n := len(c)
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && c[r].s < c[l].s {
			m = r
		}
		if !(c[m].s < x.s) {
			break
		}
		c[i] = c[m]
		i = m
	}
	c[i] = x
}

// maxCand is c as stored in the max-heap of a search (score negated).
func maxCand(c cand) cand { return cand{c.i, -c.s} }

func (h *candHeap) top() cand { return h.c[0] }
func (h *candHeap) len() int  { return len(h.c) }

// greedy descends one layer from ep, moving to the most similar neighbour.
func (g *graph) greedy(q *query, ep cand, level int) cand {
	for changed := true; changed; {
		changed = false
		for _, j := range g.links(ep.i, level) {
			if s := g.score(q, j); s > ep.s {
				ep, changed = cand{j, s}, true
			}
		}
	}
	return ep
}

// searchLayer returns up to ef nearest nodes on level (most similar first).
// With liveOnly, tombstones are traversed but not returned.
func (g *graph) searchLayer(q *query, eps []cand, ef, level int, liveOnly bool) []cand {
	return g.searchLayerInto(q, eps, ef, level, liveOnly, nil)
}

// searchLayerInto is searchLayer writing its results into dst's backing
// array when it is large enough (dst may be nil).
func (g *graph) searchLayerInto(q *query, eps []cand, ef, level int, liveOnly bool, dst []cand) []cand {
	vs := g.getVisited()
	b := beam{marks: &vs.nodes, cands: candHeap{c: vs.cbuf[:0]}, res: candHeap{c: vs.rbuf[:0]},
		lists: g.up, offs: g.upOff, at: (level - 1) * g.ups, qv: g.qv, qs: g.qs}
	if level == 0 {
		b.lists, b.offs, b.stride, b.at = g.l0, nil, g.l0s, 0
	}
	if liveOnly {
		b.dead = g.dead
	}
	g.searchBeam(q, &b, eps, ef)
	vs.cbuf, vs.rbuf = b.cands.c[:0], b.res.c[:0]
	out := b.results(dst)
	g.visitPool.Put(vs)
	return out
}

// searchUpper searches the upper layers top..1 in slot space (see
// graph.uslot), each with a beam of ef seeded by all of the previous
// layer's results, from the entry node; it returns layer 1's best as node
// indices, most similar first: the seeds of layer 0. The same search as
// searchLayer on each layer (same candidates, same order: one loop,
// graph.searchBeam), without the indirections of node space. Needs g.top ≥ 1.
func (g *graph) searchUpper(q *query, ef int) []cand {
	return g.searchUpperInto(q, ef, nil)
}

// searchUpperInto is searchUpper with its layer results in sc's buffers
// (sc may be nil: they are made); the result aliases sc.
func (g *graph) searchUpperInto(q *query, ef int, sc *searchScratch) []cand {
	if sc == nil {
		sc = &searchScratch{}
	}
	vs := g.getUpper()
	b := beam{marks: &vs.upper, cands: candHeap{c: vs.cbuf[:0]}, res: candHeap{c: vs.rbuf[:0]},
		lists: g.ulink, offs: g.uoff, qv: g.uqv, qs: g.uqs, nodeOf: g.unode}
	es := g.uslot[g.entry]
	useE1 := false
	var seed [1]cand
	eps := append(seed[:0], cand{es, g.uscore(q, es)})
	for level := g.top; level > 0; level-- {
		if level < g.top {
			vs.upper.next(len(g.unode)) // a fresh visited set per layer, as searchLayer has
		}
		b.at = (level - 1) * g.ups
		g.searchBeam(q, &b, eps, ef)
		// The layer's results, most similar first, seed the next layer.
		// Into the buffer eps is not in (e0 and e1 alternate; the first
		// layer's seed is on the stack).
		buf := &sc.e0
		if useE1 {
			buf = &sc.e1
		}
		useE1 = !useE1
		if cap(*buf) < b.res.len() {
			*buf = make([]cand, 0, max(b.res.len(), ef))
		}
		*buf = b.results(*buf)
		eps = *buf
	}
	vs.cbuf, vs.rbuf = b.cands.c[:0], b.res.c[:0]
	g.visitPool.Put(vs)
	for i := range eps {
		eps[i].i = g.unode[eps[i].i]
	}
	return eps
}

// beam is one layer's search (graph.searchBeam) in node space or in the upper
// layers' slot space: the index's link lists (count, then links) at
// lists[offs[i]+at], or lists[i*stride+at] when offs is nil; its int8
// copies at qv[i*qdim:] with scales qs (quantized graphs), else the float
// vector of node nodeOf[i] (i itself when nodeOf is nil); tombstones in
// dead (nil: returned too); the visited set and the two heaps.
type beam struct {
	marks      *marks
	cands, res candHeap // maxCand: the most similar on top; the least similar on top
	lists      []int32
	offs       []int32
	stride, at int
	qv         []int8
	qs         []float32
	nodeOf     []int32
	dead       []bool
}

// searchBeam runs a beam of ef from eps on b's layer, leaving the best ef in
// b.res (the least similar on top). What the loop reads is copied out of b
// first: the heaps and slices stay in locals, as in the two loops this one
// replaced.
func (g *graph) searchBeam(q *query, b *beam, eps []cand, ef int) {
	cands, res := candHeap{c: b.cands.c[:0]}, candHeap{c: b.res.c[:0]}
	marks, dead := b.marks, b.dead
	lists, offs, stride, at := b.lists, b.offs, b.stride, b.at
	qv, qs, qdim, nodeOf := b.qv, b.qs, g.qdim, b.nodeOf
	for _, ep := range eps {
		if !marks.visit(ep.i) {
			continue
		}
		cands.push(maxCand(ep))
		if dead == nil || !dead[ep.i] {
			if res.len() < ef {
				res.push(ep)
			} else if ep.s > res.top().s {
				res.replaceTop(ep)
			}
		}
	}
	for cands.len() > 0 {
		c := maxCand(cands.pop())
		if res.len() >= ef && c.s < res.top().s {
			break
		}
		o := at
		if offs != nil {
			o += int(offs[c.i])
		} else {
			o += int(c.i) * stride
		}
		links := lists[o+1 : o+1+int(lists[o])]
		for len(links) > 0 {
			// Unvisited neighbours in batches; with int8 copies their
			// vectors are all requested from memory before the first is
			// scored, so the cache misses overlap.
			var batch, dots [64]int32
			nb := 0
			for len(links) > 0 && nb < len(batch) {
				if j := links[0]; marks.visit(j) {
					batch[nb] = j
					nb++
				}
				links = links[1:]
			}
			if qdim > 0 {
				dotI8Rows(q.rq, qv, qdim, batch[:nb], dots[:nb])
			}
			for k, j := range batch[:nb] {
				var s float32
				if qdim > 0 { // the score, from the batch's dot products
					s = q.s * qs[j] * float32(dots[k])
				} else if nodeOf != nil {
					s = sim(q.v, g.nodes[nodeOf[j]])
				} else {
					s = sim(q.v, g.nodes[j])
				}
				if res.len() < ef || s > res.top().s {
					cands.push(cand{j, -s})
					if dead != nil && dead[j] {
						continue
					}
					if res.len() < ef {
						res.push(cand{j, s})
					} else {
						res.replaceTop(cand{j, s})
					}
				}
			}
		}
		// The next node to expand is known now: request its layer-0 link
		// list (a cache miss per expansion otherwise) before the heap work.
		if offs == nil && cands.len() > 0 {
			o := int(cands.top().i) * stride
			prefetchLines((*int8)(unsafe.Pointer(&lists[o])), stride*4)
		}
	}
	b.cands, b.res = cands, res
}

// results empties b.res into dst's backing array when it is large enough
// (else a new one), most similar first.
func (b *beam) results(dst []cand) []cand {
	out := dst[:0]
	if cap(out) < b.res.len() {
		out = make([]cand, b.res.len())
	}
	out = out[:b.res.len()]
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = b.res.pop()
	}
	return out
}

// selectNeighbors is the HNSW heuristic: keep a candidate only if it is closer
// to the base than to every neighbour kept so far, then fill up with the
// pruned ones (keepPrunedConnections). cs must be sorted most similar first.
func (g *graph) selectNeighbors(cs []cand, m int) []int32 {
	out := make([]int32, 0, m)
	var pruned []int32
	for _, c := range cs {
		if len(out) >= m {
			break
		}
		good := true
		for _, o := range out {
			if g.scoreNodes(o, c.i) > c.s {
				good = false
				break
			}
		}
		if good {
			out = append(out, c.i)
		} else {
			pruned = append(pruned, c.i)
		}
	}
	for _, p := range pruned {
		if len(out) >= m {
			break
		}
		out = append(out, p)
	}
	return out
}

func vecEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (g *graph) add(id string, v []float32) {
	if old, ok := g.byID[id]; ok {
		if vecEqual(g.nodes[old].vec, v) {
			return
		}
		g.remove(id)
	}
	level := g.randomLevel()
	n := newNode(id, v)
	n.links = make([][]int32, level+1)
	idx := g.appendNode(n)
	g.byID[id] = idx
	if g.entry < 0 {
		g.entry, g.top = idx, level
		return
	}
	qr := g.prep(v)
	ep := cand{g.entry, g.score(qr, g.entry)}
	for l := g.top; l > level; l-- {
		ep = g.greedy(qr, ep, l)
	}
	for l := min(level, g.top); l >= 0; l-- {
		cs := g.searchLayer(qr, []cand{ep}, g.cfg.EfConstruction, l, false)
		g.setLinks(idx, l, g.selectNeighbors(cs, g.cfg.M))
		for _, j := range g.links(idx, l) {
			g.link(j, idx, l)
		}
		ep = cs[0]
	}
	if level > g.top {
		g.entry, g.top = idx, level
	}
}

// link adds the edge j→i on level l, shrinking j's list with the heuristic
// when it overflows.
func (g *graph) link(j, i int32, l int) {
	cur := g.links(j, l)
	if len(cur) < g.maxLinks(l) {
		g.setLinks(j, l, append(cur, i))
		return
	}
	cs := make([]cand, len(cur)+1)
	for k, x := range cur {
		cs[k] = cand{x, g.scoreNodes(j, x)}
	}
	cs[len(cur)] = cand{i, g.scoreNodes(j, i)}
	sortCands(cs)
	g.setLinks(j, l, g.selectNeighbors(cs, g.maxLinks(l)))
}

func sortCands(cs []cand) {
	// insertion sort: lists are short (≤ 2M+1)
	for i := 1; i < len(cs); i++ {
		for k := i; k > 0 && cs[k].s > cs[k-1].s; k-- {
			cs[k], cs[k-1] = cs[k-1], cs[k]
		}
	}
}

func (g *graph) remove(id string) {
	idx, ok := g.byID[id]
	if !ok {
		return
	}
	delete(g.byID, id)
	g.dead[idx] = true
	g.tombs++
	if len(g.byID) == 0 {
		g.reset(g.seed, 0)
		return
	}
	if float64(g.tombs) > g.cfg.CompactRatio*float64(len(g.nodes)) && g.tombs >= 64 {
		g.compact()
	}
}

// compact rebuilds the graph from its live nodes, in insertion order, with
// the level generator reseeded so the result is deterministic.
func (g *graph) compact() {
	live := make([]*node, 0, len(g.byID))
	for i, n := range g.nodes {
		if !g.dead[i] {
			live = append(live, n)
		}
	}
	g.reset(g.seed+1, len(live))
	for _, n := range live {
		g.add(n.id, n.vec)
	}
}

// reset empties the graph (keeping its lock) and reseeds the level generator.
func (g *graph) reset(seed uint64, capacity int) {
	g.seed = seed
	g.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	g.nodes = make([]*node, 0, capacity)
	g.byID = make(map[string]int32, capacity)
	g.l0s = 2*g.cfg.M + 1
	g.l0 = make([]int32, 0, capacity*g.l0s)
	g.dead = make([]bool, 0, capacity)
	g.ups = g.cfg.M + 1
	g.up = nil
	g.upOff = make([]int32, 0, capacity)
	g.uslot = make([]int32, 0, capacity)
	g.unode, g.uoff, g.ulink, g.uqv, g.uqs = nil, nil, nil, nil, nil
	if g.qdim > 0 {
		g.qv = make([]int8, 0, capacity*g.qdim)
		g.qs = make([]float32, 0, capacity)
	}
	g.entry, g.top, g.tombs = -1, 0, 0
}

func (g *graph) search(q []float32, k, ef int) []Match {
	if g.entry < 0 {
		return nil
	}
	sc, _ := g.scratch.Get().(*searchScratch)
	if sc == nil {
		sc = &searchScratch{}
	}
	defer g.scratch.Put(sc)
	qr := &query{v: q}
	g.prepInto(qr, sc)
	// Every layer is searched with the full beam (not greedily above layer
	// 0), and all of a layer's best nodes seed the next: one wrong greedy
	// step on a coarse layer would otherwise leave layer 0 in the wrong
	// region. On bench cache-http's template questions at 100 000 entries
	// that took recall@1 at efSearch 32 from 0.955 to 0.998 (docs/cache.md).
	var seed [1]cand
	eps := append(seed[:0], cand{g.entry, g.score(qr, g.entry)})
	if g.top > 0 {
		eps = g.searchUpperInto(qr, ef, sc)
	}
	cs := g.searchLayerInto(qr, eps, ef, 0, true, sc.l0)
	sc.l0 = cs
	return g.matches(q, cs, k)
}

// matches turns layer 0's results cs (most similar first, by traversal
// scores) into the k best matches: with int8 copies, the best
// rescoreFactor·k are re-scored exactly and re-ranked first. cs is
// reordered in place.
func (g *graph) matches(q []float32, cs []cand, k int) []Match {
	if g.qdim > 0 {
		// Exact scores for what is returned (thresholds compare them): the
		// best rescoreFactor·k by the int8 scores are re-scored and re-ranked
		// (int8 scores are within about 1e-3 of the exact ones).
		if n := rescoreFactor * k; len(cs) > n {
			cs = cs[:n]
		}
		// The candidates' sparse vectors are requested from memory first,
		// so their cache misses overlap (each rescore otherwise waits for
		// its node, then its index and value arrays, one after another).
		for _, c := range cs {
			if n := g.nodes[c.i]; len(n.nzIdx) > 0 {
				prefetchLines((*int8)(unsafe.Pointer(&n.nzIdx[0])), 2*len(n.nzIdx))
				prefetchLines((*int8)(unsafe.Pointer(&n.nzVal[0])), 4*len(n.nzVal))
			}
		}
		for i := range cs {
			cs[i].s = sim(q, g.nodes[cs[i].i])
		}
		sortCands(cs)
	}
	if len(cs) > k {
		cs = cs[:k]
	}
	out := make([]Match, len(cs))
	for i, c := range cs {
		out[i] = Match{ID: g.nodes[c.i].id, Score: c.s}
	}
	return out
}
