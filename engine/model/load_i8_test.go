package model

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specgate/specgate/safetensors"
)

// i8Model writes a small Llama checkpoint whose projections are int8
// (QuantizeI8) into a temp dir and returns it with its config and weights.
func i8Model(t testing.TB) (string, Config, *Weights) {
	t.Helper()
	c := i8Config()
	w := RandomWeights(c, 5)
	for _, s := range Tensors(c) {
		if s.Matrix {
			*s.Field(w) = s.Field(w).To(I8)
		}
	}
	dir := t.TempDir()
	if err := Save(dir, c, w); err != nil {
		t.Fatal(err)
	}
	return dir, c, w
}

func i8Config() Config {
	return Config{HiddenSize: 32, IntermediateSize: 48, NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 8,
		RMSNormEps: 1e-5, RopeTheta: 10000, RopeScaling: RopeScaling{Type: RopeDefault}, MaxPositions: 64,
		VocabSize: 40, BOS: 1, EOS: []int32{2}}
}

// The int8 checkpoint round trip keeps every int8 value and scale bit for
// bit, and the file holds exactly the I8 tensors and their F32 scales
// (names, dtypes, shapes checked against the safetensors header).
func TestSaveLoadInt8(t *testing.T) {
	dir, c, w := i8Model(t)
	f, err := safetensors.Open(filepath.Join(dir, safetensors.SingleFileName))
	if err != nil {
		t.Fatal(err)
	}
	q, ok1 := f.Tensors["model.layers.1.mlp.down_proj.weight"]
	s, ok2 := f.Tensors["model.layers.1.mlp.down_proj.weight_scale"]
	n, ok3 := f.Tensors["model.layers.1.input_layernorm.weight"]
	f.Close()
	if !ok1 || !ok2 || !ok3 || q.DType != safetensors.I8 || s.DType != safetensors.F32 || n.DType != safetensors.F32 ||
		len(q.Shape) != 2 || q.Shape[0] != 32 || q.Shape[1] != 48 || len(s.Shape) != 1 || s.Shape[0] != 32 {
		t.Fatalf("header: down_proj %+v scale %+v norm %+v", q, s, n)
	}
	w2, err := LoadWeights(dir, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range Tensors(c) {
		a, b := sp.Field(w), sp.Field(w2)
		if a.DType != b.DType {
			t.Fatalf("%s: dtype %v after load, saved %v", sp.Name, b.DType, a.DType)
		}
		for i := range a.I8 {
			if a.I8[i] != b.I8[i] {
				t.Fatalf("%s: q[%d] %d, saved %d", sp.Name, i, b.I8[i], a.I8[i])
			}
		}
		for i := range a.Scales {
			if math.Float32bits(a.Scales[i]) != math.Float32bits(b.Scales[i]) {
				t.Fatalf("%s: scale[%d] %v, saved %v", sp.Name, i, b.Scales[i], a.Scales[i])
			}
		}
	}
	if err := Check(c, w2); err != nil {
		t.Fatal(err)
	}
}

// rewrite loads dir's safetensors file, lets edit change its tensors and
// writes it back.
func rewrite(t *testing.T, dir string, edit func(ts map[string]*safetensors.Tensor) []string) {
	t.Helper()
	path := filepath.Join(dir, safetensors.SingleFileName)
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ts := map[string]*safetensors.Tensor{}
	var names []string
	for name, info := range f.Tensors {
		raw, err := f.ReadRaw(name)
		if err != nil {
			t.Fatal(err)
		}
		ts[name] = &safetensors.Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: raw}
		names = append(names, name)
	}
	f.Close()
	drop := edit(ts)
	var out []safetensors.Tensor
	for _, n := range names {
		if v, ok := ts[n]; ok && !containsStr(drop, n) {
			out = append(out, *v)
		}
	}
	for n, v := range ts {
		if !containsStr(names, n) {
			out = append(out, *v)
		}
	}
	if err := safetensors.Write(path, out, nil); err != nil {
		t.Fatal(err)
	}
}

func containsStr(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// Malformed int8 checkpoints fail with ErrBadWeights and an error that
// names the file and the tensor.
func TestLoadInt8Malformed(t *testing.T) {
	const wq = "model.layers.0.self_attn.q_proj.weight"
	f32 := func(v ...float32) []byte { return safetensors.EncodeF32(v) }
	cases := []struct {
		name string
		edit func(ts map[string]*safetensors.Tensor) []string
		want string // in the error besides the file
	}{
		{"scale missing", func(ts map[string]*safetensors.Tensor) []string { return []string{wq + "_scale"} }, wq},
		{"scale dtype", func(ts map[string]*safetensors.Tensor) []string {
			s := ts[wq+"_scale"]
			s.DType, s.Data = safetensors.F16, s.Data[:len(s.Data)/2]
			return nil
		}, wq + "_scale"},
		{"scale shape", func(ts map[string]*safetensors.Tensor) []string {
			s := ts[wq+"_scale"]
			s.Shape, s.Data = []int64{31}, s.Data[:31*4]
			return nil
		}, wq + "_scale"},
		{"scale negative", func(ts map[string]*safetensors.Tensor) []string {
			copy(ts[wq+"_scale"].Data[8:], f32(-1))
			return nil
		}, "row 2"},
		{"scale NaN", func(ts map[string]*safetensors.Tensor) []string {
			copy(ts[wq+"_scale"].Data[0:], f32(float32(math.NaN())))
			return nil
		}, "row 0"},
		{"scale Inf", func(ts map[string]*safetensors.Tensor) []string {
			copy(ts[wq+"_scale"].Data[4:], f32(float32(math.Inf(1))))
			return nil
		}, "row 1"},
		{"int8 shape", func(ts map[string]*safetensors.Tensor) []string {
			q := ts[wq]
			q.Shape = []int64{16, 64}
			return nil
		}, wq},
		{"int8 norm", func(ts map[string]*safetensors.Tensor) []string {
			n := ts["model.norm.weight"]
			n.DType, n.Data = safetensors.I8, n.Data[:len(n.Data)/4]
			return nil
		}, "model.norm.weight"},
		{"scale beside a float weight", func(ts map[string]*safetensors.Tensor) []string {
			ts["model.layers.1.mlp.up_proj.weight_scale"] = &safetensors.Tensor{Name: "model.layers.1.mlp.up_proj.weight_scale",
				DType: safetensors.F32, Shape: []int64{48}, Data: make([]byte, 48*4)}
			u := ts["model.layers.1.mlp.up_proj.weight"] // back to float32
			vals := make([]float32, len(u.Data))
			for i, b := range u.Data {
				vals[i] = float32(int8(b))
			}
			u.DType, u.Data = safetensors.F32, safetensors.EncodeF32(vals)
			return nil
		}, "model.layers.1.mlp.up_proj.weight"},
		{"scale of a norm", func(ts map[string]*safetensors.Tensor) []string {
			ts["model.norm.weight_scale"] = &safetensors.Tensor{Name: "model.norm.weight_scale", DType: safetensors.F32, Shape: []int64{32}, Data: make([]byte, 128)}
			return nil
		}, "model.norm.weight_scale"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, c, _ := i8Model(t)
			rewrite(t, dir, tc.edit)
			_, err := LoadWeights(dir, c)
			if !errors.Is(err, ErrBadWeights) {
				t.Fatalf("got %v, want ErrBadWeights", err)
			}
			if !strings.Contains(err.Error(), safetensors.SingleFileName) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name the file and %q", err, tc.want)
			}
		})
	}
}

// FuzzLoadInt8: arbitrary bytes in place of an int8 checkpoint's
// safetensors file never panic; what loads passes Check.
func FuzzLoadInt8(f *testing.F) {
	dir, _, _ := i8Model(f)
	valid, err := os.ReadFile(filepath.Join(dir, safetensors.SingleFileName))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add(valid[:len(valid)/2])
	hdr := binary.LittleEndian.Uint64(valid)
	if hdr < uint64(len(valid)) {
		f.Add(bytes.Replace(valid, []byte(`"I8"`), []byte(`"U8"`), 1))
		f.Add(bytes.Replace(valid, []byte(`_scale"`), []byte(`_scalf"`), 1))
	}
	c := i8Config()
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, safetensors.SingleFileName), data, 0o644); err != nil {
			t.Fatal(err)
		}
		w, err := LoadWeights(dir, c)
		if err != nil {
			if !errors.Is(err, ErrBadWeights) {
				t.Fatalf("error %v does not wrap ErrBadWeights", err)
			}
			return
		}
		if err := Check(c, w); err != nil {
			t.Fatalf("loaded weights fail Check: %v", err)
		}
	})
}
