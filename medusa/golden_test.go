package medusa

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/safetensors"
)

// The golden files in testdata/golden were written by tools/medusa_golden.py
// with PyTorch on the GPU machine (CPU side): heads built with the Medusa
// reference implementation's module structure, random weights, saved as the
// reference saves them, and their logits on random hidden rows computed by
// the PyTorch modules in float64.

func goldenBase(t testing.TB) *engine.Model {
	t.Helper()
	m, err := engine.Load("testdata/golden/base", engine.LoadOptions{SkipTokenizer: true, KVTokens: 256})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func readGolden(t *testing.T, dir string) (hidden, logits []float32, lshape []int64) {
	t.Helper()
	f, err := safetensors.Open(filepath.Join(dir, "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hidden, _, err = f.ReadFloat32("hidden")
	if err != nil {
		t.Fatal(err)
	}
	logits, lshape, err = f.ReadFloat32("logits")
	if err != nil {
		t.Fatal(err)
	}
	return hidden, logits, lshape
}

func TestGoldenLogits(t *testing.T) {
	base := goldenBase(t)
	for _, tc := range []struct {
		dir           string
		heads, layers int
		shared        bool
	}{
		{"own", 3, 2, false},   // own projection, the repeated block, float32
		{"shared", 2, 1, true}, // base lm_head, float16, "medusa_head." prefix
	} {
		t.Run(tc.dir, func(t *testing.T) {
			dir := filepath.Join("testdata/golden", tc.dir)
			h, err := Load(dir, base, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if h.NumHeads != tc.heads || h.layers != tc.layers || h.Shared != tc.shared {
				t.Fatalf("loaded %d heads x %d layers shared=%v, want %d x %d %v", h.NumHeads, h.layers, h.Shared, tc.heads, tc.layers, tc.shared)
			}
			hidden, want, shape := readGolden(t, dir)
			rows := len(hidden) / h.Hidden
			if shape[0] != int64(tc.heads) || shape[1] != int64(rows) || shape[2] != int64(h.Vocab) {
				t.Fatalf("golden logits shape %v", shape)
			}
			got := h.Logits(hidden, rows, tc.heads, nil)
			worst := 0.0
			for i := range want {
				worst = max(worst, math.Abs(float64(got[i]-want[i])))
			}
			t.Logf("%s: max |go - torch| = %.2e over %d logits", tc.dir, worst, len(want))
			if worst > 1e-4 {
				t.Fatalf("max abs diff %.3e > 1e-4", worst)
			}
		})
	}
}

func TestGoldenShareOverride(t *testing.T) {
	// ShareLMHead on heads with their own projections uses the base lm_head:
	// the logits must equal blocks(hidden) . lm_head^T, i.e. differ from the
	// golden own-projection logits.
	base := goldenBase(t)
	h, err := Load("testdata/golden/own", base, LoadOptions{ShareLMHead: true})
	if err != nil {
		t.Fatal(err)
	}
	hidden, want, _ := readGolden(t, "testdata/golden/own")
	got := h.Logits(hidden, 1, 1, nil)
	same := true
	for i := range got {
		if got[i] != want[i] {
			same = false
		}
	}
	if same || !h.Shared {
		t.Fatal("ShareLMHead did not replace the projection")
	}
}

func TestPickleError(t *testing.T) {
	base := goldenBase(t)
	_, err := Load("testdata/golden/pt", base, LoadOptions{})
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "medusa_lm_head.pt") || !strings.Contains(err.Error(), "save_file") {
		t.Fatalf("err = %v", err)
	}
}

// copyDir copies the golden dir src into a temp dir for mutation tests.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func TestLoadErrors(t *testing.T) {
	base := goldenBase(t)
	writeCfg := func(dir, cfg string) {
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		edit  func(dir string)
		is    error
		wants []string
	}{
		{"missing heads", func(d string) { writeCfg(d, `{"medusa_num_layers": 2}`) }, ErrFormat, []string{"config.json", "medusa_num_heads: missing"}},
		{"bad json", func(d string) { writeCfg(d, `{"medusa_num_heads": 3,`) }, ErrFormat, []string{"config.json"}},
		{"heads range", func(d string) { writeCfg(d, `{"medusa_num_heads": 0, "medusa_num_layers": 2}`) }, ErrFormat, []string{"medusa_num_heads 0"}},
		{"fewer heads than file", func(d string) { writeCfg(d, `{"medusa_num_heads": 2, "medusa_num_layers": 2}`) }, ErrFormat, []string{"medusa_lm_head.safetensors", `"2.0.linear.bias"`, "medusa_num_heads"}},
		{"more heads than file", func(d string) { writeCfg(d, `{"medusa_num_heads": 4, "medusa_num_layers": 2}`) }, ErrFormat, []string{"medusa_lm_head.safetensors", "3 of 4 heads"}},
		{"fewer layers", func(d string) { writeCfg(d, `{"medusa_num_heads": 3, "medusa_num_layers": 1}`) }, ErrFormat, []string{"medusa_num_layers"}},
		{"hidden size", func(d string) { writeCfg(d, `{"medusa_num_heads": 3, "medusa_num_layers": 2, "hidden_size": 128}`) }, ErrMismatch, []string{"config.json", "hidden_size 128", "target hidden_size 64"}},
		{"vocab size", func(d string) { writeCfg(d, `{"medusa_num_heads": 3, "medusa_num_layers": 2, "vocab_size": 32000}`) }, ErrMismatch, []string{"vocab_size 32000"}},
		{"bad tree", func(d string) {
			writeCfg(d, `{"medusa_num_heads": 3, "medusa_num_layers": 2, "specgate": {"tree": [[0, 1], [0]]}}`)
		}, ErrFormat, []string{"specgate.tree", "before its parent"}},
		{"vocab limit without frequencies", nil, ErrFormat, []string{"specgate.token_frequency: missing"}},
		{"no weights", func(d string) { os.Remove(filepath.Join(d, "medusa_lm_head.safetensors")) }, ErrFormat, []string{"medusa_lm_head.safetensors"}},
		{"truncated weights", func(d string) {
			p := filepath.Join(d, "medusa_lm_head.safetensors")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)/2], 0o644)
		}, ErrFormat, []string{"medusa_lm_head.safetensors"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := copyDir(t, "testdata/golden/own")
			opts := LoadOptions{}
			if tc.edit != nil {
				tc.edit(d)
			} else {
				opts.VocabLimit = 10
			}
			_, err := Load(d, base, opts)
			if err == nil || !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err %q does not name %q", err, w)
				}
			}
		})
	}
}

func TestHiddenMismatchFromWeights(t *testing.T) {
	// heads of another model (hidden 64) against a target of hidden 48: the
	// weights' shapes name the tensor and both sizes.
	cfg := engine.Config{HiddenSize: 48, IntermediateSize: 64, NumLayers: 1, NumHeads: 4, NumKVHeads: 2, HeadDim: 12,
		VocabSize: 320, MaxPositions: 64, RMSNormEps: 1e-6, RopeTheta: 10000, TieWordEmbeddings: true}
	m := engine.NewRandomModel(cfg, 1, engine.LoadOptions{KVTokens: 64})
	defer m.Close()
	_, err := Load("testdata/golden/own", m, LoadOptions{})
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), `"0.0.linear.weight"`) || !strings.Contains(err.Error(), "hidden_size 48") {
		t.Fatalf("err = %v", err)
	}
}

// TestGoldenFRSpec: heads whose own projections hold only the head_vocab
// most frequent tokens (FR-Spec, what tools/train/medusa.py's f<L> variants
// ship). The golden's "ids" (the token of every projection row) were picked
// by tools/medusa_golden.py from the same token_frequency.json, on its own.
func TestGoldenFRSpec(t *testing.T) { checkFRSpecGolden(t, "testdata/golden/frspec") }

// TestGoldenInt8: FR-Spec heads whose 2-D weights PyTorch quantized to I8
// with per-row scales (tools/medusa_golden.py int8; one all-zero row with
// scale 0); the golden logits are the dequantized heads' in float64.
func TestGoldenInt8(t *testing.T) { checkFRSpecGolden(t, "testdata/golden/int8") }

func checkFRSpecGolden(t *testing.T, dir string) {
	base := goldenBase(t)
	hidden, want, shape := readGolden(t, dir)
	f, err := safetensors.Open(filepath.Join(dir, "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	idsF, _, err := f.ReadFloat32("ids")
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	K, rows, N := int(shape[0]), int(shape[1]), int(shape[2])
	if err := Check(Spec{Heads: dir}, 64, 320); err != nil {
		t.Fatalf("Check: %v", err)
	}
	for _, limit := range []int{0, N, 20} {
		h, err := Load(dir, base, LoadOptions{VocabLimit: limit})
		if err != nil {
			t.Fatal(err)
		}
		if h.Shared || h.NumHeads != K || h.layers != 2 {
			t.Fatalf("limit %d: shared=%v heads %d layers %d", limit, h.Shared, h.NumHeads, h.layers)
		}
		R := h.Rows()
		if wantR := N; limit > 0 && limit < N {
			wantR = limit
			if R != wantR {
				t.Fatalf("limit %d: %d rows", limit, R)
			}
		} else if R != wantR {
			t.Fatalf("limit %d: %d rows, want %d", limit, R, wantR)
		}
		// golden column of each token id
		col := map[int32]int{}
		for c, v := range idsF {
			col[int32(v)] = c
		}
		got := h.Logits(hidden, rows, K, nil)
		worst := 0.0
		for r := range R {
			id := h.TokenOf(r)
			c, ok := col[id]
			if !ok {
				t.Fatalf("limit %d: row %d is token %d, not one of the golden's %d rows", limit, r, id, N)
			}
			if limit == 0 && int32(idsF[r]) != id {
				t.Fatalf("row %d is token %d, golden %d", r, id, int32(idsF[r]))
			}
			for k := range K {
				for i := range rows {
					worst = max(worst, math.Abs(float64(got[(k*rows+i)*R+r]-want[(k*rows+i)*N+c])))
				}
			}
		}
		t.Logf("vocab limit %d: %d rows, max |go - torch| = %.2e", limit, R, worst)
		if worst > 1e-4 {
			t.Fatalf("limit %d: max abs diff %.3e > 1e-4", limit, worst)
		}
	}
}

func TestFRSpecErrors(t *testing.T) {
	base := goldenBase(t)
	edit := func(d string, from, to string) {
		p := filepath.Join(d, "config.json")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.Replace(string(b), from, to, 1)
		if s == string(b) {
			t.Fatalf("config.json has no %q", from)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name     string
		from, to string
		is       error
		wants    []string
	}{
		{"rows differ", `"head_vocab": 48`, `"head_vocab": 50`, ErrMismatch, []string{`"0.2.weight"`, "[50 64]"}},
		{"no frequencies", `"token_frequency": "token_frequency.json",`, ``, ErrFormat, []string{"specgate.head_vocab 48 needs specgate.token_frequency"}},
		{"more than vocab", `"head_vocab": 48`, `"head_vocab": 400`, ErrMismatch, []string{"specgate.head_vocab 400", "vocab_size 320"}},
		{"negative", `"head_vocab": 48`, `"head_vocab": -1`, ErrFormat, []string{"specgate.head_vocab -1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := copyDir(t, "testdata/golden/frspec")
			edit(d, tc.from, tc.to)
			_, err := Load(d, base, LoadOptions{})
			if err == nil || !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err %q does not name %q", err, w)
				}
			}
		})
	}
	// head_vocab on heads without projections
	d := copyDir(t, "testdata/golden/shared")
	if err := os.WriteFile(filepath.Join(d, "token_frequency.json"), []byte(`{"counts": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "config.json"), []byte(`{"medusa_num_heads": 2, "medusa_num_layers": 1, "specgate": {"token_frequency": "token_frequency.json", "head_vocab": 10}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(d, base, LoadOptions{}); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "no vocabulary projections") {
		t.Fatalf("err = %v", err)
	}
}
