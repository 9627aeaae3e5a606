//go:build cuda

package cuda

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/kernels"
)

// TestHFGoldensGPU runs every HF transformers golden of the engine
// (engine/testdata/hf: Llama cases and Qwen2 cases, references computed in
// float32 by tools/) on the GPU backend, on both prefill paths (cuBLAS,
// which rounds activations to fp16, and the GEMV kernels), and holds the
// logits to the fp16 bound (also with the tensor-core projections of
// kernels.Tuning.GemvMMA, whose inputs are fp16): relative L2 error <= 5e-3 per sequence, about
// ten fp16 unit roundoffs (2^-11), the bound the GPU-vs-CPU tests use for
// cuBLAS prefill. Weights stored as F32 or BF16 are rounded to fp16 on
// upload, so those cases carry the weight rounding too.
func TestHFGoldensGPU(t *testing.T) {
	cases, _ := filepath.Glob("../testdata/hf/*/golden.json")
	if len(cases) == 0 {
		t.Fatal("no goldens under engine/testdata/hf")
	}
	for _, gpath := range cases {
		dir := filepath.Dir(gpath)
		for _, opt := range []Options{{}, {NoCUBLAS: true}, {NoCUBLAS: true, Tuning: kernels.Tuning{GemvMMA: kernels.GemvMMAOn}}} {
			name := filepath.Base(dir)
			if opt.NoCUBLAS {
				name += "/gemv"
			}
			if opt.Tuning.GemvMMA == kernels.GemvMMAOn {
				name += "-mma" // the tensor-core projections (fp16 inputs)
			}
			t.Run(name, func(t *testing.T) {
				var g struct {
					Sequences  [][]int32 `json:"sequences"`
					LogitsFile string    `json:"logits_file"`
				}
				raw, err := os.ReadFile(gpath)
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(raw, &g); err != nil {
					t.Fatal(err)
				}
				modelDir := dir
				if b, err := os.ReadFile(filepath.Join(dir, "model_dir")); err == nil {
					modelDir = filepath.Join("..", "..", strings.TrimSpace(string(b))) // relative to engine/, the goldens' test dir
				}
				cfg, w := loadModelDir(t, modelDir)
				opt.NumSlots = 1024
				gpu, err := New(cfg, w, opt)
				if err != nil {
					if os.Getenv("SPECGATE_EXPECT_GPU") == "" {
						t.Skipf("no GPU: %v", err)
					}
					t.Fatal(err)
				}
				defer gpu.Close()
				data, err := os.ReadFile(filepath.Join(dir, "logits.f32"))
				if err != nil {
					t.Fatal(err)
				}
				V, off := cfg.VocabSize, 0
				var worstRel, worstAbs float64
				for si, s := range g.Sequences {
					r := &engine.ForwardRequest{Tokens: s, Positions: seq(0, len(s)), Slots: seq(0, len(s))}
					fwd(t, gpu, V, r)
					want := make([]float32, len(s)*V)
					for i := range want {
						want[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*(off+i):]))
					}
					off += len(want)
					e := rel(r.Logits, want)
					for i := range want {
						worstAbs = math.Max(worstAbs, math.Abs(float64(r.Logits[i]-want[i])))
					}
					worstRel = math.Max(worstRel, e)
					if !(e <= 5e-3) {
						t.Fatalf("sequence %d (%d tokens): logits rel err %.3g > 5e-3", si, len(s), e)
					}
				}
				t.Logf("%s %s: %d sequences, weights %s, rel err max %.3g, max |Δlogit| %.3g",
					filepath.Base(dir), cfg.Arch, len(g.Sequences), w.Layers[0].Wq.DType, worstRel, worstAbs)
			})
		}
	}
}
