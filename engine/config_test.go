package engine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specgate/specgate/safetensors"
)

const goodConfig = `{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64,"intermediate_size":128,
"num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":2,"rms_norm_eps":1e-5,"rope_theta":500000,
"rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192},
"max_position_embeddings":1024,"tie_word_embeddings":true,"vocab_size":100,"bos_token_id":1,"eos_token_id":[2,3],"torch_dtype":"bfloat16"}`

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(goodConfig), "config.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.HeadDim != 8 || c.NumKVHeads != 2 || c.RopeScaling.Type != RopeLlama3 || c.RopeScaling.OriginalMaxPositions != 8192 ||
		!c.TieWordEmbeddings || c.BOS != 1 || len(c.EOS) != 2 || c.DType != "bfloat16" || c.RopeTheta != 500000 {
		t.Fatalf("parsed %+v", c)
	}
	if err := c.ApplyGenerationConfig([]byte(`{"eos_token_id":[3,4],"temperature":0.7,"top_p":0.9}`), "generation_config.json"); err != nil {
		t.Fatal(err)
	}
	if len(c.EOS) != 3 || c.EOS[2] != 4 || c.DefaultTemperature != 0.7 {
		t.Fatalf("after generation config: eos %v temp %v", c.EOS, c.DefaultTemperature)
	}
	bad := []struct{ edit, want string }{
		{`"num_key_value_heads":2`, `"num_key_value_heads":3`},
		{`"architectures":["LlamaForCausalLM"]`, `"architectures":["MistralForCausalLM"]`},
		{`"hidden_size":64`, `"hidden_size":-1`},
		{`"rope_type":"llama3"`, `"rope_type":"yarn"`},
		{`"low_freq_factor":1.0,`, ``},
		{`"eos_token_id":[2,3]`, `"eos_token_id":[2,300]`},
		{`"torch_dtype":"bfloat16"`, `"torch_dtype":"int8","attention_bias":true`},
		{`"model_type":"llama"`, `"model_type":"llama","mlp_bias":true`},
	}
	wantField := []string{"config.json: num_key_value_heads: 3 does not divide num_attention_heads 8", "architectures", "hidden_size",
		"rope_scaling.rope_type", "rope_scaling.low_freq_factor", "eos_token_id", "attention_bias", "mlp_bias"}
	for i, b := range bad {
		_, err := ParseConfig([]byte(strings.Replace(goodConfig, b.edit, b.want, 1)), "config.json")
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), wantField[i]) {
			t.Errorf("case %d: err %v, want ErrBadConfig naming %q", i, err, wantField[i])
		}
	}
	if _, err := ParseConfig([]byte(`{"architectures":["LlamaForCausalLM"]`), "config.json"); !errors.Is(err, ErrBadConfig) {
		t.Errorf("truncated json: %v", err)
	}
	// transformers 5 form: rope_parameters holds rope_theta and the scaling.
	v5 := strings.Replace(strings.Replace(goodConfig, `"rope_theta":500000,`, ``, 1), `"rope_scaling":{"rope_type":"llama3"`,
		`"rope_parameters":{"rope_theta":250000.0,"rope_type":"llama3"`, 1)
	c5, err := ParseConfig([]byte(v5), "config.json")
	if err != nil {
		t.Fatal(err)
	}
	if c5.RopeTheta != 250000 || c5.RopeScaling.Type != RopeLlama3 || c5.RopeScaling.Factor != 8 {
		t.Fatalf("rope_parameters form: theta %v scaling %+v", c5.RopeTheta, c5.RopeScaling)
	}
	// head_dim absent and not dividing
	_, err = ParseConfig([]byte(strings.Replace(goodConfig, `"num_attention_heads":8`, `"num_attention_heads":6,"num_key_value_heads":6`, 1)), "config.json")
	if err == nil {
		t.Error("hidden_size 64 with 6 heads and no head_dim accepted")
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	cfg := testConfigs()["llama3"]
	m := NewRandomModel(cfg, 5, LoadOptions{KVTokens: 128})
	dir := t.TempDir()
	if err := m.SaveSafetensors(dir); err != nil {
		t.Fatal(err)
	}
	m2, err := Load(dir, LoadOptions{SkipTokenizer: true, KVTokens: 128})
	if err != nil {
		t.Fatal(err)
	}
	if m2.Config.RopeScaling != cfg.RopeScaling || m2.Config.NumKVHeads != cfg.NumKVHeads {
		t.Fatalf("config after round trip %+v", m2.Config)
	}
	toks := []int32{1, 2, 3, 4, 5}
	a, _ := m.NewSequence().Forward(toks, nil, nil)
	b, _ := m2.NewSequence().Forward(toks, nil, nil)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("logit %d: %v vs %v after round trip", i, a[i], b[i])
		}
	}
	// F16 weights load as F16 tensors; a misshapen tensor is named in the error.
	var ts []safetensors.Tensor
	for _, ws := range tensorShapes(cfg) {
		name, shape := ws[0].(string), ws[1].([]int64)
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = 0.5
		}
		if name == "model.layers.1.mlp.up_proj.weight" {
			shape = []int64{shape[0] + 1, shape[1]}
			v = append(v, make([]float32, shape[1])...)
		}
		ts = append(ts, safetensors.Tensor{Name: name, DType: safetensors.F16, Shape: shape, Data: safetensors.EncodeF16(v)})
	}
	bad := t.TempDir()
	cj, _ := cfg.ConfigJSON()
	os.WriteFile(filepath.Join(bad, "config.json"), cj, 0o644)
	if err := safetensors.Write(filepath.Join(bad, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad, LoadOptions{SkipTokenizer: true, KVTokens: 128})
	if !errors.Is(err, ErrBadWeights) || !strings.Contains(err.Error(), "model.layers.1.mlp.up_proj.weight") {
		t.Fatalf("misshapen tensor: %v", err)
	}
	// missing config
	if _, err := Load(t.TempDir(), LoadOptions{SkipTokenizer: true}); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Fatalf("missing config: %v", err)
	}
}

// FuzzParseConfig: any input gives a valid Config or an ErrBadConfig, never a panic.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(goodConfig))
	f.Add([]byte(`{"model_type":"llama","hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":4,"rope_scaling":{"type":"linear","factor":2}}`))
	f.Add([]byte(`{"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2","hidden_size":8,"intermediate_size":8,"num_hidden_layers":2,"num_attention_heads":2,"vocab_size":4,"use_sliding_window":false,"layer_types":["full_attention","full_attention"]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data, "config.json")
		if err != nil {
			if !errors.Is(err, ErrBadConfig) {
				t.Fatalf("error without ErrBadConfig: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseConfig accepted a config Validate rejects: %v", err)
		}
	})
}

func TestLoadRejectsUnexpectedAndMissingTensors(t *testing.T) {
	cfg := testConfigs()["mqa-tied"]
	m := NewRandomModel(cfg, 5, LoadOptions{KVTokens: 64})
	write := func(edit func([]safetensors.Tensor) []safetensors.Tensor) string {
		dir := t.TempDir()
		if err := m.SaveSafetensors(dir); err != nil {
			t.Fatal(err)
		}
		var ts []safetensors.Tensor
		for _, ws := range tensorShapes(cfg) {
			name, shape := ws[0].(string), ws[1].([]int64)
			n := int64(1)
			for _, d := range shape {
				n *= d
			}
			ts = append(ts, safetensors.Tensor{Name: name, DType: safetensors.F32, Shape: shape, Data: make([]byte, 4*n)})
		}
		if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), edit(ts), nil); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	extra := write(func(ts []safetensors.Tensor) []safetensors.Tensor {
		return append(ts, safetensors.Tensor{Name: "model.layers.7.self_attn.q_proj.weight", DType: safetensors.F32, Shape: []int64{1}, Data: make([]byte, 4)})
	})
	if _, err := Load(extra, LoadOptions{SkipTokenizer: true}); !errors.Is(err, ErrBadWeights) || !strings.Contains(err.Error(), "model.layers.7.self_attn.q_proj.weight") {
		t.Fatalf("unexpected tensor: %v", err)
	}
	missing := write(func(ts []safetensors.Tensor) []safetensors.Tensor { return ts[1:] })
	if _, err := Load(missing, LoadOptions{SkipTokenizer: true}); !errors.Is(err, ErrBadWeights) || !strings.Contains(err.Error(), "model.embed_tokens.weight") {
		t.Fatalf("missing tensor: %v", err)
	}
	intT := write(func(ts []safetensors.Tensor) []safetensors.Tensor {
		ts[0].DType = safetensors.I32
		return ts
	})
	if _, err := Load(intT, LoadOptions{SkipTokenizer: true}); !errors.Is(err, ErrBadWeights) || !strings.Contains(err.Error(), "dtype") {
		t.Fatalf("int tensor: %v", err)
	}
}
