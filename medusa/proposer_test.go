package medusa

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/specgate/specgate/engine"
)

func TestTopK(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for it := range 500 {
		n := 1 + r.IntN(40)
		l := make([]float32, n)
		for i := range l {
			l[i] = float32(r.IntN(7)) // many ties
			if r.IntN(15) == 0 {
				l[i] = float32(math.NaN())
			}
		}
		k := r.IntN(n + 3)
		// reference: stable sort of indices by value desc, NaN last
		idx := make([]int32, n)
		for i := range idx {
			idx[i] = int32(i)
		}
		key := func(i int32) float64 {
			if v := l[i]; v == v {
				return float64(v)
			}
			return math.Inf(-1)
		}
		sort.SliceStable(idx, func(a, b int) bool { return key(idx[a]) > key(idx[b]) })
		want := idx[:min(k, n)]
		got := TopK(l, k, nil)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("case %d: TopK(%v, %d) = %v, want %v", it, l, k, got, want)
		}
	}
}

func TestNewTree(t *testing.T) {
	tr, err := NewTree([][]int{{0}, {1}, {0, 0}, {0, 1}, {1, 0}, {0, 0, 0}, {3}}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(tr.Parent) != "[-1 -1 0 0 1 2 -1]" || fmt.Sprint(tr.TopK) != "[4 2 1]" || tr.Depth() != 3 {
		t.Fatalf("parents %v topk %v", tr.Parent, tr.TopK)
	}
	if p := tr.Prefix(3); len(p.Paths) != 3 || p.Depth() != 2 {
		t.Fatalf("prefix %v", p.Paths)
	}
	for _, bad := range [][][]int{{{}}, {{0, 0}}, {{0}, {0}}, {{0}, {0, 0, 0, 0}}, {{-1}}} {
		if _, err := NewTree(bad, 3); !errors.Is(err, ErrFormat) {
			t.Errorf("NewTree(%v) err = %v", bad, err)
		}
	}
}

func TestProposeTree(t *testing.T) {
	base := goldenBase(t)
	h, err := Load("testdata/golden/own", base, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	paths := [][]int{{0}, {1}, {0, 0}, {0, 1}, {1, 0}, {0, 0, 0}, {2}}
	tr, err := NewTree(paths, 3)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProposer(h, tr)
	if err != nil {
		t.Fatal(err)
	}
	hidden, _, _ := readGolden(t, "testdata/golden/own")
	H := h.Hidden
	// ranking per head by an independent sort of the heads' logits
	logits := h.Logits(hidden[H:3*H], 2, 3, nil)
	rank := func(row, head, r int) int32 {
		l := logits[(head*2+row)*h.Vocab : (head*2+row+1)*h.Vocab]
		idx := make([]int, len(l))
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(a, b int) bool { return l[idx[a]] > l[idx[b]] })
		return int32(idx[r])
	}
	reqs := []engine.ProposeRequest{
		{ID: 1, Hidden: hidden[H : 2*H], Budget: 100, MaxDepth: 10},
		{ID: 2, Hidden: nil, Budget: 100, MaxDepth: 10},            // no hidden row: nothing
		{ID: 3, Hidden: hidden[2*H : 3*H], Budget: 4, MaxDepth: 1}, // cut by budget and depth
	}
	props, err := p.Propose(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	want0 := engine.Proposal{
		Tokens:  []int32{rank(0, 0, 0), rank(0, 0, 1), rank(0, 1, 0), rank(0, 1, 1), rank(0, 1, 0), rank(0, 2, 0), rank(0, 0, 2)},
		Parents: []int32{-1, -1, 0, 0, 1, 2, -1},
	}
	if fmt.Sprint(props[0].Tokens, props[0].Parents) != fmt.Sprint(want0.Tokens, want0.Parents) || props[0].Source != Source || props[0].Q != nil {
		t.Fatalf("proposal 0 = %+v, want %+v", props[0], want0)
	}
	if props[1].Len() != 0 {
		t.Fatalf("proposal without hidden = %+v", props[1])
	}
	// depth 1 only, budget 4: [0], [1], [2] (row 1 is hidden row 2)
	if fmt.Sprint(props[2].Tokens, props[2].Parents) != fmt.Sprint([]int32{rank(1, 0, 0), rank(1, 0, 1), rank(1, 0, 2)}, []int32{-1, -1, -1}) {
		t.Fatalf("proposal 2 = %+v", props[2])
	}
	// budget 3 keeps the first three paths of the priority order
	props, _ = p.Propose(context.Background(), []engine.ProposeRequest{{ID: 4, Hidden: hidden[H : 2*H], Budget: 3, MaxDepth: 10}})
	if fmt.Sprint(props[0].Tokens, props[0].Parents) != fmt.Sprint(want0.Tokens[:3], want0.Parents[:3]) {
		t.Fatalf("budget 3: %+v", props[0])
	}
	if _, err := p.Propose(context.Background(), []engine.ProposeRequest{{ID: 5, Hidden: hidden[:H-1], Budget: 3, MaxDepth: 3}}); err == nil {
		t.Fatal("short hidden row accepted")
	}
}

func TestVocabLimit(t *testing.T) {
	base := goldenBase(t)
	d := copyDir(t, "testdata/golden/own")
	counts := make([]int64, 320)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range counts {
		counts[i] = int64(r.IntN(1000))
	}
	b, _ := json.Marshal(map[string]any{"counts": counts})
	os.WriteFile(filepath.Join(d, "freq.json"), b, 0o644)
	os.WriteFile(filepath.Join(d, "config.json"), []byte(`{"medusa_num_heads": 3, "medusa_num_layers": 2, "specgate": {"token_frequency": "freq.json"}}`), 0o644)
	full, err := Load(d, base, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := Load(d, base, LoadOptions{VocabLimit: 50})
	if err != nil {
		t.Fatal(err)
	}
	if lim.Rows() != 50 {
		t.Fatalf("rows %d", lim.Rows())
	}
	// the kept ids are the 50 largest counts
	thr := append([]int64(nil), counts...)
	sort.Slice(thr, func(a, b int) bool { return thr[a] > thr[b] })
	hidden, _, _ := readGolden(t, d)
	fl := full.Logits(hidden, 2, 3, nil)
	ll := lim.Logits(hidden, 2, 3, nil)
	for row := range 50 {
		id := lim.TokenOf(row)
		if counts[id] < thr[49] {
			t.Fatalf("row %d: token %d count %d below the 50th largest %d", row, id, counts[id], thr[49])
		}
		for hd := range 3 {
			for x := range 2 {
				if ll[(hd*2+x)*50+row] != fl[(hd*2+x)*320+int(id)] {
					t.Fatalf("head %d row %d token %d: restricted logit %v != full %v", hd, x, id, ll[(hd*2+x)*50+row], fl[(hd*2+x)*320+int(id)])
				}
			}
		}
	}
}
