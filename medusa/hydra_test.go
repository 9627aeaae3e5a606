package medusa

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/safetensors"
)

// Hand-made Hydra heads on a tiny target (H = 4, vocabulary 16): the test
// writes the directory itself (weights from a fixed formula), and computes
// the logits it expects with its own float64 loops over the values it wrote
// and the target's embedding and lm_head tables, not with the code under
// test. The golden written by PyTorch (testdata/golden/hydra*) checks the
// same loader against the reference implementation's modules.

// tinyTarget is a random 1-layer model with hidden size 4, vocabulary 16,
// tied embeddings.
func tinyTarget(t testing.TB, hidden int) *engine.Model {
	t.Helper()
	cfg := engine.Config{HiddenSize: hidden, IntermediateSize: 8, NumLayers: 1, NumHeads: 1, NumKVHeads: 1, HeadDim: hidden,
		VocabSize: 16, MaxPositions: 64, RMSNormEps: 1e-6, RopeTheta: 10000, TieWordEmbeddings: true}
	m := engine.NewRandomModel(cfg, 7, engine.LoadOptions{KVTokens: 64})
	t.Cleanup(func() { m.Close() })
	return m
}

// tinyHydra describes a hand-made Hydra directory.
type tinyHydra struct {
	K, L, H, V int
	r          int  // token vector width; with embedProj, hydra_embed_proj's rows
	embedProj  bool // compact layout's projection of E rows
	res        bool // the reference layout's res_connection (with bias)
	own        bool // own projections (hydra_lm_head.{i}.weight)
	projBias   bool
	headVocab  int    // > 0: own projections over the headVocab most frequent tokens
	dtype      string // "f32", "f16" or "i8" (2-D weights I8 + per-row scale; biases F32)
	prefix     string // stored names' prefix ("" or "hydra_head.")
	sharedInt8 bool   // specgate.shared_rows_int8: the target's lm_head rows quantized at load
	// w holds every tensor's values as the heads use them (float64; I8
	// weights dequantized from the q and scale written)
	w     map[string][]float64
	shape map[string][]int64
}

// freq are the token_frequency counts: a permutation of 0..15, so the N
// most frequent tokens are clear (no ties).
func tinyFreq(V int) []int64 {
	c := make([]int64, V)
	for i := range c {
		c[i] = int64((i * 7) % V)
	}
	return c
}

// frequent is the test's own N most frequent token ids in id order.
func frequent(counts []int64, n int) []int32 {
	ids := make([]int32, len(counts))
	for i := range ids {
		ids[i] = int32(i)
	}
	sort.SliceStable(ids, func(a, b int) bool { return counts[ids[a]] > counts[ids[b]] })
	ids = ids[:n]
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	return ids
}

// write writes the directory into a new temp dir and returns it.
func (th *tinyHydra) write(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	th.w, th.shape = map[string][]float64{}, map[string][]int64{}
	var ts []safetensors.Tensor
	seed := uint64(12345)
	next := func() int { // small integers in [-8, 8]
		seed = seed*6364136223846793005 + 1442695040888963407
		return int((seed>>33)%17) - 8
	}
	add := func(name string, shape ...int64) {
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		vals := make([]float64, n)
		th.shape[name] = shape
		if th.dtype == "i8" && len(shape) == 2 {
			q := make([]byte, n)
			scale := make([]float32, shape[0])
			for r := range scale {
				scale[r] = float32(r%3+1) / 512 // 1/512, 2/512, 3/512
			}
			for i := range vals {
				v := int8(next() * 15) // [-120, 120]
				q[i] = byte(v)
				vals[i] = float64(v) * float64(scale[int64(i)/shape[1]])
			}
			ts = append(ts, safetensors.Tensor{Name: th.prefix + name, DType: safetensors.I8, Shape: shape, Data: q},
				safetensors.Tensor{Name: th.prefix + name + "_scale", DType: safetensors.F32, Shape: shape[:1], Data: safetensors.EncodeF32(scale)})
			th.w[name] = vals
			return
		}
		f := make([]float32, n)
		for i := range f {
			f[i] = float32(next()) / 16 // exact in binary16
			vals[i] = float64(f[i])
		}
		th.w[name] = vals
		switch {
		case th.dtype == "f16" && len(shape) == 2:
			ts = append(ts, safetensors.Tensor{Name: th.prefix + name, DType: safetensors.F16, Shape: shape, Data: safetensors.EncodeF16(f)})
		default:
			ts = append(ts, safetensors.Tensor{Name: th.prefix + name, DType: safetensors.F32, Shape: shape, Data: safetensors.EncodeF32(f)})
		}
	}
	H, r := int64(th.H), int64(th.r)
	if th.embedProj {
		add("hydra_embed_proj.weight", r, H)
	}
	rows := int64(th.V)
	if th.headVocab > 0 {
		rows = int64(th.headVocab)
	}
	for i := range th.K {
		in := H + int64(i+1)*r
		add(fmt.Sprintf("hydra_mlp.%d.0.linear.weight", i), H, in)
		add(fmt.Sprintf("hydra_mlp.%d.0.linear.bias", i), H)
		if th.res {
			add(fmt.Sprintf("hydra_mlp.%d.0.res_connection.weight", i), H, in)
			add(fmt.Sprintf("hydra_mlp.%d.0.res_connection.bias", i), H)
		}
		for j := 1; j < th.L; j++ {
			add(fmt.Sprintf("hydra_mlp.%d.%d.linear.weight", i, j), H, H)
			add(fmt.Sprintf("hydra_mlp.%d.%d.linear.bias", i, j), H)
		}
		if th.own {
			add(fmt.Sprintf("hydra_lm_head.%d.weight", i), rows, H)
			if th.projBias {
				add(fmt.Sprintf("hydra_lm_head.%d.bias", i), rows)
			}
		}
	}
	if err := safetensors.Write(filepath.Join(dir, HydraWeightsFile), ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	dtype := map[string]string{"f32": "float32", "f16": "float16", "i8": "int8"}[th.dtype]
	sg := map[string]any{"share_lm_head": !th.own, "token_frequency": "head_token_frequency.json", "embed_dim": th.r}
	if th.headVocab > 0 {
		sg["head_vocab"] = th.headVocab
	}
	if th.sharedInt8 {
		sg["shared_rows_int8"] = true
	}
	cfg := map[string]any{"architectures": []string{"HydraModel"}, "base_model_name_or_path": "tiny", "hidden_size": th.H, "vocab_size": th.V,
		"hydra_num_heads": th.K, "hydra_num_layers": th.L, "hydra_head_arch": "mlp", "grounded_heads": true, "torch_dtype": dtype, "specgate": sg}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	fb, _ := json.Marshal(map[string]any{"counts": tinyFreq(th.V)})
	if err := os.WriteFile(filepath.Join(dir, "head_token_frequency.json"), fb, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// matVec is W x for W [rows][cols] row-major, float64.
func matVec(w []float64, rows, cols int, x []float64) []float64 {
	out := make([]float64, rows)
	for o := range rows {
		s := 0.0
		for k := range cols {
			s += w[o*cols+k] * x[k]
		}
		out[o] = s
	}
	return out
}

func silu64(x float64) float64 { return x / (1 + math.Exp(-x)) }

// ref is head i's logits in float64 for hidden row h and path tokens
// x_1..x_{i+1}, over the token ids ids (nil: every token), computed from
// the values the test wrote and the target's own tables E and lm.
func (th *tinyHydra) ref(E, lm []float64, h []float64, toks []int32, i int, ids []int32) []float64 {
	H, r := th.H, th.r
	u := append([]float64(nil), h...)
	for _, x := range toks {
		e := E[int(x)*H : (int(x)+1)*H]
		if th.embedProj {
			e = matVec(th.w["hydra_embed_proj.weight"], r, H, e)
		}
		u = append(u, e...)
	}
	in := len(u)
	t := matVec(th.w[fmt.Sprintf("hydra_mlp.%d.0.linear.weight", i)], H, in, u)
	y := append([]float64(nil), h...)
	if th.res {
		y = matVec(th.w[fmt.Sprintf("hydra_mlp.%d.0.res_connection.weight", i)], H, in, u)
		for c, v := range th.w[fmt.Sprintf("hydra_mlp.%d.0.res_connection.bias", i)] {
			y[c] += v
		}
	}
	for c, v := range th.w[fmt.Sprintf("hydra_mlp.%d.0.linear.bias", i)] {
		y[c] += silu64(t[c] + v)
	}
	for j := 1; j < th.L; j++ {
		t := matVec(th.w[fmt.Sprintf("hydra_mlp.%d.%d.linear.weight", i, j)], H, H, y)
		for c, v := range th.w[fmt.Sprintf("hydra_mlp.%d.%d.linear.bias", i, j)] {
			y[c] += silu64(t[c] + v)
		}
	}
	if ids == nil {
		for id := range th.V {
			ids = append(ids, int32(id))
		}
	}
	var fileIDs []int32 // the file's projection rows
	if th.headVocab > 0 {
		fileIDs = frequent(tinyFreq(th.V), th.headVocab)
	}
	out := make([]float64, len(ids))
	for k, id := range ids {
		var row []float64
		var bias float64
		if th.own {
			src := int(id)
			if fileIDs != nil {
				src = sort.Search(len(fileIDs), func(a int) bool { return fileIDs[a] >= id })
			}
			row = th.w[fmt.Sprintf("hydra_lm_head.%d.weight", i)][src*H : (src+1)*H]
			if th.projBias {
				bias = th.w[fmt.Sprintf("hydra_lm_head.%d.bias", i)][src]
			}
		} else {
			row = lm[int(id)*H : (int(id)+1)*H]
			if th.sharedInt8 { // the engine's own int8 quantizer (--quantize int8), row by row
				f := make([]float32, H)
				for c, v := range row {
					f[c] = float32(v)
				}
				q := model.QuantizeI8(model.NewF32(f, 1, H))
				row = make([]float64, H)
				for c, v := range q.I8 {
					row[c] = float64(v) * float64(q.Scales[0])
				}
			}
		}
		s := bias
		for c := range H {
			s += row[c] * y[c]
		}
		out[k] = s
	}
	return out
}

func float64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func tinyVariants() []struct {
	name  string
	th    tinyHydra
	limit int
} {
	return []struct {
		name  string
		th    tinyHydra
		limit int
	}{
		// the reference layout: res_connection, r = H, own projections with bias
		{"reference-f32", tinyHydra{K: 2, L: 2, H: 4, V: 16, r: 4, res: true, own: true, projBias: true, dtype: "f32"}, 0},
		// compact: hydra_embed_proj (r = 2), no res_connection, FR-Spec rows, fp16
		{"compact-f16-frspec", tinyHydra{K: 2, L: 2, H: 4, V: 16, r: 2, embedProj: true, own: true, headVocab: 6, dtype: "f16", prefix: "hydra_head."}, 0},
		// compact, int8 everywhere (hydra_embed_proj too), the target's lm_head, 3 blocks
		{"compact-i8-shared", tinyHydra{K: 2, L: 3, H: 4, V: 16, r: 3, embedProj: true, dtype: "i8"}, 0},
		// compact, the target's lm_head over the head_vocab most frequent tokens (no projections)
		{"compact-shared-headvocab", tinyHydra{K: 2, L: 2, H: 4, V: 16, r: 2, embedProj: true, headVocab: 6, dtype: "f32"}, 0},
		// the same with the shared rows in int8 (specgate.shared_rows_int8), cut to 5 tokens at load
		{"compact-shared-int8-rows", tinyHydra{K: 2, L: 2, H: 4, V: 16, r: 2, embedProj: true, headVocab: 6, dtype: "i8", sharedInt8: true}, 5},
		// reference layout in int8, own projections with bias, cut to 5 tokens at load
		{"reference-i8-limit", tinyHydra{K: 2, L: 1, H: 4, V: 16, r: 4, res: true, own: true, projBias: true, dtype: "i8"}, 5},
		// own projections over head_vocab rows with biases, cut at load to fewer
		// (the projection bias follows the FR-Spec rows' cut; review H4)
		{"reference-bias-frspec-limit", tinyHydra{K: 2, L: 2, H: 4, V: 16, r: 4, res: true, own: true, projBias: true, headVocab: 6, dtype: "f32"}, 3},
		{"compact-i8-bias-frspec-limit", tinyHydra{K: 2, L: 2, H: 4, V: 16, r: 2, embedProj: true, own: true, projBias: true, headVocab: 6, dtype: "i8"}, 4},
		// the shared lm_head over head_vocab rows with a larger limit: head_vocab rows stay
		{"compact-shared-limit-beyond-head-vocab", tinyHydra{K: 2, L: 2, H: 4, V: 16, r: 2, embedProj: true, headVocab: 6, dtype: "f32"}, 9},
	}
}

// TestHydraHandExample: Hydra heads of both layouts and every dtype give
// the logits of the test's own float64 forward within 1e-5, for nodes that
// share hidden rows (the split W0 u = W0h h + W0x z).
func TestHydraHandExample(t *testing.T) {
	target := tinyTarget(t, 4)
	E := float64s(target.Weights.Embed.Float32())
	lm := float64s(target.Weights.LMHead.Float32())
	hidden := []float32{0.5, -1.25, 2, 0.75, -0.5, 1.5, 0.25, -2}
	for _, v := range tinyVariants() {
		t.Run(v.name, func(t *testing.T) {
			th := v.th
			dir := th.write(t)
			h, err := Load(dir, target, LoadOptions{VocabLimit: v.limit})
			if err != nil {
				t.Fatal(err)
			}
			if !h.IsHydra() || h.NumHeads != th.K || h.EmbedDim() != th.r || h.Shared == th.own {
				t.Fatalf("loaded hydra=%v heads %d r %d shared %v", h.IsHydra(), h.NumHeads, h.EmbedDim(), h.Shared)
			}
			if err := Check(Spec{Heads: dir, VocabLimit: v.limit}, 4, 16); err != nil {
				t.Fatalf("Check: %v", err)
			}
			var ids []int32 // the loaded rows' tokens, by the test's own frequency order
			lim := v.limit  // a limit cuts the head_vocab rows, never widens them
			if th.headVocab > 0 && (lim == 0 || lim > th.headVocab) {
				lim = th.headVocab
			}
			if lim > 0 {
				ids = frequent(tinyFreq(16), lim)
			}
			if want := len(ids); want > 0 && h.Rows() != want || want == 0 && h.Rows() != 16 {
				t.Fatalf("%d rows, want %d (0 = 16)", h.Rows(), want)
			}
			for k, id := range ids {
				if h.TokenOf(k) != id {
					t.Fatalf("row %d is token %d, want %d", k, h.TokenOf(k), id)
				}
			}
			worst := 0.0
			for i := range th.K {
				// nodes: hidden rows 0 and 1 in mixed order, paths of i+1 tokens
				row := []int32{1, 0, 1, 0}
				var toks []int32
				for k := range row {
					for j := 0; j <= i; j++ {
						toks = append(toks, int32((3*k+5*j+i)%16))
					}
				}
				got := h.HydraLogits(i, hidden, 2, row, toks, nil)
				R := h.Rows()
				if len(got) != len(row)*R {
					t.Fatalf("head %d: %d logits, want %d", i, len(got), len(row)*R)
				}
				for k, q := range row {
					want := th.ref(E, lm, float64s(hidden[int(q)*4:int(q)*4+4]), toks[k*(i+1):(k+1)*(i+1)], i, ids)
					for c, w := range want {
						worst = max(worst, math.Abs(float64(got[k*R+c])-w))
					}
				}
			}
			t.Logf("max |go - float64| = %.2e", worst)
			if worst > 1e-5 {
				t.Fatalf("max abs diff %.3e > 1e-5", worst)
			}
		})
	}
}

// TestHydraProposeTree: the proposer builds the tree depth by depth: the
// depth-1 nodes are head 0's top-k given the pending token, a depth-2 node
// [a b] is the b-th candidate of head 1 given the pending token and node
// [a]'s token; budgets and MaxDepth cut the tree's priority prefix. The
// expected tokens come from the test's float64 forward.
func TestHydraProposeTree(t *testing.T) {
	target := tinyTarget(t, 4)
	E := float64s(target.Weights.Embed.Float32())
	lm := float64s(target.Weights.LMHead.Float32())
	th := tinyVariants()[0].th
	dir := th.write(t)
	h, err := Load(dir, target, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	paths := [][]int{{0}, {1}, {0, 0}, {2}, {0, 1}, {1, 0}, {2, 2}}
	tree, err := NewTree(paths, 2)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProposer(h, tree)
	if err != nil {
		t.Fatal(err)
	}
	top := func(l []float64) []int32 { // ranks, ties by lower id
		idx := make([]int32, len(l))
		for i := range idx {
			idx[i] = int32(i)
		}
		sort.SliceStable(idx, func(a, b int) bool { return l[idx[a]] > l[idx[b]] })
		return idx
	}
	hid := [][]float32{{0.5, -1.25, 2, 0.75}, {-0.5, 1.5, 0.25, -2}, {1, 1, -1, 0.5}}
	reqs := []engine.ProposeRequest{
		{ID: 1, Generated: []int32{3, 9}, Hidden: hid[0], Budget: 7, MaxDepth: 2},
		{ID: 2, Generated: []int32{4}, Hidden: hid[1], Budget: 4, MaxDepth: 2},
		{ID: 3, Generated: []int32{11}, Hidden: hid[2], Budget: 7, MaxDepth: 1},
		{ID: 4, Generated: []int32{5}, Hidden: nil, Budget: 7, MaxDepth: 2}, // no hidden row: nothing
	}
	got, err := p.Propose(t.Context(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for ri, r := range reqs {
		var want engine.Proposal
		if r.Hidden != nil {
			x1 := r.Generated[len(r.Generated)-1]
			h64 := float64s(r.Hidden)
			c0 := top(th.ref(E, lm, h64, []int32{x1}, 0, nil))
			node := map[string]int32{}
			for _, path := range paths {
				if len(want.Tokens) >= r.Budget || len(path) > r.MaxDepth {
					continue
				}
				var tok, par int32 = 0, -1
				if len(path) == 1 {
					tok = c0[path[0]]
				} else {
					par = node[fmt.Sprint(path[:1])]
					c1 := top(th.ref(E, lm, h64, []int32{x1, want.Tokens[par]}, 1, nil))
					tok = c1[path[1]]
				}
				node[fmt.Sprint(path)] = int32(len(want.Tokens))
				want.Tokens = append(want.Tokens, tok)
				want.Parents = append(want.Parents, par)
			}
		}
		g := got[ri]
		if fmt.Sprint(g.Tokens, g.Parents) != fmt.Sprint(want.Tokens, want.Parents) {
			t.Errorf("request %d: proposal %v %v, want %v %v", r.ID, g.Tokens, g.Parents, want.Tokens, want.Parents)
		}
		if len(g.Tokens) > 0 && g.Source != SourceHydra {
			t.Errorf("request %d: source %q", r.ID, g.Source)
		}
	}
	if len(got[0].Tokens) != 7 || len(got[1].Tokens) != 4 || len(got[2].Tokens) != 3 {
		t.Fatalf("proposal sizes %d %d %d, want 7 4 3", len(got[0].Tokens), len(got[1].Tokens), len(got[2].Tokens))
	}
}

// rewriteWeights rewrites dir's Hydra weights file through edit (tensors
// as stored, raw bytes).
func rewriteWeights(t *testing.T, dir string, edit func([]safetensors.Tensor) []safetensors.Tensor) {
	t.Helper()
	rewriteFile(t, filepath.Join(dir, HydraWeightsFile), edit)
}

func dropTensor(name string) func([]safetensors.Tensor) []safetensors.Tensor {
	return func(ts []safetensors.Tensor) []safetensors.Tensor {
		var out []safetensors.Tensor
		for _, x := range ts {
			if x.Name != name {
				out = append(out, x)
			}
		}
		return out
	}
}

// TestHydraLoadErrors: a malformed Hydra directory is refused with an
// error that names the file and the key or tensor (ErrFormat), heads of
// another model with ErrMismatch; Check (config check) refuses the same
// weights files (names, shapes, missing tensors, dtypes).
func TestHydraLoadErrors(t *testing.T) {
	target := tinyTarget(t, 4)
	cfgEdit := func(kv map[string]any) func(t *testing.T, d string) {
		return func(t *testing.T, d string) {
			p := filepath.Join(d, ConfigFile)
			b, _ := os.ReadFile(p)
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			for k, v := range kv {
				if v == nil {
					delete(m, k)
				} else {
					m[k] = v
				}
			}
			b, _ = json.Marshal(m)
			os.WriteFile(p, b, 0o644)
		}
	}
	weights := func(edit func([]safetensors.Tensor) []safetensors.Tensor) func(t *testing.T, d string) {
		return func(t *testing.T, d string) { rewriteWeights(t, d, edit) }
	}
	for _, tc := range []struct {
		name    string
		variant int // tinyVariants index
		edit    func(t *testing.T, d string)
		is      error
		check   bool // Check gives the same error
		wants   []string
	}{
		{"no layers", 0, cfgEdit(map[string]any{"hydra_num_layers": nil}), ErrFormat, true, []string{"config.json", "hydra_num_layers: missing"}},
		{"zero layers", 0, cfgEdit(map[string]any{"hydra_num_layers": 0}), ErrFormat, true, []string{"config.json", "hydra_num_layers 0"}},
		{"heads range", 0, cfgEdit(map[string]any{"hydra_num_heads": 65}), ErrFormat, true, []string{"hydra_num_heads 65"}},
		{"architectures", 0, cfgEdit(map[string]any{"architectures": []string{"MedusaModel"}}), ErrFormat, true, []string{"architectures", "HydraModel"}},
		{"no hydra keys", 0, cfgEdit(map[string]any{"hydra_num_heads": nil, "hydra_num_layers": nil}), ErrFormat, true, []string{"hydra_num_heads: missing"}},
		{"medusa keys too", 0, cfgEdit(map[string]any{"medusa_num_heads": 2}), ErrFormat, true, []string{"medusa_num_heads", "Hydra"}},
		{"ungrounded", 0, cfgEdit(map[string]any{"grounded_heads": false}), ErrFormat, true, []string{"grounded_heads false", "Medusa heads"}},
		{"head arch", 0, cfgEdit(map[string]any{"hydra_head_arch": "prefix-mlp"}), ErrFormat, true, []string{`hydra_head_arch "prefix-mlp"`}},
		{"hidden size", 0, cfgEdit(map[string]any{"hidden_size": 8}), ErrMismatch, false, []string{"config.json", "hidden_size 8", "target hidden_size 4"}},
		{"vocab size", 0, cfgEdit(map[string]any{"vocab_size": 32}), ErrMismatch, false, []string{"vocab_size 32"}},
		{"embed dim", 1, cfgEdit(map[string]any{"specgate": map[string]any{"embed_dim": 3, "head_vocab": 6, "token_frequency": "head_token_frequency.json"}}), ErrFormat, true, []string{"specgate.embed_dim 3", "r = 2"}},
		{"fewer heads than file", 0, cfgEdit(map[string]any{"hydra_num_heads": 1}), ErrFormat, true, []string{HydraWeightsFile, "not a parameter of 1 Hydra heads", "hydra_num_heads"}},
		{"more heads than file", 0, cfgEdit(map[string]any{"hydra_num_heads": 3}), ErrFormat, true, []string{HydraWeightsFile, `"hydra_mlp.2.0.`, "missing"}},
		{"fewer blocks than file", 0, cfgEdit(map[string]any{"hydra_num_layers": 1}), ErrFormat, true, []string{`"hydra_mlp.0.1.linear.`, "not a parameter of 2 Hydra heads x 1 blocks", "hydra_num_layers"}},
		{"missing bias", 0, weights(dropTensor("hydra_mlp.1.1.linear.bias")), ErrFormat, true, []string{HydraWeightsFile, "hydra_mlp.1.1.linear.bias", "missing"}},
		{"one res_connection missing", 0, weights(dropTensor("hydra_mlp.1.0.res_connection.weight")), ErrFormat, true, []string{"hydra_mlp.1.0.res_connection.weight", "1 of 2 heads"}},
		{"one projection missing", 0, weights(dropTensor("hydra_lm_head.0.weight")), ErrFormat, true, []string{"1 of 2 heads have a vocabulary projection"}},
		{"unknown tensor", 0, weights(func(ts []safetensors.Tensor) []safetensors.Tensor {
			return append(ts, safetensors.Tensor{Name: "hydra_mlp.0.0.gate.weight", DType: safetensors.F32, Shape: []int64{1}, Data: make([]byte, 4)})
		}), ErrFormat, true, []string{`"hydra_mlp.0.0.gate.weight"`, "not a parameter"}},
		{"leading zero index", 0, weights(func(ts []safetensors.Tensor) []safetensors.Tensor {
			return append(ts, safetensors.Tensor{Name: "hydra_lm_head.01.bias", DType: safetensors.F32, Shape: []int64{1}, Data: make([]byte, 4)})
		}), ErrFormat, true, []string{`"hydra_lm_head.01.bias"`}},
		{"block 0 width", 0, weights(func(ts []safetensors.Tensor) []safetensors.Tensor {
			for i, x := range ts {
				if x.Name == "hydra_mlp.1.0.linear.weight" { // [4][12] stored as [4][8]+16 values cut
					ts[i].Shape, ts[i].Data = []int64{4, 8}, x.Data[:4*8*4]
				}
			}
			return ts
		}), ErrMismatch, true, []string{`"hydra_mlp.1.0.linear.weight"`, "[4 8]", "[4 12]"}},
		{"scale without weight", 2, weights(func(ts []safetensors.Tensor) []safetensors.Tensor {
			return append(ts, safetensors.Tensor{Name: "hydra_lm_head.0.weight_scale", DType: safetensors.F32, Shape: []int64{16}, Data: make([]byte, 64)})
		}), ErrFormat, true, []string{"hydra_lm_head.0.weight_scale", "a scale without its weight"}},
		{"int8 without scale", 2, weights(dropTensor("hydra_mlp.0.1.linear.weight_scale")), ErrFormat, true, []string{`"hydra_mlp.0.1.linear.weight"`, "per-row scale"}},
		{"bias without projection", 2, weights(func(ts []safetensors.Tensor) []safetensors.Tensor {
			return append(ts, safetensors.Tensor{Name: "hydra_lm_head.1.bias", DType: safetensors.F32, Shape: []int64{16}, Data: make([]byte, 64)})
		}), ErrFormat, true, []string{`"hydra_lm_head.1.bias"`, "without its weight"}},
		{"nan", 0, weights(func(ts []safetensors.Tensor) []safetensors.Tensor {
			for i, x := range ts {
				if x.Name == "hydra_mlp.0.0.linear.bias" {
					ts[i].Data = append([]byte(nil), x.Data...)
					copy(ts[i].Data, safetensors.EncodeF32([]float32{float32(math.NaN())}))
				}
			}
			return ts
		}), ErrFormat, false, []string{`"hydra_mlp.0.0.linear.bias"`, "NaN"}},
		{"pickle only", 0, func(t *testing.T, d string) {
			os.Remove(filepath.Join(d, HydraWeightsFile))
			os.WriteFile(filepath.Join(d, HydraPickleFile), []byte("PK"), 0o644)
		}, ErrFormat, true, []string{HydraPickleFile, "save_file"}},
		{"truncated weights", 0, func(t *testing.T, d string) {
			p := filepath.Join(d, HydraWeightsFile)
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)/2], 0o644)
		}, ErrFormat, true, []string{HydraWeightsFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th := tinyVariants()[tc.variant].th
			d := th.write(t)
			tc.edit(t, d)
			_, err := Load(d, target, LoadOptions{})
			if err == nil || !errorsIs(err, tc.is) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
			for _, w := range tc.wants {
				if !contains(err.Error(), w) {
					t.Errorf("err %q does not name %q", err, w)
				}
			}
			if tc.check {
				cerr := Check(Spec{Heads: d}, 4, 16)
				if cerr == nil || !errorsIs(cerr, tc.is) {
					t.Fatalf("Check: err = %v, want %v", cerr, tc.is)
				}
			}
		})
	}
	// heads of another model: hidden 8 against the H = 4 heads
	d := tinyVariants()[0].th
	dir := d.write(t)
	cfgEdit(map[string]any{"hidden_size": nil, "specgate": map[string]any{}})(t, dir)
	other := tinyTarget(t, 8)
	if _, err := Load(dir, other, LoadOptions{}); !errorsIs(err, ErrMismatch) || !contains(err.Error(), "hydra_mlp.0.0.linear.weight") || !contains(err.Error(), "hidden_size 8") {
		t.Fatalf("target hidden 8: err = %v", err)
	}
	if err := Check(Spec{Heads: dir}, 8, 16); !errorsIs(err, ErrMismatch) {
		t.Fatalf("Check hidden 8: err = %v", err)
	}
	if err := Check(Spec{Heads: dir}, 0, 0); err != nil {
		t.Fatalf("Check with sizes unknown: %v", err)
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
func contains(s, sub string) bool     { return strings.Contains(s, sub) }

// readTinyW replaces th.w with the values of dir's weights file as the
// test reads them itself (I8 dequantized in float64 with its row's scale).
func (th *tinyHydra) readTinyW(t *testing.T, dir string) {
	t.Helper()
	f, err := safetensors.Open(filepath.Join(dir, HydraWeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	th.w = map[string][]float64{}
	for _, n := range f.Names() {
		c := strings.TrimPrefix(n, "hydra_head.")
		if strings.HasSuffix(c, "_scale") {
			continue
		}
		info, _ := f.Info(n)
		if info.DType != safetensors.I8 {
			v, _, err := f.ReadFloat32(n)
			if err != nil {
				t.Fatal(err)
			}
			th.w[c] = float64s(v)
			continue
		}
		q, err := f.ReadRaw(n)
		if err != nil {
			t.Fatal(err)
		}
		sc, _, err := f.ReadFloat32(n + "_scale")
		if err != nil {
			t.Fatal(err)
		}
		cols := int(info.Shape[1])
		v := make([]float64, len(q))
		for i, b := range q {
			v[i] = float64(int8(b)) * float64(sc[i/cols])
		}
		th.w[c] = v
	}
}

// TestHydraQuantizeInt8: medusaquant (QuantizeInt8) on Hydra directories
// of both layouts: 2-D weights become I8 + per-row scale (not
// hydra_embed_proj), rows cut FR-Spec projections and their biases, the
// config says int8; the result loads and its logits are the test's float64
// forward over the dequantized file within 1e-5, and within the int8 error
// of the original heads' logits.
func TestHydraQuantizeInt8(t *testing.T) {
	target := tinyTarget(t, 4)
	E := float64s(target.Weights.Embed.Float32())
	lm := float64s(target.Weights.LMHead.Float32())
	hidden := []float32{0.5, -1.25, 2, 0.75, -0.5, 1.5, 0.25, -2}
	for _, tc := range []struct {
		name string
		th   tinyHydra
		rows int
	}{
		{"reference", tinyHydra{K: 2, L: 2, H: 4, V: 16, r: 4, res: true, own: true, projBias: true, dtype: "f32"}, 0},
		{"compact-frspec-cut", tinyHydra{K: 2, L: 2, H: 4, V: 16, r: 2, embedProj: true, own: true, projBias: true, headVocab: 8, dtype: "f16"}, 5},
		{"compact-shared", tinyHydra{K: 2, L: 2, H: 4, V: 16, r: 2, embedProj: true, headVocab: 6, dtype: "f32"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th := tc.th
			src := th.write(t)
			out := filepath.Join(t.TempDir(), "q")
			worst, err := QuantizeInt8(src, out, tc.rows)
			if err != nil {
				t.Fatal(err)
			}
			if worst > 1.0/254+1e-6 {
				t.Fatalf("worst relative weight error %.5f > 1/254", worst)
			}
			orig := th // the fp weights' forward, for the int8 error
			f, err := safetensors.Open(filepath.Join(out, HydraWeightsFile))
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range f.Names() {
				info, _ := f.Info(n)
				is2D := len(info.Shape) == 2 && !strings.HasSuffix(n, "_scale")
				if want := is2D && n != "hydra_embed_proj.weight"; (info.DType == safetensors.I8) != want {
					t.Errorf("%s: dtype %s", n, info.DType)
				}
			}
			f.Close()
			raw, _ := os.ReadFile(filepath.Join(out, ConfigFile))
			cfg, err := ParseConfig(raw, "q/config.json")
			if err != nil || !cfg.Hydra || cfg.TorchDtype != "int8" || (tc.rows > 0 && cfg.Specgate.HeadVocab != tc.rows) {
				t.Fatalf("quantized config %+v, %v", cfg, err)
			}
			h, err := Load(out, target, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Specgate.SharedRowsInt8 != !th.own {
				t.Fatalf("shared_rows_int8 %v for heads with own projections %v", cfg.Specgate.SharedRowsInt8, th.own)
			}
			q := th
			q.sharedInt8 = !th.own
			q.readTinyW(t, out)
			if tc.rows > 0 {
				q.headVocab = tc.rows
			}
			var ids []int32
			if q.headVocab > 0 {
				ids = frequent(tinyFreq(16), q.headVocab)
			}
			worstQ, worstO := 0.0, 0.0
			for i := range th.K {
				row := []int32{0, 1, 1}
				var toks []int32
				for k := range row {
					for j := 0; j <= i; j++ {
						toks = append(toks, int32((5*k+3*j+1)%16))
					}
				}
				got := h.HydraLogits(i, hidden, 2, row, toks, nil)
				R := h.Rows()
				for k, r := range row {
					hr := float64s(hidden[int(r)*4 : int(r)*4+4])
					want := q.ref(E, lm, hr, toks[k*(i+1):(k+1)*(i+1)], i, ids)
					o := orig.ref(E, lm, hr, toks[k*(i+1):(k+1)*(i+1)], i, ids)
					for c := range want {
						worstQ = max(worstQ, math.Abs(float64(got[k*R+c])-want[c]))
						worstO = max(worstO, math.Abs(float64(got[k*R+c])-o[c]))
					}
				}
			}
			t.Logf("max |go - float64 of the int8 file| = %.2e; vs the original heads %.2e", worstQ, worstO)
			if worstQ > 1e-5 || worstO > 0.1 {
				t.Fatalf("int8 heads: %.3e from their own float64 forward, %.3e from the original's", worstQ, worstO)
			}
		})
	}
}

// TestCollectHydra: tree tuning's statistics for Hydra heads are
// teacher-forced: at position j (generated token j pending, hidden row j)
// head k is given the true tokens j..j+k and ranks token j+k+1. The test
// decodes greedily itself (its own forward loop), ranks with its own
// float64 forward, and compares every rank Collect reports (positions
// whose label ties another logit within 1e-4 are skipped).
func TestCollectHydra(t *testing.T) {
	target := tinyTarget(t, 4)
	E := float64s(target.Weights.Embed.Float32())
	lm := float64s(target.Weights.LMHead.Float32())
	th := tinyVariants()[0].th
	h, err := Load(th.write(t), target, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prompts := [][]int32{{1, 5, 9}, {2, 2, 7, 11, 3}}
	const maxNew, maxRank = 12, 6
	st, err := Collect(t.Context(), target, h, prompts, maxNew, maxRank)
	if err != nil {
		t.Fatal(err)
	}
	H, V := 4, 16
	pos, checked := 0, 0
	for _, p := range prompts {
		seq := target.NewSequence()
		items := []engine.BatchItem{{Seq: seq, Tokens: p, LogitsRows: []int32{int32(len(p) - 1)}, WantHidden: true}}
		var gen []int32
		var hidden [][]float64
		for len(gen) < maxNew {
			if err := target.ForwardBatch(items); err != nil {
				t.Fatal(err)
			}
			hidden = append(hidden, float64s(items[0].Hidden[:H]))
			best := int32(0)
			for v, x := range items[0].Logits[:V] {
				if x > items[0].Logits[best] {
					best = int32(v)
				}
			}
			gen = append(gen, best)
			if slices.Contains(target.Config.EOS, best) {
				break
			}
			items = []engine.BatchItem{{Seq: seq, Tokens: []int32{best}, WantHidden: true}}
		}
		seq.Free()
		for j := range gen {
			for k := range th.K {
				got := st.Ranks[pos+j][k]
				if j+k+1 >= len(gen) {
					if got != NoLabel {
						t.Fatalf("position %d head %d: rank %d past the continuation, want NoLabel", pos+j, k, got)
					}
					continue
				}
				l := th.ref(E, lm, hidden[j], gen[j:j+k+1], k, nil)
				label := gen[j+k+1]
				rank, tie := 0, false
				for v, x := range l {
					if int32(v) != label && math.Abs(x-l[label]) < 1e-4 {
						tie = true
					}
					if x > l[label] {
						rank++
					}
				}
				if tie {
					continue
				}
				want := uint8(rank)
				if rank >= maxRank {
					want = NoRank
				}
				if got != want {
					t.Fatalf("position %d head %d: rank %d, want %d (teacher-forced path %v, label %d)", pos+j, k, got, want, gen[j:j+k+1], label)
				}
				checked++
			}
		}
		pos += len(gen)
	}
	if pos != len(st.Ranks) || checked < 20 {
		t.Fatalf("%d positions (Collect %d), %d ranks checked", pos, len(st.Ranks), checked)
	}
	t.Logf("%d positions, %d ranks checked", pos, checked)
}
