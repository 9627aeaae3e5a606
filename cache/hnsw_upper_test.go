package cache

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// upperRef is the upper-layer search in node space: searchLayer on every
// layer from the top down to 1, each seeded with the previous layer's
// results (the search before searchUpper existed). searchUpper must return
// exactly its results.
func (g *graph) upperRef(qr *query, ef int) []cand {
	eps := []cand{{g.entry, g.score(qr, g.entry)}}
	for l := g.top; l > 0; l-- {
		eps = g.searchLayer(qr, eps, ef, l, false)
	}
	return eps
}

// searchRef is graph.search through upperRef, with fresh buffers.
func (g *graph) searchRef(q []float32, k, ef int) []Match {
	qr := g.prep(q)
	return g.matches(q, g.searchLayer(qr, g.upperRef(qr, ef), ef, 0, true), k)
}

func upperTestVec(r *rand.Rand, dim int, sparse bool) []float32 {
	v := make([]float32, dim)
	if sparse {
		for range dim / 5 {
			v[r.IntN(dim)] += float32(r.NormFloat64())
		}
	} else {
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
	}
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	for i := range v {
		v[i] /= float32(math.Sqrt(ss))
	}
	return v
}

// TestHNSWUpperMatchesNodeSpace: the slot-space search of layers ≥ 1 gives
// the same seeds for layer 0 (ids, scores, order) as the node-space search,
// on int8 graphs (512-d sparse) and float32 graphs (16-d), with tombstones,
// after a compaction, after Save/Load, and after inserts into a loaded
// graph; and whole searches (twice: the second reuses the first's scratch
// buffers) agree with the reference path. Both spaces run one loop
// (graph.searchBeam): what differs, and is checked here, is the data each
// reads (slot-indexed links, slot-ordered int8 copies, the slot visited set).
func TestHNSWUpperMatchesNodeSpace(t *testing.T) {
	for _, tc := range []struct {
		dim    int
		sparse bool
		n      int
	}{{512, true, 3000}, {16, false, 4000}} {
		t.Run(fmt.Sprint(tc.dim), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(tc.dim), 5))
			h, err := NewHNSW(HNSWConfig{Dim: tc.dim, M: 8, EfConstruction: 64, Seed: 3})
			if err != nil {
				t.Fatal(err)
			}
			vs := make([][]float32, tc.n)
			for i := range vs {
				vs[i] = upperTestVec(r, tc.dim, tc.sparse)
				if err := h.Add(t.Context(), "ns", fmt.Sprint(i), vs[i]); err != nil {
					t.Fatal(err)
				}
			}
			check := func(what string, h *HNSW) {
				t.Helper()
				g := h.graphs["ns"]
				if g.top < 2 {
					t.Fatalf("%s: graph of %d levels, want ≥ 3 for this test", what, g.top+1)
				}
				for qi := range 200 {
					q := upperTestVec(r, tc.dim, tc.sparse)
					if qi%2 == 0 { // near a stored vector
						q = vs[r.IntN(len(vs))]
					}
					for _, ef := range []int{1, 4, 16, 40} {
						qr := g.prep(q)
						got, want := g.searchUpper(qr, ef), g.upperRef(qr, ef)
						if fmt.Sprint(got) != fmt.Sprint(want) {
							t.Fatalf("%s: query %d ef %d: upper seeds\n%v\nwant\n%v", what, qi, ef, got, want)
						}
						// The whole search, twice (the second reuses the
						// first's scratch buffers).
						for range 2 {
							if got, want := g.search(q, 4, max(ef, 4)), g.searchRef(q, 4, max(ef, 4)); fmt.Sprint(got) != fmt.Sprint(want) {
								t.Fatalf("%s: query %d ef %d: search\n%v\nwant\n%v", what, qi, ef, got, want)
							}
						}
					}
				}
			}
			check("built", h)
			for i := 0; i < tc.n; i += 5 {
				_ = h.Remove(t.Context(), "ns", fmt.Sprint(i))
			}
			check("tombstones", h)
			var buf bytes.Buffer
			if err := h.Save(&buf); err != nil {
				t.Fatal(err)
			}
			back, _ := NewHNSW(h.Config())
			if err := back.Load(bytes.NewReader(buf.Bytes())); err != nil {
				t.Fatal(err)
			}
			check("loaded", back)
			for i := range 500 {
				v := upperTestVec(r, tc.dim, tc.sparse)
				vs = append(vs, v)
				_ = back.Add(t.Context(), "ns", fmt.Sprint("new", i), v)
			}
			check("loaded, then added", back)
			// Past CompactRatio: the graph is rebuilt (reset, then add).
			for i := 1; i < tc.n; i += 2 {
				_ = back.Remove(t.Context(), "ns", fmt.Sprint(i))
			}
			if g := back.graphs["ns"]; g.tombs != 0 && len(g.nodes) == tc.n+500 {
				t.Fatal("no compaction happened")
			}
			check("compacted", back)
		})
	}
}

// TestHNSWLoadRejectsLowerLink: a snapshot whose upper-layer list links to
// a node without that layer (add never writes one) is refused, not loaded
// into a graph whose upper-layer search would index past its slots.
func TestHNSWLoadRejectsLowerLink(t *testing.T) {
	h, _ := NewHNSW(HNSWConfig{Dim: 4, M: 4, Seed: 1})
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 400 {
		_ = h.Add(t.Context(), "ns", fmt.Sprint(i), upperTestVec(r, 4, false))
	}
	g := h.graphs["ns"]
	var up, low int32 = -1, -1
	for i := range g.nodes {
		if len(g.nodes[i].links) > 1 && up < 0 && len(g.links(int32(i), 1)) > 0 {
			up = int32(i)
		}
		if len(g.nodes[i].links) == 1 && low < 0 {
			low = int32(i)
		}
	}
	if up < 0 || low < 0 {
		t.Fatal("no upper node with links or no layer-0 node")
	}
	g.up[int(g.upOff[up])+1] = low // up's first layer-1 link → a layer-0-only node
	var buf bytes.Buffer
	if err := h.Save(&buf); err != nil {
		t.Fatal(err)
	}
	back, _ := NewHNSW(h.Config())
	if err := back.Load(&buf); !errors.Is(err, ErrIndexFile) {
		t.Fatalf("Load: %v, want ErrIndexFile", err)
	}
}

// TestHNSWConcurrentSearchAdd: searches of an int8 graph (slot-space upper
// layers, pooled scratch buffers) run while another goroutine inserts and
// removes; every result is sorted, and once the writer is done searches
// equal the reference path's (searchRef). Run with -race.
func TestHNSWConcurrentSearchAdd(t *testing.T) {
	h, _ := NewHNSW(HNSWConfig{Dim: 128, M: 4, EfConstruction: 16, Seed: 2})
	r := rand.New(rand.NewPCG(6, 6))
	vs := make([][]float32, 1200)
	for i := range vs {
		vs[i] = upperTestVec(r, 128, true)
	}
	for i := range 400 {
		_ = h.Add(t.Context(), "ns", fmt.Sprint(i), vs[i])
	}
	done := make(chan struct{})
	errs := make(chan error, 4)
	for w := range 4 {
		go func() {
			rr := rand.New(rand.NewPCG(uint64(w), 9))
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				ms, err := h.Search(t.Context(), "ns", vs[rr.IntN(len(vs))], 4)
				if err != nil {
					errs <- err
					return
				}
				for k := 1; k < len(ms); k++ {
					if ms[k].Score > ms[k-1].Score {
						errs <- fmt.Errorf("unsorted %v", ms)
						return
					}
				}
			}
		}()
	}
	for i := 400; i < len(vs); i++ {
		_ = h.Add(t.Context(), "ns", fmt.Sprint(i), vs[i])
		if i%10 == 0 {
			_ = h.Remove(t.Context(), "ns", fmt.Sprint(i-5))
		}
	}
	close(done)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	g := h.graphs["ns"]
	for i := 0; i < len(vs); i += 7 {
		got, want := g.search(vs[i], 4, 12), g.searchRef(vs[i], 4, 12)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("vector %d after the writes: search\n%v\nwant\n%v", i, got, want)
		}
	}
}
