package cuda

import (
	"errors"
	"strings"
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
	for _, q := range []string{"INT8", "Int4", "fp8"} {
		if _, err := New(cfg, w, Options{Quantize: q}); !errors.Is(err, engine.ErrBadConfig) {
			t.Errorf("Quantize %q: got %v, want ErrBadConfig", q, err)
		}
	}
	if _, err := New(cfg, w, Options{Quantize: engine.QuantInt8}); !errors.Is(err, engine.ErrBadConfig) {
		t.Errorf("int8 with intermediate 344: got %v, want ErrBadConfig", err)
	}
	// int4: groups of 32 columns, so 344 (a multiple of 8, not of 32) is
	// refused naming the sizes; float weights only
	if _, err := New(cfg, w, Options{Quantize: QuantInt4}); !errors.Is(err, engine.ErrBadConfig) ||
		!strings.Contains(err.Error(), "intermediate 344") || !strings.Contains(err.Error(), "multiples of 32") {
		t.Errorf("int4 with intermediate 344: got %v, want ErrBadConfig naming intermediate 344 and multiples of 32", err)
	}
	cfg.IntermediateSize = 352 // 11 x 32
	w = engine.RandomWeights(cfg, 1)
	w8, err := engine.QuantizeWeights(cfg, w, engine.QuantInt8)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, w8, Options{Quantize: QuantInt4}); !errors.Is(err, engine.ErrBadConfig) || !strings.Contains(err.Error(), "int8 checkpoint") {
		t.Errorf("int4 over int8 weights: got %v, want ErrBadConfig (int4 needs float weights)", err)
	}
	// a valid int4 request passes the checks: without a GPU it fails
	// opening the device, not on the configuration
	b, err := New(cfg, w, Options{Quantize: QuantInt4})
	if errors.Is(err, engine.ErrBadConfig) {
		t.Errorf("int4 with widths multiple of 32: %v", err)
	}
	if err == nil {
		defer b.Close()
		if b.Quantization() != QuantInt4 {
			t.Errorf("Quantization() = %q, want int4", b.Quantization())
		}
	}
}
