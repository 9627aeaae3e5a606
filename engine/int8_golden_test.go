package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine/model"
)

// int8Golden is engine/testdata/int8/<case>/golden.json, written by
// tools/quant/int8_golden.py: HF transformers logits of the model whose
// projections were quantized by numpy (its own implementation) and
// dequantized, plus the sha256 of numpy's int8 values and scales per matrix.
type int8Golden struct {
	golden
	QuantSHA256 map[string]string `json:"quant_sha256"`
}

// TestInt8HFGolden: the CPU backend with int8 weights (LoadOptions.Quantize)
// against the independent reference: every matrix's int8 values and scales
// hash to numpy's, the logits of the golden sequences are within 1e-3 of
// HF's on the dequantized weights, and the 64-token greedy continuation is
// identical.
func TestInt8HFGolden(t *testing.T) {
	dir := filepath.Join("testdata", "int8", "specgate-target")
	raw, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g int8Golden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "model_dir"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(filepath.Join("..", strings.TrimSpace(string(md))), LoadOptions{SkipTokenizer: true, KVTokens: 4096,
		DisablePrefixCache: true, Quantize: QuantInt8})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !Int8Weights(m.Weights) {
		t.Fatal("Quantize int8 left float projections")
	}
	// Quantization: bit-identical to numpy's.
	hash := func(q model.Tensor) string {
		h := sha256.New()
		b := make([]byte, len(q.I8))
		for i, v := range q.I8 {
			b[i] = byte(v)
		}
		h.Write(b)
		s := make([]byte, 4*len(q.Scales))
		for i, v := range q.Scales {
			binary.LittleEndian.PutUint32(s[4*i:], math.Float32bits(v))
		}
		h.Write(s)
		return hex.EncodeToString(h.Sum(nil))
	}
	n := 0
	for _, s := range model.Tensors(m.Config) {
		if !s.Matrix {
			continue
		}
		want, ok := g.QuantSHA256[s.Name]
		if !ok {
			t.Fatalf("golden has no hash for %s", s.Name)
		}
		if got := hash(*s.Field(m.Weights)); got != want {
			t.Fatalf("%s: int8 values/scales hash %s, numpy's %s", s.Name, got[:12], want[:12])
		}
		n++
	}
	if m.Config.TieWordEmbeddings { // the projection's int8 copy of the table
		if got := hash(m.Weights.LMHead.To(model.I8)); got != g.QuantSHA256["lm_head.weight"] {
			t.Fatalf("tied lm_head int8 copy: hash %s, numpy's %s", got[:12], g.QuantSHA256["lm_head.weight"][:12])
		}
		n++
	}
	if n != len(g.QuantSHA256) {
		t.Fatalf("checked %d matrices, golden has %d", n, len(g.QuantSHA256))
	}
	worst := checkQuantGolden(t, m, dir, g, "int8")
	t.Logf("%d int8 matrices identical to numpy's; %d sequences max |Δlogit| %.3g; greedy %d tokens identical", n, len(g.Sequences), worst, len(g.Greedy))
}

// checkQuantGolden holds m, a model on quantized weights, to the HF logits
// of dir's golden (g.LogitsFile: HF on numpy's dequantized weights, max
// |Δ| <= 1e-3 on every golden sequence) and to its greedy continuation,
// and returns the largest |Δlogit|. format names the quantization in
// failures.
func checkQuantGolden(t *testing.T, m *Model, dir string, g int8Golden, format string) float64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, g.LogitsFile))
	if err != nil {
		t.Fatal(err)
	}
	V := m.Config.VocabSize
	off := 0
	var worst float64
	for si, seq := range g.Sequences {
		s := m.NewSequence()
		lg, err := s.Forward(seq, nil, nil)
		s.Free()
		if err != nil {
			t.Fatal(err)
		}
		if 4*(off+len(lg)) > len(data) {
			t.Fatalf("%s: %d bytes, too short for sequence %d", g.LogitsFile, len(data), si)
		}
		for i, v := range lg {
			want := math.Float32frombits(binary.LittleEndian.Uint32(data[4*(off+i):]))
			d := math.Abs(float64(v) - float64(want))
			worst = math.Max(worst, d)
			if !(d <= 1e-3) {
				t.Fatalf("sequence %d, token %d, id %d: logit %v, HF on numpy's %s %v (|Δ| %g)", si, i/V, i%V, v, format, want, d)
			}
		}
		off += len(lg)
	}
	if 4*off != len(data) {
		t.Fatalf("%s: %d bytes, sequences use %d", g.LogitsFile, len(data), 4*off)
	}
	got := greedyDecode(t, m, g.GreedyPrompt, len(g.Greedy))
	for i := range got {
		if got[i] != g.Greedy[i] {
			t.Fatalf("greedy token %d: %d, HF %d\n got %v\nwant %v", i, got[i], g.Greedy[i], got, g.Greedy)
		}
	}
	return worst
}
