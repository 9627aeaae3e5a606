// Package modeltest holds small model configurations shared by the tests of
// the engine and of its CPU backend (tests only).
package modeltest

import "github.com/specgate/specgate/engine/model"

// Configs are small architectures covering GQA, MQA + tied embeddings,
// both rope scalings, and Qwen2's QKV biases.
func Configs() map[string]model.Config {
	base := model.Config{HiddenSize: 48, IntermediateSize: 80, NumLayers: 2, NumHeads: 6, NumKVHeads: 2, HeadDim: 8,
		RMSNormEps: 1e-5, RopeTheta: 10000, RopeScaling: model.RopeScaling{Type: model.RopeDefault}, MaxPositions: 256,
		VocabSize: 61, BOS: 1, EOS: []int32{2}}
	gqa := base
	mqa := base
	mqa.NumKVHeads = 1
	mqa.TieWordEmbeddings = true
	mqa.HeadDim = 16
	lin := base
	lin.RopeScaling = model.RopeScaling{Type: model.RopeLinear, Factor: 4}
	l3 := base
	l3.RopeTheta = 500000
	l3.RopeScaling = model.RopeScaling{Type: model.RopeLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 32}
	qw := base
	qw.Arch, qw.QKVBias = "Qwen2ForCausalLM", true
	return map[string]model.Config{"gqa": gqa, "mqa-tied": mqa, "linear": lin, "llama3": l3, "qwen2-bias": qw}
}
