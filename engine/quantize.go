package engine

import (
	"fmt"

	"github.com/specgate/specgate/engine/model"
)

// Int8 weight-only quantization (issue #15 point 5): every projection
// ([out][in] matrix: q/k/v/o, gate/up/down, an untied LM head) is stored as
// int8 with one float32 scale per output row (model.QuantizeI8);
// embeddings and norms keep their dtype. Activations and accumulation stay
// float32 on every backend; the scale multiplies each row's dot product
// once. With tied embeddings the table keeps its dtype (one row per token
// is gathered from it) and the backends project with an int8 copy of it.

// QuantInt8 names int8 weight-only quantization (config `quantize: int8`,
// `--quantize int8`).
const QuantInt8 = "int8"

// ErrQuantize: an unknown quantization name.
var ErrQuantize = fmt.Errorf("unknown quantization (want int8 or none): %w", ErrBadConfig)

// CheckQuantize validates a quantization name: "" or "none" (weights as
// stored) or QuantInt8.
func CheckQuantize(q string) error {
	switch q {
	case "", "none", QuantInt8:
		return nil
	}
	return fmt.Errorf("quantize %q: %w", q, ErrQuantize)
}

// QuantizeWeights returns w with every projection quantized to int8 (see
// above; tensors already I8 are kept), sharing the other tensors with w.
// q "" or "none" returns w itself.
func QuantizeWeights(cfg Config, w *Weights, q string) (*Weights, error) {
	if err := CheckQuantize(q); err != nil {
		return nil, err
	}
	if q != QuantInt8 {
		return w, nil
	}
	if err := model.Check(cfg, w); err != nil {
		return nil, err
	}
	out := *w
	out.Layers = append([]LayerWeights(nil), w.Layers...)
	for _, s := range model.Tensors(cfg) {
		if !s.Matrix {
			continue
		}
		t := s.Field(&out)
		*t = t.To(model.I8)
	}
	return &out, nil
}
