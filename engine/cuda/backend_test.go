package cuda

import (
	"errors"
	"os"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/kernels"
)

// On a machine without CUDA, New fails cleanly with errors the caller can
// test for (and then use the CPU backend); it never panics.
func TestNewWithoutCUDA(t *testing.T) {
	if os.Getenv("SPECGATE_EXPECT_GPU") != "" {
		t.Skip("GPU machine")
	}
	cfg := engine.Config{HiddenSize: 48, IntermediateSize: 80, NumLayers: 1, NumHeads: 6, NumKVHeads: 2, HeadDim: 8,
		RMSNormEps: 1e-5, RopeTheta: 10000, RopeScaling: engine.RopeScaling{Type: engine.RopeDefault}, MaxPositions: 64,
		VocabSize: 61, BOS: 1, EOS: []int32{2}}
	b, err := New(cfg, engine.RandomWeights(cfg, 1), Options{NumSlots: 64})
	if err == nil {
		b.Close()
		t.Skip("a GPU is present here")
	}
	if !errors.Is(err, engine.ErrBackendMissing) || !errors.Is(err, kernels.ErrNoCUDA) {
		t.Fatalf("error %v wraps neither ErrBackendMissing nor ErrNoCUDA", err)
	}
	// Through the engine's factory hook, the same error reaches NewModel.
	_, err = engine.NewModel(cfg, engine.RandomWeights(cfg, 1), engine.LoadOptions{KVTokens: 64, NewBackend: Factory(Options{})})
	if !errors.Is(err, engine.ErrBackendMissing) {
		t.Fatalf("NewModel with the CUDA factory: %v", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	cfg := engine.Config{HiddenSize: 50, IntermediateSize: 80, NumLayers: 1, NumHeads: 5, NumKVHeads: 5, HeadDim: 10,
		RMSNormEps: 1e-5, RopeTheta: 10000, RopeScaling: engine.RopeScaling{Type: engine.RopeDefault}, MaxPositions: 64,
		VocabSize: 61}
	if _, err := New(cfg, nil, Options{Random: true}); !errors.Is(err, engine.ErrBadConfig) {
		t.Fatalf("hidden 50 / head_dim 10: got %v, want ErrBadConfig", err)
	}
}

func TestSelect(t *testing.T) {
	if f, err := Select("cpu", Options{}, engine.CPUOptions{Threads: 1}, nil); f != nil || err != nil {
		t.Fatalf("cpu: %v %v", f != nil, err)
	}
	if _, err := Select("tpu", Options{}, engine.CPUOptions{Threads: 1}, nil); !errors.Is(err, ErrBackendName) {
		t.Fatalf("tpu: %v", err)
	}
	if os.Getenv("SPECGATE_EXPECT_GPU") != "" {
		return
	}
	cfg := engine.Config{HiddenSize: 48, IntermediateSize: 80, NumLayers: 1, NumHeads: 6, NumKVHeads: 2, HeadDim: 8,
		RMSNormEps: 1e-5, RopeTheta: 10000, RopeScaling: engine.RopeScaling{Type: engine.RopeDefault}, MaxPositions: 64,
		VocabSize: 61, BOS: 1, EOS: []int32{2}}
	var reason error
	f, err := Select("auto", Options{}, engine.CPUOptions{Threads: 1}, func(e error) { reason = e })
	if err != nil {
		t.Fatal(err)
	}
	b, err := f(cfg, engine.RandomWeights(cfg, 1), 64)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, isCPU := b.(*engine.CPUBackend); isCPU && !errors.Is(reason, kernels.ErrNoCUDA) {
		t.Fatalf("fell back to CPU without an ErrNoCUDA reason: %v", reason)
	}
}
