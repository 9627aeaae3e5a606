package cuda

import (
	"errors"
	"testing"

	"github.com/specgate/specgate/engine"
)

// Unsupported quantization settings are refused with ErrBadConfig before
// any device work.
func TestQuantizeOptionErrors(t *testing.T) {
	cfg := engine.Config{HiddenSize: 128, IntermediateSize: 344, NumLayers: 1, NumHeads: 4, NumKVHeads: 2, HeadDim: 32,
		RMSNormEps: 1e-5, RopeTheta: 10000, RopeScaling: engine.RopeScaling{Type: engine.RopeDefault}, MaxPositions: 64,
		VocabSize: 50, BOS: 1, EOS: []int32{2}} // intermediate 344: not a multiple of 16
	w := engine.RandomWeights(cfg, 1)
	for _, q := range []string{"int4", "INT8", "fp8"} {
		if _, err := New(cfg, w, Options{Quantize: q}); !errors.Is(err, engine.ErrBadConfig) {
			t.Errorf("Quantize %q: got %v, want ErrBadConfig", q, err)
		}
	}
	if _, err := New(cfg, w, Options{Quantize: engine.QuantInt8}); !errors.Is(err, engine.ErrBadConfig) {
		t.Errorf("int8 with intermediate 344: got %v, want ErrBadConfig", err)
	}
}
