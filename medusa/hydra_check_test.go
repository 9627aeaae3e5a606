package medusa

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/safetensors"
)

// TestHydraCheckAgreesWithLoad: Check (what `specgate config check` runs)
// refuses every incomplete Hydra directory that Load refuses, naming the
// same tensor: a missing block, a missing bias, one head without its
// projection, one head without its res_connection, an I8 weight without its
// scale (review H2), an I8 bias with or without a scale (review H5: the
// error said to add a scale, which then was "not a parameter").
func TestHydraCheckAgreesWithLoad(t *testing.T) {
	target := tinyTarget(t, 4)
	ref := tinyHydra{K: 2, L: 2, H: 4, V: 16, r: 4, res: true, own: true, projBias: true, dtype: "f32"}
	refI8 := ref
	refI8.dtype = "i8"
	for _, c := range []struct {
		name string
		th   tinyHydra
		edit func([]safetensors.Tensor) []safetensors.Tensor
		want string // the tensor both errors name
		also string // and a phrase of both
	}{
		{"block", ref, dropTensor("hydra_mlp.1.1.linear.weight"), `"hydra_mlp.1.1.linear.weight"`, "missing"},
		{"bias", ref, dropTensor("hydra_mlp.1.0.linear.bias"), `"hydra_mlp.1.0.linear.bias"`, "missing"},
		{"projection", ref, dropTensor("hydra_lm_head.1.weight"), `"hydra_lm_head.1.weight"`, "1 of 2 heads have a vocabulary projection"},
		{"res_connection", ref, dropTensor("hydra_mlp.1.0.res_connection.weight"), `"hydra_mlp.1.0.res_connection.weight"`, "1 of 2 heads have a res_connection"},
		{"scale", refI8, dropTensor("hydra_mlp.1.1.linear.weight_scale"), `"hydra_mlp.1.1.linear.weight"`, "per-row scale"},
		{"int8 bias", refI8, int8Bias("hydra_mlp.0.0.linear.bias", false), `"hydra_mlp.0.0.linear.bias"`, "I8 is for 2-D weights"},
		{"int8 bias with scale", refI8, int8Bias("hydra_mlp.0.0.linear.bias", true), `"hydra_mlp.0.0.linear.bias_scale"`, "I8 is for 2-D weights"},
	} {
		t.Run(c.name, func(t *testing.T) {
			th := c.th
			dir := th.write(t)
			rewriteWeights(t, dir, c.edit)
			cerr := Check(Spec{Heads: dir}, 4, 16)
			_, lerr := Load(dir, target, LoadOptions{})
			bothRefuse(t, c.name, cerr, lerr, c.want, c.also)
		})
	}
}

// TestHydraEmbedProjWiderThanHidden: hydra_embed_proj narrows the target's
// embedding rows (r <= hidden_size); a wider one (r = 4H+1 here, a
// consistent directory otherwise) is refused by Load and Check with
// ErrFormat naming the tensor and hidden_size, before Load allocates its
// [V][r] token table (review H3: r was bounded by the file size only).
func TestHydraEmbedProjWiderThanHidden(t *testing.T) {
	target := tinyTarget(t, 4)
	for _, dtype := range []string{"f32", "i8"} {
		th := tinyHydra{K: 2, L: 1, H: 4, V: 16, r: 17, embedProj: true, dtype: dtype}
		dir := th.write(t)
		cerr := Check(Spec{Heads: dir}, 4, 16)
		_, lerr := Load(dir, target, LoadOptions{})
		bothRefuse(t, dtype, cerr, lerr, `"hydra_embed_proj.weight"`, "hidden_size 4")
	}
}

// TestSharedRowsInt8WithoutSharedRows: specgate.shared_rows_int8 quantizes
// the target's lm_head rows that Hydra heads share; where there are none
// (Medusa heads, which never read the key, or Hydra heads with their own
// projections) Load and Check refuse it with ErrFormat naming config.json
// and the key instead of ignoring it (review H7). Shared Hydra heads take
// it (TestHydraHandExample's compact-shared-int8-rows).
func TestSharedRowsInt8WithoutSharedRows(t *testing.T) {
	target := tinyTarget(t, 4)
	hydraOwn := tinyHydra{K: 2, L: 1, H: 4, V: 16, r: 4, own: true, dtype: "f32", sharedInt8: true}
	hydraDir := hydraOwn.write(t)
	medusaDir := copyDir(t, "testdata/golden/shared")
	p := filepath.Join(medusaDir, ConfigFile)
	b, _ := os.ReadFile(p)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["specgate"] = map[string]any{"shared_rows_int8": true}
	b, _ = json.Marshal(m)
	os.WriteFile(p, b, 0o644)
	base := goldenBase(t)
	for _, c := range []struct {
		name, dir     string
		target        *engine.Model
		hidden, vocab int
	}{
		{"hydra own projections", hydraDir, target, 4, 16},
		{"medusa", medusaDir, base, 64, 320},
	} {
		_, lerr := Load(c.dir, c.target, LoadOptions{})
		cerr := Check(Spec{Heads: c.dir}, c.hidden, c.vocab)
		bothRefuse(t, c.name, cerr, lerr, filepath.Join(c.dir, ConfigFile), "specgate.shared_rows_int8")
	}
}

// int8Bias stores the F32/F16 vector name as I8 (one byte per value), with
// a per-row scale tensor "<name>_scale" when withScale.
func int8Bias(name string, withScale bool) func([]safetensors.Tensor) []safetensors.Tensor {
	return func(ts []safetensors.Tensor) []safetensors.Tensor {
		for i, x := range ts {
			if x.Name == name {
				ts[i].DType, ts[i].Data = safetensors.I8, make([]byte, x.Shape[0])
				if withScale {
					ts = append(ts, safetensors.Tensor{Name: name + "_scale", DType: safetensors.F32, Shape: x.Shape, Data: make([]byte, 4*x.Shape[0])})
				}
				return ts
			}
		}
		panic("int8Bias: no tensor " + name)
	}
}

// bothRefuse fails t unless Check's error cerr and Load's error lerr on
// one directory both wrap ErrFormat and name every one of wants.
func bothRefuse(t *testing.T, what string, cerr, lerr error, wants ...string) {
	t.Helper()
	for _, e := range []struct {
		who string
		err error
	}{{"Check", cerr}, {"Load", lerr}} {
		if !errors.Is(e.err, ErrFormat) {
			t.Errorf("%s: %s: err = %v, want ErrFormat", what, e.who, e.err)
			continue
		}
		for _, w := range wants {
			if !strings.Contains(e.err.Error(), w) {
				t.Errorf("%s: %s: err %q does not name %s", what, e.who, e.err, w)
			}
		}
	}
}

// TestCheckReadsTheFrequencyFile: where Load reads the token_frequency
// file (FR-Spec projections of head_vocab rows, a vocabulary limit below
// the projection's rows), Check reads it too: a missing file or one of
// another vocabulary fails both (config check said OK, serve failed).
func TestCheckReadsTheFrequencyFile(t *testing.T) {
	target := tinyTarget(t, 4)
	for _, c := range []struct {
		name  string
		th    tinyHydra
		limit int
	}{
		{"head_vocab rows", tinyHydra{K: 2, L: 1, H: 4, V: 16, r: 4, own: true, headVocab: 6, dtype: "f32"}, 0},
		{"vocabulary limit", tinyHydra{K: 2, L: 1, H: 4, V: 16, r: 4, own: true, dtype: "f32"}, 5},
		{"shared head_vocab rows", tinyHydra{K: 2, L: 1, H: 4, V: 16, r: 2, embedProj: true, headVocab: 6, dtype: "f32"}, 0},
	} {
		for _, bad := range []struct {
			name string
			body []byte // nil: no file
			want string
		}{
			{"missing", nil, "head_token_frequency.json"},
			{"other vocabulary", []byte(`{"counts": [3, 1, 2]}`), "3 entries"},
		} {
			th := c.th
			dir := th.write(t)
			p := filepath.Join(dir, "head_token_frequency.json")
			os.Remove(p)
			if bad.body != nil {
				os.WriteFile(p, bad.body, 0o644)
			}
			_, lerr := Load(dir, target, LoadOptions{VocabLimit: c.limit})
			cerr := Check(Spec{Heads: dir, VocabLimit: c.limit}, 4, 16)
			for _, e := range []struct {
				who string
				err error
			}{{"Check", cerr}, {"Load", lerr}} {
				if e.err == nil || !strings.Contains(e.err.Error(), bad.want) || !errors.Is(e.err, ErrFormat) && !errors.Is(e.err, ErrMismatch) {
					t.Errorf("%s, %s frequency file: %s: err = %v, want an error naming %s", c.name, bad.name, e.who, e.err, bad.want)
				}
			}
		}
	}
}
