package model

import "encoding/json"

// ConfigJSON renders cfg as a HF config.json of its architecture
// (LlamaForCausalLM when Arch is empty); torch_dtype is c.DType, float32
// when empty.
func (c Config) ConfigJSON() ([]byte, error) {
	arch, ok := Lookup(c.Arch)
	if !ok {
		arch = Llama
	}
	m := map[string]any{
		"architectures":           []string{arch.Name},
		"model_type":              arch.ModelType,
		"hidden_size":             c.HiddenSize,
		"intermediate_size":       c.IntermediateSize,
		"num_hidden_layers":       c.NumLayers,
		"num_attention_heads":     c.NumHeads,
		"num_key_value_heads":     c.NumKVHeads,
		"head_dim":                c.HeadDim,
		"rms_norm_eps":            c.RMSNormEps,
		"rope_theta":              c.RopeTheta,
		"max_position_embeddings": c.MaxPositions,
		"tie_word_embeddings":     c.TieWordEmbeddings,
		"vocab_size":              c.VocabSize,
		"hidden_act":              "silu",
		"attention_bias":          false,
		"mlp_bias":                false,
		"torch_dtype":             "float32", // c.DType below when set
	}
	if c.DType != "" {
		m["torch_dtype"] = c.DType
	}
	if arch != Llama { // Llama's keys; Qwen2 has its biases built in
		delete(m, "attention_bias")
		delete(m, "mlp_bias")
	}
	switch c.RopeScaling.Type {
	case RopeLinear:
		m["rope_scaling"] = map[string]any{"rope_type": "linear", "factor": c.RopeScaling.Factor}
	case RopeLlama3:
		r := c.RopeScaling
		m["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": r.Factor, "low_freq_factor": r.LowFreqFactor,
			"high_freq_factor": r.HighFreqFactor, "original_max_position_embeddings": r.OriginalMaxPositions}
	}
	if c.BOS >= 0 {
		m["bos_token_id"] = c.BOS
	}
	if len(c.EOS) == 1 {
		m["eos_token_id"] = c.EOS[0]
	} else if len(c.EOS) > 1 {
		m["eos_token_id"] = c.EOS
	}
	return json.MarshalIndent(m, "", "  ")
}
