package medusa

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/specgate/specgate/safetensors"
)

// TestQuantizeInt8 quantizes the fp16 FR-Spec golden heads and checks the
// result against the original loaded on its own: every dequantized weight
// within half a quantization step of the original (|Δ| <= max|row| / 254),
// and with a row cut the same token rows as LoadOptions.VocabLimit.
func TestQuantizeInt8(t *testing.T) {
	base := goldenBase(t)
	src := "testdata/golden/frspec"
	orig, err := Load(src, base, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rows := range []int{0, 20} {
		out := filepath.Join(t.TempDir(), "q")
		worst, err := QuantizeInt8(src, out, rows)
		if err != nil {
			t.Fatal(err)
		}
		if worst > 1.0/254+1e-6 || worst == 0 {
			t.Fatalf("rows %d: reported worst relative error %.5f", rows, worst)
		}
		if err := Check(Spec{Heads: out}, 64, 320); err != nil {
			t.Fatalf("Check: %v", err)
		}
		q, err := Load(out, base, LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ref := orig
		if rows > 0 {
			if ref, err = Load(src, base, LoadOptions{VocabLimit: rows}); err != nil {
				t.Fatal(err)
			}
			if q.Config.Specgate.HeadVocab != rows {
				t.Fatalf("head_vocab %d, want %d", q.Config.Specgate.HeadVocab, rows)
			}
		}
		if q.Rows() != ref.Rows() || !slices.Equal(q.ids, ref.ids) {
			t.Fatalf("rows %d: token rows %v, want %v", rows, q.ids, ref.ids)
		}
		near := func(what string, a, b []float32, cols int) {
			for r := 0; r < len(b)/cols; r++ {
				m := 0.0
				for _, v := range b[r*cols : (r+1)*cols] {
					m = max(m, math.Abs(float64(v)))
				}
				for c := range cols {
					if d := math.Abs(float64(a[r*cols+c] - b[r*cols+c])); d > m/254*(1+1e-5) {
						t.Fatalf("rows %d: %s row %d col %d: %v vs %v (max |row| %v)", rows, what, r, c, a[r*cols+c], b[r*cols+c], m)
					}
				}
			}
		}
		qw, qp := q.deviceWeights()
		rw, rp := ref.deviceWeights()
		for i := range q.NumHeads {
			for j := range q.layers {
				near("block", qw[i][j], rw[i][j], q.Hidden)
				if !slices.Equal(q.b[i][j], ref.b[i][j]) {
					t.Fatalf("head %d layer %d: bias changed", i, j)
				}
			}
			near("projection", qp[i], rp[i], q.Hidden)
		}
	}
	if _, err := QuantizeInt8("testdata/golden/shared", filepath.Join(t.TempDir(), "q"), 10); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "head_vocab") {
		t.Fatalf("rows on shared heads: err = %v", err)
	}
}

// rewrite copies dir's (Medusa) weights file through edit (which returns
// the new tensor list).
func rewrite(t *testing.T, dir string, edit func([]safetensors.Tensor) []safetensors.Tensor) {
	t.Helper()
	rewriteFile(t, filepath.Join(dir, WeightsFile), edit)
}

// rewriteFile rewrites the safetensors file p through edit (tensors as
// stored, raw bytes; the metadata dropped).
func rewriteFile(t *testing.T, p string, edit func([]safetensors.Tensor) []safetensors.Tensor) {
	t.Helper()
	f, err := safetensors.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, n := range f.Names() {
		info, _ := f.Info(n)
		b, err := f.ReadRaw(n)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: b})
	}
	f.Close()
	if err := safetensors.Write(p, edit(ts), nil); err != nil {
		t.Fatal(err)
	}
}

func TestInt8Errors(t *testing.T) {
	base := goldenBase(t)
	q := filepath.Join(t.TempDir(), "q")
	if _, err := QuantizeInt8("testdata/golden/frspec", q, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := QuantizeInt8(q, filepath.Join(t.TempDir(), "qq"), 0); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "already quantized") {
		t.Fatalf("quantizing twice: err = %v", err)
	}
	set := func(name string, f func(*safetensors.Tensor)) func([]safetensors.Tensor) []safetensors.Tensor {
		return func(ts []safetensors.Tensor) []safetensors.Tensor {
			for i := range ts {
				if ts[i].Name == name {
					f(&ts[i])
				}
			}
			return ts
		}
	}
	for _, tc := range []struct {
		name  string
		edit  func([]safetensors.Tensor) []safetensors.Tensor
		wants []string
	}{
		{"no scale", dropTensor("1.0.linear.weight_scale"), []string{`"1.0.linear.weight"`, `"1.0.linear.weight_scale"`, "dtype I8 needs a per-row scale"}},
		{"orphan scale", func(ts []safetensors.Tensor) []safetensors.Tensor {
			return append(ts, safetensors.Tensor{Name: "0.0.linear.bias_scale", DType: safetensors.F32, Shape: []int64{64}, Data: make([]byte, 256)})
		}, []string{`"0.0.linear.bias_scale"`}},
		{"scale with a float weight", set("0.2.weight", func(x *safetensors.Tensor) {
			x.DType = safetensors.F16
			x.Data = append(x.Data, x.Data...)
		}), []string{`"0.2.weight_scale"`, "I8 weights only"}},
		{"scale shape", set("0.2.weight_scale", func(x *safetensors.Tensor) {
			x.Shape = []int64{x.Shape[0] / 2, 2}
		}), []string{`"0.2.weight_scale"`, "per-row scales"}},
		{"negative scale", set("1.1.linear.weight_scale", func(x *safetensors.Tensor) {
			x.Data[3] |= 0x80
		}), []string{`"1.1.linear.weight_scale"`, "scale 0 is -"}},
		{"int8 bias", set("0.1.linear.bias", func(x *safetensors.Tensor) {
			x.DType = safetensors.I8
			x.Data = x.Data[:len(x.Data)/2]
		}), []string{`"0.1.linear.bias"`, "dtype I8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := copyDir(t, q)
			rewrite(t, d, tc.edit)
			_, err := Load(d, base, LoadOptions{})
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("err = %v, want ErrFormat", err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err %q does not name %q", err, w)
				}
			}
		})
	}
	// the quantized directory itself loads and names its files as before
	if _, err := os.Stat(filepath.Join(q, "token_frequency.json")); err != nil {
		t.Fatal(err)
	}
}

// TestQuantizeHeadVocabBeyondVocabulary: medusaquant -rows on a directory
// whose specgate.head_vocab exceeds the vocabulary (config.json without
// vocab_size: the vocabulary is the frequency file's 16 counts; or with
// vocab_size 16) is an ErrFormat naming config.json and the field, not a
// slice-bounds panic in frequentTokens.
func TestQuantizeHeadVocabBeyondVocabulary(t *testing.T) {
	for _, vocabSize := range []any{nil, 16} {
		th := tinyHydra{K: 2, L: 1, H: 4, V: 16, r: 4, own: true, headVocab: 6, dtype: "f32"}
		dir := th.write(t)
		p := filepath.Join(dir, ConfigFile)
		b, _ := os.ReadFile(p)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if vocabSize == nil {
			delete(m, "vocab_size")
		}
		m["specgate"].(map[string]any)["head_vocab"] = 20
		b, _ = json.Marshal(m)
		os.WriteFile(p, b, 0o644)
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("vocab_size %v: panic: %v", vocabSize, r)
				}
			}()
			_, err := QuantizeInt8(dir, t.TempDir(), 5)
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "specgate.head_vocab 20") {
				t.Fatalf("vocab_size %v: err = %v, want ErrFormat naming %s and specgate.head_vocab 20", vocabSize, err, p)
			}
		}()
		// frequentTokens itself refuses a limit beyond the vocabulary
		raw, _ := os.ReadFile(p)
		cfg, err := ParseConfig(raw, p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := frequentTokens(dir, cfg, 16, 20); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "specgate.head_vocab") {
			t.Fatalf("frequentTokens(limit 20 of 16): err = %v", err)
		}
	}
}
