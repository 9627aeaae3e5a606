package model

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestTensorDTypes(t *testing.T) {
	// 1.5, -2, 0.099975586 (fp16 nearest of 0.1), 65504 (fp16 max)
	f := NewF32([]float32{1.5, -2, 0.1, 65504, 3, -0.25}, 2, 3)
	if f.Rows() != 2 || f.Cols() != 3 || f.Len() != 6 || f.Bytes() != 24 {
		t.Fatalf("rows %d cols %d len %d bytes %d", f.Rows(), f.Cols(), f.Len(), f.Bytes())
	}
	h := f.To(F16)
	if h.DType != F16 || h.Half[0] != 0x3e00 || h.Half[1] != 0xc000 || h.Half[2] != 0x2e66 || h.Half[3] != 0x7bff || h.Bytes() != 12 {
		t.Fatalf("F16 bits %x", h.Half)
	}
	if got := h.At(2); got != 0.099975586 {
		t.Fatalf("F16 At(2) = %v", got)
	}
	b := f.To(BF16)
	if b.Half[0] != 0x3fc0 || b.Half[1] != 0xc000 || b.Half[2] != 0x3dcd {
		t.Fatalf("BF16 bits %x", b.Half)
	}
	row := make([]float32, 3)
	b.RowInto(row, 1)
	if row[0] != 65536 || row[1] != 3 || row[2] != -0.25 { // 65504 rounds to 65536 in bfloat16
		t.Fatalf("BF16 row 1 = %v", row)
	}
	if err := h.Check(); err != nil {
		t.Fatal(err)
	}
	if err := (Tensor{DType: F16, Shape: []int{2, 3}, Half: make([]uint16, 5)}).Check(); err == nil {
		t.Fatal("short F16 data accepted")
	}
}

func TestQuantizeI8PerRow(t *testing.T) {
	w := NewF32([]float32{
		1.27, -0.635, 0.01, 0, // max 1.27: scale 0.01
		0, 0, 0, 0, // zero row: scale 0
		-254, 127, 63.5, 0.4, // max 254: scale 2
	}, 3, 4)
	q := QuantizeI8(w)
	want := []int8{127, -64, 1, 0, 0, 0, 0, 0, -127, 64, 32, 0}
	for i := range want {
		if q.I8[i] != want[i] {
			t.Fatalf("I8 = %v, want %v", q.I8, want)
		}
	}
	if math.Abs(float64(q.Scales[0])-0.01) > 1e-9 || q.Scales[1] != 0 || q.Scales[2] != 2 {
		t.Fatalf("scales %v", q.Scales)
	}
	if q.At(8) != -254 || q.Bytes() != 12+12 {
		t.Fatalf("At(8) %v bytes %d", q.At(8), q.Bytes())
	}
	if err := q.Check(); err != nil {
		t.Fatal(err)
	}
	q.Scales = q.Scales[:2]
	if err := q.Check(); err == nil {
		t.Fatal("I8 with 2 scales for 3 rows accepted")
	}
}

const qwen2Config = `{"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2","hidden_size":64,"intermediate_size":96,
"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"rms_norm_eps":1e-6,"rope_theta":1000000.0,
"max_position_embeddings":512,"tie_word_embeddings":false,"vocab_size":120,"use_sliding_window":false,"sliding_window":4096,
"max_window_layers":2,"hidden_act":"silu","torch_dtype":"float32"}`

func TestArchRegistry(t *testing.T) {
	if got := strings.Join(Archs(), ","); got != "LlamaForCausalLM,Qwen2ForCausalLM" {
		t.Fatalf("Archs() = %s", got)
	}
	c, err := ParseConfig([]byte(qwen2Config), "config.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.Arch != "Qwen2ForCausalLM" || !c.QKVBias || c.HeadDim != 16 || c.RopeTheta != 1e6 {
		t.Fatalf("parsed %+v", c)
	}
	names := map[string][]int{}
	for _, s := range Tensors(c) {
		names[s.Name] = s.Shape
	}
	if s := names["model.layers.1.self_attn.k_proj.bias"]; len(s) != 1 || s[0] != 32 {
		t.Fatalf("k_proj.bias shape %v", s)
	}
	if _, ok := names["model.layers.0.self_attn.o_proj.bias"]; ok {
		t.Fatal("Qwen2 has no o_proj bias")
	}
	if len(names) != 2*12+3 {
		t.Fatalf("%d tensors, want %d", len(names), 2*12+3)
	}
	for _, bad := range []struct{ edit, want, field string }{
		{`"use_sliding_window":false`, `"use_sliding_window":true`, "use_sliding_window"},
		{`"model_type":"qwen2"`, `"model_type":"llama"`, "model_type"},
		{`["Qwen2ForCausalLM"]`, `["Qwen3ForCausalLM"]`, "architectures"},
	} {
		_, err := ParseConfig([]byte(strings.Replace(qwen2Config, bad.edit, bad.want, 1)), "config.json")
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "config.json: "+bad.field) {
			t.Errorf("%s: err %v, want ErrBadConfig naming %s", bad.want, err, bad.field)
		}
	}
	// model_type alone picks the architecture.
	c2, err := ParseConfig([]byte(strings.Replace(qwen2Config, `"architectures":["Qwen2ForCausalLM"],`, ``, 1)), "config.json")
	if err != nil || c2.Arch != "Qwen2ForCausalLM" {
		t.Fatalf("model_type only: %+v %v", c2, err)
	}
	// A round trip through ConfigJSON keeps the architecture.
	js, err := c.ConfigJSON()
	if err != nil {
		t.Fatal(err)
	}
	c3, err := ParseConfig(js, "config.json")
	if err != nil || c3.Arch != c.Arch || !c3.QKVBias {
		t.Fatalf("round trip: %+v %v", c3, err)
	}
}

func TestSaveLoadTyped(t *testing.T) {
	c, err := ParseConfig([]byte(qwen2Config), "config.json")
	if err != nil {
		t.Fatal(err)
	}
	w := RandomWeights(c, 3)
	w.Layers[1].WUp = w.Layers[1].WUp.To(F16)
	w.Layers[0].Bk = w.Layers[0].Bk.To(BF16)
	if err := Check(c, w); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := Save(dir, c, w); err != nil {
		t.Fatal(err)
	}
	c2, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := LoadWeights(dir, c2)
	if err != nil {
		t.Fatal(err)
	}
	if c2.DType != "float32" {
		t.Fatalf("torch_dtype %q, want float32 (layer 0's q_proj)", c2.DType)
	}
	if w2.Layers[1].WUp.DType != F16 || w2.Layers[0].Bk.DType != BF16 || w2.Layers[0].Wq.DType != F32 {
		t.Fatalf("dtypes after load: %v %v %v", w2.Layers[1].WUp.DType, w2.Layers[0].Bk.DType, w2.Layers[0].Wq.DType)
	}
	for i, v := range w.Layers[1].WUp.Half {
		if w2.Layers[1].WUp.Half[i] != v {
			t.Fatalf("up_proj element %d: %x, saved %x", i, w2.Layers[1].WUp.Half[i], v)
		}
	}
	if w2.Layers[1].Bv.F32[5] != w.Layers[1].Bv.F32[5] {
		t.Fatal("bias changed in the round trip")
	}
	w.Layers[0].Wq = w.Layers[0].Wq.To(F16)
	half := t.TempDir()
	if err := Save(half, c, w); err != nil {
		t.Fatal(err)
	}
	if c3, err := LoadConfig(half); err != nil || c3.DType != "float16" {
		t.Fatalf("F16 q_proj saved with torch_dtype %q (%v), want float16", c3.DType, err)
	}
	w2.Layers[1].Bq = Tensor{}
	if err := Check(c2, w2); !errors.Is(err, ErrBadWeights) || !strings.Contains(err.Error(), "model.layers.1.self_attn.q_proj.bias") {
		t.Fatalf("missing bias: %v", err)
	}
}
