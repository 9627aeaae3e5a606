package model

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Layer is one decoder layer's weights. Matrices are [out][in] as in the HF
// checkpoint (nn.Linear.weight).
type Layer struct {
	AttnNorm Tensor // [Hidden]            input_layernorm.weight
	Wq       Tensor // [NumHeads*HeadDim][Hidden]
	Wk       Tensor // [NumKVHeads*HeadDim][Hidden]
	Wv       Tensor // [NumKVHeads*HeadDim][Hidden]
	Wo       Tensor // [Hidden][NumHeads*HeadDim]
	MLPNorm  Tensor // [Hidden]            post_attention_layernorm.weight
	WGate    Tensor // [Intermediate][Hidden]
	WUp      Tensor // [Intermediate][Hidden]
	WDown    Tensor // [Hidden][Intermediate]

	// Bq, Bk, Bv are the q/k/v projection biases ([QDim], [KVDim], [KVDim])
	// of architectures with Config.QKVBias (Qwen2); zero Tensors otherwise.
	Bq, Bk, Bv Tensor
}

// Weights are a model's typed weights, in the dtype they were stored in
// (or quantized to). With tied embeddings LMHead and Embed are the same
// Tensor. Weights are read-only once a backend uses them.
type Weights struct {
	Embed  Tensor // [Vocab][Hidden]
	Layers []Layer
	Norm   Tensor // [Hidden]
	LMHead Tensor // [Vocab][Hidden]
}

// TensorSpec names one tensor of a model as its HF checkpoint does, with
// its shape and where it lives in Weights.
type TensorSpec struct {
	Name  string
	Shape []int
	Layer int // -1 for model-level tensors
	Field func(*Weights) *Tensor
	// Matrix marks the [out][in] projections (the weights a weight-only
	// quantization converts); norms, biases and embeddings are not.
	Matrix bool
}

// Tensors lists every tensor cfg's architecture stores, in checkpoint
// order (lm_head only when embeddings are untied).
func Tensors(cfg Config) []TensorSpec {
	H, V, I := cfg.HiddenSize, cfg.VocabSize, cfg.IntermediateSize
	q, kv := cfg.QDim(), cfg.KVDim()
	out := []TensorSpec{{Name: "model.embed_tokens.weight", Shape: []int{V, H}, Layer: -1, Field: func(w *Weights) *Tensor { return &w.Embed }}}
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := func(f func(*Layer) *Tensor) func(*Weights) *Tensor {
			return func(w *Weights) *Tensor { return f(&w.Layers[i]) }
		}
		out = append(out,
			TensorSpec{p + "input_layernorm.weight", []int{H}, i, l(func(l *Layer) *Tensor { return &l.AttnNorm }), false},
			TensorSpec{p + "self_attn.q_proj.weight", []int{q, H}, i, l(func(l *Layer) *Tensor { return &l.Wq }), true},
			TensorSpec{p + "self_attn.k_proj.weight", []int{kv, H}, i, l(func(l *Layer) *Tensor { return &l.Wk }), true},
			TensorSpec{p + "self_attn.v_proj.weight", []int{kv, H}, i, l(func(l *Layer) *Tensor { return &l.Wv }), true},
		)
		if cfg.QKVBias {
			out = append(out,
				TensorSpec{p + "self_attn.q_proj.bias", []int{q}, i, l(func(l *Layer) *Tensor { return &l.Bq }), false},
				TensorSpec{p + "self_attn.k_proj.bias", []int{kv}, i, l(func(l *Layer) *Tensor { return &l.Bk }), false},
				TensorSpec{p + "self_attn.v_proj.bias", []int{kv}, i, l(func(l *Layer) *Tensor { return &l.Bv }), false},
			)
		}
		out = append(out,
			TensorSpec{p + "self_attn.o_proj.weight", []int{H, q}, i, l(func(l *Layer) *Tensor { return &l.Wo }), true},
			TensorSpec{p + "post_attention_layernorm.weight", []int{H}, i, l(func(l *Layer) *Tensor { return &l.MLPNorm }), false},
			TensorSpec{p + "mlp.gate_proj.weight", []int{I, H}, i, l(func(l *Layer) *Tensor { return &l.WGate }), true},
			TensorSpec{p + "mlp.up_proj.weight", []int{I, H}, i, l(func(l *Layer) *Tensor { return &l.WUp }), true},
			TensorSpec{p + "mlp.down_proj.weight", []int{H, I}, i, l(func(l *Layer) *Tensor { return &l.WDown }), true},
		)
	}
	out = append(out, TensorSpec{Name: "model.norm.weight", Shape: []int{H}, Layer: -1, Field: func(w *Weights) *Tensor { return &w.Norm }})
	if !cfg.TieWordEmbeddings {
		out = append(out, TensorSpec{Name: "lm_head.weight", Shape: []int{V, H}, Layer: -1, Field: func(w *Weights) *Tensor { return &w.LMHead }, Matrix: true})
	}
	return out
}

// NewWeights returns Weights with cfg.NumLayers empty layers.
func NewWeights(cfg Config) *Weights {
	return &Weights{Layers: make([]Layer, cfg.NumLayers)}
}

// Check validates every tensor of w against cfg (shape and data length);
// errors wrap ErrBadWeights and name the tensor as the checkpoint does.
func Check(cfg Config, w *Weights) error {
	if w == nil {
		return fmt.Errorf("no weights: %w", ErrBadWeights)
	}
	if len(w.Layers) != cfg.NumLayers {
		return fmt.Errorf("model.layers: %d layers, want %d: %w", len(w.Layers), cfg.NumLayers, ErrBadWeights)
	}
	specs := Tensors(cfg)
	if cfg.TieWordEmbeddings {
		specs = append(specs, TensorSpec{Name: "lm_head.weight", Shape: []int{cfg.VocabSize, cfg.HiddenSize}, Field: func(w *Weights) *Tensor { return &w.LMHead }})
	}
	for _, s := range specs {
		t := s.Field(w)
		if t.Len() != prod(s.Shape) || t.Cols() != s.Shape[len(s.Shape)-1] {
			return fmt.Errorf("%s: shape %v, want %v: %w", s.Name, t.Shape, s.Shape, ErrBadWeights)
		}
		if err := t.Check(); err != nil {
			return fmt.Errorf("%s: %v: %w", s.Name, err, ErrBadWeights)
		}
	}
	return nil
}

func prod(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// RandomWeights draws deterministic float32 weights for cfg: matrices
// uniform with standard deviation about 1/sqrt(fan-in) (so activations stay
// O(1)), norm weights near 1, embeddings with unit scale, biases (QKVBias)
// uniform in ±0.5. The same cfg and seed give the same weights.
func RandomWeights(cfg Config, seed uint64) *Weights {
	r := rand.New(rand.NewPCG(seed, 0x5eed5eed))
	H, V, I := cfg.HiddenSize, cfg.VocabSize, cfg.IntermediateSize
	q, kv := cfg.QDim(), cfg.KVDim()
	mat := func(out, in int, scale float64) Tensor {
		a := scale * math.Sqrt(3/float64(in))
		v := make([]float32, out*in)
		for i := range v {
			v[i] = float32((2*r.Float64() - 1) * a)
		}
		return NewF32(v, out, in)
	}
	norm := func() Tensor {
		v := make([]float32, H)
		for i := range v {
			v[i] = float32(1 + 0.2*(2*r.Float64()-1))
		}
		return NewF32(v, H)
	}
	w := &Weights{Embed: mat(V, H, math.Sqrt(float64(H)))}
	for range cfg.NumLayers {
		w.Layers = append(w.Layers, Layer{
			AttnNorm: norm(), Wq: mat(q, H, 1), Wk: mat(kv, H, 1), Wv: mat(kv, H, 1), Wo: mat(H, q, 0.5),
			MLPNorm: norm(), WGate: mat(I, H, 1), WUp: mat(I, H, 1), WDown: mat(H, I, 0.5),
		})
	}
	w.Norm = norm()
	if cfg.TieWordEmbeddings {
		w.LMHead = w.Embed
	} else {
		w.LMHead = mat(V, H, 2)
	}
	if cfg.QKVBias {
		// Drawn after every other weight, so that a config without biases
		// gets the same weights as before biases existed.
		bias := func(n int) Tensor {
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(0.5 * (2*r.Float64() - 1))
			}
			return NewF32(v, n)
		}
		for i := range w.Layers {
			w.Layers[i].Bq, w.Layers[i].Bk, w.Layers[i].Bv = bias(q), bias(kv), bias(kv)
		}
	}
	return w
}
