package cache

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
)

// ErrIndexFile reports a malformed HNSW snapshot.
var ErrIndexFile = errors.New("cache: bad hnsw snapshot")

const hnswMagic = "SGHNSW1\n"

// Save writes a snapshot of every namespace graph (vectors, links,
// tombstones) to w. Searches may run concurrently; writes wait.
//
// Layout (little-endian): magic, dim u32, m u32, namespace count u32; per
// namespace (sorted): name, seed u64, entry i32, top u32, node count u32;
// per node: id, deleted u8, dim float32s, level count u32, per level: link
// count u32 and i32 targets. Strings are u32 length + bytes.
func (h *HNSW) Save(w io.Writer) error {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return ErrClosed
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	le := binary.LittleEndian
	var buf [8]byte
	u32 := func(x uint32) { le.PutUint32(buf[:4], x); bw.Write(buf[:4]) }
	str := func(s string) { u32(uint32(len(s))); bw.WriteString(s) }
	bw.WriteString(hnswMagic)
	u32(uint32(h.cfg.Dim))
	u32(uint32(h.cfg.M))
	names := make([]string, 0, len(h.graphs))
	for ns := range h.graphs {
		names = append(names, ns)
	}
	sort.Strings(names)
	u32(uint32(len(names)))
	for _, ns := range names {
		g := h.graphs[ns]
		g.mu.RLock()
		str(ns)
		le.PutUint64(buf[:], g.seed)
		bw.Write(buf[:8])
		u32(uint32(g.entry))
		u32(uint32(g.top))
		u32(uint32(len(g.nodes)))
		for i, n := range g.nodes {
			str(n.id)
			if g.dead[i] {
				bw.WriteByte(1)
			} else {
				bw.WriteByte(0)
			}
			for _, x := range n.vec {
				u32(math.Float32bits(x))
			}
			u32(uint32(len(n.links)))
			for l := range n.links {
				ls := g.links(int32(i), l)
				u32(uint32(len(ls)))
				for _, j := range ls {
					u32(uint32(j))
				}
			}
		}
		g.mu.RUnlock()
	}
	return bw.Flush()
}

// Load replaces the index contents with a snapshot written by Save. The
// snapshot's dimension must match; every count and link is checked, so a
// truncated or corrupt file fails with ErrIndexFile instead of panicking.
func (h *HNSW) Load(r io.Reader) error {
	br := bufio.NewReaderSize(r, 1<<16)
	le := binary.LittleEndian
	var buf [8]byte
	var rerr error
	u32 := func() uint32 {
		if rerr != nil {
			return 0
		}
		if _, err := io.ReadFull(br, buf[:4]); err != nil {
			rerr = err
			return 0
		}
		return le.Uint32(buf[:4])
	}
	str := func() string {
		n := u32()
		if rerr != nil || n > 1<<20 {
			if rerr == nil {
				rerr = fmt.Errorf("string of %d bytes", n)
			}
			return ""
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			rerr = err
		}
		return string(b)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrIndexFile}, args...)...)
	}
	magic := make([]byte, len(hnswMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != hnswMagic {
		return bad("magic")
	}
	dim, m := u32(), u32()
	if rerr == nil && int(dim) != h.cfg.Dim {
		return fmt.Errorf("%w: snapshot dim %d, index dim %d", ErrDim, dim, h.cfg.Dim)
	}
	_ = m // links were built with the snapshot's M; new inserts use h.cfg.M
	nns := u32()
	if rerr == nil && nns > 1<<24 {
		return bad("%d namespaces", nns)
	}
	graphs := map[string]*graph{}
	for range nns {
		ns := str()
		if _, err := io.ReadFull(br, buf[:8]); err != nil && rerr == nil {
			rerr = err
		}
		seed := le.Uint64(buf[:8])
		entry, top, count := int32(u32()), u32(), u32()
		if rerr != nil {
			break
		}
		if count > 1<<28 || top > 64 || entry < -1 || (count > 0 && (entry < 0 || uint32(entry) >= count)) || (count == 0 && entry != -1) {
			return bad("namespace %q: entry %d, top %d, %d nodes", ns, entry, top, count)
		}
		g := newGraph(h.cfg, seed)
		// Capacity from the header only up to a bound: a corrupt count
		// must not allocate gigabytes before the data runs out.
		g.nodes = make([]*node, 0, min(count, 1<<16))
		dead := make([]bool, 0, min(count, 1<<16))
		for i := range count {
			id := str()
			del, err := br.ReadByte()
			if err != nil && rerr == nil {
				rerr = err
			}
			vec := make([]float32, dim)
			for k := range vec {
				vec[k] = math.Float32frombits(u32())
			}
			n := newNode(id, vec)
			dead = append(dead, del == 1)
			levels := u32()
			if rerr != nil {
				break
			}
			if levels == 0 || levels > top+1 {
				return bad("namespace %q node %d: %d levels", ns, i, levels)
			}
			n.links = make([][]int32, levels)
			for l := range n.links {
				k := u32()
				if rerr != nil || k > 4096 {
					if rerr == nil {
						return bad("namespace %q node %d: %d links", ns, i, k)
					}
					break
				}
				n.links[l] = make([]int32, k)
				for x := range n.links[l] {
					j := u32()
					if j >= count {
						return bad("namespace %q node %d: link to %d of %d", ns, i, j, count)
					}
					n.links[l][x] = int32(j)
				}
			}
			if del == 1 {
				g.tombs++
			} else {
				if _, dup := g.byID[n.id]; dup {
					return bad("namespace %q: duplicate id %q", ns, n.id)
				}
				g.byID[n.id] = int32(len(g.nodes))
			}
			g.nodes = append(g.nodes, n)
		}
		if rerr != nil {
			break
		}
		g.entry, g.top = entry, int(top)
		if entry >= 0 && len(g.nodes[entry].links) != int(top)+1 {
			return bad("namespace %q: entry level mismatch", ns)
		}
		// Links into the arenas, their strides fitting the longest lists (a
		// snapshot written with a larger M keeps its lists).
		nodes := g.nodes
		for _, n := range nodes {
			g.l0s = max(g.l0s, len(n.links[0])+1)
			for _, ls := range n.links[1:] {
				g.ups = max(g.ups, len(ls)+1)
			}
		}
		g.nodes = make([]*node, 0, len(nodes))
		g.l0 = make([]int32, 0, len(nodes)*g.l0s)
		lists := make([][][]int32, len(nodes))
		for i, n := range nodes {
			lists[i] = n.links
			n.links = make([][]int32, len(lists[i]))
			g.appendNode(n)
			g.dead[i] = dead[i]
		}
		for i := range nodes {
			for l, ls := range lists[i] {
				// A link on layer l leads to a node on layer l (add makes
				// no other); searches index the upper layers by it.
				for _, j := range ls {
					if l >= len(nodes[j].links) {
						return bad("namespace %q node %d: link on layer %d to node %d of %d levels", ns, i, l, j, len(nodes[j].links))
					}
				}
				g.setLinks(int32(i), l, ls)
			}
		}
		// Levels of later inserts continue from a seed derived from the count.
		g.rng = rand.New(rand.NewPCG(seed+uint64(count), seed^0x9e3779b97f4a7c15))
		graphs[ns] = g
	}
	if rerr != nil {
		return bad("truncated: %v", rerr)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	h.graphs = graphs
	return nil
}

// SaveFile writes a snapshot atomically (temporary file, then rename).
func (h *HNSW) SaveFile(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".hnsw-*")
	if err != nil {
		return fmt.Errorf("hnsw: save %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := h.Save(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("hnsw: save %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("hnsw: save %s: %w", path, err)
	}
	return os.Rename(tmp.Name(), path)
}

// LoadFile loads a snapshot written by SaveFile. A missing file returns an
// error wrapping os.ErrNotExist (start empty and let the cache rebuild).
func (h *HNSW) LoadFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("hnsw: load %s: %w", path, err)
	}
	defer f.Close()
	if err := h.Load(f); err != nil {
		return fmt.Errorf("hnsw: load %s: %w", path, err)
	}
	return nil
}
