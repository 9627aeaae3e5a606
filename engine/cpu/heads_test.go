package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/specgate/specgate/engine/backend"
)

// recordHeads is a RowHeads that copies the hidden rows it is given and
// derives its candidates from them (row r, slot i: the index of the i-th
// largest of the first Width values), so a test can check both what Forward
// handed it and where the candidates went.
type recordHeads struct {
	w    int
	seen [][]float32
}

func (h *recordHeads) Width() int { return h.w }

func (h *recordHeads) Top(hidden []float32, rows int, top []int32) {
	H := len(hidden) / rows
	for r := range rows {
		row := hidden[r*H : (r+1)*H]
		h.seen = append(h.seen, slices.Clone(row))
		copy(top[r*h.w:(r+1)*h.w], TopK(row[:h.w], h.w, nil))
	}
}

// TestRowHeadsInForward: heads registered with AddRowHeads run inside
// Forward on exactly the final hidden rows of the requests that ask for
// them (the rows a Hidden request receives: checked bit for bit against a
// second backend's Hidden output), their candidates land in those
// requests' HeadTop, the logits do not change, and an unknown heads id
// fills HeadTop with -1; on 1 thread (after the LM head) and 2 threads (a
// pool worker beside the LM head), over many forwards so that both the
// worker and the fallback paths run.
func TestRowHeadsInForward(t *testing.T) {
	cfg := testConfigs()["gqa"]
	w := RandomWeights(cfg, 5)
	V, H := cfg.VocabSize, cfg.HiddenSize
	for _, threads := range []int{1, 2} {
		t.Run(fmt.Sprint("threads=", threads), func(t *testing.T) {
			hb, err := NewCPUBackend(cfg, w, 256, threads)
			if err != nil {
				t.Fatal(err)
			}
			ref, _ := NewCPUBackend(cfg, w, 256, 1)
			rh := &recordHeads{w: 3}
			id, err := hb.AddRowHeads(rh)
			if err != nil || id != 1 || hb.HeadsWidth(id) != 3 || hb.HeadsWidth(2) != 0 {
				t.Fatalf("AddRowHeads: id %d err %v width %d / %d", id, err, hb.HeadsWidth(id), hb.HeadsWidth(2))
			}
			seq := func(lo, n int) []int32 {
				s := make([]int32, n)
				for i := range s {
					s[i] = int32(lo + i)
				}
				return s
			}
			for step := range 40 {
				pos := int32(step)
				// request 0: one token without heads; request 1: a 2-token
				// tree with heads (its logits rows after request 0's);
				// request 2: a 3-token chain whose last row only gets logits,
				// and heads of an unknown id
				mk := func(heads bool) []*backend.ForwardRequest {
					rs := []*backend.ForwardRequest{
						{Tokens: []int32{3}, Positions: []int32{0}, Slots: []int32{250}, Logits: make([]float32, V)},
						{CachedSlots: seq(0, step), Tokens: []int32{int32(step % V), int32((step * 7) % V)}, Positions: []int32{pos, pos + 1}, Slots: []int32{pos + 100, pos + 150}, Parents: []int32{-1, 0}, Logits: make([]float32, 2*V)},
						{Tokens: []int32{4, 5, 6}, Positions: seq(0, 3), Slots: seq(200, 3), LogitsRows: []int32{2}, Logits: make([]float32, V)},
					}
					if heads {
						rs[1].Heads, rs[1].HeadTop = id, make([]int32, 2*3)
						rs[2].Heads, rs[2].HeadTop = 7, make([]int32, 4)
					} else {
						rs[1].Hidden = make([]float32, 2*H)
					}
					return rs
				}
				a, b := mk(true), mk(false)
				// the KV of slots 0..step-1: the same tokens in both backends
				if step > 0 {
					for _, be := range []*CPUBackend{hb, ref} {
						r := &backend.ForwardRequest{CachedSlots: seq(0, step-1), Tokens: []int32{int32(step)}, Positions: []int32{pos - 1}, Slots: []int32{pos - 1}, LogitsRows: []int32{}}
						if err := be.Forward([]*backend.ForwardRequest{r}); err != nil {
							t.Fatal(err)
						}
					}
				}
				rh.seen = rh.seen[:0]
				if err := hb.Forward(a); err != nil {
					t.Fatal(err)
				}
				if err := ref.Forward(b); err != nil {
					t.Fatal(err)
				}
				for r := range a {
					for i := range a[r].Logits {
						if a[r].Logits[i] != b[r].Logits[i] {
							t.Fatalf("step %d request %d logit %d: %v with heads, %v without", step, r, i, a[r].Logits[i], b[r].Logits[i])
						}
					}
				}
				if len(rh.seen) != 2 {
					t.Fatalf("step %d: heads saw %d rows, want 2", step, len(rh.seen))
				}
				for r := range 2 {
					want := b[1].Hidden[r*H : (r+1)*H]
					if !slices.Equal(rh.seen[r], want) {
						t.Fatalf("step %d row %d: heads got another hidden row than Hidden", step, r)
					}
					if got, wt := a[1].HeadTop[r*3:(r+1)*3], TopK(want[:3], 3, nil); !slices.Equal(got, wt) {
						t.Fatalf("step %d row %d: HeadTop %v, want %v", step, r, got, wt)
					}
				}
				if !slices.Equal(a[2].HeadTop, []int32{-1, -1, -1, -1}) {
					t.Fatalf("step %d: unknown heads id: HeadTop %v, want all -1", step, a[2].HeadTop)
				}
			}
			// a HeadTop too small for the rows is an error, before any KV is written
			bad := &backend.ForwardRequest{Tokens: []int32{1, 2}, Positions: []int32{0, 1}, Slots: []int32{0, 1}, Logits: make([]float32, 2*V), Heads: id, HeadTop: make([]int32, 5)}
			if err := hb.Forward([]*backend.ForwardRequest{bad}); err == nil {
				t.Fatal("HeadTop of 5 for 2 rows x 3: no error")
			}
		})
	}
}

// TestLoadHeadsMatchesReference: heads given as float32 weights
// (backend.HeadsBackend's LoadHeads: residual blocks, own or shared
// projections, a vocabulary subset) give, for every row, the top-k of a
// float64 reference of the same heads computed from the Hidden rows (ranks
// compared where the reference's values are more than 1e-4 apart).
func TestLoadHeadsMatchesReference(t *testing.T) {
	cfg := testConfigs()["gqa"]
	w := RandomWeights(cfg, 6)
	V, H := cfg.VocabSize, cfg.HiddenSize
	r := rand.New(rand.NewPCG(7, 8))
	randv := func(n int, s float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * s)
		}
		return v
	}
	ids := []int32{int32(V - 1), 0, 3, int32(V / 2), 5, 1, 2, 7}
	for _, c := range []struct {
		name string
		proj int // 0: the LM head, 1: shared, 2: own
		ids  []int32
	}{{"lmhead", 0, nil}, {"shared", 1, nil}, {"own+ids", 2, ids}} {
		d := &backend.DraftHeads{Key: c.name, NumHeads: 2, Layers: 2, Hidden: H, TopK: 4, IDs: c.ids}
		rows := V
		if c.ids != nil {
			rows = len(c.ids)
		}
		for h := range 2 {
			d.W = append(d.W, [][]float32{randv(H*H, 0.1), randv(H*H, 0.1)})
			d.B = append(d.B, [][]float32{randv(H, 0.1), randv(H, 0.1)})
			if c.proj == 2 || (c.proj == 1 && h == 0) {
				d.Proj = append(d.Proj, randv(rows*H, 1))
			}
		}
		be, err := NewCPUBackend(cfg, w, 64, 2)
		if err != nil {
			t.Fatal(err)
		}
		id, err := be.LoadHeads(d)
		if err != nil || be.HeadsWidth(id) != 8 {
			t.Fatalf("%s: LoadHeads: %d %v (width %d)", c.name, id, err, be.HeadsWidth(id))
		}
		req := &backend.ForwardRequest{Tokens: []int32{1, 2, 3}, Positions: []int32{0, 1, 2}, Slots: []int32{0, 1, 2},
			Logits: make([]float32, 3*V), Hidden: make([]float32, 3*H), Heads: id, HeadTop: make([]int32, 3*8)}
		if err := be.Forward([]*backend.ForwardRequest{req}); err != nil {
			t.Fatal(err)
		}
		lm := w.LMHead.Float32()
		for row := range 3 {
			for h := range 2 {
				x := make([]float64, H)
				for i := range x {
					x[i] = float64(req.Hidden[row*H+i])
				}
				for l := range 2 {
					y := make([]float64, H)
					for o := range H {
						s := float64(d.B[h][l][o])
						for k := range H {
							s += float64(d.W[h][l][o*H+k]) * x[k]
						}
						y[o] = s
					}
					for o := range H {
						x[o] += y[o] / (1 + math.Exp(-y[o]))
					}
				}
				proj := lm
				if c.proj > 0 {
					proj = d.Proj[min(h, len(d.Proj)-1)]
				}
				logit := make([]float64, rows)
				for v := range rows {
					for k := range H {
						logit[v] += float64(proj[v*H+k]) * x[k]
					}
				}
				got := req.HeadTop[row*8+h*4 : row*8+h*4+4]
				order := make([]int, rows)
				for i := range order {
					order[i] = i
				}
				slices.SortStableFunc(order, func(a, b int) int {
					switch {
					case logit[a] > logit[b]:
						return -1
					case logit[a] < logit[b]:
						return 1
					}
					return 0
				})
				for j := range 4 {
					want := int32(order[j])
					if c.ids != nil {
						want = c.ids[order[j]]
					}
					if got[j] != want && math.Abs(logit[order[j]]-logit[order[j+1]]) > 1e-4 && (j == 0 || math.Abs(logit[order[j]]-logit[order[j-1]]) > 1e-4) {
						t.Fatalf("%s row %d head %d: top %v, reference rank %d is %d", c.name, row, h, got, j, want)
					}
				}
			}
		}
	}
}

// TestHeadsRegistrationKeyed: registrations live as long as the backend,
// so heads registered again under the same key (AddRowHeadsKey) or the same
// DraftHeads Key and TopK (LoadHeads, the backend.HeadsBackend contract)
// get the first registration's id and add none; another key or top-k gets
// a registration of its own; AddRowHeads (no key) always adds one. Ids are
// dense, so the id a new registration gets is the backend's count.
func TestHeadsRegistrationKeyed(t *testing.T) {
	cfg := testConfigs()["gqa"]
	be, err := NewCPUBackend(cfg, RandomWeights(cfg, 6), 64, 2)
	if err != nil {
		t.Fatal(err)
	}
	H := cfg.HiddenSize
	a, err := be.AddRowHeadsKey("a", &recordHeads{w: 2})
	if err != nil || a != 1 {
		t.Fatalf("first AddRowHeadsKey: id %d, %v", a, err)
	}
	for range 10 {
		if id, err := be.AddRowHeadsKey("a", &recordHeads{w: 2}); err != nil || id != a {
			t.Fatalf("AddRowHeadsKey a again: id %d, %v; want %d", id, err, a)
		}
	}
	draft := func(k int) *backend.DraftHeads {
		w := make([]float32, H*H)
		b := make([]float32, H)
		return &backend.DraftHeads{Key: "d", NumHeads: 1, Layers: 1, Hidden: H, TopK: k, W: [][][]float32{{w}}, B: [][][]float32{{b}}}
	}
	d4, err := be.LoadHeads(draft(4))
	if err != nil || d4 != 2 {
		t.Fatalf("LoadHeads k=4: id %d, %v; want 2", d4, err)
	}
	for range 10 {
		if id, err := be.LoadHeads(draft(4)); err != nil || id != d4 {
			t.Fatalf("LoadHeads k=4 again: id %d, %v; want %d", id, err, d4)
		}
	}
	if id, err := be.LoadHeads(draft(2)); err != nil || id != 3 || be.HeadsWidth(id) != 2 {
		t.Fatalf("LoadHeads k=2: id %d (width %d), %v; want 3 (width 2)", id, be.HeadsWidth(id), err)
	}
	if id, err := be.AddRowHeadsKey("b", &recordHeads{w: 3}); err != nil || id != 4 {
		t.Fatalf("AddRowHeadsKey b: id %d, %v; want 4", id, err)
	}
	for want := 5; want < 7; want++ {
		if id, err := be.AddRowHeads(&recordHeads{w: 2}); err != nil || id != want {
			t.Fatalf("AddRowHeads: id %d, %v; want %d", id, err, want)
		}
	}
	if be.HeadsWidth(a) != 2 || be.HeadsWidth(d4) != 4 {
		t.Fatalf("widths %d, %d: want 2, 4", be.HeadsWidth(a), be.HeadsWidth(d4))
	}
}
