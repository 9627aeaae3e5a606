package bert

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// golden is testdata/minibert/golden.json, written by PyTorch/transformers
// on a random-init BertModel with a trained WordPiece tokenizer (the model
// files lie beside it): per text, the tokenizer's input_ids, the
// mean-pooled last hidden state and its L2-normalized form.
type golden struct {
	Texts      []string    `json:"texts"`
	InputIDs   [][]int32   `json:"input_ids"`
	Pooled     [][]float64 `json:"pooled"`
	Normalized [][]float64 `json:"normalized"`
	// BatchedPooledFirst4 is the pooled output of the first 4 texts run as
	// one right-padded batch (pad id 0) with an attention mask.
	BatchedPooledFirst4 [][]float64 `json:"batched_pooled_first4"`
}

const goldenDir = "testdata/minibert"

func TestGoldenPyTorch(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(goldenDir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Texts) == 0 || len(g.InputIDs) != len(g.Texts) || len(g.Pooled) != len(g.Texts) || len(g.Normalized) != len(g.Texts) {
		t.Fatalf("golden.json: %d texts, %d input_ids, %d pooled, %d normalized", len(g.Texts), len(g.InputIDs), len(g.Pooled), len(g.Normalized))
	}
	enc, err := Open(goldenDir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var worstPooled, worstNorm float64
	for i, text := range g.Texts {
		pooled, ids, err := enc.Pooled(text)
		if err != nil {
			t.Fatalf("text %d %q: %v", i, text, err)
		}
		if !equalIDs(ids, g.InputIDs[i]) {
			t.Errorf("text %d %q:\n ids  %v\n want %v\n toks %q", i, text, ids, g.InputIDs[i], enc.Tok.Tokens(ids))
			continue
		}
		if len(pooled) != len(g.Pooled[i]) {
			t.Fatalf("text %d: pooled has %d floats, golden %d", i, len(pooled), len(g.Pooled[i]))
		}
		var d float64
		for j := range pooled {
			d = math.Max(d, math.Abs(float64(pooled[j])-g.Pooled[i][j]))
		}
		worstPooled = math.Max(worstPooled, d)
		if d > 1e-4 {
			t.Errorf("text %d %q: pooled max |Δ| = %.3g > 1e-4", i, text, d)
		}
		Normalize(pooled)
		d = 0
		for j := range pooled {
			d = math.Max(d, math.Abs(float64(pooled[j])-g.Normalized[i][j]))
		}
		worstNorm = math.Max(worstNorm, d)
		if d > 1e-4 {
			t.Errorf("text %d %q: normalized max |Δ| = %.3g > 1e-4", i, text, d)
		}
	}
	t.Logf("%d texts: input_ids equal; max |Δ| pooled %.3g, normalized %.3g", len(g.Texts), worstPooled, worstNorm)
	if enc.MaxLen() != 64 {
		t.Errorf("MaxLen = %d, want tokenizer.json's truncation.max_length 64", enc.MaxLen())
	}

	// The padded batch: our Forward with the same padding and mask.
	if len(g.BatchedPooledFirst4) != 4 {
		t.Fatalf("golden.json: batched_pooled_first4 has %d rows", len(g.BatchedPooledFirst4))
	}
	T := 0
	for _, ids := range g.InputIDs[:4] {
		T = max(T, len(ids))
	}
	var worstBatch float64
	for i, ids := range g.InputIDs[:4] {
		padded, mask := make([]int32, T), make([]int32, T)
		copy(padded, ids)
		for j := range ids {
			mask[j] = 1
		}
		h, err := enc.Model.Forward(padded, mask)
		if err != nil {
			t.Fatal(err)
		}
		p := MeanPool(h, mask, enc.Dim())
		for j := range p {
			worstBatch = math.Max(worstBatch, math.Abs(float64(p[j])-g.BatchedPooledFirst4[i][j]))
		}
	}
	if worstBatch > 1e-4 {
		t.Errorf("padded batch: pooled max |Δ| = %.3g > 1e-4", worstBatch)
	}
	t.Logf("padded batch of 4 (T=%d) with attention mask: pooled max |Δ| %.3g", T, worstBatch)
}

func equalIDs(a, b []int32) bool {
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
