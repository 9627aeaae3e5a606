package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine/model"
)

// TestInt4HFGolden: the Go int4 quantizer (model.QuantizeI4, what the CUDA
// backend uploads with Options.Quantize int4) against the independent
// reference of tools/quant/int4_golden.py (engine/testdata/int4): every
// matrix's packed nibbles and fp16 group scales hash to numpy's, and the
// CPU backend (float32) running the dequantized weights s*q matches HF
// transformers on numpy's dequantized weights: max |Δlogit| <= 1e-3 on the
// golden sequences and the same 64-token greedy continuation. The GPU's
// int4 kernels are held to the same logits in engine/cuda
// (TestInt4HFGoldenGPU).
func TestInt4HFGolden(t *testing.T) {
	dir := filepath.Join("testdata", "int4", "specgate-target")
	raw, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g int8Golden // same format: HF golden + quant_sha256
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "model_dir"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	hash := func(name string, v model.Tensor) model.Tensor {
		p, s, err := model.QuantizeI4(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		h := sha256.New()
		h.Write(p)
		b := make([]byte, 2*len(s))
		for i, x := range s {
			binary.LittleEndian.PutUint16(b[2*i:], x)
		}
		h.Write(b)
		want, ok := g.QuantSHA256[name]
		if !ok {
			t.Fatalf("golden has no hash for %s", name)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			t.Fatalf("%s: int4 nibbles/scales hash %s, numpy's %s", name, got[:12], want[:12])
		}
		n++
		return model.NewF32(model.DequantizeI4(p, s, v.Rows(), v.Cols()), v.Shape...)
	}
	// The CPU backend gets a copy of the loaded weights whose projections
	// and LM head are their int4 round trips (the embedding stays as
	// stored; a tied LM head becomes its own int4 copy, as on the GPU).
	deq := func(cfg Config, w *Weights, slots int) (Backend, error) {
		c := *w
		c.Layers = append([]LayerWeights(nil), w.Layers...)
		for _, s := range model.Tensors(cfg) {
			if s.Matrix {
				*s.Field(&c) = hash(s.Name, *s.Field(w))
			}
		}
		if cfg.TieWordEmbeddings {
			c.LMHead = hash("lm_head.weight", w.LMHead)
		}
		return NewCPUBackend(cfg, &c, slots, 0)
	}
	m, err := Load(filepath.Join("..", strings.TrimSpace(string(md))), LoadOptions{SkipTokenizer: true, KVTokens: 4096,
		DisablePrefixCache: true, NewBackend: deq})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if n != len(g.QuantSHA256) {
		t.Fatalf("checked %d matrices, golden has %d", n, len(g.QuantSHA256))
	}
	worst := checkQuantGolden(t, m, dir, g, "int4")
	t.Logf("%d int4 matrices identical to numpy's; %d sequences max |Δlogit| %.3g; greedy %d tokens identical", n, len(g.Sequences), worst, len(g.Greedy))
}
