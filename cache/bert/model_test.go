package bert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specgate/specgate/safetensors"
)

// tinyConfig is a BERT small enough for a float64 reference in the test.
var tinyConfig = Config{VocabSize: 32, HiddenSize: 8, NumHiddenLayers: 2, NumAttentionHeads: 2,
	IntermediateSize: 16, HiddenAct: "gelu", MaxPositionEmbeddings: 16, TypeVocabSize: 2,
	LayerNormEps: 1e-12, PositionEmbeddingType: "absolute"}

// writeRandomModel writes config.json, model.safetensors (random weights,
// names as saved by transformers' BertModel, with an unused pooler) and the
// tiny tokenizer into a new directory and returns it with the weights.
func writeRandomModel(t testing.TB, cfg Config, seed uint64, mutate func(map[string][]float32, map[string][]int64)) (string, map[string][]float32) {
	t.Helper()
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(seed, 1))
	H, I := int64(cfg.HiddenSize), int64(cfg.IntermediateSize)
	shapes := map[string][]int64{
		"embeddings.word_embeddings.weight":       {int64(cfg.VocabSize), H},
		"embeddings.position_embeddings.weight":   {int64(cfg.MaxPositionEmbeddings), H},
		"embeddings.token_type_embeddings.weight": {int64(cfg.TypeVocabSize), H},
		"embeddings.LayerNorm.weight":             {H},
		"embeddings.LayerNorm.bias":               {H},
		"pooler.dense.weight":                     {H, H},
		"pooler.dense.bias":                       {H},
	}
	for i := range cfg.NumHiddenLayers {
		p := fmt.Sprintf("encoder.layer.%d.", i)
		for _, n := range []string{"attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"} {
			shapes[p+n+".weight"], shapes[p+n+".bias"] = []int64{H, H}, []int64{H}
		}
		shapes[p+"intermediate.dense.weight"], shapes[p+"intermediate.dense.bias"] = []int64{I, H}, []int64{I}
		shapes[p+"output.dense.weight"], shapes[p+"output.dense.bias"] = []int64{H, I}, []int64{H}
		for _, n := range []string{"attention.output.LayerNorm", "output.LayerNorm"} {
			shapes[p+n+".weight"], shapes[p+n+".bias"] = []int64{H}, []int64{H}
		}
	}
	w := map[string][]float32{}
	for name, shape := range shapes {
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * 0.5)
			if strings.Contains(name, "LayerNorm.weight") {
				v[i] = 1 + float32(r.NormFloat64()*0.1)
			}
		}
		w[name] = v
	}
	if mutate != nil {
		mutate(w, shapes)
	}
	var tensors []safetensors.Tensor
	for name, v := range w {
		tensors = append(tensors, safetensors.Tensor{Name: name, DType: safetensors.F32, Shape: shapes[name], Data: safetensors.EncodeF32(v)})
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), tensors, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	cj, _ := json.Marshal(map[string]any{
		"architectures": []string{"BertModel"}, "model_type": "bert",
		"vocab_size": cfg.VocabSize, "hidden_size": cfg.HiddenSize, "num_hidden_layers": cfg.NumHiddenLayers,
		"num_attention_heads": cfg.NumAttentionHeads, "intermediate_size": cfg.IntermediateSize,
		"hidden_act": cfg.HiddenAct, "max_position_embeddings": cfg.MaxPositionEmbeddings,
		"type_vocab_size": cfg.TypeVocabSize, "layer_norm_eps": cfg.LayerNormEps,
		"position_embedding_type": cfg.PositionEmbeddingType,
	})
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(readFile(t, "../../tokenizer/testdata/wordpiece-tiny/tokenizer.json")), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, w
}

// refForward is an independent float64 BERT forward (matrix-by-matrix, as
// in the transformers source) used as the reference for Model.Forward.
func refForward(cfg Config, w map[string][]float32, ids []int32, mask []int32) [][]float64 {
	H, T := cfg.HiddenSize, len(ids)
	mat := func(name string, rows, cols int) [][]float64 {
		m := make([][]float64, rows)
		for i := range m {
			m[i] = make([]float64, cols)
			for j := range m[i] {
				m[i][j] = float64(w[name][i*cols+j])
			}
		}
		return m
	}
	vec := func(name string) []float64 {
		v := make([]float64, len(w[name]))
		for i, x := range w[name] {
			v[i] = float64(x)
		}
		return v
	}
	lin := func(x [][]float64, name string, out int) [][]float64 { // x·Wᵀ + b
		in := len(x[0])
		W, b := mat(name+".weight", out, in), vec(name+".bias")
		y := make([][]float64, len(x))
		for t := range x {
			y[t] = make([]float64, out)
			for o := range out {
				s := b[o]
				for i := range in {
					s += x[t][i] * W[o][i]
				}
				y[t][o] = s
			}
		}
		return y
	}
	ln := func(x [][]float64, name string) [][]float64 {
		g, b := vec(name+".weight"), vec(name+".bias")
		y := make([][]float64, len(x))
		for t, row := range x {
			var mu, va float64
			for _, v := range row {
				mu += v
			}
			mu /= float64(len(row))
			for _, v := range row {
				va += (v - mu) * (v - mu)
			}
			va /= float64(len(row))
			y[t] = make([]float64, len(row))
			for j, v := range row {
				y[t][j] = (v-mu)/math.Sqrt(va+cfg.LayerNormEps)*g[j] + b[j]
			}
		}
		return y
	}
	we, pe, te := mat("embeddings.word_embeddings.weight", cfg.VocabSize, H), mat("embeddings.position_embeddings.weight", cfg.MaxPositionEmbeddings, H), mat("embeddings.token_type_embeddings.weight", cfg.TypeVocabSize, H)
	x := make([][]float64, T)
	for t, id := range ids {
		x[t] = make([]float64, H)
		for j := range H {
			x[t][j] = we[id][j] + pe[t][j] + te[0][j]
		}
	}
	x = ln(x, "embeddings.LayerNorm")
	nh := cfg.NumAttentionHeads
	dh := H / nh
	for l := range cfg.NumHiddenLayers {
		p := fmt.Sprintf("encoder.layer.%d.", l)
		q, k, v := lin(x, p+"attention.self.query", H), lin(x, p+"attention.self.key", H), lin(x, p+"attention.self.value", H)
		ctx := make([][]float64, T)
		for i := range ctx {
			ctx[i] = make([]float64, H)
		}
		for h := range nh {
			for i := range T {
				s := make([]float64, T)
				for j := range T {
					for d := range dh {
						s[j] += q[i][h*dh+d] * k[j][h*dh+d]
					}
					s[j] /= math.Sqrt(float64(dh))
					if mask != nil && mask[j] == 0 {
						s[j] += -1e30 // extended attention mask
					}
				}
				mx := math.Inf(-1)
				for _, z := range s {
					mx = math.Max(mx, z)
				}
				var sum float64
				for j := range s {
					s[j] = math.Exp(s[j] - mx)
					sum += s[j]
				}
				for j := range T {
					for d := range dh {
						ctx[i][h*dh+d] += s[j] / sum * v[j][h*dh+d]
					}
				}
			}
		}
		a := lin(ctx, p+"attention.output.dense", H)
		for t := range x {
			for j := range H {
				a[t][j] += x[t][j]
			}
		}
		x = ln(a, p+"attention.output.LayerNorm")
		inter := lin(x, p+"intermediate.dense", cfg.IntermediateSize)
		for t := range inter {
			for j, z := range inter[t] {
				inter[t][j] = 0.5 * z * (1 + math.Erf(z/math.Sqrt2))
			}
		}
		o := lin(inter, p+"output.dense", H)
		for t := range x {
			for j := range H {
				o[t][j] += x[t][j]
			}
		}
		x = ln(o, p+"output.LayerNorm")
	}
	return x
}

func TestForwardMatchesReference(t *testing.T) {
	dir, w := writeRandomModel(t, tinyConfig, 42, nil)
	m, err := LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, ids := range [][]int32{{2, 3}, {2, 5, 7, 6, 8, 3}, {2, 9, 10, 11, 12, 13, 20, 21, 22, 23, 24, 25, 26, 27, 28, 3}} {
		got, err := m.Forward(ids, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := refForward(tinyConfig, w, ids, nil)
		var maxd float64
		for tpos := range want {
			for j := range want[tpos] {
				maxd = math.Max(maxd, math.Abs(float64(got[tpos*8+j])-want[tpos][j]))
			}
		}
		if maxd > 2e-5 {
			t.Fatalf("ids %v: max |Δ| = %g against the float64 reference", ids, maxd)
		}
	}
}

// TestForwardMask: padding masked out leaves the real positions and the
// mean-pooled vector unchanged, and matches the reference with the mask.
func TestForwardMask(t *testing.T) {
	dir, w := writeRandomModel(t, tinyConfig, 7, nil)
	m, err := LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids := []int32{2, 5, 6, 3}
	plain, _ := m.Forward(ids, nil)
	padded := []int32{2, 5, 6, 3, 0, 0, 0}
	mask := []int32{1, 1, 1, 1, 0, 0, 0}
	hp, err := m.Forward(padded, mask)
	if err != nil {
		t.Fatal(err)
	}
	a, b := MeanPool(plain, nil, 8), MeanPool(hp, mask, 8)
	ref := refForward(tinyConfig, w, padded, mask)
	for j := range a {
		if d := math.Abs(float64(a[j] - b[j])); d > 1e-6 {
			t.Fatalf("pooled[%d]: unpadded %v, padded+masked %v", j, a[j], b[j])
		}
	}
	for tpos := range 4 {
		for j := range 8 {
			if d := math.Abs(float64(hp[tpos*8+j]) - ref[tpos][j]); d > 2e-5 {
				t.Fatalf("masked forward [%d,%d]: %v vs reference %v", tpos, j, hp[tpos*8+j], ref[tpos][j])
			}
		}
	}
	// Without the mask the padding changes the result (the mask matters).
	hu, _ := m.Forward(padded, nil)
	if math.Abs(float64(hu[0]-hp[0])) < 1e-6 {
		t.Fatal("unmasked padding did not change the output: the test cannot see the mask")
	}
}

// TestZeroLayers checks the embedding stage against values computed by
// hand: with H=2, LayerNorm of any (a, b) with a < b is (-1, 1)·g + β.
func TestZeroLayers(t *testing.T) {
	cfg := tinyConfig
	cfg.HiddenSize, cfg.NumAttentionHeads, cfg.NumHiddenLayers = 2, 1, 0
	dir, _ := writeRandomModel(t, cfg, 1, func(w map[string][]float32, _ map[string][]int64) {
		for i := range w["embeddings.word_embeddings.weight"] {
			w["embeddings.word_embeddings.weight"][i] = float32(i % 2) // row = (0, 1)
		}
		clear(w["embeddings.position_embeddings.weight"])
		clear(w["embeddings.token_type_embeddings.weight"])
		w["embeddings.position_embeddings.weight"][2] = 5 // position 1 = (5, 0): row (5, 1)
		copy(w["embeddings.LayerNorm.weight"], []float32{2, 3})
		copy(w["embeddings.LayerNorm.bias"], []float32{0.5, -0.5})
	})
	m, err := LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	h, err := m.Forward([]int32{4, 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{-2 + 0.5, 3 - 0.5, 2 + 0.5, -3 - 0.5}
	for i := range want {
		if math.Abs(float64(h[i]-want[i])) > 1e-5 {
			t.Fatalf("hidden = %v, want %v", h, want)
		}
	}
	p := MeanPool(h, nil, 2)
	if math.Abs(float64(p[0]-0.5)) > 1e-5 || math.Abs(float64(p[1]+0.5)) > 1e-5 {
		t.Fatalf("pooled = %v, want [0.5 -0.5]", p)
	}
}

func TestEncoder(t *testing.T) {
	dir, _ := writeRandomModel(t, tinyConfig, 3, nil)
	enc, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if enc.Dim() != 8 || enc.MaxLen() != 16 || !strings.HasPrefix(enc.Name(), "bert:") {
		t.Fatalf("Dim %d MaxLen %d Name %q", enc.Dim(), enc.MaxLen(), enc.Name())
	}
	texts := []string{"Hello, world!", "the cats", "中文", "", strings.Repeat("hello ", 100)}
	vs, err := enc.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vs {
		var n float64
		for _, x := range v {
			n += float64(x) * float64(x)
		}
		if len(v) != 8 || math.Abs(n-1) > 1e-5 {
			t.Fatalf("text %d: len %d, norm² %v", i, len(v), n)
		}
		// Embed = normalize(Pooled), one text at a time, in order.
		p, ids, err := enc.Pooled(texts[i])
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) > 16 {
			t.Fatalf("text %d: %d ids beyond MaxLen", i, len(ids))
		}
		Normalize(p)
		for j := range p {
			if p[j] != v[j] {
				t.Fatalf("text %d: Embed differs from normalized Pooled", i)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := enc.Embed(ctx, texts); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Embed: %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	dir, _ := writeRandomModel(t, tinyConfig, 5, func(w map[string][]float32, s map[string][]int64) {
		s["encoder.layer.1.intermediate.dense.weight"] = []int64{8, 16} // transposed
	})
	if _, err := LoadModel(dir); !errors.Is(err, ErrFormat) {
		t.Fatalf("transposed weight: %v", err)
	}
	dir, _ = writeRandomModel(t, tinyConfig, 5, func(w map[string][]float32, s map[string][]int64) {
		delete(w, "encoder.layer.0.output.LayerNorm.bias")
	})
	if _, err := LoadModel(dir); err == nil {
		t.Fatal("missing tensor accepted")
	}
	for name, cfg := range map[string]string{
		"heads":    `{"vocab_size":32,"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":3,"intermediate_size":16,"max_position_embeddings":16}`,
		"act":      `{"vocab_size":32,"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":16,"max_position_embeddings":16,"hidden_act":"swish"}`,
		"huge":     `{"vocab_size":32,"hidden_size":8,"num_hidden_layers":100000,"num_attention_heads":2,"intermediate_size":16,"max_position_embeddings":16}`,
		"eps":      `{"vocab_size":32,"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":16,"max_position_embeddings":16,"layer_norm_eps":0}`,
		"relative": `{"vocab_size":32,"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":16,"max_position_embeddings":16,"position_embedding_type":"relative_key"}`,
	} {
		p := filepath.Join(t.TempDir(), "config.json")
		os.WriteFile(p, []byte(cfg), 0o644)
		if _, err := LoadConfig(p); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v, want ErrFormat", name, err)
		}
	}
	dir, _ = writeRandomModel(t, tinyConfig, 5, nil)
	m, _ := LoadModel(dir)
	if _, err := m.Forward([]int32{2, 99}, nil); !errors.Is(err, ErrInput) {
		t.Fatalf("id beyond vocab: %v", err)
	}
	if _, err := m.Forward(make([]int32, 17), nil); !errors.Is(err, ErrInput) {
		t.Fatalf("sequence beyond max positions: %v", err)
	}
}
